package scalable

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/scalable/layout"
	"github.com/magnetar-io/magnetar/sim"
)

// The world of the simulation: a metadata store holding the layout record and the leader
// key, segment topics with their logs, cursors and exclusive stream attachments, producers
// (one per key, sending in order and re-routing on TopicTerminated), stream consumers
// following their assignments, a queue consumer, and controller leaders (Core) that crash
// and are replaced while their effects in flight still land. Every effect and reply is
// delayed by the seed; metadata writes fail, or apply and report failure.

const (
	simRecordKey = "/scalable/t/ns/x/layout"
	simLeaderKey = "/scalable/t/ns/x/controller"
	simQueueSub  = "queue"
)

var (
	errSimWrite     = errors.New("sim: write failed")
	errSimAmbiguous = errors.New("sim: write timed out (applied)")
	errSimEffect    = errors.New("sim: effect failed")
	errSimStaleTerm = errors.New("sim: stale controller term")
)

type simParams struct {
	keys, perKey    int
	streamSubs      int
	consumers       int
	queue           bool
	window          time.Duration
	maxDelay        time.Duration
	writeFail       float64
	writeAmbig      float64
	effectFail      float64
	crashes         int
	splits, merges  int
	seeks           int
	churn           int
	subscribes      int
	auto            bool
	retentionMs     int64
	graceMs         int64
	initialSegments int
}

func (p simParams) String() string {
	return fmt.Sprintf("keys=%d×%d subs=%d consumers=%d queue=%v window=%v delay<=%v fail(write=%.2f ambiguous=%.2f effect=%.2f) crashes=%d splits=%d merges=%d seeks=%d churn=%d subscribes=%d auto=%v retention=%dms grace=%dms initial=%d",
		p.keys, p.perKey, p.streamSubs, p.consumers, p.queue, p.window, p.maxDelay, p.writeFail, p.writeAmbig, p.effectFail,
		p.crashes, p.splits, p.merges, p.seeks, p.churn, p.subscribes, p.auto, p.retentionMs, p.graceMs, p.initialSegments)
}

func randomSimParams(s *sim.Sim) simParams {
	r := s.Rand()
	rate := func(max float64) float64 {
		if r.IntN(3) == 0 {
			return 0
		}
		return r.Float64() * max
	}
	return simParams{
		keys: 2 + r.IntN(5), perKey: 2 + r.IntN(7), streamSubs: 1 + r.IntN(2), consumers: 1 + r.IntN(3),
		queue: r.IntN(2) == 0, window: time.Duration(40+r.IntN(120)) * time.Millisecond,
		maxDelay: time.Duration(1+r.IntN(4)) * time.Millisecond, writeFail: rate(0.2), writeAmbig: rate(0.15),
		effectFail: rate(0.15), crashes: r.IntN(3), splits: r.IntN(6), merges: r.IntN(4), seeks: r.IntN(4),
		churn: r.IntN(5), subscribes: r.IntN(2), auto: r.IntN(3) == 0, retentionMs: int64(r.IntN(30)), graceMs: int64(r.IntN(20)),
		initialSegments: 1 + r.IntN(2),
	}
}

type simMsg struct{ key, seq int }

// simSeg is one segment topic at its broker.
type simSeg struct {
	seg        layout.Segment
	log        []simMsg
	terminated bool
	deleted    bool
	cursors    map[string]int // sub → index of the next message to read
	attached   map[string]*simConsumer
	attachVer  map[string]uint64
	fence      map[string]uint64
	maxTerm    uint64
}

type simProducer struct {
	key, hash uint16
	next      int // next seq to send (1-based)
	limit     int // last seq to send
	view      layout.Layout
	sending   bool
}

type simConsumer struct {
	name, sub  string
	version    uint64
	assigned   []SegmentID
	registered bool // with the current leader
	left       bool
	polling    bool
	paused     bool // follows its assignment but reads nothing (scenarios)
	away       bool // disconnected: attached to nothing until it reconnects
	conn       uint64
}

type simInc struct {
	id      int
	c       *Core
	alive   bool
	term    uint64
	session int64
	timerAt int64
}

