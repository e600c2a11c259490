package replsub

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic/dispatch"
	"github.com/magnetar-io/magnetar/replication"
	"github.com/magnetar-io/magnetar/sim"
)

var flags = sim.NewSeedFlags(150, "TestSim")

// The simulation runs one geo-replicated topic in two or three clusters, each with its copy
// of the log, a Controller, a replicator to every other cluster and the replicated
// subscription "sub" (a real dispatch.Core over a model of the cursor, with a Cache). One
// consumer reads the subscription in one cluster at a time, acknowledges (mostly
// cumulatively, sometimes one message), and moves to another cluster now and then, as a
// user fails over. Every cluster publishes data; replication keeps each link's order
// (Pulsar's replicator, package replication, proven by its own simulation), with random,
// asymmetric delays, and each link's replicator reconnects after faults: it then reads again
// from its cursor's mark-delete position, so markers are processed and travel again (they
// are not deduplicated, data is). Links are cut for a while; brokers crash (the
// controller's snapshots in progress and the subscription's cache are lost; the
// replication cursors and the subscription's cursor keep what they had persisted); marker
// writes fail; snapshots time out.
//
// After every step the checker verifies R3: in every cluster, every data message at or
// before the subscription's mark-delete position was acknowledged by the consumer (in
// whichever cluster it was reading): moving the consumer never skips a message it has not
// acknowledged; and no marker is ever delivered to the consumer. At the end, with the faults
// over and a last message published where the consumer is, it checks that the
// subscription's position reached the other clusters (the last snapshot's update applied
// everywhere).

const (
	simBase    = 1_700_000_000_000 // Unix ms of the simulation's time 0
	simSubName = "sub"
	simWindow  = 100 // the consumer's permits
	// simLinkWindow bounds a replicator's sends in flight (replicationProducerQueueSize).
	simLinkWindow = 64
)

var simClusters = []string{"a", "b", "c"}

func simPos(i int) Position { return Position{LedgerID: 1, EntryID: int64(i)} }

func simIndex(p Position) int {
	if p.LedgerID < 1 {
		return -1
	}
	return int(p.EntryID)
}

type simParams struct {
	clusters             int
	messages             int           // data messages published over the window, in all clusters
	window               time.Duration // publishing and faults happen in [0, window)
	frequency, timeout   int64         // the controller's (ms)
	maxCached            int
	latency              [3][3]time.Duration // base latency of each link (from, to)
	jitter               time.Duration
	cuts, crashes, moves int
	writeFail            float64 // share of marker writes that fail
	individual           float64 // share of acks that are individual
	publishers           int     // how many clusters publish (1..clusters)
}

func (p simParams) String() string {
	return fmt.Sprintf("clusters=%d messages=%d window=%v frequency=%dms timeout=%dms cached=%d latency=%v jitter=%v cuts=%d crashes=%d moves=%d writefail=%.2f individual=%.2f publishers=%d",
		p.clusters, p.messages, p.window, p.frequency, p.timeout, p.maxCached, p.latency, p.jitter, p.cuts, p.crashes,
		p.moves, p.writeFail, p.individual, p.publishers)
}

func randomSimParams(s *sim.Sim) simParams {
	r := s.Rand()
	p := simParams{
		clusters:   2 + r.IntN(2),
		messages:   5 + r.IntN(60),
		window:     time.Duration(200+r.IntN(800)) * time.Millisecond,
		frequency:  int64(30 + r.IntN(70)),
		maxCached:  1 + r.IntN(5),
		jitter:     time.Duration(r.IntN(5)) * time.Millisecond,
		cuts:       r.IntN(4),
		crashes:    r.IntN(3),
		moves:      r.IntN(5),
		individual: r.Float64() * 0.3,
	}
	if r.IntN(3) == 0 {
		p.writeFail = r.Float64() * 0.1
	}
	for i := range p.latency {
		for j := range p.latency[i] {
			p.latency[i][j] = time.Duration(1+r.IntN(30)) * time.Millisecond
		}
	}
	// Mostly longer than a round trip; sometimes shorter, so snapshots time out.
	p.timeout = int64(150 + r.IntN(400))
	if r.IntN(4) == 0 {
		p.timeout = int64(20 + r.IntN(60))
	}
	p.publishers = 1 + r.IntN(p.clusters)
	return p
}

