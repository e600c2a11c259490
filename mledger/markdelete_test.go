package mledger

import (
	"testing"
	"time"
)

// TestMarkDeleteRate: beyond the mark-delete rate, acknowledgements take effect in memory at
// once and their persist is held; a crash then redelivers the held window (at-least-once),
// Flush persists at once whatever the rate (a transaction's commit relies on it), a change
// to unlimited persists the held state, and a graceful close loses nothing.
func TestMarkDeleteRate(t *testing.T) {
	e := newMemEnv(t)
	ctx := tctx(t)
	cfg := memConfig()
	cfg.MaxMarkDeleteRate, cfg.CursorFlushInterval = 1e-4, time.Hour // one token, then none
	m1 := mustOpen(t, e.f, "md", cfg)
	ps := addN(t, m1, 0, 10)
	cu, err := m1.OpenCursor(ctx, "sub", Earliest)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(err)
	stats := func(cu *Cursor) CursorStats {
		t.Helper()
		st, err := cu.Stats(ctx)
		must(err)
		return st
	}
	must(cu.Ack(ctx, ps[0])) // takes the token
	must(cu.Flush(ctx))      // waits for that write
	must(cu.Ack(ctx, ps[1]))
	must(cu.AckCumulative(ctx, ps[2]))
	if st := stats(cu); st.MarkDelete != ps[2] || st.PersistedMarkDelete != ps[0] || !st.Held || st.Backlog != 7 {
		t.Fatalf("throttled: %+v (want md %v, persisted %v, held)", st, ps[2], ps[0])
	}

	// A crash (another owner takes over without a close): the held window comes back.
	m2 := mustOpen(t, e.second(t), "md", cfg)
	cu2, err := m2.OpenCursor(ctx, "sub", Latest)
	must(err)
	if st := stats(cu2); st.MarkDelete != ps[0] || st.Held {
		t.Fatalf("recovered after a crash: %+v, want the persisted %v", st, ps[0])
	}
	must(cu2.AckCumulative(ctx, ps[2])) // takes the token: creates the cursor's ledger
	must(cu2.Flush(ctx))
	must(cu2.Ack(ctx, ps[3]))
	if st := stats(cu2); !st.Held || st.PersistedMarkDelete == ps[3] {
		t.Fatalf("second ack not held: %+v", st)
	}
	// Flush persists at once, throttled or not.
	must(cu2.Flush(ctx))
	if st := stats(cu2); st.Held || st.PersistedMarkDelete != ps[3] {
		t.Fatalf("after Flush: %+v", st)
	}
	// Unlimited persists what is held.
	must(cu2.Ack(ctx, ps[4]))
	if st := stats(cu2); !st.Held {
		t.Fatalf("not held: %+v", st)
	}
	must(m2.SetMarkDeleteRate(ctx, 0))
	if st := stats(cu2); st.Held {
		t.Fatalf("held after the rate went unlimited: %+v", st)
	}
	must(m2.SetMarkDeleteRate(ctx, 1e-4)) // the bucket is empty: the next change is held
	must(cu2.Ack(ctx, ps[5], ps[6]))
	if st := stats(cu2); !st.Held || st.MarkDelete != ps[6] {
		t.Fatalf("not held again: %+v", st)
	}
	// A graceful close persists the held state.
	must(m2.Close(ctx))
	m3 := mustOpen(t, e.second(t), "md", cfg)
	cu3, err := m3.OpenCursor(ctx, "sub", Latest)
	must(err)
	if st := stats(cu3); st.MarkDelete != ps[6] || st.PersistedMarkDelete != ps[6] {
		t.Fatalf("after a graceful close and reopen: %+v, want %v", st, ps[6])
	}
	must(m3.Close(ctx))
	must(m1.Close(ctx)) // fenced by m2: its close fails nothing it has not already
}