type simStats struct {
	Splits, Merges, AutoSplits, AutoMerges, Subscribes, Seeks, Prunes, Deletes, Crashes, Produced, Consumed,
	Rerouted, WriteFails, Ambiguous, Reloads, StaleTerms, Fenced, Churn, Resumed, Ghosts, Reconnects int
}

type simWorld struct {
	s     *sim.Sim
	p     simParams
	mut   Mutation
	err   error
	quiet bool
	top   layout.Topic
	store *sim.MetaStore

	segs      map[SegmentID]*simSeg
	segIDs    []SegmentID // the keys of segs, sorted
	producers []*simProducer
	consumers []*simConsumer
	queueView layout.Layout
	// consumed: sub → every message it consumed at least once.
	consumed map[string]map[simMsg]bool
	acked    map[simMsg]bool
	// wrote: segment → it took an append (for the parent-after-child check).
	wrote  map[SegmentID]bool
	stored layout.Layout // the record as stored now

	inc   *simInc
	incs  int
	stats simStats
	// streamSubs are the stream subscriptions, the added ones too (nextSub names them).
	streamSubs []string
	nextSub    int
	// requested: segments an admin asked to split or merge (the others are the policy's).
	requested map[SegmentID]bool
}

func newSimWorld(seed int64, mut Mutation, verbose bool) *simWorld {
	s := sim.New(seed)
	s.Verbose = verbose
	w := &simWorld{s: s, mut: mut, top: layout.Topic{Tenant: "t", Namespace: "ns", Name: "x"}, store: sim.NewMetaStore(),
		segs: map[SegmentID]*simSeg{}, consumed: map[string]map[simMsg]bool{}, acked: map[simMsg]bool{},
		wrote: map[SegmentID]bool{}, requested: map[SegmentID]bool{}}
	w.p = randomSimParams(s)
	return w
}

func (w *simWorld) failf(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("at %v: %s", w.s.Now(), fmt.Sprintf(format, args...))
		w.s.Tracef("CHECK FAILED: %v", w.err)
	}
}

func (w *simWorld) nowMs() int64 { return int64(w.s.Now()/time.Millisecond) + 1 }

func (w *simWorld) delay() time.Duration { return w.s.Between(0, w.p.maxDelay) }

func (w *simWorld) chance(p float64) bool { return !w.quiet && w.s.Chance(p) }

// later runs fn after a delay unless a check failed.
func (w *simWorld) later(name string, fn func()) {
	w.s.After(w.delay(), name, func() {
		if w.err == nil {
			fn()
		}
	})
}

// slow is later, but now and then a ghost: a request that lands long after, when its
// leader may be gone.
func (w *simWorld) slow(name string, fn func()) {
	d := w.delay()
	if w.chance(0.03) {
		w.stats.Ghosts++
		d += w.s.Between(5*time.Millisecond, 30*time.Millisecond)
	}
	w.s.After(d, name, func() {
		if w.err == nil {
			fn()
		}
	})
}

// create writes the topic's first record and its initial segments.
func (w *simWorld) create(subs []string) {
	l := layout.Initial(w.p.initialSegments, subs, w.nowMs())
	for _, s := range l.Segments {
		w.createSeg(s, subs)
	}
	b, _ := l.Marshal()
	if _, err := w.store.Put(simRecordKey, b, 0); err != nil {
		panic(err)
	}
	for _, sub := range subs {
		w.consumed[sub] = map[simMsg]bool{}
	}
	w.store.OnChange = w.storeChange
	w.stored = l
	w.queueView = l
}

func (w *simWorld) createSeg(s layout.Segment, subs []string) {
	t := w.segs[s.ID]
	if t == nil {
		t = &simSeg{seg: s, cursors: map[string]int{}, attached: map[string]*simConsumer{}, attachVer: map[string]uint64{}, fence: map[string]uint64{}}
		w.segs[s.ID] = t
		i, _ := slices.BinarySearch(w.segIDs, s.ID)
		w.segIDs = slices.Insert(w.segIDs, i, s.ID)
	}
	for _, sub := range subs {
		if _, ok := t.cursors[sub]; !ok {
			t.cursors[sub] = 0
		}
	}
}

// Leaders.