// simEntry is one entry of a cluster's copy of the topic.
type simEntry struct {
	key       string // a data message's identity: "<origin>/<n>" ("" for a marker)
	marker    int32  // the marker type (0: data)
	payload   []byte
	from      string   // replicated_from ("" published here)
	to        []string // replicate_to
	publishMs int64
}

func (e simEntry) String() string {
	if e.marker != 0 {
		return fmt.Sprintf("marker %d from %q", e.marker, e.from)
	}
	return e.key
}

// simLink is the replicator of one cluster to another: it reads the source's log in order
// after its cursor, processes the markers that came from its remote cluster, and sends
// what travels; the link delivers in order. A fault ends its session: what was in flight is
// lost and it reads again from its cursor's mark-delete position.
type simLink struct {
	w        *simWorld
	src, dst *simCluster
	md       int // entries before md are done (on the remote, or not sent)
	read     int // the next entry to read
	session  int
	inflight []int // entries sent in this session, not delivered
	lastAt   time.Duration
	up       bool
	pumping  bool
}

// simCluster is one cluster: its copy of the topic, its controller, its replicators and
// its subscription.
type simCluster struct {
	w        *simWorld
	name     string
	idx      int
	log      []simEntry
	has      map[string]bool // data keys stored: the receiving side deduplicates them
	gen      int             // the broker's incarnation: a crash drops its events
	ctl      *Controller
	timerAt  int64
	links    map[string]*simLink
	sub      *simSubscription
	pubAt    time.Duration // marker writes complete in order
	nextData int
	ids      int
}

// simSubscription is the replicated subscription in one cluster: a dispatch core over a model of the
// cursor (mark-delete position and individual acknowledgements, persisted at once), and the
// snapshot cache.
type simSubscription struct {
	c         *simCluster
	gen       int
	d         *dispatch.Core
	md        int
	acked     map[int]bool
	readPos   int
	parked    *dispatch.Read
	cache     *Cache
	cid       dispatch.CID // the consumer attached here (0: none)
	received  []int        // entries the consumer received and has not acknowledged
	delivered map[int]bool
	verified  int // every data entry up to verified was checked acknowledged (R3)
}

type simStats struct {
	Snapshots, SnapshotsTimedOut, Updates, UpdatesApplied, Moves, Crashes, Cuts, Resends int
	MarkersSkipped, WriteFailures, CreatedByUpdate, ThreeClusters                        int
}

type simWorld struct {
	s        *sim.Sim
	p        simParams
	mut      Mutation
	dmut     dispatch.Mutation
	clusters []*simCluster
	byName   map[string]*simCluster
	acked    map[string]bool // data keys the consumer acknowledged, in any cluster
	consumer *simCluster     // where the consumer reads (nil: moving)
	quiesce  bool
	err      error
	stats    simStats
}

func newSimWorld(seed int64, mut Mutation, dmut dispatch.Mutation, verbose bool) *simWorld {
	s := sim.New(seed)
	s.Verbose = verbose
	w := &simWorld{s: s, mut: mut, dmut: dmut, byName: map[string]*simCluster{}, acked: map[string]bool{}}
	w.p = randomSimParams(s)
	for i := range w.p.clusters {
		c := &simCluster{w: w, name: simClusters[i], idx: i, has: map[string]bool{}, links: map[string]*simLink{}}
		w.clusters = append(w.clusters, c)
		w.byName[c.name] = c
	}
	for _, c := range w.clusters {
		for _, o := range w.clusters {
			if o != c {
				c.links[o.name] = &simLink{w: w, src: c, dst: o, up: true}
			}
		}
	}
	return w
}

func (w *simWorld) failf(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("at %v: %s", w.s.Now(), fmt.Sprintf(format, args...))
	}
}

func (w *simWorld) nowMs() int64 { return simBase + int64(w.s.Now()/time.Millisecond) }

