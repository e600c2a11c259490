package mledger

import (
	"errors"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
)

// TestRolloverSwitchLandingAfterItsTimeout (M3, M4): the rollover's switch to the new ledger
// times out while terminate waits behind it, and the store applies it later (etcd may apply a
// timed-out write after the writer's re-read). The owner re-reads the unchanged record,
// gives the switch up (terminate took over) and must not delete the new ledger yet: the
// timed-out write can still land. It lands before terminate's write, so the record names the
// new ledger for a moment; terminate's write then conflicts with our own late write, re-reads,
// removes the new ledger from the record and terminates at the old one, and only then is the
// new ledger deleted (dropLostRollover). Deleting it as soon as the switch was given up
// (mutation) leaves the record naming a deleted ledger, which the checker catches. The random
// simulation first caught that mutation at a seed of TestSimCatchesMutations' search (its late
// applies); this is the schedule.
func TestRolloverSwitchLandingAfterItsTimeout(t *testing.T) {
	run := func(t *testing.T, mut mutation) (w *world, sc *simCore, term *terminateResult, first, next int64) {
		w = newScenario(t, 1, mut)
		sc = w.mustOpen(t)
		first = sc.c.tail.id
		w.holdOnce("meta.put", 1) // the rollover's switch
		a := w.newAdd(sc)
		w.runFor(20 * time.Millisecond)
		if sc.c.state != StateCreatingLedger || !a.acked || len(w.held) != 1 {
			t.Fatalf("setup: state %v, add %v, held %d: want CreatingLedger with the switch held", sc.c.state, a.err, len(w.held))
		}
		next = w.bk.next
		queued := w.newAdd(sc)
		term = w.terminate(sc)
		w.runFor(5 * time.Millisecond)
		if sc.c.state != StateTerminating {
			t.Fatalf("state %v, want Terminating behind the switch", sc.c.state)
		}
		// The switch times out; the store applies it later (held); terminate's write is held.
		w.lateNext = 1
		w.holdOnce("meta.late-apply", 1)
		w.holdOnce("meta.put", 1)
		w.release("meta.put", 1)
		w.runFor(30 * time.Millisecond)
		if w.err != nil {
			return w, sc, term, first, next
		}
		if len(w.held) != 2 || w.held[0].kind != "meta.late-apply" || w.held[1].kind != "meta.put" {
			t.Fatalf("setup: held %v, want the late switch and terminate's write", w.held)
		}
		if ids := ledgerIDs(w.record()); len(ids) != 1 || ids[0] != first {
			t.Fatalf("record ledgers %v before the late switch, want [%d]", ids, first)
		}
		// The late switch lands: the record names the new ledger.
		w.release("meta.late-apply", 0)
		w.runFor(time.Millisecond)
		if w.err != nil {
			return w, sc, term, first, next
		}
		if ids := ledgerIDs(w.record()); len(ids) != 2 || ids[1] != next {
			t.Fatalf("record ledgers %v after the late switch, want [%d %d]", ids, first, next)
		}
		w.release("meta.put", 0)
		w.runFor(30 * time.Millisecond)
		if w.err == nil && (queued.done != 1 || !errors.Is(queued.err, ErrTerminated)) {
			t.Fatalf("queued add: done %d, %v", queued.done, queued.err)
		}
		return w, sc, term, first, next
	}
	t.Run("fixed", func(t *testing.T) {
		w, sc, term, first, next := run(t, mutation{})
		w.mustCheck(t)
		want := Position{LedgerID: first, EntryID: 0}
		if sc.c.state != StateTerminated || term.done != 1 || term.pos != want || term.err != nil {
			t.Fatalf("state %v, terminate %d replies %v %v; want Terminated at %v", sc.c.state, term.done, term.pos, term.err, want)
		}
		if ids := ledgerIDs(w.record()); len(ids) != 1 || ids[0] != first {
			t.Fatalf("record ledgers %v, want [%d]", ids, first)
		}
		if l := w.ledgerState(next); l == nil || !l.deleted {
			t.Fatalf("the late switch's ledger %d is not deleted: %+v", next, l)
		}
		w.mustReopenTerminated(t, want)
	})
	t.Run("deleting the ledger before the switch settled is caught", func(t *testing.T) {
		w, _, _, _, _ := run(t, mutation{deleteLostRolloverAtOnce: true})
		if w.err == nil {
			t.Fatal("the checker did not catch a record naming a deleted ledger")
		}
		t.Logf("caught: %v", w.err)
	})
}

