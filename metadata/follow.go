package metadata

import (
	"context"
	"log/slog"
	"time"

	"github.com/magnetar-io/magnetar/internal/backoff"
)

// Follower follows every key under a prefix: it lists the prefix, delivers the listing,
// follows a watch from the listed revision, and lists again when the watch ends (a
// compaction, a broken stream), waiting between failed listings. It is the one
// list-then-watch loop of the code base; a Follower is a value with no state of its own
// and may be run many times, each run on its caller's goroutine (Run, Resume) or on one
// of its own (Chan).
type Follower struct {
	// Store is the store followed.
	Store Store
	// Prefix is the prefix followed (a whole key follows that key, and every key it is a
	// prefix of).
	Prefix string
	// RevisionKey, if set, is listed instead of Prefix, only to learn the store's revision
	// (on a Split, the revision of the store that holds Prefix): the listings then carry no
	// keys. For callers that need every change after the start,
	// not the current keys (which may be many).
	RevisionKey string
	// Retry is the delay after a failed listing: Base, doubling up to Max, reset by every
	// watch batch. A Policy without Base and Max waits one second each time.
	Retry backoff.Policy
	// PauseAfterWatch waits the next Retry delay after a watch ends too, before listing
	// again (otherwise the listing follows at once).
	PauseAfterWatch bool
	// Log hears why a watch ended or a listing failed (Debug); nil: nothing is logged.
	Log *slog.Logger

	sleep func(ctx context.Context, d time.Duration) bool // backoff.Sleep; tests record the waits
}

// UpdateKind tells the updates of a Follower apart.
type UpdateKind uint8

// Update kinds.
const (
	// Listed is a listing: KVs is every key under the prefix at revision Rev (none with a
	// RevisionKey), replacing what earlier updates said. A run starts with one (unless it
	// is a Resume), and one follows every WatchEnded.
	Listed UpdateKind = iota + 1
	// Changed is a watch batch: Events are the changes up to revision Rev, in order, after
	// the last listing.
	Changed
	// WatchEnded says the watch following the last listing ended (Err says why); changes
	// may be missed until the next listing.
	WatchEnded
)

func (k UpdateKind) String() string {
	switch k {
	case Listed:
		return "listed"
	case Changed:
		return "changed"
	case WatchEnded:
		return "watch-ended"
	}
	return "unknown"
}

// Update is one delivery of a Follower.
type Update struct {
	Kind   UpdateKind
	KVs    []KV    // Listed
	Rev    int64   // Listed, Changed: the revision the update brings the follower up to
	Events []Event // Changed
	Err    error   // WatchEnded
}

// Run lists, then follows the prefix, calling fn with each update on the calling
// goroutine (the watch is already running when fn hears a listing, so a read made after
// it cannot miss a later change), until ctx ends. fn must not block for long: the watch
// buffers meanwhile.
func (f Follower) Run(ctx context.Context, fn func(Update)) {
	f.run(ctx, 0, false, fn)
}

// Resume is Run after a listing the caller made itself (at revision rev, e.g. to fail fast
// at a start): it first follows a watch from rev+1, then continues as Run.
func (f Follower) Resume(ctx context.Context, rev int64, fn func(Update)) {
	f.run(ctx, rev, true, fn)
}

// List lists what the follower lists (Prefix, or RevisionKey): for a caller that makes the
// first listing itself before a Resume.
func (f Follower) List(ctx context.Context) ([]KV, int64, error) {
	st := storeFor(f.Store, f.Prefix) // a Split: the revision is that of the store of Prefix
	if f.RevisionKey != "" {
		_, rev, err := st.List(ctx, f.RevisionKey)
		return nil, rev, err
	}
	return st.List(ctx, f.Prefix)
}

// Chan runs the follower on a goroutine of its own and sends its updates on the returned
// channel, which closes after ctx ends. No update is dropped: the follower waits for the
// receiver (or ctx).
func (f Follower) Chan(ctx context.Context) <-chan Update {
	return f.chanFrom(ctx, 0, false)
}

// ResumeChan is Chan after a listing the caller made at revision rev (see Resume).
func (f Follower) ResumeChan(ctx context.Context, rev int64) <-chan Update {
	return f.chanFrom(ctx, rev, true)
}

func (f Follower) chanFrom(ctx context.Context, rev int64, resume bool) <-chan Update {
	ch := make(chan Update)
	go func() {
		defer close(ch)
		f.run(ctx, rev, resume, func(u Update) {
			select {
			case ch <- u:
			case <-ctx.Done():
			}
		})
	}()
	return ch
}

func (f Follower) run(ctx context.Context, rev int64, resume bool, fn func(Update)) {
	policy := f.Retry
	if policy.Base == 0 && policy.Max == 0 {
		policy = backoff.Policy{Base: time.Second, Max: time.Second}
	}
	r := backoff.Retry{Policy: policy}
	sleep := f.sleep
	if sleep == nil {
		sleep = backoff.Sleep
	}
	for ctx.Err() == nil {
		var w *Watch
		if resume {
			resume = false
			w = f.Store.Watch(ctx, f.Prefix, rev+1)
		} else {
			kvs, rev, err := f.List(ctx)
			if err != nil {
				if ctx.Err() == nil && f.Log != nil {
					f.Log.Debug("metadata: listing failed, retrying", "prefix", f.Prefix, "err", err)
				}
				if !sleep(ctx, r.Next()) {
					return
				}
				continue
			}
			w = f.Store.Watch(ctx, f.Prefix, rev+1)
			fn(Update{Kind: Listed, KVs: kvs, Rev: rev})
		}
		for b := range w.C {
			r.Reset()
			fn(Update{Kind: Changed, Rev: b.Rev, Events: b.Events})
		}
		if ctx.Err() != nil {
			return
		}
		err := w.Err()
		if f.Log != nil {
			f.Log.Debug("metadata: watch ended, listing again", "prefix", f.Prefix, "err", err)
		}
		fn(Update{Kind: WatchEnded, Err: err})
		if f.PauseAfterWatch && !sleep(ctx, r.Next()) {
			return
		}
	}
}