// on schedules fn for c's current incarnation; it is dropped if c crashed meanwhile.
func (c *simCluster) on(d time.Duration, name string, fn func()) {
	gen := c.gen
	c.w.s.After(d, c.name+": "+name, func() {
		if c.gen == gen && c.w.err == nil {
			fn()
			c.w.check()
		}
	})
}

func (c *simCluster) remotes() []string {
	var rs []string
	for _, o := range c.w.clusters {
		if o != c {
			rs = append(rs, o.name)
		}
	}
	return rs
}

// start starts c's broker: a new controller; the replicators read again from their
// cursors; the subscription's dispatcher starts over from its cursor.
func (c *simCluster) start() {
	w := c.w
	c.countStats()
	c.ctl = NewController(Config{LocalCluster: c.name, FrequencyMs: w.p.frequency, TimeoutMs: w.p.timeout,
		Mutation: w.mut, NewID: func() string { c.ids++; return fmt.Sprintf("%s-%d-%d", c.name, c.gen, c.ids) }})
	c.ctl.SetRemotes(c.remotes())
	for _, name := range c.remotes() {
		c.ctl.SetConnected(name, c.links[name].up)
	}
	c.ctl.Start(w.nowMs())
	c.timerAt = 0
	c.performCtl()
	for _, name := range c.remotes() {
		c.links[name].restart()
	}
	if c.sub != nil {
		c.sub.restart()
	}
}

// countStats adds the controller's counters to the run's (before a crash replaces it).
func (c *simCluster) countStats() {
	if c.ctl != nil {
		c.w.stats.SnapshotsTimedOut += int(c.ctl.Stats().TimedOut)
	}
}

func (c *simCluster) crash() {
	w := c.w
	w.stats.Crashes++
	w.s.Tracef("%s crashes", c.name)
	consumerHere := w.consumer == c
	if consumerHere {
		w.detach()
	}
	c.gen++
	c.start()
	// The other clusters' replicators lose their connections to it.
	for _, o := range w.clusters {
		if o != c {
			o.links[c.name].restart()
		}
	}
	if consumerHere {
		w.attachLater(c)
	}
}

// performCtl performs what the controller asks for.
func (c *simCluster) performCtl() {
	w := c.w
	r := c.ctl.Ready()
	if err := c.ctl.invariantErr(); err != nil && w.mut == (Mutation{}) {
		w.failf("%s controller: %v", c.name, err)
	}
	for _, wr := range r.Writes {
		c.writeMarker(wr)
	}
	for _, a := range r.Acks {
		c.applyUpdate(a)
	}
	if r.TimerAt != 0 && (c.timerAt == 0 || r.TimerAt < c.timerAt) {
		c.timerAt = r.TimerAt
		at := time.Duration(r.TimerAt-simBase) * time.Millisecond
		c.on(at-w.s.Now(), "controller timer", func() {
			c.timerAt = 0
			c.ctl.Tick(w.nowMs())
			c.performCtl()
		})
	}
}

// writeMarker publishes a marker in c's log (in order with c's other marker writes).
func (c *simCluster) writeMarker(wr MarkerWrite) {
	w := c.w
	c.pubAt = max(c.pubAt, w.s.Now()) + w.s.Between(0, 2*time.Millisecond)
	fail := !w.quiesce && w.s.Chance(w.p.writeFail)
	gen := c.gen
	w.s.After(c.pubAt-w.s.Now(), c.name+": marker write", func() {
		if w.err != nil {
			return
		}
		var pos Position
		var err error
		if fail {
			err = fmt.Errorf("simulated write failure")
			w.stats.WriteFailures++
		} else {
			pos = c.append(simEntry{marker: wr.Type, payload: wr.Payload, to: wr.ReplicateTo, publishMs: w.nowMs()})
			switch wr.Type {
			case replication.MarkerSnapshot:
				w.stats.Snapshots++
			case replication.MarkerUpdate:
				w.stats.Updates++
			}
		}
		if c.gen == gen { // a crash loses the answer (the write may have landed)
			c.ctl.Written(wr.Tag, pos, err)
			c.performCtl()
		}
		w.check()
	})
}

