package topic

import (
	"context"

	"github.com/magnetar-io/magnetar/internal/inbox"
)

// events is an owner goroutine's (a topic's or a subscription's) event queue: unbounded,
// so that completions posted from other goroutines (the managed ledger's owner,
// connections) never block.
type events = inbox.Queue[func()]

func newEvents() *events { return inbox.New[func()]() }

// call runs fn on the owner goroutine and waits for its reply, for ctx, or for the owner to
// stop (ErrClosed).
func call[T any](ctx context.Context, b *events, stopped <-chan struct{}, fn func(reply func(T, error))) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	reply := func(v T, err error) {
		select {
		case ch <- result{v, err}:
		default:
		}
	}
	var zero T
	if !b.Push(func() { fn(reply) }) {
		return zero, ErrClosed
	}
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-stopped:
		select {
		case r := <-ch:
			return r.v, r.err
		default:
			return zero, ErrClosed
		}
	}
}

func call0(ctx context.Context, b *events, stopped <-chan struct{}, fn func(reply func(error))) error {
	_, err := call(ctx, b, stopped, func(reply func(struct{}, error)) {
		fn(func(err error) { reply(struct{}{}, err) })
	})
	return err
}
