package txnbuf

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/sim"
	"github.com/magnetar-io/magnetar/txn"
)

// The scenarios of upstream's transaction-buffer bug report (apache/pulsar#25821), and an
// apply racing an append, each scripted on the simulation's world without faults: the
// checks of the random simulation run at every step, and each scenario asserts its own
// outcome. Each must pass, and fail with its upstream behaviour.

// newScenario returns a world with one loaded incarnation, no faults and 1ms delays.
func newScenario(mut Mutation) *simWorld {
	w := &simWorld{s: sim.New(1), mut: mut, open: map[txn.ID]bool{}, aborted: map[txn.ID]Position{},
		headers: map[txn.ID]*simHeader{}, final: map[txn.ID]txn.Status{}, orphans: map[txn.ID]bool{}}
	w.p = simParams{maxDelay: time.Millisecond}
	w.start()
	return w
}

// runFor runs the events of the next d.
func (w *simWorld) runFor(d time.Duration) {
	done := false
	w.s.After(d, "", func() { done = true })
	for !done && w.err == nil && w.s.Step() {
	}
}

// sendN sends n entries of id (nil: plain) and lets them complete.
func (w *simWorld) sendN(id *txn.ID, n int) {
	for i := 0; i < n; i++ {
		w.send(&simSend{txn: id, n: i})
	}
	w.runFor(50 * time.Millisecond)
}

// entriesOf returns the positions of id's entries; visibleOf those a reader gets now.
func (w *simWorld) entriesOf(id txn.ID, vis bool) []Position {
	es := w.log[w.trimmed:]
	if vis {
		es = w.visible(w.inc.c)
	}
	var out []Position
	for _, e := range es {
		if e.txn != nil && *e.txn == id {
			out = append(out, e.pos)
		}
	}
	return out
}

func (w *simWorld) result(err error) error {
	if w.err != nil {
		return w.err
	}
	return err
}

// scenarioCommitGCRestart: a committed transaction's header is collected, then the topic
// reloads: its entries stay visible (unknown is not aborted).
func scenarioCommitGCRestart(mut Mutation) error {
	w := newScenario(mut)
	id := w.begin(true, time.Hour)
	w.sendN(&id, 3)
	w.endTxn(id, txn.Committed)
	w.runFor(200 * time.Millisecond)
	if w.headers[id] != nil || w.open[id] {
		return w.result(fmt.Errorf("header or open record of %v not collected", id))
	}
	w.reload()
	w.runFor(50 * time.Millisecond)
	if got := w.entriesOf(id, true); len(got) != 3 {
		return w.result(fmt.Errorf("after the reload %d of 3 committed entries are visible", len(got)))
	}
	return w.err
}

// scenarioAbortRestart: an aborted transaction is applied (the watermark passes it), then
// the topic reloads: its entries stay filtered.
func scenarioAbortRestart(mut Mutation) error {
	w := newScenario(mut)
	id := w.begin(true, time.Hour)
	w.sendN(&id, 3)
	w.sendN(nil, 1)
	w.endTxn(id, txn.Aborted)
	w.runFor(200 * time.Millisecond)
	if !w.log[len(w.log)-1].pos.Less(w.wm) {
		return w.result(fmt.Errorf("the watermark %v did not pass the log", w.wm))
	}
	w.reload()
	w.runFor(50 * time.Millisecond)
	if got := w.entriesOf(id, true); len(got) != 0 {
		return w.result(fmt.Errorf("after the reload aborted entries %v are visible", got))
	}
	return w.err
}