// append stores e in c's log and wakes the readers.
func (c *simCluster) append(e simEntry) Position {
	c.log = append(c.log, e)
	i := len(c.log) - 1
	c.w.s.Tracef("  %s[%d] = %v", c.name, i, e)
	for _, name := range c.remotes() {
		c.links[name].pump()
	}
	if c.sub != nil {
		c.sub.tryRead()
	}
	return simPos(i)
}

// publish publishes a data message in c.
func (c *simCluster) publish() {
	c.nextData++
	key := fmt.Sprintf("%s/%d", c.name, c.nextData)
	c.has[key] = true
	c.append(simEntry{key: key, publishMs: c.w.nowMs()})
	c.ctl.DataPublished(c.w.nowMs())
}

// applyUpdate applies an UPDATE's acknowledgement to c's subscription, creating it at the
// earliest position if it does not exist.
func (c *simCluster) applyUpdate(a SubscriptionAck) {
	w := c.w
	if a.Subscription != simSubName {
		w.failf("%s: update of unknown subscription %q", c.name, a.Subscription)
		return
	}
	w.stats.UpdatesApplied++
	if c.sub == nil {
		w.stats.CreatedByUpdate++
		c.sub = &simSubscription{c: c, md: -1, acked: map[int]bool{}, verified: -1}
		c.sub.restart()
	}
	s := c.sub
	w.s.Tracef("  %s: update sub to %v (md %d)", c.name, a.Pos, s.md)
	s.d.AckUpTo(dispatch.Position(a.Pos), nil)
	s.flush()
}

// The replicators.

func (l *simLink) restart() {
	l.session++
	if len(l.inflight) > 0 {
		l.w.stats.Resends++
	}
	l.inflight = nil
	l.read = l.md
	l.pumping = false
	l.pump()
}

// fault ends the link's session (a disconnect, a cut): the replicator is not connected
// until it heals.
func (l *simLink) cut(d time.Duration) {
	w := l.w
	w.stats.Cuts++
	l.up = false
	l.src.ctl.SetConnected(l.dst.name, false)
	l.restart()
	w.s.After(d, "link "+l.src.name+"->"+l.dst.name+" heals", func() {
		if w.err != nil {
			return
		}
		l.up = true
		l.src.ctl.SetConnected(l.dst.name, true)
		l.src.performCtl()
		l.pump()
		w.check()
	})
}

// pump schedules the reading of the next entry if there is one and the window allows.
func (l *simLink) pump() {
	if l.pumping || !l.up || l.read >= len(l.src.log) || len(l.inflight) >= simLinkWindow {
		return
	}
	l.pumping = true
	session := l.session
	l.src.on(l.w.s.Between(0, time.Millisecond), "replicator "+l.src.name+"->"+l.dst.name+" reads", func() {
		if l.session != session {
			return
		}
		l.pumping = false
		l.step()
		l.pump()
	})
}

// step reads one entry: a marker that came from the remote cluster goes to the controller;
// what travels is sent.
func (l *simLink) step() {
	w := l.w
	i := l.read
	l.read++
	e := l.src.log[i]
	if e.marker != 0 && e.from == l.dst.name {
		l.src.ctl.MarkerRead(l.dst.name, simPos(i), e.marker, e.payload, simPos(len(l.src.log)-1))
		l.src.performCtl()
	}
	meta := replication.Meta{Marker: e.marker != 0, MarkerType: e.marker, ReplicatedFrom: e.from, ReplicateTo: e.to}
	if replication.Classify(meta, l.dst.name, true) != replication.Replicate {
		if len(l.inflight) == 0 {
			l.md = i + 1
		}
		return
	}
	l.inflight = append(l.inflight, i)
	src, dst := l.src.idx, l.dst.idx
	l.lastAt = max(l.lastAt, w.s.Now()+w.p.latency[src][dst]+w.s.Between(0, w.p.jitter))
	session := l.session
	w.s.After(l.lastAt-w.s.Now(), fmt.Sprintf("deliver %s[%d] to %s", l.src.name, i, l.dst.name), func() {
		if l.session != session || w.err != nil {
			return // the session ended: the replicator sends it again
		}
		l.inflight = l.inflight[1:]
		l.md = i + 1
		if e.key != "" && l.dst.has[e.key] {
			return // deduplicated by the original producer's identity
		}
		if e.key != "" {
			l.dst.has[e.key] = true
		}
		out := e
		out.from = l.src.name
		l.dst.append(out)
		if e.key != "" {
			l.dst.ctl.DataPublished(w.nowMs())
		}
		l.pump()
		w.check()
	})
}