// elect makes a new leader: the election key through a new session, then a core that loads
// the record.
func (w *simWorld) elect() {
	sess := w.store.NewSession()
	ver, err := w.store.PutEphemeral(simLeaderKey, []byte("broker"), 0, sess)
	if err != nil {
		w.failf("election: %v", err)
		return
	}
	w.incs++
	inc := &simInc{id: w.incs, alive: true, term: uint64(ver), session: sess}
	cfg := Config{Topic: w.top, Term: inc.term, RetentionMs: w.p.retentionMs, TickMs: 2, RetryMs: 3, GraceMs: w.p.graceMs, Policy: w.policy()}
	inc.c = New(cfg, w.mut, w.nowMs())
	w.inc = inc
	w.s.Tracef("leader %d elected (term %d)", inc.id, inc.term)
	w.input(inc, "start", func(*Core) {})
	for _, c := range w.consumers {
		c.registered = false
		if !c.left {
			w.registerLater(c)
		}
	}
}

func (w *simWorld) policy() Policy {
	p := DefaultPolicy()
	p.Enabled = w.p.auto
	p.MaxSegments, p.MinSegments = 6, 1
	p.SplitCooldownMs, p.MergeCooldownMs, p.MergeWindowMs = 10, 15, 5
	p.SplitMsgRateIn, p.MergeMsgRateIn = 100, 10
	return p
}

func (w *simWorld) crash() {
	inc := w.inc
	if w.quiet || inc == nil || !inc.alive {
		return
	}
	w.stats.Crashes++
	inc.alive = false
	inc.c.Stop()
	w.s.Tracef("CRASH leader %d", inc.id)
	w.store.ExpireSession(inc.session)
	w.s.After(w.s.Between(0, 3*w.p.maxDelay), "elect", w.elect)
}

// input runs one input on inc's core and performs what it asks.
func (w *simWorld) input(inc *simInc, name string, fn func(c *Core)) {
	if !inc.alive || w.err != nil {
		return
	}
	if name != "" {
		w.s.Tracef(" %s", name)
	}
	fn(inc.c)
	w.perform(inc, inc.c.Ready())
}

func (w *simWorld) reply(inc *simInc, name string, fn func(c *Core)) {
	w.later("", func() { w.input(inc, name, fn) })
}

func (w *simWorld) fail(p float64) bool { return w.chance(p) }

