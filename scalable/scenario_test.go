package scalable

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/mledger"
)

// Seed 004's cases (apache/pulsar#26842 and #26850), each scripted on the simulation's
// world without faults: the checks of the random simulation run at every step, and each
// scenario asserts its own outcome. Each must pass, and fail with its upstream behaviour.
//
// Hashes: 0 covers [0000, ffff]; split at the midpoint it gives 1 = [0000, 7fff] and
// 2 = [8000, ffff]; 2 split gives 3 = [8000, bfff] and 4 = [c000, ffff].

const scenarioSub = "sub-a"

// newScenario returns a world with one subscription, a leader, no faults and 1ms delays.
func newScenario(mut Mutation, retentionMs int64) *simWorld {
	w := newSimWorld(1, mut, false)
	w.p = simParams{maxDelay: time.Millisecond, retentionMs: retentionMs, streamSubs: 1, initialSegments: 1}
	w.streamSubs = []string{scenarioSub}
	w.create([]string{scenarioSub})
	w.elect()
	w.runFor(10 * time.Millisecond)
	return w
}

func (w *simWorld) runFor(d time.Duration) {
	done := false
	w.s.After(d, "", func() { done = true })
	for !done && w.err == nil && w.s.Step() {
	}
}

// consumer adds a stream consumer of sub that reads nothing until resumed.
func (w *simWorld) pausedConsumer(sub string) *simConsumer {
	w.addConsumer(sub, fmt.Sprintf("c-%d", len(w.consumers)))
	c := w.consumers[len(w.consumers)-1]
	c.paused = true
	w.runFor(10 * time.Millisecond)
	return c
}

// producer returns a producer of a new key with hash h that has sent n messages.
func (w *simWorld) producer(h uint16, n int) *simProducer {
	p := &simProducer{key: uint16(len(w.producers)), hash: h, next: 1, view: w.stored}
	w.producers = append(w.producers, p)
	w.more(p, n)
	return p
}

// more sends n more messages of p's key and lets them complete.
func (w *simWorld) more(p *simProducer, n int) {
	p.limit += n
	w.produce(p)
	w.runFor(30 * time.Millisecond)
}

// split splits seg at the midpoint through the leader and lets it complete.
func (w *simWorld) split(seg SegmentID) {
	w.input(w.inc, fmt.Sprintf("admin: split %d", seg), func(c *Core) { c.Split(seg, 0) })
	w.runFor(30 * time.Millisecond)
}

func (w *simWorld) result(err error) error {
	if w.err != nil {
		return w.err
	}
	return err
}

// blocked reports an error unless none of segs is assignable to sub or held by c.
func (w *simWorld) blocked(c *simConsumer, why string, segs ...SegmentID) error {
	for _, s := range segs {
		if w.inc.c.Assignable(c.sub, s) || slices.Contains(c.assigned, s) {
			return w.result(fmt.Errorf("segment %d is assigned to %s (%v) while %s", s, c.sub, c.assigned, why))
		}
	}
	return w.err
}

// finish resumes c and requires every message consumed, in per-key order (the checkers).
func (w *simWorld) finish(c *simConsumer) error {
	c.paused = false
	w.runFor(300 * time.Millisecond)
	if w.err != nil {
		return w.err
	}
	for m := range w.acked {
		if !w.consumed[c.sub][m] {
			return fmt.Errorf("%v not consumed: %s", m, w.where(c.sub, m))
		}
	}
	return nil
}

