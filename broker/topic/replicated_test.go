package topic_test

import (
	"context"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
)

// closeLog records when the topic closes its log.
type closeLog struct {
	topic.Log
	closed chan struct{}
}

func (l closeLog) Close(ctx context.Context) error {
	close(l.closed)
	return l.Log.Close(ctx)
}

// TestOnCloseRunsBeforeTheLogCloses: a close hook (the geo-replicators') runs when the
// topic starts closing, and the topic closes its log only once the hook is done; a hook
// registered on a closed topic runs at once.
func TestOnCloseRunsBeforeTheLogCloses(t *testing.T) {
	log := closeLog{Log: topictest.NewStore().Open("t"), closed: make(chan struct{})}
	tp := openTopic(t, log)
	called, release := make(chan struct{}), make(chan struct{})
	tp.OnClose(func(done func()) {
		close(called)
		go func() {
			<-release
			done()
		}()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closeErr := make(chan error, 1)
	go func() { closeErr <- tp.Close(ctx) }()
	select {
	case <-called:
	case <-ctx.Done():
		t.Fatal("the close hook was not called")
	}
	select {
	case <-log.closed:
		t.Fatal("the log closed before the close hook was done")
	default:
	}
	close(release)
	if err := <-closeErr; err != nil {
		t.Fatal(err)
	}
	select {
	case <-log.closed:
	default:
		t.Fatal("Close returned without closing the log")
	}
	late := make(chan struct{})
	tp.OnClose(func(done func()) {
		done()
		close(late)
	})
	select {
	case <-late:
	case <-ctx.Done():
		t.Fatal("a hook registered on a closed topic did not run")
	}
}
