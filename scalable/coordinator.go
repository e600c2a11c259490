package scalable

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// subState is the coordinator's view of one subscription.
type subState struct {
	name string
	// consumers are the registered stream consumers, sorted; away: those disconnected and
	// when (Unix ms): they keep their share until Config.GraceMs has passed.
	consumers []string
	away      map[string]int64
	conns     map[string]uint64 // the connection each consumer registered through
	// drained: sealed segments whose cursor is known at the end (in memory: a new leader
	// starts empty and polls, which only delays assignments). gen counts each segment's
	// seeks: a check issued before one is stale. checking: a check in flight.
	drained  map[SegmentID]bool
	gen      map[SegmentID]uint64
	checking map[SegmentID]bool
	seeking  map[SegmentID]*seekRun
	// assigned is the last assignment sent, version its version.
	assigned map[string][]SegmentID
	version  uint64
}

type seekStep uint8

const (
	seekFence seekStep = iota + 1
	seekReset
)

type seekRun struct {
	tag     uint64
	seg     layout.Segment
	to      mledger.Position
	step    seekStep
	version uint64
	failed  bool
}

func newSubState(name string) *subState {
	return &subState{name: name, away: map[string]int64{}, conns: map[string]uint64{}, drained: map[SegmentID]bool{}, gen: map[SegmentID]uint64{},
		checking: map[SegmentID]bool{}, seeking: map[SegmentID]*seekRun{}, assigned: map[string][]SegmentID{}}
}

func (c *Core) subNames() []string { return slices.Sorted(maps.Keys(c.subs)) }

// syncSubs makes the coordinator's subscriptions those of the layout and forgets segments
// that left it.
func (c *Core) syncSubs() {
	for _, name := range c.l.Subscriptions {
		if c.subs[name] == nil {
			c.subs[name] = newSubState(name)
		}
	}
	for _, name := range c.subNames() {
		if !slices.Contains(c.l.Subscriptions, name) {
			delete(c.subs, name)
			continue
		}
		ss := c.subs[name]
		for id := range ss.drained {
			if !c.l.Has(id) {
				delete(ss.drained, id)
			}
		}
	}
}

// Register adds stream consumer name to sub through connection conn (a reconnect of a
// registered consumer changes nothing) and sends the assignments.
func (c *Core) Register(sub, name string, conn uint64) error {
	ss, err := c.sub(sub)
	if err != nil {
		return err
	}
	if i, found := slices.BinarySearch(ss.consumers, name); !found {
		ss.consumers = slices.Insert(ss.consumers, i, name)
	}
	ss.conns[name] = conn
	delete(ss.away, name) // a reconnect within the grace period keeps the assignment
	c.recompute(ss, name)
	return nil
}

// Disconnected reports that connection conn of stream consumer name of sub was lost: it
// keeps its assignment (nobody else reads its segments) until it registers again or
// Config.GraceMs passes, when it is unregistered. The loss of a connection other than the
// one the consumer last registered through is stale and ignored (a reconnect may be seen
// first).
func (c *Core) Disconnected(sub, name string, conn uint64) error {
	ss, err := c.sub(sub)
	if err != nil {
		return err
	}
	if _, found := slices.BinarySearch(ss.consumers, name); found && ss.conns[name] == conn {
		if _, ok := ss.away[name]; !ok {
			ss.away[name] = c.now
		}
	}
	return nil
}

// evictAway unregisters the consumers away for longer than the grace period.
func (c *Core) evictAway() {
	for _, name := range c.subNames() {
		ss := c.subs[name]
		for _, n := range slices.Sorted(maps.Keys(ss.away)) {
			if c.now-ss.away[n] >= c.cfg.GraceMs {
				_ = c.Unregister(name, n)
			}
		}
	}
}

// Unregister removes stream consumer name from sub.
func (c *Core) Unregister(sub, name string) error {
	ss, err := c.sub(sub)
	if err != nil {
		return err
	}
	if i, found := slices.BinarySearch(ss.consumers, name); found {
		ss.consumers = slices.Delete(ss.consumers, i, i+1)
		delete(ss.assigned, name)
	}
	delete(ss.away, name)
	delete(ss.conns, name)
	c.recompute(ss, "")
	return nil
}

func (c *Core) sub(sub string) (*subState, error) {
	if c.state == StateStopped {
		return nil, ErrNotLeading
	}
	// While reloading, the subscriptions of the last layout are known: the consumer's
	// assignment goes out once the record is loaded.
	ss := c.subs[sub]
	if ss == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownSubscription, sub)
	}
	return ss, nil
}