func (w *simWorld) perform(inc *simInc, r Ready) {
	if r.Reload {
		w.stats.Reloads++
		w.later("reload", func() {
			b, ver, ok := w.store.Get(simRecordKey)
			if !ok {
				w.failf("the record is gone")
				return
			}
			l, err := layout.Unmarshal(b)
			if err != nil {
				w.failf("stored record: %v", err)
				return
			}
			if l.Pending != nil && inc.c.op == nil {
				w.stats.Resumed++
			}
			w.input(inc, fmt.Sprintf("load epoch %d", l.Epoch), func(c *Core) { c.Load(l, metadata.Version(ver)) })
		})
	}
	if wr := r.Write; wr != nil {
		w.write(inc, *wr)
	}
	for _, x := range r.Creates {
		w.effect(inc, fmt.Sprintf("create %d %v", x.Segment.ID, x.Subs), x.Tag, func() error {
			w.createSeg(x.Segment, x.Subs)
			return nil
		})
	}
	for _, x := range r.Seals {
		w.effect(inc, fmt.Sprintf("seal %d", x.Segment.ID), x.Tag, func() error {
			if t := w.segs[x.Segment.ID]; t != nil {
				t.terminated = true
			}
			return nil
		})
	}
	for _, x := range r.Deletes {
		w.effect(inc, fmt.Sprintf("delete %d", x.Segment.ID), x.Tag, func() error {
			if t := w.segs[x.Segment.ID]; t != nil && !t.deleted {
				t.deleted = true
				w.stats.Deletes++
			}
			return nil
		})
	}
	for _, x := range r.Fences {
		w.effect(inc, fmt.Sprintf("fence %s v%x", x.Sub, x.Version), x.Tag, func() error {
			for _, s := range x.Segments {
				t := w.segs[s.ID]
				if t == nil {
					continue
				}
				if !w.termOK(t, x.Term) {
					return errSimStaleTerm
				}
				t.fence[x.Sub] = max(t.fence[x.Sub], x.Version)
				if a := t.attached[x.Sub]; a != nil && t.attachVer[x.Sub] < x.Version {
					w.stats.Fenced++
					delete(t.attached, x.Sub)
				}
			}
			return nil
		})
	}
	for _, x := range r.Resets {
		w.effect(inc, fmt.Sprintf("reset %s on %d to %v", x.Sub, x.Segment.ID, x.To), x.Tag, func() error {
			t := w.segs[x.Segment.ID]
			if t == nil || t.deleted {
				return errSimEffect
			}
			if !w.termOK(t, x.Term) {
				return errSimStaleTerm
			}
			to := min(int(x.To.EntryID), len(t.log))
			if cur, ok := t.cursors[x.Sub]; ok && to > cur {
				for _, m := range t.log[cur:to] { // skipped: as good as consumed
					w.consumed[x.Sub][m] = true
				}
			}
			t.cursors[x.Sub] = to
			return nil
		})
	}
	for _, x := range r.Checks {
		w.slow("", func() {
			t := w.segs[x.Segment.ID]
			var drained bool
			var err error
			switch {
			case w.fail(w.p.effectFail) || t == nil:
				err = errSimEffect
			case !w.termOK(t, x.Term):
				err = errSimStaleTerm
			default:
				cur, ok := t.cursors[x.Sub]
				drained = t.terminated && (!ok || cur == len(t.log))
			}
			w.reply(inc, "", func(c *Core) { c.Checked(x.Tag, drained, err) })
		})
	}
	if r.Layout != nil {
		l := *r.Layout
		for _, p := range w.producers {
			w.later("", func() { w.updateView(p, l) })
		}
		w.later("", func() {
			if l.Epoch > w.queueView.Epoch {
				w.queueView = l
			}
		})
	}
	for _, a := range r.Assignments {
		w.later("", func() { w.assign(a) })
	}
	for _, res := range r.Results {
		if res.Err != nil {
			w.s.Tracef(" result %d: %v", res.Tag, res.Err)
		}
	}
	if r.TimerAt != 0 && (inc.timerAt == 0 || r.TimerAt < inc.timerAt) {
		inc.timerAt = r.TimerAt
		d := time.Duration(r.TimerAt-1)*time.Millisecond - w.s.Now()
		w.s.After(d, "", func() {
			inc.timerAt = 0
			w.input(inc, "", func(c *Core) { c.Tick(w.nowMs()) })
		})
	}
}

// termOK applies the brokers' term fence: an effect of an older term than one seen is
// refused.
func (w *simWorld) termOK(t *simSeg, term uint64) bool {
	if term < t.maxTerm {
		w.stats.StaleTerms++
		return false
	}
	t.maxTerm = term
	return true
}

// effect applies fn after a delay (it lands even if the leader died meanwhile), unless it
// fails, and reports to inc.
func (w *simWorld) effect(inc *simInc, name string, tag uint64, fn func() error) {
	w.slow(name, func() {
		err := errSimEffect
		if !w.fail(w.p.effectFail) {
			err = fn()
		}
		w.reply(inc, "", func(c *Core) { c.Done(tag, err) })
	})
}

func (w *simWorld) write(inc *simInc, wr Write) {
	w.later(fmt.Sprintf("write epoch %d (expect v%d)", wr.Record.Epoch, wr.Expected), func() {
		if w.fail(w.p.writeFail) {
			w.stats.WriteFails++
			w.reply(inc, "written: failed", func(c *Core) { c.Written(wr.Tag, 0, errSimWrite) })
			return
		}
		b, err := wr.Record.Marshal()
		if err != nil {
			w.failf("marshal: %v", err)
			return
		}
		ver, err := w.store.Put(simRecordKey, b, int64(wr.Expected))
		if err == nil && w.fail(w.p.writeAmbig) {
			w.stats.Ambiguous++
			err = errSimAmbiguous
		}
		w.reply(inc, fmt.Sprintf("written v%d: %v", ver, err), func(c *Core) { c.Written(wr.Tag, metadata.Version(ver), err) })
	})
}