// scenarioOpenAtRecovery: a transaction open when the topic reloads pins the read bound at
// the watermark (also for plain entries after it) until its outcome arrives.
func scenarioOpenAtRecovery(mut Mutation) error {
	w := newScenario(mut)
	a := w.begin(true, time.Hour)
	w.sendN(&a, 2)
	w.endTxn(a, txn.Committed)
	w.runFor(100 * time.Millisecond)
	b := w.begin(true, time.Hour)
	w.sendN(&b, 2)
	w.sendN(nil, 1)
	w.reload()
	w.runFor(50 * time.Millisecond)
	mr := w.inc.c.MaxRead()
	if mr == nil || w.wm.Less(mr.Pos) {
		return w.result(fmt.Errorf("read bound %v past the watermark %v while %v is unresolved", mr, w.wm, b))
	}
	if got := w.entriesOf(a, true); len(got) != 2 {
		return w.result(fmt.Errorf("%d of 2 entries of committed %v visible below the watermark", len(got), a))
	}
	if len(w.visible(w.inc.c)) != 2 {
		return w.result(errors.New("entries past the watermark are visible"))
	}
	w.endTxn(b, txn.Committed)
	w.runFor(100 * time.Millisecond)
	if got := w.entriesOf(b, true); len(got) != 2 || w.inc.c.MaxRead() != nil {
		return w.result(fmt.Errorf("after %v committed: %d of 2 visible, bound %v", b, len(got), w.inc.c.MaxRead()))
	}
	return w.err
}

// scenarioRecordBeforeAppend: a transaction's first send is held until its open record is
// durable; the append comes after (T3, checked at every append).
func scenarioRecordBeforeAppend(mut Mutation) error {
	w := newScenario(mut)
	id := w.begin(true, time.Hour)
	w.send(&simSend{txn: &id})
	if len(w.inc.adds) != 0 || len(w.log) != 0 {
		return w.result(errors.New("the first send was appended before its registration completed"))
	}
	w.runFor(50 * time.Millisecond)
	if len(w.entriesOf(id, false)) != 1 {
		return w.result(errors.New("the held send was not appended after the registration"))
	}
	return w.err
}

// scenarioApplyWaitsForAppend: an abort arrives while an append of the transaction is in
// flight; the apply waits for it, so the aborted record covers the late entry.
func scenarioApplyWaitsForAppend(mut Mutation) error {
	w := newScenario(mut)
	id := w.begin(true, time.Hour)
	w.sendN(&id, 1)
	w.send(&simSend{txn: &id, n: 1})
	w.endTxn(id, txn.Aborted)
	w.input(w.inc, "ended", func(c *Core) { c.Ended(id, txn.Aborted) })
	if w.inc.applying != 0 {
		return w.result(errors.New("the abort is applied while an append is in flight"))
	}
	w.runFor(200 * time.Millisecond)
	es := w.entriesOf(id, false)
	if p, ok := w.aborted[id]; !ok || len(es) != 2 || p.Less(es[1]) {
		return w.result(fmt.Errorf("aborted record %v (stored %v) does not cover the entries %v", p, ok, es))
	}
	return w.err
}

func testScenario(t *testing.T, run func(Mutation) error, upstream Mutation) {
	t.Helper()
	if err := run(Mutation{}); err != nil {
		t.Fatal(err)
	}
	if err := run(upstream); err == nil {
		t.Fatalf("the upstream behaviour %+v is not caught", upstream)
	} else {
		t.Logf("upstream behaviour caught: %v", err)
	}
}

func TestRestartAfterCommitWithHeaderCollectedKeepsDataVisible(t *testing.T) {
	testScenario(t, scenarioCommitGCRestart, Mutation{UnknownIsAborted: true})
}

func TestRestartAfterAbortKeepsDataFiltered(t *testing.T) {
	testScenario(t, scenarioAbortRestart, Mutation{SkipAbortRecord: true})
}

func TestOpenTransactionAtRecoveryPinsMaxRead(t *testing.T) {
	testScenario(t, scenarioOpenAtRecovery, Mutation{NoPinAtRecovery: true})
}

func TestRecordWrittenBeforeAppend(t *testing.T) {
	testScenario(t, scenarioRecordBeforeAppend, Mutation{AppendBeforeRecord: true})
}

func TestApplyWaitsForAppendsInFlight(t *testing.T) {
	testScenario(t, scenarioApplyWaitsForAppend, Mutation{ApplyWithInflight: true})
}
