package scalable

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/scalable/layout"
	"github.com/magnetar-io/magnetar/sim"
)

// The simulation drives the controller core (split, merge, subscribe, with their intents
// and effects), the subscription coordinator (assignments, drain checks, seeks) and the GC
// through seeded interleavings: metadata writes delayed, failed, or applied and reported
// failed; effects (create, seal, delete, fence, reset, drain checks) delayed and failed;
// producers re-routing on TopicTerminated; stream consumers joining and leaving and
// following delayed assignments; a queue consumer; admin splits, merges, subscriptions and
// seeks; the auto-scale policy over load samples; and leader crashes (a new leader elected
// through an ephemeral key, a new Core) while the old leader's effects still land.
//
// Checked at every change of the record (storeChange): S1 and the structure (Validate), S3
// (a pruned segment had no parent left and was drained by every subscription), a child is
// active only once its parents are terminated, every segment has a cursor of every
// subscription. At every append: no segment is written after one of its descendants. At
// every read of a stream subscription: S2 (every ancestor in the layout drained) and
// per-key order (no older message of the key unread on any segment). At the end, with the
// faults stopped: every acknowledged message was consumed by every subscription, no
// operation is pending, and every sealed segment was pruned and its topic deleted.
//
// Long run: go test ./scalable -run 'TestSim$' -seeds 1000000 -timeout 0
// Replay a seed with a full trace: go test ./scalable -run 'TestSim$' -seed S -v

var flags = sim.NewSeedFlags(2000, "TestSim")

func (w *simWorld) run() error {
	p := w.p
	s := w.s
	s.Tracef("params: %v", p)
	subs := []string{}
	for i := range p.streamSubs {
		subs = append(subs, fmt.Sprintf("sub-%d", i))
	}
	w.streamSubs = slices.Clone(subs)
	if p.queue {
		subs = append(subs, simQueueSub)
	}
	w.create(subs)
	w.elect()
	for k := range p.keys {
		pr := &simProducer{key: uint16(k), hash: uint16(s.Rand().IntN(layout.MaxHash + 1)), next: 1, limit: p.perKey, view: w.stored}
		w.producers = append(w.producers, pr)
		s.After(s.Between(0, p.window/2), fmt.Sprintf("producer %d (hash %04x)", k, pr.hash), func() { w.produce(pr) })
	}
	for i := range p.streamSubs {
		for j := range p.consumers {
			w.addConsumer(fmt.Sprintf("sub-%d", i), fmt.Sprintf("c-%d", j))
		}
	}
	if p.queue {
		s.After(0, "", w.pollQueue)
	}
	for range p.crashes {
		s.After(s.Between(0, p.window), "crash", w.crash)
	}
	for range p.splits {
		s.After(s.Between(0, p.window), "", w.adminSplit)
	}
	for range p.merges {
		s.After(s.Between(0, p.window), "", w.adminMerge)
	}
	for range p.seeks {
		s.After(s.Between(0, p.window), "", w.adminSeek)
	}
	for range p.subscribes {
		s.After(s.Between(0, p.window), "", w.adminSubscribe)
	}
	for range p.churn {
		s.After(s.Between(0, p.window), "", w.churnOne)
	}
	if p.auto {
		s.After(0, "", w.sampleLoad)
	}
	s.After(p.window, "quiesce", w.quiesce)
	deadline := p.window + 5*time.Second
	for w.err == nil && s.Step() {
		if s.Now() > p.window && w.settled() {
			break
		}
		if s.Now() > deadline {
			w.failf("no quiescence by %v: %s", deadline, w.unsettled())
		}
	}
	return w.err
}

func (w *simWorld) addConsumer(sub, name string) {
	c := &simConsumer{name: name, sub: sub}
	w.consumers = append(w.consumers, c)
	w.s.Tracef("consumer %s/%s joins", sub, name)
	w.registerLater(c)
	if !c.polling {
		c.polling = true
		w.s.After(w.delay(), "", func() { w.poll(c) })
	}
}

func (w *simWorld) leader() (*simInc, bool) {
	inc := w.inc
	return inc, !w.quiet && inc != nil && inc.alive && inc.c.State() == StateReady
}

