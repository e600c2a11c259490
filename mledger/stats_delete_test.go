package mledger

import (
	"errors"
	"testing"
)

// TestStatsWhileDeleting: Stats and FindFirst asked while Delete has removed the managed
// ledger's record but not yet its ledgers answer (no ledgers; ErrClosed) instead of
// dereferencing the removed record, and the delete then completes.
func TestStatsWhileDeleting(t *testing.T) {
	e := newMemEnv(t)
	ctx := tctx(t)
	m := mustOpen(t, e.f, "del-stats", memConfig())
	addN(t, m, 0, 5)
	e.bk.holdDeletes, e.bk.releaseDeletes = make(chan int64, 16), make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- m.Delete(ctx) }()
	select {
	case <-e.bk.holdDeletes: // the record is gone: ledgers are deleted after it
	case err := <-done:
		t.Fatalf("delete ended before deleting a ledger: %v", err)
	case <-ctx.Done():
		t.Fatal("no ledger delete started")
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatalf("stats while deleting: %v", err)
	}
	if st.State != StateClosing || len(st.Ledgers) != 0 {
		t.Fatalf("stats while deleting: state %v, %d ledgers", st.State, len(st.Ledgers))
	}
	if _, err := m.FindFirst(ctx, func(Entry) (bool, error) { return true, nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("find first while deleting: %v", err)
	}
	close(e.bk.releaseDeletes)
	if err := <-done; err != nil {
		t.Fatalf("delete: %v", err)
	}
}
