package topic

import "sync"

// budget bounds the bytes of a topic's publishes in flight (a leaf structure shared by the
// connections that publish and the topic goroutine that completes).
type budget struct {
	mu struct {
		sync.Mutex // guards the fields below
		used       int64
		waiters    int
		freed      chan struct{} // closed (and replaced) when bytes are released to waiters
	}
	limit int64
}

// acquire takes n bytes, waiting while the budget is exhausted (a single publish larger
// than the limit passes when nothing else is in flight). false if cancel closed first.
func (b *budget) acquire(n int64, cancel <-chan struct{}) bool {
	for {
		b.mu.Lock()
		if b.limit <= 0 || b.mu.used == 0 || b.mu.used+n <= b.limit {
			b.mu.used += n
			b.mu.Unlock()
			return true
		}
		if b.mu.freed == nil {
			b.mu.freed = make(chan struct{})
		}
		ch := b.mu.freed
		b.mu.waiters++
		b.mu.Unlock()
		select {
		case <-ch:
			b.mu.Lock()
			b.mu.waiters--
			b.mu.Unlock()
		case <-cancel:
			b.mu.Lock()
			b.mu.waiters--
			b.mu.Unlock()
			return false
		}
	}
}

func (b *budget) release(n int64) {
	b.mu.Lock()
	b.mu.used -= n
	if b.mu.waiters > 0 && b.mu.freed != nil {
		close(b.mu.freed)
		b.mu.freed = nil
	}
	b.mu.Unlock()
}

// AcquirePublish reserves n bytes of the topic's pending-publish budget for the next
// Publish; it waits while the topic has Config.MaxPendingBytes in flight (so a slow disk
// slows producers down), and returns false if cancel closes first.
func (t *Topic) AcquirePublish(n int, cancel <-chan struct{}) bool {
	return t.pubBudget.acquire(int64(n), cancel)
}