func (w *simWorld) adminSplit() {
	inc, ok := w.leader()
	if !ok {
		return
	}
	l, _ := inc.c.Layout()
	act := l.Active()
	seg := act[w.s.Rand().IntN(len(act))]
	if seg.Range.Size() < 2 {
		return
	}
	var at uint16
	if w.s.Rand().IntN(2) == 0 {
		at = seg.Range.Start + 1 + uint16(w.s.Rand().IntN(seg.Range.Size()-1))
	}
	w.requested[seg.ID] = true
	w.input(inc, fmt.Sprintf("admin: split %d at %04x", seg.ID, at), func(c *Core) { c.Split(seg.ID, at) })
}

func (w *simWorld) adminMerge() {
	inc, ok := w.leader()
	if !ok {
		return
	}
	l, _ := inc.c.Layout()
	act := l.Active()
	if len(act) < 2 {
		return
	}
	i := w.s.Rand().IntN(len(act) - 1)
	w.requested[min(act[i].ID, act[i+1].ID)] = true
	w.input(inc, fmt.Sprintf("admin: merge %d %d", act[i].ID, act[i+1].ID), func(c *Core) { c.Merge(act[i].ID, act[i+1].ID) })
}

func (w *simWorld) adminSeek() {
	inc, ok := w.leader()
	if !ok {
		return
	}
	l, _ := inc.c.Layout()
	sub := fmt.Sprintf("sub-%d", w.s.Rand().IntN(w.p.streamSubs))
	seg := l.Segments[w.s.Rand().IntN(len(l.Segments))]
	to := 0
	if t := w.segs[seg.ID]; t != nil && w.s.Rand().IntN(2) == 0 {
		to = w.s.Rand().IntN(len(t.log) + 1)
	}
	w.stats.Seeks++
	w.input(inc, fmt.Sprintf("admin: seek %s on %d to %d", sub, seg.ID, to), func(c *Core) {
		c.Seek(sub, seg.ID, mledger.Position{LedgerID: 1, EntryID: int64(to)})
	})
}

func (w *simWorld) adminSubscribe() {
	inc, ok := w.leader()
	if !ok {
		return
	}
	w.nextSub++
	sub := fmt.Sprintf("late-%d", w.nextSub)
	w.streamSubs = append(w.streamSubs, sub)
	w.input(inc, "admin: subscribe "+sub, func(c *Core) { c.Subscribe(sub) })
	// Its consumer joins once the subscription is in the layout (registrations retry).
	w.addConsumer(sub, "c-0")
}

func (w *simWorld) churnOne() {
	if w.quiet {
		return
	}
	w.stats.Churn++
	var live []*simConsumer
	for _, c := range w.consumers {
		if !c.left {
			live = append(live, c)
		}
	}
	if len(live) > 0 && w.s.Rand().IntN(3) == 0 {
		w.disconnect(live[w.s.Rand().IntN(len(live))])
		return
	}
	if len(live) > 0 && w.s.Rand().IntN(2) == 0 {
		c := live[w.s.Rand().IntN(len(live))]
		w.leave(c)
		return
	}
	w.addConsumer(fmt.Sprintf("sub-%d", w.s.Rand().IntN(w.p.streamSubs)), fmt.Sprintf("c-%d", len(w.consumers)))
}

func (w *simWorld) leave(c *simConsumer) {
	c.left = true
	w.s.Tracef("consumer %s/%s leaves", c.sub, c.name)
	for _, id := range w.segIDs {
		if t := w.segs[id]; t.attached[c.sub] == c {
			delete(t.attached, c.sub)
		}
	}
	w.unregisterLater(c)
}

// disconnect drops c's connection: the brokers detach it, the leader hears of it (the
// grace period starts), and it reconnects (registers again) after a while.
func (w *simWorld) disconnect(c *simConsumer) {
	if c.away {
		return
	}
	c.away = true
	w.stats.Reconnects++
	w.s.Tracef("consumer %s/%s disconnects", c.sub, c.name)
	for _, id := range w.segIDs {
		if t := w.segs[id]; t.attached[c.sub] == c {
			delete(t.attached, c.sub)
		}
	}
	if inc, conn := w.inc, c.conn; inc != nil && inc.alive {
		w.later("", func() {
			w.input(inc, "disconnected "+c.name, func(core *Core) { _ = core.Disconnected(c.sub, c.name, conn) })
		})
	}
	w.s.After(w.s.Between(time.Millisecond, 30*time.Millisecond), "", func() {
		c.away = false
		c.conn++
		w.s.Tracef("consumer %s/%s reconnects", c.sub, c.name)
		w.registerLater(c)
	})
}

