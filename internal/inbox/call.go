package inbox

import "context"

// Call runs fn on the owner goroutine that drains q and waits for its reply. fn gets a reply
// function; the owner calls it once, from fn or later (further calls are dropped). Call
// returns the reply; ctx.Err() if ctx ends first (fn may still run and reply, unheard); or
// errStopped if q is closed or stopped is closed before a reply. A reply given before the
// owner stopped wins over stopped.
func Call[T any](ctx context.Context, q *Queue[func()], stopped <-chan struct{}, errStopped error,
	fn func(reply func(T, error))) (T, error) {
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
	if !q.Push(func() { fn(reply) }) {
		return zero, errStopped
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
			return zero, errStopped
		}
	}
}

// Call0 is Call for an operation that replies only an error.
func Call0(ctx context.Context, q *Queue[func()], stopped <-chan struct{}, errStopped error,
	fn func(reply func(error))) error {
	_, err := Call(ctx, q, stopped, errStopped, func(reply func(struct{}, error)) {
		fn(func(err error) { reply(struct{}{}, err) })
	})
	return err
}