// The subscription.

func (s *simSubscription) restart() {
	s.gen++
	s.d = dispatch.New(dispatch.Config{Partition: -1, Mutation: s.c.w.dmut})
	s.d.SetTime(s.c.w.nowMs())
	s.cache = NewCache(s.c.w.p.maxCached, s.c.w.mut)
	s.readPos = s.md + 1
	s.parked = nil
	s.cid = 0
	s.received = nil
}

func (s *simSubscription) flush() {
	w := s.c.w
	r := s.d.Ready()
	for _, snd := range r.Sends {
		i := simIndex(Position(snd.Entry.Pos))
		e := &s.c.log[i]
		if e.marker != 0 {
			w.failf("R3: %s delivered marker entry %d (%v) to the consumer", s.c.name, i, *e)
			return
		}
		if snd.To != s.cid || s.cid == 0 {
			w.failf("%s: entry %d sent to consumer %d, attached %d", s.c.name, i, snd.To, s.cid)
			return
		}
		s.received = append(s.received, i)
		s.delivered[i] = true
	}
	for _, m := range r.Markers {
		w.stats.MarkersSkipped++
		i := simIndex(Position(m.Pos))
		if e := s.c.log[i]; e.marker == replication.MarkerSnapshot {
			snap, err := DecodeSnapshot(e.payload)
			if err != nil {
				w.failf("%s: snapshot marker %d: %v", s.c.name, i, err)
				return
			}
			s.cache.Add(snap)
		}
	}
	moved := false
	for _, a := range r.Acks {
		switch a.Kind {
		case dispatch.AckIndividual:
			for _, p := range a.Positions {
				if i := simIndex(Position(p)); i > s.md {
					s.acked[i] = true
				}
			}
		case dispatch.AckCumulative:
			if i := simIndex(Position(a.Pos)); i > s.md {
				s.md = i
				moved = true
			}
		default:
			w.failf("unexpected ack kind %v", a.Kind)
		}
		if a.Done != nil {
			a.Done(nil)
		}
	}
	for s.acked[s.md+1] {
		delete(s.acked, s.md+1)
		s.md++
		moved = true
	}
	for i := range s.acked {
		if i <= s.md {
			delete(s.acked, i)
		}
	}
	s.readPos = max(s.readPos, s.md+1)
	for _, rep := range r.Replies {
		rep.Done(rep.Err)
	}
	if r.Read != nil {
		rd := *r.Read
		s.parked = &rd
		gen := s.gen
		s.c.on(w.s.Between(0, time.Millisecond), "sub read", func() {
			if s.gen == gen {
				s.tryRead()
			}
		})
	}
	if r.Replay != nil {
		rp := *r.Replay
		gen := s.gen
		s.c.on(w.s.Between(0, time.Millisecond), "sub replay", func() {
			if s.gen != gen {
				return
			}
			var es []dispatch.Entry
			for _, p := range rp.Positions {
				if i := simIndex(Position(p)); i > s.md && !s.acked[i] {
					es = append(es, s.entry(i))
				}
			}
			s.d.SetTime(w.nowMs())
			s.d.ReplayDone(rp.Epoch, rp.Positions, es, dispatch.ReadOK, w.nowMs())
			s.flush()
		})
	}
	if r.TimerAt != 0 {
		gen := s.gen
		at := time.Duration(r.TimerAt-simBase) * time.Millisecond
		s.c.on(at-w.s.Now(), "sub timer", func() {
			if s.gen == gen {
				s.d.Tick(w.nowMs())
				s.flush()
			}
		})
	}
	if moved {
		if snap, ok := s.cache.Advanced(simPos(s.md)); ok {
			w.s.Tracef("  %s: sub md %d passed snapshot %v", s.c.name, s.md, snap)
			s.c.ctl.SubscriptionAdvanced(simSubName, snap)
			s.c.performCtl()
		}
	}
}

