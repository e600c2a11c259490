package inbox

import "sync"

// Queue is an unbounded queue of T from any goroutine to one owner goroutine. It is safe for
// concurrent use; see the package documentation for who calls what.
type Queue[T any] struct {
	signal chan struct{} // cap 1: the queue may be non-empty; nil for an owned queue
	owner  *Owner        // woken by Push instead of signal (NewOwned); nil otherwise
	mu     sync.Mutex    // guards q and closed; a leaf lock
	q      []T
	closed bool
}

// New returns an empty, open queue.
func New[T any]() *Queue[T] { return &Queue[T]{signal: make(chan struct{}, 1)} }

// NewOwned returns an empty, open queue whose pushes wake o: o's step drains it. Its Signal
// never fires.
func NewOwned[T any](o *Owner) *Queue[T] { return &Queue[T]{owner: o} }

// Push queues v and wakes the owner. It returns false, queueing nothing, once Close was
// called.
func (b *Queue[T]) Push(v T) bool {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false
	}
	b.q = append(b.q, v)
	b.mu.Unlock()
	if b.owner != nil {
		b.owner.Wake()
		return true
	}
	select {
	case b.signal <- struct{}{}:
	default:
	}
	return true
}

// Signal receives a value after pushes: the owner drains when it does. It is nil (never
// ready) for a queue made by NewOwned.
func (b *Queue[T]) Signal() <-chan struct{} { return b.signal }

// Drain returns every queued value in push order. spare, the previous Drain's result that
// the owner no longer uses, is cleared and becomes the queue's storage.
func (b *Queue[T]) Drain(spare []T) []T {
	clear(spare)
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.q
	b.q = spare[:0]
	return q
}

// Compact drops the storage of an empty queue (the owner calls it when it goes idle, so an
// idle queue holds no memory); a queue with values is left as it is.
func (b *Queue[T]) Compact() {
	b.mu.Lock()
	if len(b.q) == 0 {
		b.q = nil
	}
	b.mu.Unlock()
}

// Close makes later pushes fail and returns what is still queued, in push order (nil after
// the first Close). Idempotent.
func (b *Queue[T]) Close() []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	q := b.q
	b.q = nil
	return q
}