// Assignable reports whether segment id may be read by sub's stream consumers now (S2):
// it is not known drained and every ancestor still in the layout is.
func (c *Core) Assignable(sub string, id SegmentID) bool {
	ss := c.subs[sub]
	s, ok := c.l.Segment(id)
	return ss != nil && ok && c.assignable(ss, s)
}

func (c *Core) assignable(ss *subState, s layout.Segment) bool {
	if ss.drained[s.ID] {
		return false
	}
	if c.mut.SealedAlwaysAssignable && s.State == layout.StateSealed {
		return true
	}
	anc := c.l.Ancestors(s.ID)
	if c.mut.DirectParentsOnly {
		anc = s.Parents
	}
	for _, a := range anc {
		if !ss.drained[a] {
			return false
		}
	}
	return true
}

// QueueSegments returns the segments a queue consumer attaches to: every segment of the
// layout, active and sealed, in id order (no ordering across them).
func QueueSegments(l layout.Layout) []SegmentID {
	out := make([]SegmentID, 0, len(l.Segments))
	for _, s := range l.Segments {
		out = append(out, s.ID)
	}
	return out
}

// ComputeAssignment is the deterministic assignment (upstream's computeAssignment): the
// assignable segments in hash order (then id), dealt round-robin to the consumers in name
// order. Any leader computes the same from the same layout, consumers and drained set.
func ComputeAssignment(l layout.Layout, consumers []string, assignable func(layout.Segment) bool) map[string][]SegmentID {
	out := map[string][]SegmentID{}
	if len(consumers) == 0 {
		return out
	}
	names := slices.Sorted(slices.Values(consumers))
	segs := slices.DeleteFunc(slices.Clone(l.Segments), func(s layout.Segment) bool { return !assignable(s) })
	sort.Slice(segs, func(i, j int) bool {
		if segs[i].Range.Start != segs[j].Range.Start {
			return segs[i].Range.Start < segs[j].Range.Start
		}
		return segs[i].ID < segs[j].ID
	})
	for _, n := range names {
		out[n] = []SegmentID{}
	}
	for i, s := range segs {
		n := names[i%len(names)]
		out[n] = append(out[n], s.ID)
	}
	for _, n := range names {
		slices.Sort(out[n])
	}
	return out
}

func (c *Core) recomputeAll() {
	for _, name := range c.subNames() {
		c.recompute(c.subs[name], "")
	}
}

// recompute sends sub's assignments if they changed (and always to consumer also, a
// consumer that just registered).
func (c *Core) recompute(ss *subState, also string) {
	if c.state != StateReady {
		return
	}
	next := ComputeAssignment(c.l, ss.consumers, func(s layout.Segment) bool { return c.assignable(ss, s) })
	if maps.EqualFunc(next, ss.assigned, slices.Equal) && also == "" {
		return
	}
	if !maps.EqualFunc(next, ss.assigned, slices.Equal) {
		c.seq++
		ss.version = c.cfg.Term<<32 | c.seq
		ss.assigned = next
		for _, n := range ss.consumers {
			c.ready.Assignments = append(c.ready.Assignments, Assignment{Sub: ss.name, Consumer: n, Version: ss.version, Segments: slices.Clone(next[n])})
		}
		return
	}
	c.ready.Assignments = append(c.ready.Assignments, Assignment{Sub: ss.name, Consumer: also, Version: ss.version, Segments: slices.Clone(next[also])})
}

// pollDrains asks, for every subscription, about each sealed segment not known drained and
// not being reset.
func (c *Core) pollDrains() {
	for _, name := range c.subNames() {
		ss := c.subs[name]
		for _, s := range c.l.Segments {
			if s.State != layout.StateSealed || ss.drained[s.ID] || ss.checking[s.ID] || ss.seeking[s.ID] != nil {
				continue
			}
			ss.checking[s.ID] = true
			t := c.tag()
			c.effects[t] = effect{kind: effCheck, sub: name, seg: s.ID, gen: ss.gen[s.ID]}
			c.ready.Checks = append(c.ready.Checks, Check{Tag: t, Term: c.cfg.Term, Sub: name, Segment: s})
		}
	}
}