func (s *simSubscription) entry(i int) dispatch.Entry {
	return dispatch.Entry{Pos: dispatch.Position(simPos(i)), Info: dispatch.Info{Msgs: 1, Marker: s.c.log[i].marker != 0}}
}

// tryRead completes the parked read with the entries after the read position (skipping
// acknowledged ones), if there are any.
func (s *simSubscription) tryRead() {
	rd := s.parked
	if rd == nil {
		return
	}
	var es []dispatch.Entry
	i := s.readPos
	for ; i < len(s.c.log) && len(es) < rd.N; i++ {
		if !s.acked[i] {
			es = append(es, s.entry(i))
		}
	}
	if len(es) == 0 {
		return
	}
	s.readPos = i
	s.parked = nil
	s.d.SetTime(s.c.w.nowMs())
	s.d.ReadDone(rd.Epoch, es, dispatch.ReadOK, s.c.w.nowMs())
	s.flush()
}

// The consumer.

func (w *simWorld) attach(c *simCluster) {
	if c.sub == nil {
		c.sub = &simSubscription{c: c, md: -1, acked: map[int]bool{}, verified: -1}
		c.sub.restart()
	}
	s := c.sub
	id, err := s.d.AddConsumer(dispatch.ConsumerSpec{Type: dispatch.Exclusive, Name: "consumer"})
	if err != nil {
		w.failf("%s: attach: %v", c.name, err)
		return
	}
	w.consumer = c
	s.cid = id
	s.received = nil
	s.delivered = map[int]bool{}
	w.s.Tracef("  consumer attached in %s (md %d)", c.name, s.md)
	s.d.SetTime(w.nowMs())
	s.d.Flow(id, simWindow)
	s.flush()
}

func (w *simWorld) attachLater(c *simCluster) {
	w.s.After(w.s.Between(time.Millisecond, 20*time.Millisecond), "consumer attaches in "+c.name, func() {
		if w.err == nil && w.consumer == nil {
			w.attach(c)
			w.check()
		}
	})
}

func (w *simWorld) detach() {
	c := w.consumer
	if c == nil {
		return
	}
	s := c.sub
	if s.cid != 0 {
		s.d.RemoveConsumer(s.cid, false)
		s.cid = 0
		s.received = nil
		s.flush()
	}
	w.consumer = nil
}

// move moves the consumer to another cluster (a fail-over).
func (w *simWorld) move() {
	from := w.consumer
	if from == nil {
		return
	}
	w.stats.Moves++
	w.detach()
	var to *simCluster
	for to == nil || to == from {
		to = w.clusters[w.s.Rand().IntN(len(w.clusters))]
	}
	w.s.Tracef("consumer moves from %s to %s", from.name, to.name)
	w.attachLater(to)
}

// ack acknowledges some of what the consumer received: cumulatively up to a received
// message, or one message individually.
func (w *simWorld) ack() {
	c := w.consumer
	if c == nil || c.sub == nil || len(c.sub.received) == 0 {
		return
	}
	s := c.sub
	k := len(s.received)
	if !w.quiesce {
		k = 1 + w.s.Rand().IntN(len(s.received))
	}
	s.d.SetTime(w.nowMs())
	if w.s.Chance(w.p.individual) && !w.quiesce {
		j := w.s.Rand().IntN(k)
		i := s.received[j]
		s.received = slices.Delete(s.received, j, j+1)
		w.acked[c.log[i].key] = true
		w.s.Tracef("  consumer acks %s[%d]", c.name, i)
		s.d.Ack(s.cid, false, []dispatch.AckID{{Pos: dispatch.Position(simPos(i))}}, nil)
		s.d.Flow(s.cid, 1)
		s.flush()
		return
	}
	upTo := s.received[k-1]
	for _, i := range s.received[:k] {
		w.acked[c.log[i].key] = true
	}
	s.received = s.received[k:]
	w.s.Tracef("  consumer acks %s up to %d", c.name, upTo)
	s.d.Ack(s.cid, true, []dispatch.AckID{{Pos: dispatch.Position(simPos(upTo))}}, nil)
	s.d.Flow(s.cid, k)
	s.flush()
}