func (w *simWorld) unregisterLater(c *simConsumer) {
	inc := w.inc
	if inc == nil || !inc.alive || !c.registered {
		return
	}
	w.later("", func() {
		w.input(inc, "unregister "+c.name, func(core *Core) {
			if err := core.Unregister(c.sub, c.name); err != nil {
				w.s.After(w.s.Between(time.Millisecond, 5*time.Millisecond), "", func() { w.unregisterLater(c) })
			}
		})
	})
}

// sampleLoad feeds the leader load samples: hot or cold segments by the seed.
func (w *simWorld) sampleLoad() {
	if w.quiet {
		return
	}
	if inc, ok := w.leader(); ok {
		l, _ := inc.c.Layout()
		for _, s := range l.Active() {
			rate := float64(w.s.Rand().IntN(40))
			if w.s.Rand().IntN(6) == 0 {
				rate = 150
			}
			inc.c.Sample(s.ID, LoadSample{MsgRateIn: rate, ChangedMs: w.nowMs() - int64(w.s.Rand().IntN(10))})
		}
		w.input(inc, "", func(*Core) {})
	}
	w.s.After(w.s.Between(3*time.Millisecond, 8*time.Millisecond), "", w.sampleLoad)
}

// quiesce stops the faults and the admin operations; every stream subscription keeps a
// consumer.
func (w *simWorld) quiesce() {
	w.quiet = true
	for _, sub := range w.streamSubs {
		if !slices.ContainsFunc(w.consumers, func(c *simConsumer) bool { return c.sub == sub && !c.left }) {
			w.addConsumer(sub, fmt.Sprintf("c-%d", len(w.consumers)))
		}
	}
	if w.inc == nil || !w.inc.alive {
		return
	}
}

// settled is unsettled() == "", cheap checks first (it runs after every step of the end).
func (w *simWorld) settled() bool {
	if w.stored.Pending != nil || len(w.stored.Deleting) > 0 || w.inc == nil || !w.inc.alive || w.inc.c.State() != StateReady {
		return false
	}
	for _, s := range w.stored.Segments {
		if s.State == layout.StateSealed {
			return false
		}
	}
	for _, p := range w.producers {
		if p.next <= p.limit {
			return false
		}
	}
	for _, sub := range w.stored.Subscriptions {
		for m := range w.acked {
			if !w.consumed[sub][m] {
				return false
			}
		}
	}
	return true
}

// unsettled says what is left to do before the end (empty: nothing).
func (w *simWorld) unsettled() string {
	for _, p := range w.producers {
		if p.next <= p.limit {
			return fmt.Sprintf("producer %d at %d", p.key, p.next)
		}
	}
	for _, sub := range w.stored.Subscriptions {
		for _, m := range slices.SortedFunc(maps.Keys(w.acked), func(a, b simMsg) int { return (a.key-b.key)*1000 + a.seq - b.seq }) {
			if !w.consumed[sub][m] {
				return fmt.Sprintf("%s has not consumed %v (%s)", sub, m, w.where(sub, m))
			}
		}
	}
	if w.stored.Pending != nil {
		return fmt.Sprintf("pending %v", w.stored.Pending.Kind)
	}
	for _, s := range w.stored.Segments {
		if s.State == layout.StateSealed {
			return fmt.Sprintf("sealed segment %d not pruned", s.ID)
		}
	}
	if len(w.stored.Deleting) > 0 {
		return fmt.Sprintf("topics %v not deleted", w.stored.Deleting)
	}
	if w.inc == nil || !w.inc.alive || w.inc.c.State() != StateReady {
		return "no leader"
	}
	return ""
}

func runSimSeed(seed int64, mut Mutation, verbose bool) (*simWorld, error) {
	w := newSimWorld(seed, mut, verbose)
	return w, w.run()
}

