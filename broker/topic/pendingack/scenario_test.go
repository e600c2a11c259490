package pendingack

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/sim"
	"github.com/magnetar-io/magnetar/txn"
)

// The scenarios of upstream's pending-ack replay bug report (apache/pulsar#26374), scripted
// on the simulation's world without random faults: the checks of the random simulation run
// at every step, and each scenario asserts its own outcome. Each must pass, and fail with
// its upstream behaviour.

// newScenario returns a world with one incarnation, no faults and 1ms delays.
func newScenario(mut Mutation) *simWorld {
	w := newWorld(sim.New(1), mut)
	w.p = simParams{maxDelay: time.Millisecond, msgs: 1000}
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

func (w *simWorld) result(err error) error {
	if w.err != nil {
		return w.err
	}
	return err
}

// openWithAcks opens a transaction and acknowledges n positions in it, one record each, so
// that the log spans n/simEntriesPerLedger ledgers.
func (w *simWorld) openWithAcks(n int) (txn.ID, error) {
	id := w.begin(true, time.Hour)
	for i := 0; i < n; i++ {
		var got error = errors.New("not answered")
		w.txnAck(id, []Ack{{Pos: Position{LedgerID: simTopicLedger, EntryID: int64(i)}}}, func(err error) { got = err })
		w.runFor(20 * time.Millisecond)
		if got != nil {
			return id, w.result(fmt.Errorf("ack %d: %v", i, got))
		}
	}
	return id, nil
}

// reloadNow replaces the incarnation (the topic is unloaded and loaded again).
func (w *simWorld) reloadNow() {
	w.inc.alive = false
	w.start()
}

// scenarioDeletedLedger: several hundred pending acks of an open transaction span several
// ledgers of the log; one of them is deleted and the subscription reloads: the subscribe
// fails fast, naming the cause.
func scenarioDeletedLedger(mut Mutation) error {
	w := newScenario(mut)
	if _, err := w.openWithAcks(300); err != nil {
		return err
	}
	w.gone = w.log[len(w.log)/2].pos.LedgerID
	w.reloadNow()
	w.runFor(5 * time.Second)
	if w.err != nil {
		return w.err
	}
	inc := w.inc
	if inc.subAnswered != 1 || inc.subErr == nil {
		st, _ := inc.c.State()
		return fmt.Errorf("5s after the reload the subscribe is answered %d times (%v), the handle %v, %d attempts",
			inc.subAnswered, inc.subErr, st, len(inc.attempts))
	}
	if !strings.Contains(inc.subErr.Error(), errSimGone.Error()) {
		return fmt.Errorf("the subscribe fails with %v, which does not name the deleted ledger", inc.subErr)
	}
	return nil
}

// scenarioBookieOutage: the bookies are out while the subscription reloads; the replay
// backs off (a few attempts per second at most) and completes once they are back, with the
// transaction's acks locked again.
func scenarioBookieOutage(mut Mutation) error {
	w := newScenario(mut)
	id, err := w.openWithAcks(20)
	if err != nil {
		return err
	}
	w.p.outage = [2]time.Duration{w.s.Now(), w.s.Now() + 10*time.Second}
	w.p.slowFail = false
	w.reloadNow()
	w.runFor(10 * time.Second)
	inc := w.inc
	if w.err != nil {
		return w.err
	}
	if inc.subAnswered != 0 {
		return fmt.Errorf("the subscribe is answered (%v) while the bookies are out", inc.subErr)
	}
	if n := len(inc.attempts); n > 20 {
		return fmt.Errorf("%d replay attempts in a 10s outage", n)
	}
	w.runFor(40 * time.Second) // the backoff is at most 30s
	if inc.subAnswered != 1 || inc.subErr != nil {
		return w.result(fmt.Errorf("after the outage the subscribe is answered %d times (%v)", inc.subAnswered, inc.subErr))
	}
	if txns, pos := inc.c.Pending(); txns != 1 || pos != 20 {
		return w.result(fmt.Errorf("after the replay %d transactions and %d positions are pending, want 1 and 20 of %v", txns, pos, id))
	}
	return w.err
}

func testScenario(t *testing.T, run func(Mutation) error, upstream ...Mutation) {
	t.Helper()
	if err := run(Mutation{}); err != nil {
		t.Fatal(err)
	}
	for _, m := range upstream {
		if err := run(m); err == nil {
			t.Fatalf("the upstream behaviour %+v is not caught", m)
		} else {
			t.Logf("upstream behaviour %+v caught: %v", m, err)
		}
	}
}

// TestDeletedPendingAckLedgerFailsSubscribeFast is the bug report's first scenario: the
// upstream behaviours are a replay that reads the deleted ledger again forever (a hang)
// and one that completes without it.
func TestDeletedPendingAckLedgerFailsSubscribeFast(t *testing.T) {
	testScenario(t, scenarioDeletedLedger, Mutation{RetryPermanentFailure: true}, Mutation{ReadyOnPermanentFailure: true})
}

// TestBookieOutageDuringReplayBacksOff is the bug report's second scenario: the upstream
// behaviour re-issues the failed read at once (apache/pulsar#26374's hot loop).
func TestBookieOutageDuringReplayBacksOff(t *testing.T) {
	testScenario(t, scenarioBookieOutage, Mutation{RetryReadAtOnce: true})
}
