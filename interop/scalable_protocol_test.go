package interop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

// errorHook keeps the pulsar-client-go log entries at warning level and above.
type errorHook struct {
	mu      sync.Mutex
	entries []string
}

func (h *errorHook) Levels() []logrus.Level {
	return []logrus.Level{logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel, logrus.WarnLevel}
}

func (h *errorHook) Fire(e *logrus.Entry) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries = append(h.entries, e.Message)
	return nil
}

func (h *errorHook) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.entries...)
}

// TestScalableCommandsNotSentToGoClient: a pulsar-client-go v0.19 producer and consumer
// (whose CONNECT does not set supports_scalable_topics) on the same broker as a scalable
// topic that splits three times, with Magnetar's scalable producer following every split
// over its DAG watch on that broker: the Go client never receives a scalable-topic command
// — it would log "Received invalid command type" (or fail to parse the frame) and close
// its connection — and every one of its messages goes through. (v0.19 refuses segment://
// names, "Invalid topic domain", so it cannot attach to a segment itself.)
func TestScalableCommandsNotSentToGoClient(t *testing.T) {
	c := newCluster(t, clusterOpts{memLog: true, tweak: func(cfg *broker.Config) { cfg.Scalable.TickInterval = 50 * time.Millisecond }})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	hook := &errorHook{}
	l := logrus.New()
	l.SetOutput(io.Discard)
	l.AddHook(hook)
	gc, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.url, OperationTimeout: 30 * time.Second, Logger: plog.NewLoggerWithLogrus(l)})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	const plain = "persistent://public/default/beside-scalable"
	cons, err := gc.Subscribe(pulsar.ConsumerOptions{Topic: plain, SubscriptionName: "s", Type: pulsar.Exclusive})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := gc.CreateProducer(pulsar.ProducerOptions{Topic: plain})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	const topic = "topic://public/default/splitting"
	if err := c.broker.CreateScalableTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	mc, err := pulsarclient.New(pulsarclient.Options{URL: c.url, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	sp, err := mc.CreateScalableProducer(ctx, pulsarclient.ScalableProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close(ctx)

	for round := range 3 {
		// Split the active segment holding key "k": the scalable producer must follow.
		seg, _ := sp.Layout().FindActive(0)
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := c.broker.SplitScalableSegment(ctx, topic, uint64(seg.ID), 0)
			if err == nil {
				break
			}
			if !errors.Is(err, broker.ErrServiceNotReady) || time.Now().After(deadline) {
				t.Fatalf("split %d: %v", round, err)
			}
			time.Sleep(20 * time.Millisecond) // waiting for the controller to lead, with a deadline
		}
		for i := range 20 {
			if _, _, err := sp.Send(ctx, &pulsarclient.ProducerMessage{Key: fmt.Sprintf("k%d", i), Payload: []byte("x")}); err != nil {
				t.Fatalf("scalable send after split %d: %v", round, err)
			}
		}
		if ep := sp.Layout().Epoch; ep < int64(round+2) {
			t.Fatalf("scalable producer at epoch %d after split %d", ep, round)
		}
		payload := fmt.Sprintf("m%d", round)
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
			t.Fatalf("Go client send %d: %v", round, err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := cons.Receive(rctx)
		rcancel()
		if err != nil || string(m.Payload()) != payload {
			t.Fatalf("Go client receive %d: %v", round, err)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range hook.all() {
		if strings.Contains(e, "invalid command") || strings.Contains(strings.ToLower(e), "parse") ||
			strings.Contains(strings.ToLower(e), "connection closed") {
			t.Errorf("Go client: %s", e)
		}
	}
	t.Logf("Go client warnings and errors: %q", hook.all())
}
