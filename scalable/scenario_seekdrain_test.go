package scalable

import (
	"fmt"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/mledger"
)

// scenarioSeekRacesDrainCheck: a seek on segment 0 races a drain check of 0 (doc.go,
// "Subscriptions"). sub-a consumed all of 0, then 0 was split into {1, 2} and sealed at that
// end; the coordinator asks whether 0 is drained, and with that check in flight an admin
// seeks 0 back to the earliest. The broker answers "drained" (it looked before the reset), and
// the answer lands after the seek began: here after the reset, with other timings during the
// fence. It was true of the cursor before the seek, not after: taken, it would mark 0 drained
// and make 1 and 2 assignable while 0 has its rewound backlog (S2). The coordinator drops it
// (the check's generation is older than the seek's), so 1 and 2 stay blocked until a check
// issued after the seek finds 0 drained again. The random simulation first caught the
// mutation that drops that guard (Mutation.StaleDrainChecks) at seed 78 of
// TestSimCatchesMutations, as a prune of segment 2 with backlog.
func scenarioSeekRacesDrainCheck(mut Mutation) error {
	w := newScenario(mut, time.Hour.Milliseconds())
	c := w.pausedConsumer(scenarioSub)
	k1, k2 := w.producer(0x1000, 3), w.producer(0x9000, 3)
	ss := w.inc.c.subs[scenarioSub]
	seg0 := w.segs[0]
	atEnd := func() bool { return seg0.cursors[scenarioSub] == len(seg0.log) }
	deadline := w.s.Now() + 200*time.Millisecond
	step := func(what string, until func() bool) error {
		for !until() {
			if w.err != nil {
				return w.err
			}
			if w.s.Now() > deadline || !w.s.Step() {
				return fmt.Errorf("scenario: no %s by %v", what, w.s.Now())
			}
		}
		return w.err
	}

	// c consumes 0 to its end while it is active; then 0 is split and sealed at that end, so
	// the first drain check of 0 is answered "drained".
	c.paused = false
	if err := step("end of segment 0", atEnd); err != nil {
		return err
	}
	c.paused = true
	w.input(w.inc, "admin: split 0", func(core *Core) { core.Split(0, 0) })
	if err := step("drain check of 0", func() bool { return ss.checking[0] }); err != nil {
		return err
	}

	// The seek, with that check in flight.
	w.input(w.inc, "admin: seek 0 to the earliest", func(core *Core) { core.Seek(scenarioSub, 0, mledger.Position{LedgerID: 1}) })
	if ss.seeking[0] == nil {
		return w.result(fmt.Errorf("scenario: the seek did not start"))
	}
	if err := step("answer of the check", func() bool { return !ss.checking[0] }); err != nil {
		return err
	}
	// The answer landed after the seek began (during it or after it), about a sealed 0 whose
	// cursor the broker saw at the end unless the reset had already landed.
	if !seg0.terminated {
		return fmt.Errorf("scenario: 0 is not sealed")
	}
	if err := w.blocked(c, "a drain check issued before the seek was answered", 1, 2); err != nil {
		return err
	}
	w.runFor(30 * time.Millisecond) // the fence and the reset land; the seek ends
	if ss.seeking[0] != nil || atEnd() {
		return w.result(fmt.Errorf("the seek did not complete: in progress %v, cursor at the end %v", ss.seeking[0] != nil, atEnd()))
	}
	if err := w.blocked(c, "0 was reset", 1, 2); err != nil {
		return err
	}
	w.more(k1, 2) // on 1
	w.more(k2, 2) // on 2
	return w.finish(c)
}

func TestScenarioSeekRacesDrainCheck(t *testing.T) {
	testScenario(t, scenarioSeekRacesDrainCheck, Mutation{StaleDrainChecks: true})
}