// scenarioPruneOrder: 0 → {1, 2}, then 2 → {3, 4} before anything was written to 2, with
// backlog left on 0: 2 (sealed, empty, drained) must not be pruned, and 3, 4 not assigned
// while 0 has backlog (#26842).
func scenarioPruneOrder(mut Mutation) error {
	w := newScenario(mut, 0)
	c := w.pausedConsumer(scenarioSub)
	k3, k4 := w.producer(0x9000, 3), w.producer(0xd000, 3)
	w.split(0)
	w.split(2)
	w.more(k3, 2)
	w.more(k4, 2)
	w.runFor(50 * time.Millisecond) // GC ticks with 0 undrained
	if !w.stored.Has(2) {
		return w.result(fmt.Errorf("segment 2 pruned while 0 has backlog"))
	}
	if err := w.blocked(c, "0 has backlog", 3, 4); err != nil {
		return err
	}
	if err := w.finish(c); err != nil {
		return err
	}
	if w.stored.Has(0) || w.stored.Has(2) {
		return fmt.Errorf("sealed segments left after draining: %v", w.stored.Segments)
	}
	return nil
}

// scenarioChainAssignment: 0 → 2 → 3 with 2 sealed and empty: 3 is not assigned while 0
// has backlog (#26850: the direct parent 2 is drained, the grandparent is not).
func scenarioChainAssignment(mut Mutation) error {
	w := newScenario(mut, time.Hour.Milliseconds())
	c := w.pausedConsumer(scenarioSub)
	k := w.producer(0x9000, 3)
	w.split(0)
	w.split(2)
	w.more(k, 3)
	w.runFor(30 * time.Millisecond) // drain polls: 2 is drained
	if err := w.blocked(c, "0 has backlog", 3, 4); err != nil {
		return err
	}
	return w.finish(c)
}

// scenarioSealedWithMessages: a sealed segment with messages is not assigned while its
// parent has backlog (#26850: sealed segments were always assignable).
func scenarioSealedWithMessages(mut Mutation) error {
	w := newScenario(mut, time.Hour.Milliseconds())
	c := w.pausedConsumer(scenarioSub)
	k := w.producer(0x9000, 3)
	w.split(0)
	w.more(k, 3) // on 2
	w.split(2)
	w.more(k, 3) // on 3
	if err := w.blocked(c, "0 has backlog", 2, 3); err != nil {
		return err
	}
	return w.finish(c)
}

// scenarioSeekReblocks: a seek on 0 re-blocks its descendants until 0 is drained again.
func scenarioSeekReblocks(mut Mutation) error {
	w := newScenario(mut, time.Hour.Milliseconds())
	c := w.pausedConsumer(scenarioSub)
	k1, k2 := w.producer(0x1000, 3), w.producer(0x9000, 3)
	w.split(0)
	w.more(k1, 2)
	w.more(k2, 2)
	c.paused = false
	w.runFor(100 * time.Millisecond)
	for m := range w.acked {
		if !w.consumed[c.sub][m] {
			return w.result(fmt.Errorf("not drained before the seek: %v", m))
		}
	}
	c.paused = true
	w.input(w.inc, "admin: seek 0 to the earliest", func(core *Core) { core.Seek(scenarioSub, 0, mledger.Position{LedgerID: 1}) })
	w.runFor(30 * time.Millisecond)
	if err := w.blocked(c, "0 was reset", 1, 2); err != nil {
		return err
	}
	w.more(k1, 2)
	w.more(k2, 2)
	return w.finish(c)
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

func TestPruneKeepsDrainedSegmentWithUndrainedAncestor(t *testing.T) {
	testScenario(t, scenarioPruneOrder, Mutation{PruneAnySealed: true})
}

func TestGrandchildNotAssignedWhileGrandparentHasBacklog(t *testing.T) {
	testScenario(t, scenarioChainAssignment, Mutation{DirectParentsOnly: true})
}

func TestSealedSegmentWithMessagesNotAssignedWhileParentHasBacklog(t *testing.T) {
	testScenario(t, scenarioSealedWithMessages, Mutation{SealedAlwaysAssignable: true})
}

func TestSeekOnAncestorReblocksDescendants(t *testing.T) {
	testScenario(t, scenarioSeekReblocks, Mutation{SeekKeepsDrained: true})
}
