package scalable

import (
	"errors"
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// SegmentID is the layout's.
type SegmentID = layout.SegmentID

// Errors. Callers test them with errors.Is.
var (
	// ErrNotLeading is returned for a request to a core that is loading or stopped.
	ErrNotLeading = errors.New("scalable: controller not ready")
	// ErrUnknownSubscription is returned for a consumer or seek of a subscription the layout
	// does not list.
	ErrUnknownSubscription = errors.New("scalable: unknown subscription")
	// ErrSegmentGone is returned for a seek on a segment that is not in the layout or is
	// being pruned.
	ErrSegmentGone = errors.New("scalable: segment not in the layout")
	// ErrSeekInProgress is returned for a seek on a segment that is already being reset for
	// the subscription.
	ErrSeekInProgress = errors.New("scalable: a seek of the segment is in progress")
)

// State is a controller core's lifecycle state.
type State uint8

// States.
const (
	// StateLoading: the core waits for the layout record (Load), at start and after a
	// refused or failed write.
	StateLoading State = iota + 1
	// StateReady: the core leads the topic: it runs operations, GC and assignments.
	StateReady
	// StateStopped: the core lost leadership or was closed; it does nothing more.
	StateStopped
)

func (s State) String() string {
	switch s {
	case StateLoading:
		return "Loading"
	case StateReady:
		return "Ready"
	case StateStopped:
		return "Stopped"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Config configures one core: one leader term of one topic's controller.
type Config struct {
	Topic layout.Topic
	// Term is the leader term (increasing across leaders, e.g. the election key's version):
	// assignment versions and effects on segments carry it, and brokers refuse an effect of
	// an older term than one they have seen for the segment.
	Term uint64
	// RetentionMs is how long a sealed segment is kept after its seal once every
	// subscription drained it.
	RetentionMs int64
	// TickMs is the period of Tick (drain polls, GC, auto-scale, retries); RetryMs the delay
	// before a failed effect is retried.
	TickMs, RetryMs int64
	// GraceMs is how long a disconnected stream consumer keeps its assignment (upstream: 60 s).
	GraceMs int64
	Policy  Policy
}

// Mutation deliberately breaks the core (upstream's behaviours and others), to prove the
// simulation's checkers catch them. Only tests set it.
type Mutation struct {
	// PruneAnySealed prunes every sealed, retained, drained segment in any order and drops
	// its edges (apache/pulsar#26842 before the fix).
	PruneAnySealed bool
	// DirectParentsOnly checks only a segment's direct parents for drain (#26850 before).
	DirectParentsOnly bool
	// SealedAlwaysAssignable assigns sealed segments whatever their ancestors (#26850 before).
	SealedAlwaysAssignable bool
	// SeekKeepsDrained resets the cursor at once and keeps the segment drained: the
	// descendants stay assigned (#26274's open gap).
	SeekKeepsDrained bool
	// CommitBeforeSeal makes the children active before the parents are sealed.
	CommitBeforeSeal bool
	// NoChildCursors creates children without the subscriptions' cursors.
	NoChildCursors bool
	// StaleDrainChecks lets a drain check issued before a seek mark the segment drained when
	// its answer lands during or after the seek (no generation or seek-in-progress guard).
	StaleDrainChecks bool
}

// Write asks for a compare-and-swap of the whole layout record: put Record if the stored
// version is Expected (0: the record must not exist). Report it with Written.
type Write struct {
	Tag      uint64
	Record   layout.Layout
	Expected metadata.Version
}

// Create asks to create Segment's topic (its managed ledger) if missing, with a durable
// cursor at the earliest position for each of Subs that it lacks. Idempotent; report with
// Done.
type Create struct {
	Tag     uint64
	Segment layout.Segment
	Subs    []string
}

// Seal asks to terminate Segment's managed ledger (idempotent). Report with Done.
type Seal struct {
	Tag     uint64
	Segment layout.Segment
}

// Delete asks to delete a pruned Segment's topic (idempotent). Report with Done.
type Delete struct {
	Tag     uint64
	Segment layout.Segment
}

// Check asks whether Sub's cursor on the sealed Segment is at the end of its terminated
// ledger. Report with Checked. The segment's broker refuses it if it has seen a later Term.
type Check struct {
	Tag     uint64
	Term    uint64
	Sub     string
	Segment layout.Segment
}

// Fence asks the brokers of Segments to detach Sub's consumers that hold an assignment older
// than Version and to refuse such attaches from now on. Report with Done.
type Fence struct {
	Tag      uint64
	Term     uint64
	Sub      string
	Segments []layout.Segment
	Version  uint64
}

// Reset asks to move Sub's cursor on Segment to To (a seek or reset-cursor). Report with Done.
// The segment's broker refuses it if it has seen a later Term.
type Reset struct {
	Tag     uint64
	Term    uint64
	Sub     string
	Segment layout.Segment
	To      mledger.Position
}

// Assignment is what a stream consumer of Sub reads: Segments, in the version Version
// (versions increase across leaders; a consumer keeps the newest it got).
type Assignment struct {
	Sub, Consumer string
	Version       uint64
	Segments      []SegmentID
}

// Result ends a request (Split, Merge, Subscribe, Seek): Err nil on success.
type Result struct {
	Tag uint64
	Err error
}

// Ready is what the owner must do next (after every input).
type Ready struct {
	// Reload asks to read the record and feed it to Load.
	Reload  bool
	Write   *Write
	Creates []Create
	Seals   []Seal
	Deletes []Delete
	Checks  []Check
	Fences  []Fence
	Resets  []Reset
	// Layout, if set, is the stored layout that changed: push it to producers and watchers.
	Layout *layout.Layout
	// Assignments changed: send each to its consumer.
	Assignments []Assignment
	Results     []Result
	// TimerAt asks for a Tick at this time (Unix ms).
	TimerAt int64
}

type writeKind uint8

const (
	writeIntent writeKind = iota + 1
	writeCommit
	writeGC
)

type opStep uint8

const (
	stepCreate opStep = iota + 1
	stepSeal
	stepCommit
	stepSealAfter // CommitBeforeSeal mutation only
)

type reqKind uint8

const (
	reqSplit reqKind = iota + 1
	reqMerge
	reqSubscribe
)

type request struct {
	tag    uint64 // 0: the policy's
	kind   reqKind
	seg    SegmentID
	other  SegmentID
	at     uint16
	sub    string
	intent *layout.Op // the intent written for it (nil: not yet)
}

// opRun is the operation the record has pending, from its durable intent to its commit.
type opRun struct {
	op      layout.Op
	step    opStep
	waiting map[uint64]bool // effects of the step in flight
	failed  []any           // effects of the step to retry
	req     *request        // nil: found in the record
}

type effectKind uint8

const (
	effOp effectKind = iota + 1
	effDelete
	effCheck
	effFence
	effReset
)

type effect struct {
	kind effectKind
	sub  string
	seg  SegmentID
	gen  uint64
	eff  any
}

// Core is one leader term of a scalable topic's controller, sans I/O: the operations that
// change the layout (split, merge, subscribe: intent, effects, commit), the subscription
// coordinator (assignments, drain checks, seeks) and the garbage collector of sealed
// segments. The owner performs what Ready lists and feeds the outcomes back; a new leader
// starts a new Core, which completes whatever operation the record has pending.
//
// Invariants:
//   - one write of the record at a time, each a compare-and-swap at the version last read;
//   - an operation's intent is durable before any of its effects; the parents of a split or
//     merge are sealed before the commit makes the children active, and the children exist
//     with a cursor for every subscription before the parents are sealed (S1, never both
//     writable);
//   - a segment is assigned to a subscription only when every ancestor still in the layout
//     is known drained for it (S2); a seek first takes the segment out of the drained set and
//     fences its descendants, then resets the cursor, and no drain check of the segment runs
//     meanwhile;
//   - only a sealed segment with no parent left in the layout, past retention and known
//     drained by every subscription is pruned (S3); its topic is deleted after the write.
//
// Not safe for concurrent use.
type Core struct {
	cfg   Config
	mut   Mutation
	state State
	now   int64
	tags  uint64
	seq   uint64

	// l is the stored record as last read or written, ver its version.
	l   layout.Layout
	ver metadata.Version
	// write is the compare-and-swap in flight (writeTag 0: none).
	writeTag  uint64
	writeKind writeKind
	writeRec  layout.Layout

	op   *opRun
	reqs []*request
	// effects in flight by tag (a Done of an unknown tag is stale: ignored).
	effects map[uint64]effect
	retryAt int64
	// deleting: Deleting entries with a delete in flight or done (deleted: done, to drop
	// from the record at the next write); pruning: in the prune write in flight.
	deleting map[SegmentID]bool
	deleted  []SegmentID
	pruning  map[SegmentID]bool
	gcDue    bool

	subs map[string]*subState
	load map[SegmentID]LoadSample

	lastSplitMs, lastMergeMs int64
	ready                    Ready
}

// New returns a core in StateLoading: feed it the record with Load. mut is zero outside
// tests.
func New(cfg Config, mut Mutation, nowMs int64) *Core {
	if cfg.TickMs <= 0 {
		cfg.TickMs = 1000
	}
	if cfg.RetryMs <= 0 {
		cfg.RetryMs = cfg.TickMs
	}
	c := &Core{cfg: cfg, mut: mut, state: StateLoading, now: nowMs, effects: map[uint64]effect{},
		deleting: map[SegmentID]bool{}, pruning: map[SegmentID]bool{}, subs: map[string]*subState{},
		load: map[SegmentID]LoadSample{}}
	c.ready.Reload = true
	return c
}

// State returns the lifecycle state.
func (c *Core) State() State { return c.state }

// Layout returns the stored layout as last read or written, and its version.
func (c *Core) Layout() (layout.Layout, metadata.Version) { return c.l, c.ver }

func (c *Core) tag() uint64 { c.tags++; return c.tags }

// Ready returns what to do and forgets it (the owner must perform all of it).
func (c *Core) Ready() Ready {
	r := c.ready
	c.ready = Ready{}
	if c.state != StateStopped {
		r.TimerAt = c.now + c.cfg.TickMs
		if c.retryAt > c.now && c.retryAt < r.TimerAt {
			r.TimerAt = c.retryAt
		}
	}
	return r
}

// Stop ends the term: the core does nothing more (its effects in flight may still land).
func (c *Core) Stop() { c.state = StateStopped }

// Load feeds the stored record (found: false for a topic that has none yet is an error of
// the owner: a scalable topic is created with its first record).
func (c *Core) Load(l layout.Layout, ver metadata.Version) {
	if c.state == StateStopped {
		return
	}
	c.state = StateReady
	c.l, c.ver = l, ver
	c.publish()
	c.pruning = map[SegmentID]bool{}
	c.forgetDeleted()
	c.seedCooldowns()
	c.syncSubs()
	// Forget the effects of an operation attempt: the operation restarts from the record.
	for t, e := range c.effects {
		if e.kind == effOp {
			delete(c.effects, t)
		}
	}
	prev := c.op
	c.op = nil
	if l.Pending != nil {
		c.op = &opRun{op: *l.Pending, waiting: map[uint64]bool{}}
		if len(c.reqs) > 0 && c.reqs[0].intent != nil && sameOp(*c.reqs[0].intent, *l.Pending) {
			c.op.req = c.reqs[0]
			c.reqs = c.reqs[1:]
		}
		c.enterStep(stepCreate)
	} else if prev != nil {
		// The commit was reported failed or unknown: it applied if the children are there.
		c.endOp(prev, c.committed(prev.op))
	} else if len(c.reqs) > 0 && c.reqs[0].intent != nil {
		c.reqs[0].intent = nil // the intent did not apply: plan again
	}
	for _, d := range l.Deleting {
		c.issueDelete(d)
	}
	c.recomputeAll()
	c.advance()
}

// Watched feeds a change of the record seen by a watch: a newer version than the core's,
// written by someone else (a deposed leader's write landing late), is loaded; the core's own
// writes and anything seen while a write is in flight are ignored (the write's outcome
// settles it).
func (c *Core) Watched(l layout.Layout, ver metadata.Version) {
	if c.state != StateReady || c.writeTag != 0 || ver <= c.ver {
		return
	}
	c.Load(l, ver)
}

func sameOp(a, b layout.Op) bool {
	return a.Kind == b.Kind && slices.Equal(a.Parents, b.Parents) && a.Subscription == b.Subscription &&
		len(a.Children) == len(b.Children) && (len(a.Children) == 0 || a.Children[0].ID == b.Children[0].ID)
}

func (c *Core) committed(op layout.Op) error {
	if op.Kind == layout.OpSubscribe {
		if slices.Contains(c.l.Subscriptions, op.Subscription) {
			return nil
		}
	} else if len(op.Children) > 0 && c.l.Has(op.Children[0].ID) {
		return nil
	}
	return fmt.Errorf("scalable: %v of %v lost", op.Kind, op.Parents)
}

// seedCooldowns takes the last split and merge times from the layout (the children's
// creation), so that a new leader keeps the cooldowns.
func (c *Core) seedCooldowns() {
	for _, s := range c.l.Segments {
		switch {
		case len(s.Parents) == 1:
			c.lastSplitMs = max(c.lastSplitMs, s.CreatedMs)
		case len(s.Parents) >= 2:
			c.lastMergeMs = max(c.lastMergeMs, s.CreatedMs)
		}
	}
}

func (c *Core) publish() {
	l := c.l
	c.ready.Layout = &l
}

// Split asks to split active segment seg at hash at (0: the midpoint); the Result with the
// returned tag ends it.
func (c *Core) Split(seg SegmentID, at uint16) uint64 {
	return c.request(&request{kind: reqSplit, seg: seg, at: at})
}

// Merge asks to merge adjacent active segments a and b.
func (c *Core) Merge(a, b SegmentID) uint64 {
	return c.request(&request{kind: reqMerge, seg: a, other: b})
}

// Subscribe asks to add subscription sub (a cursor at the earliest of every segment).
func (c *Core) Subscribe(sub string) uint64 { return c.request(&request{kind: reqSubscribe, sub: sub}) }

func (c *Core) request(r *request) uint64 {
	r.tag = c.tag()
	if c.state == StateStopped { // while loading, it waits for the record
		c.ready.Results = append(c.ready.Results, Result{Tag: r.tag, Err: ErrNotLeading})
		return r.tag
	}
	c.reqs = append(c.reqs, r)
	c.advance()
	return r.tag
}

// Sample records an active segment's load for the auto-scale policy.
func (c *Core) Sample(seg SegmentID, s LoadSample) { c.load[seg] = s }

// Tick advances the clock: retries, drain polls, GC and the auto-scale policy.
func (c *Core) Tick(nowMs int64) {
	c.now = max(c.now, nowMs)
	if c.state != StateReady {
		return
	}
	if c.retryAt != 0 && c.now >= c.retryAt {
		c.retryAt = 0
		c.retry()
	}
	c.gcDue = true
	c.evictAway()
	c.pollDrains()
	if c.op == nil && len(c.reqs) == 0 && c.writeTag == 0 {
		c.autoScale()
	}
	c.advance()
}

func (c *Core) autoScale() {
	consumers := 0
	for _, name := range c.subNames() {
		consumers = max(consumers, len(c.subs[name].consumers))
	}
	d := Decide(c.l, c.load, consumers, c.cfg.Policy, c.now, c.lastSplitMs, c.lastMergeMs)
	switch d.Kind {
	case DecideSplit:
		c.reqs = append(c.reqs, &request{kind: reqSplit, seg: d.Segment})
	case DecideMerge:
		c.reqs = append(c.reqs, &request{kind: reqMerge, seg: d.Segment, other: d.Other})
	}
}

// Written reports the write with tag: its new version, or an error (refused or unknown:
// the core reloads).
func (c *Core) Written(tag uint64, ver metadata.Version, err error) {
	if c.state == StateStopped || tag != c.writeTag {
		return
	}
	c.writeTag = 0
	if err != nil {
		c.state = StateLoading
		c.ready.Reload = true
		return
	}
	c.l, c.ver = c.writeRec, ver
	c.publish()
	c.forgetDeleted()
	switch c.writeKind {
	case writeIntent:
		r := c.reqs[0]
		c.reqs = c.reqs[1:]
		c.op = &opRun{op: *c.l.Pending, waiting: map[uint64]bool{}, req: r}
		c.enterStep(stepCreate)
	case writeCommit:
		op := c.op
		if c.mut.CommitBeforeSeal && op.op.Kind != layout.OpSubscribe {
			c.enterStep(stepSealAfter)
			break
		}
		c.endOp(op, nil)
	case writeGC:
		c.pruning = map[SegmentID]bool{}
		for _, d := range c.l.Deleting {
			c.issueDelete(d)
		}
	}
	c.syncSubs()
	c.recomputeAll()
	c.advance()
}

// forgetDeleted drops what it knows of deleted topics that the record no longer lists.
func (c *Core) forgetDeleted() {
	listed := func(id SegmentID) bool {
		return slices.ContainsFunc(c.l.Deleting, func(s layout.Segment) bool { return s.ID == id })
	}
	c.deleted = slices.DeleteFunc(c.deleted, func(id SegmentID) bool { return !listed(id) })
	for id := range c.deleting {
		if !listed(id) {
			delete(c.deleting, id)
		}
	}
}

func (c *Core) endOp(op *opRun, err error) {
	c.op = nil
	if err == nil && op.op.Kind != layout.OpSubscribe {
		if op.op.Kind == layout.OpSplit {
			c.lastSplitMs = c.now
		} else {
			c.lastMergeMs = c.now
		}
		for _, p := range op.op.Parents {
			delete(c.load, p)
		}
	}
	if op.req != nil && op.req.tag != 0 {
		c.ready.Results = append(c.ready.Results, Result{Tag: op.req.tag, Err: err})
	}
}

// Done reports an effect (Create, Seal, Delete, Fence, Reset) with tag.
func (c *Core) Done(tag uint64, err error) {
	e, ok := c.effects[tag]
	if !ok || c.state == StateStopped {
		return
	}
	delete(c.effects, tag)
	switch e.kind {
	case effOp:
		if c.op == nil || !c.op.waiting[tag] {
			return
		}
		delete(c.op.waiting, tag)
		if err != nil {
			c.op.failed = append(c.op.failed, e.eff)
			c.scheduleRetry()
		}
	case effDelete:
		if err != nil {
			delete(c.deleting, e.seg)
			c.scheduleRetry()
		} else {
			c.deleted = append(c.deleted, e.seg)
		}
	case effFence, effReset:
		c.seekDone(e, err)
	}
	c.advance()
}

func (c *Core) scheduleRetry() {
	if c.retryAt == 0 {
		c.retryAt = c.now + c.cfg.RetryMs
	}
}

func (c *Core) retry() {
	if c.op != nil {
		failed := c.op.failed
		c.op.failed = nil
		for _, e := range failed {
			c.issueOp(e)
		}
	}
	for _, d := range c.l.Deleting {
		c.issueDelete(d)
	}
	c.retrySeeks()
}

func (c *Core) issueDelete(d layout.Segment) {
	if c.deleting[d.ID] {
		return
	}
	c.deleting[d.ID] = true
	t := c.tag()
	c.effects[t] = effect{kind: effDelete, seg: d.ID}
	c.ready.Deletes = append(c.ready.Deletes, Delete{Tag: t, Segment: d})
}

// issueOp (re)issues one effect of the running operation's step under a new tag.
func (c *Core) issueOp(e any) {
	t := c.tag()
	switch x := e.(type) {
	case Create:
		x.Tag = t
		c.ready.Creates = append(c.ready.Creates, x)
		e = x
	case Seal:
		x.Tag = t
		c.ready.Seals = append(c.ready.Seals, x)
		e = x
	}
	c.effects[t] = effect{kind: effOp, eff: e}
	c.op.waiting[t] = true
}

// enterStep starts a step of the running operation: its effects, or its commit write.
func (c *Core) enterStep(s opStep) {
	op := c.op
	op.step = s
	switch s {
	case stepCreate:
		if op.op.Kind == layout.OpSubscribe {
			for _, seg := range c.l.Segments {
				c.issueOp(Create{Segment: seg, Subs: []string{op.op.Subscription}})
			}
			return
		}
		subs := c.l.Subscriptions
		if c.mut.NoChildCursors {
			subs = nil
		}
		for _, ch := range op.op.Children {
			c.issueOp(Create{Segment: ch, Subs: slices.Clone(subs)})
		}
	case stepSeal, stepSealAfter:
		for _, p := range op.op.Parents {
			seg, _ := c.l.Segment(p)
			c.issueOp(Seal{Segment: seg})
		}
	}
}

// advance makes progress: the running operation's next step, the next request, GC.
func (c *Core) advance() {
	if c.state != StateReady || c.writeTag != 0 {
		return
	}
	if op := c.op; op != nil {
		if len(op.waiting) > 0 || len(op.failed) > 0 {
			return
		}
		switch op.step {
		case stepCreate:
			if op.op.Kind == layout.OpSubscribe || c.mut.CommitBeforeSeal {
				c.commitOp()
			} else {
				c.enterStep(stepSeal)
			}
		case stepSeal:
			c.commitOp()
		case stepSealAfter:
			c.endOp(op, nil)
			c.advance()
		}
		return
	}
	for len(c.reqs) > 0 {
		r := c.reqs[0]
		var next layout.Layout
		var err error
		switch r.kind {
		case reqSplit:
			next, err = c.l.PlanSplit(r.seg, r.at, c.now)
		case reqMerge:
			next, err = c.l.PlanMerge(r.seg, r.other, c.now)
		case reqSubscribe:
			next, err = c.l.PlanSubscribe(r.sub, c.now)
		}
		if err != nil {
			c.reqs = c.reqs[1:]
			if r.tag != 0 {
				c.ready.Results = append(c.ready.Results, Result{Tag: r.tag, Err: err})
			}
			continue
		}
		r.intent = next.Pending
		c.startWrite(writeIntent, c.withDeleted(next))
		return
	}
	if c.gcDue {
		c.gcDue = false
		c.collect()
	}
}

func (c *Core) commitOp() {
	next, err := c.l.Commit(c.now)
	if err != nil {
		panic(fmt.Sprintf("scalable: commit of a validated intent: %v", err))
	}
	c.startWrite(writeCommit, c.withDeleted(next))
}

// withDeleted drops the segments whose topics are deleted from the record's Deleting.
func (c *Core) withDeleted(l layout.Layout) layout.Layout {
	if len(c.deleted) == 0 {
		return l
	}
	return l.Deleted(c.deleted)
}

func (c *Core) startWrite(k writeKind, rec layout.Layout) {
	c.writeTag, c.writeKind, c.writeRec = c.tag(), k, rec
	c.ready.Write = &Write{Tag: c.writeTag, Record: rec, Expected: c.ver}
}

// collect is the GC tick: prune the sealed segments that are candidates (S3), or only drop
// deleted topics from the record.
func (c *Core) collect() {
	if c.l.Pending != nil {
		return
	}
	next := c.l
	pruned := false
	for _, s := range c.l.Segments {
		if !c.gcCandidate(s.ID) {
			continue
		}
		if c.mut.PruneAnySealed {
			next = next.Remove(s.ID)
		} else {
			var err error
			if next, err = next.Prune(s.ID); err != nil {
				panic(fmt.Sprintf("scalable: prune of a candidate: %v", err))
			}
		}
		c.pruning[s.ID] = true
		pruned = true
	}
	if !pruned && len(c.deleted) == 0 {
		return
	}
	c.startWrite(writeGC, c.withDeleted(next))
}

// gcCandidate: sealed past retention, no parent left in the stored layout (S3: one write
// prunes one generation, ancestors first), drained by every subscription, no seek running.
func (c *Core) gcCandidate(id SegmentID) bool {
	s, ok := c.l.Segment(id)
	if !ok || s.State != layout.StateSealed || c.now-s.SealedMs < c.cfg.RetentionMs {
		return false
	}
	if len(s.Parents) > 0 && !c.mut.PruneAnySealed {
		return false
	}
	for _, name := range c.l.Subscriptions {
		ss := c.subs[name]
		if ss == nil || !ss.drained[id] || ss.seeking[id] != nil {
			return false
		}
	}
	return true
}
