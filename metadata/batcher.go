package metadata

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Batcher commits the operations of many callers by group commit: one store commit in
// flight; the calls that come meanwhile go together in the next, so that under load one
// store operation carries many callers' writes (the store's cost per operation, not per
// key, is what limits metadata-heavy work such as transactions). A shared commit refused
// for a version (some caller's expected version is stale) is retried call by call, so each
// call gets the outcome it would have had alone; any other failure fails every call of the
// commit (each may or may not have been applied, as with Commit alone).
//
// Safe for concurrent use. The goroutine of a waiting caller commits the queue (other
// callers' groups too) until its own call is done, then hands the rest to a new goroutine.
type Batcher struct {
	st      Store
	maxOps  int
	timeout time.Duration

	mu struct {
		sync.Mutex // leaf lock
		queue      []*batchCall
		busy       bool // a goroutine is committing the queue
	}
}

type batchCall struct {
	ops  []Op
	vers []Version
	err  error
	done chan struct{}
}

// DefaultBatchOps bounds the operations of one shared commit, below etcd's default limit of
// 128 per transaction.
const DefaultBatchOps = 120

// NewBatcher returns a batcher committing to st, at most maxOps operations per shared commit
// (DefaultBatchOps if 0; a call with more goes alone), each commit bounded by timeout.
func NewBatcher(st Store, maxOps int, timeout time.Duration) *Batcher {
	if maxOps <= 0 {
		maxOps = DefaultBatchOps
	}
	return &Batcher{st: st, maxOps: maxOps, timeout: timeout}
}

// Commit commits ops atomically, as Store.Commit does, possibly in one store commit with
// other callers' operations. It returns once the commit that carried ops is done (ctx only
// bounds the wait for its turn: a call that has gone out is waited for).
func (b *Batcher) Commit(ctx context.Context, ops []Op) ([]Version, error) {
	c := &batchCall{ops: ops, done: make(chan struct{})}
	b.mu.Lock()
	b.mu.queue = append(b.mu.queue, c)
	lead := !b.mu.busy
	b.mu.busy = true
	b.mu.Unlock()
	if lead {
		b.lead(c)
	}
	<-c.done
	return c.vers, c.err
}

// Queued returns how many calls wait for a commit (for tests and metrics).
func (b *Batcher) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.mu.queue)
}

// lead commits groups of the queue until own is done, then leaves the rest of the queue to
// a new goroutine (or stops leading if it is empty).
func (b *Batcher) lead(own *batchCall) {
	for {
		b.mu.Lock()
		if len(b.mu.queue) == 0 {
			b.mu.busy = false
			b.mu.Unlock()
			return
		}
		if own != nil && isDone(own) {
			b.mu.Unlock()
			go b.lead(nil)
			return
		}
		group := b.take()
		b.mu.Unlock()
		b.commit(group)
	}
}

// fence is a Check operation: the same one in several calls goes once in a shared commit.
type fence struct {
	key string
	ver Version
}

func isDone(c *batchCall) bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// take removes the next group from the queue: calls in order while they fit in maxOps and
// touch no key of the group twice (a call that would is left for a later group). Called
// with mu held.
func (b *Batcher) take() []*batchCall {
	keys := map[string]bool{}
	checks := map[fence]bool{}
	var group, rest []*batchCall
	count := 0
	for _, c := range b.mu.queue {
		fits := count+len(c.ops) <= b.maxOps || len(group) == 0
		for _, o := range c.ops {
			if !fits {
				break
			}
			if o.Check && checks[fence{o.Key, o.Expected}] {
				continue // the same fence: once per commit
			}
			fits = !keys[o.Key]
		}
		if !fits {
			rest = append(rest, c)
			continue
		}
		for _, o := range c.ops {
			if o.Check {
				checks[fence{o.Key, o.Expected}] = true
			}
			keys[o.Key] = true
		}
		group = append(group, c)
		count += len(c.ops)
	}
	b.mu.queue = rest
	return group
}

// commit commits a group and completes its calls.
func (b *Batcher) commit(group []*batchCall) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	defer func() {
		for _, c := range group {
			close(c.done)
		}
	}()
	if len(group) == 1 {
		group[0].vers, group[0].err = b.st.Commit(ctx, group[0].ops)
		return
	}
	var ops []Op
	where := map[fence]int{} // a shared fence's index
	idx := make([][]int, len(group))
	for i, c := range group {
		idx[i] = make([]int, len(c.ops))
		for j, o := range c.ops {
			if o.Check {
				k := fence{o.Key, o.Expected}
				if at, ok := where[k]; ok {
					idx[i][j] = at
					continue
				}
				where[k] = len(ops)
			}
			idx[i][j] = len(ops)
			ops = append(ops, o)
		}
	}
	vs, err := b.st.Commit(ctx, ops)
	switch {
	case err == nil:
		for i, c := range group {
			c.vers = make([]Version, len(c.ops))
			for j, o := range c.ops {
				if !o.Check {
					c.vers[j] = vs[idx[i][j]]
				}
			}
		}
	case errors.Is(err, ErrBadVersion):
		for _, c := range group {
			c.vers, c.err = b.st.Commit(ctx, c.ops)
		}
	default:
		for _, c := range group {
			c.err = err
		}
	}
}