// check verifies R3 in every cluster: every data message at or before the subscription's
// mark-delete position was acknowledged by the consumer.
func (w *simWorld) check() {
	if w.err != nil {
		return
	}
	for _, c := range w.clusters {
		s := c.sub
		if s == nil {
			continue
		}
		for i := s.verified + 1; i <= s.md && i < len(c.log); i++ {
			if e := c.log[i]; e.key != "" && !w.acked[e.key] {
				w.failf("R3: the subscription in %s is at %d, past message %s (%s[%d]) that the consumer never acknowledged",
					c.name, s.md, e.key, c.name, i)
				return
			}
			s.verified = i
		}
	}
}

func (w *simWorld) run() error {
	p, s := w.p, w.s
	s.Tracef("params: %v", p)
	for _, c := range w.clusters {
		c.start()
	}
	w.attach(w.clusters[0])
	for range p.messages {
		c := w.clusters[s.Rand().IntN(p.publishers)]
		s.After(s.Between(0, p.window), "publish in "+c.name, func() { c.publish(); w.check() })
	}
	end := p.window + p.window/3 + 5*time.Second
	for at := time.Duration(0); at < end; at += s.Between(time.Millisecond, 15*time.Millisecond) {
		s.After(at, "", func() { w.ack(); w.check() })
	}
	for range p.moves {
		s.After(s.Between(0, p.window), "move", func() { w.move(); w.check() })
	}
	for range p.crashes {
		c := w.clusters[s.Rand().IntN(len(w.clusters))]
		s.After(s.Between(0, p.window), "crash "+c.name, func() { c.crash(); w.check() })
	}
	for range p.cuts {
		c := w.clusters[s.Rand().IntN(len(w.clusters))]
		rs := c.remotes()
		l := c.links[rs[s.Rand().IntN(len(rs))]]
		d := s.Between(time.Millisecond, p.window/3)
		s.After(s.Between(0, p.window), "cut "+l.src.name+"->"+l.dst.name, func() { l.cut(d); w.check() })
	}
	if p.clusters > 2 {
		w.stats.ThreeClusters++
	}
	// The faults are over: a last message where the consumer reads, which a snapshot then
	// covers.
	var last *simCluster
	s.After(p.window+p.window/3+time.Millisecond, "quiesce", func() {
		w.quiesce = true
		last = w.consumer
		if last == nil {
			return // it attaches later; quiesce again below
		}
	})
	s.After(p.window+p.window/3+100*time.Millisecond, "last message", func() {
		last = w.consumer
		if last != nil {
			last.publish()
		}
		w.check()
	})
	for w.err == nil && s.Now() < end && s.Step() {
	}
	for _, c := range w.clusters {
		c.countStats()
	}
	if w.err != nil {
		return w.err
	}
	return w.liveness(last)
}

