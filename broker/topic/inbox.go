package topic

import (
	"context"
	"sync"
)

// inbox is an owner goroutine's event queue: unbounded, so that completions posted from
// other goroutines (the managed ledger's owner, connections) never block.
type inbox struct {
	mu struct {
		sync.Mutex // guards the fields below
		q          []func()
		closed     bool
	}
	signal chan struct{}
}

func newInbox() *inbox { return &inbox{signal: make(chan struct{}, 1)} }

// push queues fn; false once the owner has stopped.
func (b *inbox) push(fn func()) bool {
	b.mu.Lock()
	if b.mu.closed {
		b.mu.Unlock()
		return false
	}
	b.mu.q = append(b.mu.q, fn)
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
	return true
}

// drain takes every queued event.
func (b *inbox) drain(into []func()) []func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	into = append(into[:0], b.mu.q...)
	clear(b.mu.q)
	b.mu.q = b.mu.q[:0]
	return into
}

// close makes later pushes fail and drops what is queued.
func (b *inbox) close() {
	b.mu.Lock()
	b.mu.closed = true
	b.mu.q = nil
	b.mu.Unlock()
}

// call runs fn on the owner goroutine and waits for its reply, for ctx, or for the owner to
// stop (ErrClosed).
func call[T any](ctx context.Context, b *inbox, stopped <-chan struct{}, fn func(reply func(T, error))) (T, error) {
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
	if !b.push(func() { fn(reply) }) {
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

func call0(ctx context.Context, b *inbox, stopped <-chan struct{}, fn func(reply func(error))) error {
	_, err := call(ctx, b, stopped, func(reply func(struct{}, error)) {
		fn(func(err error) { reply(struct{}{}, err) })
	})
	return err
}