// storeChange checks every change of the record: S1 and structure, S3, the children's
// cursors, parents sealed before children are active.
func (w *simWorld) storeChange(ch sim.MetaChange) {
	if ch.Key != simRecordKey || ch.New == nil {
		return
	}
	l, err := layout.Unmarshal(ch.New)
	if err != nil {
		w.failf("stored layout invalid (S1/structure): %v", err)
		return
	}
	old := w.stored
	w.stored = l
	if inc := w.inc; inc != nil && inc.alive {
		w.later("", func() { w.input(inc, "", func(c *Core) { c.Watched(l, metadata.Version(ch.Version)) }) })
	}
	for _, s := range old.Segments {
		if l.Has(s.ID) {
			continue
		}
		w.stats.Prunes++
		if len(s.Parents) > 0 {
			w.failf("S3: segment %d pruned while its parents %v are in the layout", s.ID, s.Parents)
		}
		for _, sub := range old.Subscriptions {
			if !w.drained(s.ID, sub) {
				w.failf("segment %d pruned while %s has backlog on it", s.ID, sub)
			}
		}
	}
	for _, s := range l.Segments {
		t := w.segs[s.ID]
		if t == nil || t.deleted {
			w.failf("segment %d is in the layout without its topic", s.ID)
			continue
		}
		if s.State == layout.StateActive {
			for _, p := range s.Parents {
				if pt := w.segs[p]; pt != nil && !pt.terminated {
					w.failf("segment %d is active while its parent %d is writable", s.ID, p)
				}
			}
		}
		for _, sub := range l.Subscriptions {
			if _, ok := t.cursors[sub]; !ok {
				w.failf("segment %d is in the layout without a cursor of %s", s.ID, sub)
			}
		}
	}
	for _, sub := range l.Subscriptions {
		if w.consumed[sub] != nil {
			continue
		}
		// A new subscription reads from the earliest of the segments in the layout: the
		// messages of pruned ones are not for it.
		w.consumed[sub] = map[simMsg]bool{}
		for _, id := range w.segIDs {
			if !l.Has(id) {
				for _, m := range w.segs[id].log {
					w.consumed[sub][m] = true
				}
			}
		}
	}
	if old.Pending == nil && l.Pending != nil {
		auto := l.Pending.Kind != layout.OpSubscribe && !w.requested[l.Pending.Parents[0]]
		switch l.Pending.Kind {
		case layout.OpSplit:
			w.stats.Splits++
			if auto {
				w.stats.AutoSplits++
			}
		case layout.OpMerge:
			w.stats.Merges++
			if auto {
				w.stats.AutoMerges++
			}
		case layout.OpSubscribe:
			w.stats.Subscribes++
		}
	}
}

// drained: sub's cursor is at the end of the segment's terminated log (no cursor: nothing).
func (w *simWorld) drained(id SegmentID, sub string) bool {
	t := w.segs[id]
	if t == nil || t.deleted {
		return true
	}
	cur, ok := t.cursors[sub]
	return t.terminated && (!ok || cur == len(t.log))
}

// Producers.

func (w *simWorld) updateView(p *simProducer, l layout.Layout) {
	if l.Epoch > p.view.Epoch {
		p.view = l
	}
}

// produce sends the producer's next message to the segment its view routes the key to,
// re-routing on TopicTerminated once a newer layout arrives.
func (w *simWorld) produce(p *simProducer) {
	if p.next > p.limit || p.sending {
		return
	}
	p.sending = true
	seg, ok := p.view.FindActive(p.hash)
	if !ok {
		w.failf("no active segment for hash %04x in epoch %d", p.hash, p.view.Epoch)
		return
	}
	m := simMsg{int(p.key), p.next}
	w.later("", func() {
		t := w.segs[seg.ID]
		if t == nil || t.deleted || t.terminated {
			w.stats.Rerouted++
			w.s.After(w.s.Between(time.Millisecond, 3*time.Millisecond), "", func() {
				p.sending = false
				w.produce(p)
			})
			return
		}
		w.append(t, m)
		w.later("", func() {
			w.acked[m] = true
			p.next++
			p.sending = false
			w.produce(p)
		})
	})
}

func (w *simWorld) append(t *simSeg, m simMsg) {
	for _, d := range w.descendantsEver(t.seg.ID) {
		if w.wrote[d] {
			w.failf("segment %d takes %v after its descendant %d was written (parent and child both writable)", t.seg.ID, m, d)
		}
	}
	t.log = append(t.log, m)
	w.wrote[t.seg.ID] = true
	w.stats.Produced++
}