// liveness: the consumer acknowledged everything in its cluster, a snapshot after its last
// message became an update, and every other cluster applied it.
func (w *simWorld) liveness(z *simCluster) error {
	if z == nil || w.consumer != z {
		return fmt.Errorf("liveness: the consumer is not attached at the end")
	}
	s := z.sub
	lastData := -1
	for i, e := range z.log {
		if e.key != "" {
			lastData = i
		}
	}
	if s.md < lastData {
		return fmt.Errorf("liveness: the subscription in %s is at %d, before its last message %d", z.name, s.md, lastData)
	}
	var upd *Update
	for i := len(z.log) - 1; i > lastData; i-- {
		if e := z.log[i]; e.marker == replication.MarkerUpdate && e.from == "" {
			u, err := DecodeUpdate(e.payload)
			if err != nil {
				return err
			}
			upd = &u
			break
		}
	}
	if w.p.timeout < 150 {
		return nil // snapshots may never complete within so short a timeout
	}
	if upd == nil {
		return fmt.Errorf("liveness: %s wrote no update after its last message %d (controller %+v)", z.name, lastData, z.ctl.Stats())
	}
	for _, cp := range upd.Clusters {
		o := w.byName[cp.Cluster]
		if o == nil || o.sub == nil || o.sub.md < simIndex(cp.Pos) {
			md := -2
			if o != nil && o.sub != nil {
				md = o.sub.md
			}
			return fmt.Errorf("liveness: %s's last update puts %s at %v, which is at %d", z.name, cp.Cluster, cp.Pos, md)
		}
	}
	if len(upd.Clusters) != len(w.clusters)-1 {
		return fmt.Errorf("liveness: %s's last update names %d clusters", z.name, len(upd.Clusters))
	}
	return nil
}

func runSimSeed(seed int64, mut Mutation, dmut dispatch.Mutation, verbose bool) (w *simWorld, err error) {
	w = newSimWorld(seed, mut, dmut, verbose)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, w.s.Trace())
		}
	}()
	return w, w.run()
}

// TestSim runs seeded two- and three-cluster worlds (see simWorld) and checks R3 after every
// step and the subscription's progress at the end. Replay a seed with
// go test ./replication/replsub -run 'TestSim$' -seed S -v; a long run:
// go test ./replication/replsub -run 'TestSim$' -seeds 100000 -timeout 0.
func TestSim(t *testing.T) {
	var st simStats
	ran, failed := sim.RunSeeds(t, flags.Seeds("./replication/replsub", 0), func(seed int64, verbose bool) sim.Outcome {
		w, err := runSimSeed(seed, Mutation{}, dispatch.Mutation{}, verbose)
		sim.AddCounts(&st, w.stats)
		return sim.Outcome{Sim: w.s, Params: w.p, Err: err}
	})
	if failed {
		return
	}
	t.Logf("%+v", st)
	sim.RequireCoverage(t, ran, 100, map[string]int{"snapshots": st.Snapshots, "updates": st.Updates,
		"updates applied": st.UpdatesApplied, "moves": st.Moves, "crashes": st.Crashes, "cuts": st.Cuts,
		"re-sends": st.Resends, "markers skipped": st.MarkersSkipped, "failed marker writes": st.WriteFailures,
		"subscriptions created by an update": st.CreatedByUpdate, "three-cluster runs": st.ThreeClusters,
		"snapshots timed out": st.SnapshotsTimedOut})
}

// TestSimDeterministic replays seeds and requires identical traces.
func TestSimDeterministic(t *testing.T) {
	sim.CheckDeterministic(t, 10, func(seed int64) *sim.Sim {
		w, _ := runSimSeed(seed, Mutation{}, dispatch.Mutation{}, true)
		return w.s
	})
}

type simMutant struct {
	mut  Mutation
	dmut dispatch.Mutation
}

var simMutants = []sim.Mutant[simMutant]{
	{Name: "an UPDATE from a snapshot the subscription has not reached", Mut: simMutant{mut: Mutation{UpdateUncovered: true}}},
	{Name: "the SNAPSHOT written before the second round's responses", Mut: simMutant{mut: Mutation{OneRound: true}}},
	{Name: "an UPDATE applied at another cluster's entry", Mut: simMutant{mut: Mutation{WrongClusterEntry: true}}},
	{Name: "markers delivered to consumers", Mut: simMutant{dmut: dispatch.Mutation{DeliverMarkers: true}}},
}

// TestSimCatchesMutations proves the checker can fail: each deliberately broken controller,
// cache or dispatcher is caught by some seed.
func TestSimCatchesMutations(t *testing.T) {
	if flags.Replaying() {
		t.Skip("replaying one seed")
	}
	sim.CatchMutations(t, 3000, simMutants, func(seed int64, m simMutant) error {
		_, err := runSimSeed(seed, m.mut, m.dmut, false)
		return err
	})
}
