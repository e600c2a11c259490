package inbox

import (
	"context"
	"errors"
	"testing"
)

var errStopped = errors.New("inbox test: stopped")

// owner runs q's closures on its own goroutine until stop is closed, then closes q and
// stopped. Each closure runs after every earlier one.
func owner(q *Queue[func()], stop <-chan struct{}) (stopped chan struct{}) {
	stopped = make(chan struct{})
	go func() {
		defer close(stopped)
		defer q.Close()
		var batch []func()
		for {
			select {
			case <-q.Signal():
				batch = q.Drain(batch)
				for _, fn := range batch {
					fn()
				}
			case <-stop:
				return
			}
		}
	}()
	return stopped
}

// TestCallReplies: the first reply is returned, later ones are dropped, and a reply given
// after fn returned (from a later event) is waited for.
func TestCallReplies(t *testing.T) {
	q := New[func()]()
	stop := make(chan struct{})
	stopped := owner(q, stop)
	defer func() { close(stop); <-stopped }()
	ctx := context.Background()

	v, err := Call(ctx, q, stopped, errStopped, func(reply func(int, error)) {
		reply(1, nil)
		reply(2, errors.New("second reply"))
	})
	if v != 1 || err != nil {
		t.Fatalf("Call = %d, %v; want 1, nil", v, err)
	}

	var later func(int, error)
	v, err = Call(ctx, q, stopped, errStopped, func(reply func(int, error)) {
		later = reply
		q.Push(func() { later(3, nil) })
	})
	if v != 3 || err != nil {
		t.Fatalf("deferred reply: Call = %d, %v; want 3, nil", v, err)
	}

	boom := errors.New("boom")
	if err := Call0(ctx, q, stopped, errStopped, func(reply func(error)) { reply(boom) }); !errors.Is(err, boom) {
		t.Fatalf("Call0 = %v, want %v", err, boom)
	}
	if err := Call0(ctx, q, stopped, errStopped, func(reply func(error)) { reply(nil) }); err != nil {
		t.Fatalf("Call0 = %v, want nil", err)
	}
}

// TestCallContext: a Call whose ctx ends before the reply returns ctx.Err().
func TestCallContext(t *testing.T) {
	q := New[func()]()
	stop := make(chan struct{})
	stopped := owner(q, stop)
	defer func() { close(stop); <-stopped }()
	ctx, cancel := context.WithCancel(context.Background())
	_, err := Call(ctx, q, stopped, errStopped, func(reply func(int, error)) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Call = %v, want context.Canceled", err)
	}
}

// TestCallStopped: a Call to a stopped owner fails with errStopped, both when the queue is
// closed and when the owner stops without replying; a reply given before stopping wins.
func TestCallStopped(t *testing.T) {
	ctx := context.Background()
	q := New[func()]()
	q.Close()
	ran := false
	if _, err := Call(ctx, q, nil, errStopped, func(func(int, error)) { ran = true }); !errors.Is(err, errStopped) || ran {
		t.Fatalf("closed queue: Call = %v (ran %v), want errStopped without running", err, ran)
	}

	// The owner stops without replying to the second call.
	q = New[func()]()
	stop := make(chan struct{})
	stopped := owner(q, stop)
	if _, err := Call(ctx, q, stopped, errStopped, func(func(int, error)) { close(stop) }); !errors.Is(err, errStopped) {
		t.Fatalf("owner stopped: Call = %v, want errStopped", err)
	}

	// A reply and the stop come together: the reply wins.
	q = New[func()]()
	stop = make(chan struct{})
	stopped = owner(q, stop)
	v, err := Call(ctx, q, stopped, errStopped, func(reply func(int, error)) {
		reply(7, nil)
		close(stop)
	})
	if v != 7 || err != nil {
		t.Fatalf("reply then stop: Call = %d, %v; want 7, nil", v, err)
	}
	<-stopped
}