// descendantsEver: the descendants in the stored layout (pruned segments are gone).
func (w *simWorld) descendantsEver(id SegmentID) []SegmentID { return w.stored.Descendants(id) }

// Consumers.

func (w *simWorld) registerLater(c *simConsumer) {
	inc := w.inc
	w.later("", func() {
		if c.left || inc != w.inc {
			return
		}
		w.input(inc, fmt.Sprintf("register %s/%s", c.sub, c.name), func(core *Core) {
			if err := core.Register(c.sub, c.name, c.conn); err == nil {
				c.registered = true
			} else {
				w.s.After(w.s.Between(time.Millisecond, 5*time.Millisecond), "", func() { w.registerLater(c) })
			}
		})
	})
}

func (w *simWorld) assign(a Assignment) {
	for _, c := range w.consumers {
		if c.name == a.Consumer && c.sub == a.Sub && !c.left && a.Version > c.version {
			c.version, c.assigned = a.Version, a.Segments
			w.s.Tracef(" %s/%s assigned v%x %v", c.sub, c.name, a.Version, a.Segments)
		}
	}
}

// poll is one turn of a stream consumer: follow the assignment (detach, attach), then
// consume one message from an attached segment.
func (w *simWorld) poll(c *simConsumer) {
	if c.left {
		c.polling = false
		return
	}
	if c.away {
		w.s.After(w.s.Between(time.Millisecond, 3*time.Millisecond), "", func() { w.poll(c) })
		return
	}
	var ready []*simSeg
	for _, id := range w.segIDs {
		t := w.segs[id]
		mine := t.attached[c.sub] == c
		want := slices.Contains(c.assigned, id) && !t.deleted
		switch {
		case mine && !want:
			delete(t.attached, c.sub)
		case want && !mine && t.attached[c.sub] == nil && c.version >= t.fence[c.sub]:
			t.attached[c.sub] = c
			mine = true
			if _, ok := t.cursors[c.sub]; !ok {
				t.cursors[c.sub] = len(t.log) // a new subscription on a topic starts at the latest
			}
		}
		if mine {
			t.attachVer[c.sub] = c.version
			if t.cursors[c.sub] < len(t.log) {
				ready = append(ready, t)
			}
		}
	}
	if len(ready) > 0 && !c.paused {
		w.consume(c.sub, ready[w.s.Rand().IntN(len(ready))], true)
	}
	w.s.After(w.s.Between(time.Millisecond, 3*time.Millisecond), "", func() { w.poll(c) })
}

// pollQueue is one turn of the queue consumer: any segment of its layout view.
func (w *simWorld) pollQueue() {
	var ready []*simSeg
	for _, id := range QueueSegments(w.queueView) {
		if t := w.segs[id]; t != nil && !t.deleted && t.cursors[simQueueSub] < len(t.log) {
			ready = append(ready, t)
		}
	}
	if len(ready) > 0 {
		w.consume(simQueueSub, ready[w.s.Rand().IntN(len(ready))], false)
	}
	w.s.After(w.s.Between(time.Millisecond, 2*time.Millisecond), "", w.pollQueue)
}

// consume reads and acknowledges the next message of sub on t; for a stream subscription it
// checks S2 (every ancestor in the layout drained) and per-key order (no older message of
// the key unread by sub on any segment of the layout).
func (w *simWorld) consume(sub string, t *simSeg, ordered bool) {
	m := t.log[t.cursors[sub]]
	t.cursors[sub]++
	w.stats.Consumed++
	if w.consumed[sub] == nil {
		w.consumed[sub] = map[simMsg]bool{}
	}
	w.consumed[sub][m] = true
	if !ordered {
		return
	}
	for _, a := range w.stored.Ancestors(t.seg.ID) {
		if !w.drained(a, sub) {
			w.failf("S2: %s reads %v from segment %d while its ancestor %d has backlog", sub, m, t.seg.ID, a)
		}
	}
	for _, s := range w.stored.Segments {
		o := w.segs[s.ID]
		if o == nil || o == t {
			continue
		}
		for _, x := range o.log[min(o.cursors[sub], len(o.log)):] {
			if x.key == m.key && x.seq < m.seq {
				w.failf("key order: %s reads %v from segment %d before %v unread on segment %d", sub, m, t.seg.ID, x, o.seg.ID)
			}
		}
	}
}