// TestSim drives the controller, the coordinator and the GC through seeded worlds.
func TestSim(t *testing.T) {
	var st simStats
	ran, failed := sim.RunSeeds(t, flags.Seeds("./scalable", 0), func(seed int64, verbose bool) sim.Outcome {
		w, err := runSimSeed(seed, Mutation{}, verbose)
		sim.AddCounts(&st, w.stats)
		return sim.Outcome{Sim: w.s, Params: w.p, Err: err}
	})
	if failed {
		return
	}
	t.Logf("%+v", st)
	sim.RequireCoverage(t, ran, 500, map[string]int{"splits": st.Splits, "merges": st.Merges, "subscribes": st.Subscribes,
		"seeks": st.Seeks, "prunes": st.Prunes, "deletes": st.Deletes, "crashes": st.Crashes, "re-routes": st.Rerouted,
		"failed writes": st.WriteFails, "ambiguous writes": st.Ambiguous, "reloads": st.Reloads, "stale terms": st.StaleTerms,
		"fenced consumers": st.Fenced, "churn": st.Churn, "auto splits": st.AutoSplits, "auto merges": st.AutoMerges,
		"operations resumed by a new leader": st.Resumed, "ghost effects": st.Ghosts, "reconnects": st.Reconnects})
}

// TestSimDeterministic replays seeds and requires identical traces.
func TestSimDeterministic(t *testing.T) {
	sim.CheckDeterministic(t, 20, func(seed int64) *sim.Sim {
		w, _ := runSimSeed(seed, Mutation{}, true)
		return w.s
	})
}

// simMutants are upstream's behaviours (apache/pulsar#26842, apache/pulsar#26850) and broken split orders.
var simMutants = []sim.Mutant[Mutation]{
	{Name: "prune any sealed segment (#26842 before the fix)", Mut: Mutation{PruneAnySealed: true}},
	{Name: "direct parents only (#26850 before the fix)", Mut: Mutation{DirectParentsOnly: true}},
	{Name: "sealed segments always assignable (#26850 before the fix)", Mut: Mutation{SealedAlwaysAssignable: true}},
	{Name: "a seek keeps the descendants assigned (#26274)", Mut: Mutation{SeekKeepsDrained: true}},
	{Name: "the commit before the seal", Mut: Mutation{CommitBeforeSeal: true}},
	{Name: "children without cursors", Mut: Mutation{NoChildCursors: true}},
	{Name: "a drain check issued before a seek counts after it", Mut: Mutation{StaleDrainChecks: true}},
}

// TestSimCatchesMutations proves the checkers can fail: each broken core is caught by some
// seed of the random simulation.
func TestSimCatchesMutations(t *testing.T) {
	if flags.Replaying() {
		t.Skip("replaying one seed")
	}
	sim.CatchMutations(t, 2000, simMutants, func(seed int64, mut Mutation) error {
		_, err := runSimSeed(seed, mut, false)
		return err
	})
}

// where describes message m's segments and sub's consumers there (for failure messages).
func (w *simWorld) where(sub string, m simMsg) string {
	var b []string
	for _, id := range slices.Sorted(maps.Keys(w.segs)) {
		t := w.segs[id]
		if i := slices.Index(t.log, m); i >= 0 {
			cur, ok := t.cursors[sub]
			b = append(b, fmt.Sprintf("segment %d at %d (in layout %v, deleted %v, cursor %d/%v of %d, attached %v)",
				id, i, w.stored.Has(id), t.deleted, cur, ok, len(t.log), t.attached[sub] != nil))
		}
	}
	for _, c := range w.consumers {
		if c.sub == sub && !c.left {
			b = append(b, fmt.Sprintf("%s v%x %v registered %v", c.name, c.version, c.assigned, c.registered))
		}
	}
	if w.inc != nil && w.inc.alive {
		l, _ := w.inc.c.Layout()
		for _, s := range l.Segments {
			b = append(b, fmt.Sprintf("%d %v %v parents %v assignable %v", s.ID, s.Range, s.State, s.Parents, w.inc.c.Assignable(sub, s.ID)))
		}
		if ss := w.inc.c.subs[sub]; ss != nil {
			b = append(b, fmt.Sprintf("drained %v assigned %v", ss.drained, ss.assigned))
		}
	}
	return fmt.Sprint(b)
}
