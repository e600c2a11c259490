package ledger

import "sync"

// swapQueue carries values from any goroutine to one owner goroutine without blocking the
// sender: push appends under mu and signals; the owner drains everything at once, handing
// back the slice it drained last time. A leaf structure: mu is held for no I/O or callback.
type swapQueue[T any] struct {
	signal chan struct{} // cap 1: q is non-empty
	mu     sync.Mutex    // guards q (and the fields of a type embedding the queue that say so)
	q      []T
}

func newSwapQueue[T any]() swapQueue[T] { return swapQueue[T]{signal: make(chan struct{}, 1)} }

func (s *swapQueue[T]) push(v T) {
	s.mu.Lock()
	s.q = append(s.q, v)
	s.mu.Unlock()
	s.notify()
}

// notify wakes the owner; call it after queueing, with mu released.
func (s *swapQueue[T]) notify() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// drain returns every queued value in push order; spare (the previous drain's slice, which
// the owner no longer uses) becomes the new queue.
func (s *swapQueue[T]) drain(spare []T) []T {
	clear(spare)
	s.mu.Lock()
	q := s.q
	s.q = spare[:0]
	s.mu.Unlock()
	return q
}