// Checked reports a drain check: whether the cursor was at the end of the terminated
// ledger (err: unknown, asked again at the next poll).
func (c *Core) Checked(tag uint64, drained bool, err error) {
	e, ok := c.effects[tag]
	if !ok || e.kind != effCheck || c.state == StateStopped {
		return
	}
	delete(c.effects, tag)
	ss := c.subs[e.sub]
	if ss == nil {
		return
	}
	delete(ss.checking, e.seg)
	stale := ss.gen[e.seg] != e.gen || ss.seeking[e.seg] != nil
	if err != nil || !drained || stale && !c.mut.StaleDrainChecks || !c.l.Has(e.seg) {
		return
	}
	ss.drained[e.seg] = true
	c.recompute(ss, "")
	c.advance()
}

// Seek asks to reset sub's cursor on segment seg to to. The segment is first taken out of
// the drained set and its descendants out of the assignments, and the descendants are
// fenced (consumers holding an older assignment are detached), so that nothing past the
// seek is read before the segment is drained again; then the cursor is reset. The Result
// with the returned tag ends it.
func (c *Core) Seek(sub string, seg SegmentID, to mledger.Position) uint64 {
	t := c.tag()
	fail := func(err error) uint64 {
		c.ready.Results = append(c.ready.Results, Result{Tag: t, Err: err})
		return t
	}
	if c.state != StateReady {
		return fail(ErrNotLeading)
	}
	ss, err := c.sub(sub)
	if err != nil {
		return fail(err)
	}
	s, ok := c.l.Segment(seg)
	if !ok || c.pruning[seg] {
		return fail(fmt.Errorf("%w: %d", ErrSegmentGone, seg))
	}
	if ss.seeking[seg] != nil {
		return fail(ErrSeekInProgress)
	}
	run := &seekRun{tag: t, seg: s, to: to}
	ss.seeking[seg] = run
	if c.mut.SeekKeepsDrained {
		c.issueReset(ss, run)
		return t
	}
	delete(ss.drained, seg)
	ss.gen[seg]++
	c.recompute(ss, "")
	// The fence is above every version sent so far, by this leader or an earlier one (a new
	// leader may not have sent any yet): only assignments computed from now on pass it.
	c.seq++
	run.version = c.cfg.Term<<32 | c.seq
	if c.Descendants(seg) == nil {
		c.issueReset(ss, run)
	} else {
		c.issueFence(ss, run)
	}
	return t
}

// Descendants returns seg's descendants in the stored layout as segments.
func (c *Core) Descendants(seg SegmentID) []layout.Segment {
	var out []layout.Segment
	for _, d := range c.l.Descendants(seg) {
		s, _ := c.l.Segment(d)
		out = append(out, s)
	}
	return out
}

func (c *Core) issueFence(ss *subState, run *seekRun) {
	run.step, run.failed = seekFence, false
	t := c.tag()
	c.effects[t] = effect{kind: effFence, sub: ss.name, seg: run.seg.ID}
	c.ready.Fences = append(c.ready.Fences, Fence{Tag: t, Term: c.cfg.Term, Sub: ss.name, Segments: c.Descendants(run.seg.ID), Version: run.version})
}

func (c *Core) issueReset(ss *subState, run *seekRun) {
	run.step, run.failed = seekReset, false
	t := c.tag()
	c.effects[t] = effect{kind: effReset, sub: ss.name, seg: run.seg.ID}
	c.ready.Resets = append(c.ready.Resets, Reset{Tag: t, Term: c.cfg.Term, Sub: ss.name, Segment: run.seg, To: run.to})
}

func (c *Core) seekDone(e effect, err error) {
	ss := c.subs[e.sub]
	if ss == nil {
		return
	}
	run := ss.seeking[e.seg]
	if run == nil {
		return
	}
	if err != nil {
		run.failed = true
		c.scheduleRetry()
		return
	}
	if e.kind == effFence {
		c.issueReset(ss, run)
		return
	}
	delete(ss.seeking, e.seg)
	ss.gen[e.seg]++
	c.ready.Results = append(c.ready.Results, Result{Tag: run.tag})
	c.recompute(ss, "")
}

func (c *Core) retrySeeks() {
	for _, name := range c.subNames() {
		ss := c.subs[name]
		for _, id := range slices.Sorted(maps.Keys(ss.seeking)) {
			run := ss.seeking[id]
			switch {
			case !run.failed:
			case run.step == seekFence:
				c.issueFence(ss, run)
			default:
				c.issueReset(ss, run)
			}
		}
	}
}
