package bookie

import (
	"errors"
	"sync"

	"github.com/magnetar-io/magnetar/bookie/storage"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// ledgerTable maps ledger ids to their in-memory state. Lock order: ledgerTable.mu before
// ledgerState.mu; ledgerTable.mu is never held while waiting on anything.
type ledgerTable struct {
	mu struct {
		sync.Mutex
		m map[int64]*ledgerState
	}
}

// ledgerState is what the bookie knows about one ledger. Every check-then-act on a ledger
// (fence check + store + journal enqueue of an add; fence + read of the last entry) runs
// under mu, so a fence either precedes an add entirely or follows it entirely. Because the
// journal completes records in append order, an add enqueued before a fence record is durable
// (and acknowledged) before the fence reply.
type ledgerState struct {
	id int64

	mu sync.Mutex // guards all fields below
	// loaded is true once meta/known/lac were read from storage.
	loaded bool
	// known is true once the ledger has a master key on this bookie (first add, fence or
	// explicit LAC).
	known bool
	meta  storage.LedgerMeta
	// lac is the highest last-add-confirmed the bookie has seen for the ledger: piggybacked on
	// an entry or written explicitly. -1 when none.
	lac     int64
	waiters []*pollWaiter
}

// pollWaiter is a parked long-poll read. It is answered exactly once: by a LAC advance, by its
// timer, or by shutdown — whichever removes it from the ledger's waiters first.
type pollWaiter struct {
	prevLAC   int64
	piggyback bool
	respond   func(bk.Response)
	req       *bk.Request
	stop      func() bool // stops the timer
}

func newLedgerTable() *ledgerTable {
	t := &ledgerTable{}
	t.mu.m = make(map[int64]*ledgerState)
	return t
}

// get returns the state of ledger id, creating an unloaded one.
func (t *ledgerTable) get(id int64) *ledgerState {
	t.mu.Lock()
	defer t.mu.Unlock()
	ls, ok := t.mu.m[id]
	if !ok {
		ls = &ledgerState{id: id, lac: -1}
		t.mu.m[id] = ls
	}
	return ls
}

// drop forgets ledger id (after garbage collection).
func (t *ledgerTable) drop(id int64) {
	t.mu.Lock()
	delete(t.mu.m, id)
	t.mu.Unlock()
}

// all returns a snapshot of the states.
func (t *ledgerTable) all() []*ledgerState {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*ledgerState, 0, len(t.mu.m))
	for _, ls := range t.mu.m {
		out = append(out, ls)
	}
	return out
}

// loadLocked reads the ledger's meta and LAC from storage on first use.
func (ls *ledgerState) loadLocked(st *storage.Storage) error {
	if ls.loaded {
		return nil
	}
	meta, ok, err := st.Meta(ls.id)
	if err != nil {
		return err
	}
	ls.known = ok
	ls.meta = meta
	if ok {
		if len(meta.ExplicitLAC) > 0 {
			if _, lac, err := bk.DecodeLACBody(meta.ExplicitLAC, bk.DigestType(meta.Digest)); err == nil && lac > ls.lac {
				ls.lac = lac
			}
		}
		last, err := st.Get(ls.id, bk.LastEntry)
		switch {
		case err == nil:
			if e, err := bk.DecodeEntry(last, bk.DigestType(meta.Digest)); err == nil && e.LAC > ls.lac {
				ls.lac = e.LAC
			}
		case errors.Is(err, storage.ErrNoSuchEntry), errors.Is(err, storage.ErrNoSuchLedger):
		default:
			return err
		}
	}
	ls.loaded = true
	return nil
}

// advanceLACLocked raises the known LAC and returns the waiters it releases; the caller
// answers them after unlocking.
func (ls *ledgerState) advanceLACLocked(lac int64) []*pollWaiter {
	if lac <= ls.lac {
		return nil
	}
	ls.lac = lac
	var ready []*pollWaiter
	keep := ls.waiters[:0]
	for _, w := range ls.waiters {
		if lac > w.prevLAC {
			ready = append(ready, w)
		} else {
			keep = append(keep, w)
		}
	}
	for i := len(keep); i < len(ls.waiters); i++ {
		ls.waiters[i] = nil
	}
	ls.waiters = keep
	return ready
}

// removeWaiterLocked removes w and reports whether it was still parked.
func (ls *ledgerState) removeWaiterLocked(w *pollWaiter) bool {
	for i, x := range ls.waiters {
		if x == w {
			ls.waiters = append(ls.waiters[:i], ls.waiters[i+1:]...)
			return true
		}
	}
	return false
}