// TestCursorSwitchLandingAfterItsTimeout: the same for a cursor's switch to a new cursor
// ledger. The switch of the cursor record times out and the store applies it later; the
// managed ledger is closed before the owner's re-read is answered, so the re-read finds the
// record unchanged and the switch is given up (the cursor closed). The new cursor ledger must
// not be deleted yet: the late switch lands before the close's snapshot, and the record names
// it. settleCursorSwitch decides after the next write of the record succeeded: the record
// names the new ledger, so the one it replaced goes instead. Deleting the new ledger as soon
// as the switch was given up (mutation) leaves the cursor record naming a deleted ledger, which
// the checker catches. The random simulation first caught that mutation at seed 11,317 of its
// search (beyond the 3,000 TestSimCatchesMutations runs); this is the schedule.
func TestCursorSwitchLandingAfterItsTimeout(t *testing.T) {
	key := metadata.ManagedCursorKey(simML, "sub")
	run := func(t *testing.T, mut mutation) (w *world, sc *simCore, cur *cursor, next int64) {
		w = newScenario(t, 100, mut)
		w.cfg.MaxMarkDeleteRate = 0 // every acknowledgement is persisted at once
		sc = w.mustOpen(t)
		sc.c.openCursor("sub", Earliest, func(c *cursor, err error) { cur = c })
		for range 3 {
			w.newAdd(sc)
		}
		w.runFor(30 * time.Millisecond)
		if cur == nil || cur.lstate != cursorNoLedger {
			t.Fatalf("setup: cursor %v", cur)
		}
		// The first acknowledgement creates the cursor's ledger and switches the record to it.
		w.holdOnce("meta.put", 1)
		sc.c.cursorAckCumulative(cur, sc.c.lastConfirmed)
		w.runFor(20 * time.Millisecond)
		if cur.lstate != cursorSwitchingLedger || len(w.held) != 1 {
			t.Fatalf("setup: cursor ledger state %v, held %d: want the switch held", cur.lstate, len(w.held))
		}
		next = w.bk.next
		// The switch times out and lands later (held); the re-read is held.
		w.lateNext = 1
		w.holdOnce("meta.late-apply", 1)
		w.holdOnce("meta.get", 1)
		w.release("meta.put", 1)
		w.runFor(10 * time.Millisecond)
		if len(w.held) != 2 {
			t.Fatalf("setup: held %v, want the late switch and the re-read", w.held)
		}
		// Close; the re-read finds the record unchanged and the switch is given up. The
		// close's snapshot of the cursor is held.
		sc.c.closeML(func(error) { sc.closed = true })
		w.holdOnce("meta.put", 1)
		w.release("meta.get", 0)
		w.runFor(10 * time.Millisecond)
		if w.err != nil {
			return w, sc, cur, next
		}
		if ci, _ := w.cursorRecord(key); ci == nil || ci.Ledger == next {
			t.Fatalf("setup: the cursor record %+v already names %d", ci, next)
		}
		// The late switch lands: the cursor record names the new ledger.
		w.release("meta.late-apply", 0)
		w.runFor(time.Millisecond)
		if w.err != nil {
			return w, sc, cur, next
		}
		if ci, _ := w.cursorRecord(key); ci == nil || ci.Ledger != next {
			t.Fatalf("the cursor record %+v does not name %d after the late switch", ci, next)
		}
		w.release("meta.put", 0)
		w.runFor(50 * time.Millisecond)
		return w, sc, cur, next
	}
	t.Run("fixed", func(t *testing.T) {
		w, sc, _, next := run(t, mutation{})
		w.mustCheck(t)
		if !sc.closed {
			t.Fatalf("the managed ledger did not close (state %v)", sc.c.state)
		}
		ci, err := w.cursorRecord(key)
		if err != nil || ci.Ledger != next {
			t.Fatalf("cursor record %+v (%v), want it naming ledger %d", ci, err, next)
		}
		if l := w.ledgerState(next); l == nil || l.deleted {
			t.Fatalf("the cursor ledger %d the record names is deleted", next)
		}
		w.checkLeaks()
		w.mustCheck(t)
	})
	t.Run("deleting the ledger before the switch settled is caught", func(t *testing.T) {
		w, _, _, _ := run(t, mutation{deleteCursorSwitchAtOnce: true})
		if w.err == nil {
			t.Fatal("the checker did not catch a cursor record naming a deleted ledger")
		}
		t.Logf("caught: %v", w.err)
	})
}
