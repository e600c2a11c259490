package dispatch

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/sim"
)

var flags = sim.NewSeedFlags(3000, "TestSim")

// The simulation drives one Core — the dispatcher of one subscription — through seeded
// interleavings of everything around it: a log that grows while it is read, a cursor whose
// reads, re-reads, acknowledgements, resets and persistence complete late and in adversarial
// order, consumers that arrive, flow permits, acknowledge, negatively acknowledge, close and
// reconnect, seeks, delayed messages, timers, and crashes of the broker (a new core over the
// cursor's persisted state). After every step it checks the broker invariants (see check and
// onSend); at the end, with the faults stopped, it checks that every message was delivered
// and acknowledged.

// simEntriesPerLedger makes the log span several ledgers.
const simEntriesPerLedger = 7

// simBase is the Unix ms of the simulation's time 0.
const simBase = 1_700_000_000_000

type simParams struct {
	typ        SubType
	ooo        bool // Key_Shared allowOutOfOrderDelivery
	entries    int
	window     time.Duration // publishing, churn, seeks and crashes happen in [0, window)
	keys       int
	batchMax   int     // messages per entry: 1..batchMax
	delayed    float64 // share of entries with a delivery time (Shared, Key_Shared)
	nack       float64 // share of receipts negatively acknowledged
	cumulative float64 // Exclusive/Failover: share of acks that are cumulative
	churn      int     // consumer departures and arrivals
	resubs     int     // a client subscribes its consumer again (it drops what it prefetched)
	seeks      int
	crashes    int
	maxDelay   time.Duration // I/O and network delays: 0..maxDelay
	readFail   float64
	resetFail  float64
	queue      int // a consumer's receiver queue (permits)
	// The dispatch rates (0: off): the subscription's (msgs, bytes per second), the topic's
	// (Config.Shared), and how many times the subscription's is changed.
	rateMsgs, rateBytes     int64
	sharedMsgs, sharedBytes int64
	rateChanges             int
}

func (p simParams) String() string {
	return fmt.Sprintf("type=%v ooo=%v entries=%d window=%v keys=%d batch<=%d delayed=%.2f nack=%.2f cumulative=%.2f churn=%d resubs=%d seeks=%d crashes=%d delay<=%v fail(read=%.2f reset=%.2f) queue=%d rate=%d/%dB shared=%d/%dB changes=%d",
		p.typ, p.ooo, p.entries, p.window, p.keys, p.batchMax, p.delayed, p.nack, p.cumulative, p.churn, p.resubs,
		p.seeks, p.crashes, p.maxDelay, p.readFail, p.resetFail, p.queue, p.rateMsgs, p.rateBytes, p.sharedMsgs, p.sharedBytes, p.rateChanges)
}

func randomSimParams(r interface {
	IntN(int) int
	Float64() float64
}) simParams {
	rate := func(max float64) float64 {
		if r.IntN(3) == 0 {
			return 0
		}
		return r.Float64() * max
	}
	p := simParams{
		typ:        []SubType{Exclusive, Failover, Shared, KeyShared, KeyShared}[r.IntN(5)],
		entries:    5 + r.IntN(60),
		window:     time.Duration(20+r.IntN(200)) * time.Millisecond,
		keys:       1 + r.IntN(6),
		batchMax:   1 + r.IntN(3),
		delayed:    rate(0.3),
		nack:       rate(0.3),
		cumulative: rate(0.5),
		churn:      r.IntN(6),
		seeks:      r.IntN(3),
		crashes:    r.IntN(3),
		maxDelay:   time.Duration(1+r.IntN(6)) * time.Millisecond,
		readFail:   rate(0.1),
		resetFail:  rate(0.3),
		queue:      1 + r.IntN(12),
	}
	p.ooo = p.typ == KeyShared && r.IntN(4) == 0
	p.resubs = r.IntN(4)
	if r.IntN(2) == 0 {
		p.rateMsgs, p.rateBytes = randomRate(r)
		p.rateChanges = r.IntN(3)
	}
	if r.IntN(3) == 0 {
		p.sharedMsgs, p.sharedBytes = randomRate(r)
	}
	return p
}

// randomRate draws a dispatch rate that throttles the simulation's reads (entries carry
// 1..simMaxBytes bytes) yet drains its log within seconds.
func randomRate(r interface{ IntN(int) int }) (msgs, bytes int64) {
	switch r.IntN(3) {
	case 0:
		return int64(50 + r.IntN(950)), 0
	case 1:
		return 0, int64(2000 + r.IntN(48000))
	}
	return int64(50 + r.IntN(950)), int64(2000 + r.IntN(48000))
}

// simMaxBytes bounds an entry's size.
const simMaxBytes = 200

// simEntry is one entry of the log.
type simEntry struct {
	key       int
	info      Info
	size      int
	published bool
}

func simPos(i int) Position {
	return Position{LedgerID: int64(1 + i/simEntriesPerLedger), EntryID: int64(i % simEntriesPerLedger)}
}

func simIndex(p Position) int {
	return int(p.LedgerID-1)*simEntriesPerLedger + int(p.EntryID)
}

// simCursor models the managed ledger's cursor: reads skip acknowledged entries and advance
// the read position; mutations (acks, resets) apply in order, after a delay; a persisted copy
// of the acknowledgements lags behind and is what a crash leaves.
type simCursor struct {
	readPos   int
	acked     []bool
	persisted []bool
	// lastApply orders the mutations: each applies after the previous one.
	lastApply time.Duration
	parked    *simRead // a tailing read waiting for entries
	issued    *simRead // the last read issued
}

type simRead struct {
	cancelled bool
	inc       *simIncarnation
	epoch     uint64
	n         int
	gen       int // the world's seek generation when the read was issued
}

// simIncarnation is one broker lifetime of the subscription: a core and the consumers
// connected to it. A crash ends it: its events are dropped.
type simIncarnation struct {
	id    int
	d     *Core
	alive bool
	cons  map[CID]*simConsumer
	// holder is, per entry index, the consumer it is pending with (delivered, neither
	// acknowledged nor returned) as the checker derives it from the inputs.
	holder map[int]CID
	// granted and sent count each consumer's permits and messages received (B4).
	granted, sent map[CID]int
	timerAt       int64
	// own and shared are the checker's budgets of the subscription's and the topic's
	// dispatch rates.
	own, shared simBudget
}

// simBudget is what a dispatch rate allows since it was set at t0 (Unix ms): its burst plus
// rate × elapsed, in messages and in bytes; used is what the reads brought since. A token
// bucket only keeps less (it caps its tokens at the burst), so a read issued when the used
// budget is already exhausted was issued beyond the rate.
type simBudget struct {
	msgs, bytes float64 // per second; 0: off
	t0          int64
	usedMsgs    float64
	usedBytes   float64
}

func newSimBudget(msgs, bytes, now int64) simBudget {
	return simBudget{msgs: float64(msgs), bytes: float64(bytes), t0: now}
}

// exceeded describes how a read of n entries issued at now goes beyond the budget ("" if
// it does not): issued with none left, or asking for more entries than messages are left
// (a bucket's tokens are at most what is left, and a read asks for at most their number).
func (b *simBudget) exceeded(n int, now int64) string {
	el := float64(now-b.t0) / 1000
	if b.msgs > 0 {
		left := max(b.msgs/10, 1) + b.msgs*el - b.usedMsgs
		if limit := max(int(left+0.999+1e-6), 1); n > limit {
			return fmt.Sprintf("a read of %d entries with %.2f messages left at %.0f/s", n, left, b.msgs)
		}
	}
	if b.msgs > 0 {
		if allow := max(b.msgs/10, 1) + b.msgs*el; b.usedMsgs > allow+1e-6 {
			return fmt.Sprintf("%.0f messages read of %.1f allowed at %.0f/s in %.3fs", b.usedMsgs, allow, b.msgs, el)
		}
	}
	if b.bytes > 0 {
		if allow := max(b.bytes/10, 1) + b.bytes*el; b.usedBytes > allow+1e-6 {
			return fmt.Sprintf("%.0f bytes read of %.1f allowed at %.0f/s in %.3fs", b.usedBytes, allow, b.bytes, el)
		}
	}
	return ""
}

// simConsumer is a client's consumer.
type simConsumer struct {
	id      CID
	name    string
	closed  bool
	pending int // messages received since the last FLOW
	epoch   int // subscriptions again: deliveries sent before the last one are dropped
}

// simStats are the coverage counters of a run (summed over seeds by sim.AddCounts).
type simStats struct {
	Sends, Redeliveries, Seeks, Resets, Crashes, Departures, Arrivals, StaleDropped, Resubscribes int
	Replays, DelayedSent, Nacks, Cumulative, ActiveSwitches, Batches, ReadRetries                 int
	RateWaits, RateChanges                                                                        int
}

type simWorld struct {
	s       *sim.Sim
	p       simParams
	mut     Mutation
	log     []simEntry
	cur     simCursor
	inc     *simIncarnation
	shared  Rate // the topic's dispatch rate (Config.Shared), set anew at each start
	incs    int
	names   int
	seekGen int
	// ackedSeen: entries the subscription has acknowledged (fed to a core, or persisted
	// across a crash, or below a completed reset's position): never delivered again (B1).
	ackedSeen []bool
	// ackQueued counts, per entry, the cursor acks queued and not applied yet.
	ackQueued []int
	// redeliver: entries at or after a completed reset's position, which must be delivered
	// again (or acknowledged by an ack that arrived after the reset).
	redeliver []bool
	// inputGen is the seek generation of the read whose result is being fed (-1: none).
	inputGen int
	quiesce  bool // the window is over: no more faults, consumers ack everything
	err      error
	stats    simStats
}

func newSimWorld(seed int64, mut Mutation, verbose bool) *simWorld {
	s := sim.New(seed)
	s.Verbose = verbose
	w := &simWorld{s: s, mut: mut, inputGen: -1}
	w.p = randomSimParams(s.Rand())
	r := s.Rand()
	for i := 0; i < w.p.entries; i++ {
		e := simEntry{key: r.IntN(w.p.keys), info: Info{Msgs: 1 + r.IntN(w.p.batchMax)}, size: 1 + r.IntN(simMaxBytes)}
		e.info.Hash = uint32(e.key*9973) % KeyHashRange
		if (w.p.typ == Shared || w.p.typ == KeyShared) && s.Chance(w.p.delayed) {
			e.info.DeliverAt = simBase + int64(r.IntN(int(w.p.window/time.Millisecond)+20))
		}
		// Every ninth entry is a marker (a replicated subscription's snapshot marker, say):
		// never delivered, acknowledged by the core itself (B7).
		e.info.Marker = i%9 == 4 && e.info.DeliverAt == 0
		w.log = append(w.log, e)
	}
	w.cur.acked = make([]bool, w.p.entries)
	w.cur.persisted = make([]bool, w.p.entries)
	w.ackedSeen = make([]bool, w.p.entries)
	w.redeliver = make([]bool, w.p.entries)
	w.ackQueued = make([]int, w.p.entries)
	return w
}

func (w *simWorld) failf(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("at %v: %s", w.s.Now(), fmt.Sprintf(format, args...))
	}
}

func (w *simWorld) nowMs() int64 { return simBase + int64(w.s.Now()/time.Millisecond) }

func (w *simWorld) delay() time.Duration { return w.s.Between(0, w.p.maxDelay) }

// on schedules fn for incarnation inc; it is dropped if inc crashed meanwhile.
func (w *simWorld) on(inc *simIncarnation, d time.Duration, name string, fn func()) {
	w.s.After(d, name, func() {
		if inc.alive && w.err == nil {
			fn()
		}
	})
}

// Incarnations.

func (w *simWorld) start() {
	w.incs++
	inc := &simIncarnation{id: w.incs, alive: true, cons: map[CID]*simConsumer{}, holder: map[int]CID{},
		granted: map[CID]int{}, sent: map[CID]int{}}
	now := w.nowMs()
	var shared Limiter
	if w.p.sharedMsgs > 0 || w.p.sharedBytes > 0 {
		w.shared.Set(w.p.sharedMsgs, w.p.sharedBytes, now*1e6)
		shared = &w.shared
	}
	inc.d = New(Config{Partition: -1, Mutation: w.mut, Shared: shared})
	inc.d.SetTime(now)
	inc.d.SetRate(w.p.rateMsgs, w.p.rateBytes)
	inc.own = newSimBudget(w.p.rateMsgs, w.p.rateBytes, now)
	inc.shared = newSimBudget(w.p.sharedMsgs, w.p.sharedBytes, now)
	w.inc = inc
	// A recovered cursor reads from its first unacknowledged entry.
	w.cur.readPos = 0
	for w.cur.readPos < len(w.log) && w.cur.acked[w.cur.readPos] {
		w.cur.readPos++
	}
	w.cur.parked = nil
	n := 1
	if w.p.typ != Exclusive {
		n += w.s.Rand().IntN(3)
	}
	for i := 0; i < n; i++ {
		w.on(inc, w.delay(), "consumer arrives", func() { w.arrive(inc) })
	}
}

func (w *simWorld) crash() {
	inc := w.inc
	if !inc.alive {
		return
	}
	w.stats.Crashes++
	w.s.Tracef("CRASH incarnation %d", inc.id)
	inc.alive = false
	// What survives is the persisted cursor state; unpersisted acks are lost (at least
	// once) and may be redelivered.
	copy(w.cur.acked, w.cur.persisted)
	copy(w.ackedSeen, w.cur.persisted)
	clear(w.ackQueued)
	for j, acked := range w.cur.persisted {
		if acked {
			w.redeliver[j] = false // a reset not persisted before the crash is lost with it
		}
	}
	w.cur.lastApply = w.s.Now()
	w.s.After(w.delay(), "restart", w.start)
}

// input runs one input on the current core and performs its effects.
func (w *simWorld) input(inc *simIncarnation, name string, fn func(d *Core)) {
	if !inc.alive || w.err != nil {
		return
	}
	prevActive, hadActive := inc.d.Active()
	w.s.Tracef(" %s", name)
	inc.d.SetTime(w.nowMs())
	fn(inc.d)
	if a, ok := inc.d.Active(); (w.p.typ == Exclusive || w.p.typ == Failover) && hadActive && (!ok || a != prevActive) {
		// The core returned the previous active consumer's entries.
		w.stats.ActiveSwitches++
		w.releaseHeld(inc, prevActive)
	}
	w.perform(inc, inc.d.Ready())
	w.check(inc)
}

func (w *simWorld) releaseHeld(inc *simIncarnation, c CID) {
	for i, h := range inc.holder {
		if h == c {
			delete(inc.holder, i)
		}
	}
}

// Consumers.

func (w *simWorld) arrive(inc *simIncarnation) {
	w.names++
	name := fmt.Sprintf("c%d", w.names)
	w.input(inc, "add "+name, func(d *Core) {
		id, err := d.AddConsumer(ConsumerSpec{Type: w.p.typ, Name: name, AllowOutOfOrder: w.p.ooo})
		if err != nil {
			if w.p.typ == Exclusive && errors.Is(err, ErrConsumerBusy) {
				return
			}
			w.failf("add consumer %s: %v", name, err)
			return
		}
		w.stats.Arrivals++
		c := &simConsumer{id: id, name: name}
		inc.cons[id] = c
		w.s.Tracef("consumer %s is %d", name, id)
		w.on(inc, w.delay(), "flow", func() { w.flow(inc, c, w.p.queue) })
	})
}

func (w *simWorld) flow(inc *simIncarnation, c *simConsumer, n int) {
	if c.closed {
		return
	}
	w.input(inc, fmt.Sprintf("flow %d +%d", c.id, n), func(d *Core) {
		inc.granted[c.id] += n
		d.Flow(c.id, n)
	})
}

func (w *simWorld) depart(inc *simIncarnation) {
	c := w.pickOpen(inc)
	if c == nil {
		return
	}
	c.closed = true
	w.stats.Departures++
	w.input(inc, fmt.Sprintf("consumer %d closes", c.id), func(d *Core) {
		d.RemoveConsumer(c.id, true)
		w.releaseHeld(inc, c.id)
	})
	w.on(inc, w.delay()+time.Millisecond, "consumer arrives", func() { w.arrive(inc) })
}

// pickOpen draws one of inc's open consumers (nil if none).
func (w *simWorld) pickOpen(inc *simIncarnation) *simConsumer {
	var open []*simConsumer
	for _, c := range inc.cons {
		if !c.closed {
			open = append(open, c)
		}
	}
	if len(open) == 0 {
		return nil
	}
	slices.SortFunc(open, func(a, b *simConsumer) int { return int(a.id) - int(b.id) })
	return open[w.s.Rand().IntN(len(open))]
}

// resubscribe is a client subscribing its consumer again on the same connection (as
// pulsar-client-go does when it reconnects the consumer while the broker kept it): it drops
// what it prefetched — deliveries on their way are lost — and grants its permits anew.
func (w *simWorld) resubscribe(inc *simIncarnation) {
	c := w.pickOpen(inc)
	if c == nil {
		return
	}
	c.epoch++
	c.pending = 0
	w.stats.Resubscribes++
	w.input(inc, fmt.Sprintf("consumer %d subscribes again", c.id), func(d *Core) {
		w.releaseHeld(inc, c.id)
		inc.granted[c.id], inc.sent[c.id] = 0, 0
		d.Reattach(c.id)
	})
	w.on(inc, w.delay(), "flow", func() { w.flow(inc, c, w.p.queue) })
}

// receive is a consumer's client getting a message: it acknowledges it (or not), and flows
// permits again once it has processed half its queue.
func (w *simWorld) receive(inc *simIncarnation, c *simConsumer, i int, msgs int) {
	if c.closed {
		return
	}
	c.pending += msgs
	if c.pending >= max(w.p.queue/2, 1) {
		n := c.pending
		c.pending = 0
		w.on(inc, w.delay(), "flow", func() { w.flow(inc, c, n) })
	}
	pos := simPos(i)
	switch {
	case !w.quiesce && w.s.Chance(w.p.nack):
		w.stats.Nacks++
		w.on(inc, w.delay(), fmt.Sprintf("nack %d by %d", i, c.id), func() {
			w.input(inc, "redeliver", func(d *Core) {
				if inc.holder[i] == c.id {
					delete(inc.holder, i)
				}
				d.Redeliver(c.id, []Position{pos})
			})
		})
	case (w.p.typ == Exclusive || w.p.typ == Failover) && w.s.Chance(w.p.cumulative):
		w.stats.Cumulative++
		w.on(inc, w.delay(), fmt.Sprintf("ack cumulative %d by %d", i, c.id), func() {
			w.input(inc, "ack", func(d *Core) {
				for j := 0; j <= i; j++ {
					w.ackedSeen[j] = true
					w.redeliver[j] = false
					delete(inc.holder, j)
				}
				d.Ack(c.id, true, []AckID{{Pos: pos}}, nil)
			})
		})
	default:
		w.on(inc, w.delay(), fmt.Sprintf("ack %d by %d", i, c.id), func() {
			w.input(inc, "ack", func(d *Core) {
				w.ackedSeen[i] = true
				w.redeliver[i] = false
				delete(inc.holder, i)
				d.Ack(c.id, false, []AckID{{Pos: pos}}, nil)
			})
		})
	}
}

// Effects.

func (w *simWorld) perform(inc *simIncarnation, r Ready) {
	for _, snd := range r.Sends {
		w.onSend(inc, snd)
	}
	for _, a := range r.Acks {
		w.cursorAck(a)
	}
	for _, rep := range r.Replies {
		rep.Done(rep.Err)
	}
	if rd := w.cur.issued; r.CancelRead && rd != nil && rd.inc == inc {
		rd.cancelled = true
		if w.cur.parked == rd {
			w.cur.parked = nil
			w.cancelled(rd)
		}
	}
	if r.Read != nil {
		w.read(inc, *r.Read)
	}
	if r.Replay != nil {
		w.replay(inc, *r.Replay)
	}
	if r.Reset != nil {
		w.reset(inc, *r.Reset)
	}
	if inc.d.rateAt != 0 && r.Read == nil {
		w.stats.RateWaits++
	}
	if r.TimerAt != 0 && (inc.timerAt == 0 || r.TimerAt < inc.timerAt) {
		inc.timerAt = r.TimerAt
		at := time.Duration(r.TimerAt-simBase) * time.Millisecond
		w.on(inc, at-w.s.Now(), "timer", func() {
			inc.timerAt = 0
			w.input(inc, "tick", func(d *Core) { d.Tick(w.nowMs()) })
		})
	}
}

// onSend checks a delivery the core decided (B1, B3, B4, B6) and hands it to the consumer.
func (w *simWorld) onSend(inc *simIncarnation, snd Send) {
	i := simIndex(snd.Entry.Pos)
	e := w.log[i]
	w.s.Tracef("  send %d to %d (redelivery %d)", i, snd.To, snd.RedeliveryCount)
	w.stats.Sends++
	if snd.RedeliveryCount > 0 {
		w.stats.Redeliveries++
	}
	if e.info.DeliverAt != 0 {
		w.stats.DelayedSent++
	}
	if e.info.Msgs > 1 {
		w.stats.Batches++
	}
	c := inc.cons[snd.To]
	switch {
	case e.info.Marker:
		w.failf("B7: marker entry %d delivered to consumer %d", i, snd.To)
		return
	case c == nil:
		w.failf("entry %d sent to unknown consumer %d", i, snd.To)
		return
	case c.closed:
		w.failf("entry %d sent to consumer %d after it closed", i, snd.To)
		return
	case w.ackedSeen[i]:
		w.failf("B1: entry %d delivered to %d after it was acknowledged", i, snd.To)
		return
	case w.inputGen >= 0 && w.inputGen < w.seekGen:
		w.failf("B6: entry %d delivered from a read issued before seek %d", i, w.seekGen)
		return
	case inc.sent[c.id] >= inc.granted[c.id]:
		w.failf("B4: consumer %d got entry %d with %d messages sent of %d permits", c.id, i, inc.sent[c.id], inc.granted[c.id])
		return
	}
	inc.sent[c.id] += e.info.Msgs
	if h, ok := inc.holder[i]; ok && h != c.id && (w.p.typ == Exclusive || w.p.typ == Failover || (w.p.typ == KeyShared && !w.p.ooo)) {
		w.failf("entry %d sent to %d while pending with %d", i, c.id, h)
		return
	}
	// B3: every older unacknowledged entry of the key (of the subscription, for Exclusive
	// and Failover) is pending with this consumer.
	if w.p.typ == Exclusive || w.p.typ == Failover || (w.p.typ == KeyShared && !w.p.ooo) {
		for j := 0; j < i; j++ {
			o := w.log[j]
			if w.ackedSeen[j] || w.ackQueued[j] > 0 || o.info.DeliverAt != 0 || !o.published || o.info.Marker {
				continue
			}
			if w.p.typ == KeyShared && o.key != e.key {
				continue
			}
			if h, ok := inc.holder[j]; !ok || h != c.id {
				w.failf("B3: entry %d (key %d) sent to %d before older entry %d (held by %v)", i, e.key, c.id, j, inc.holder[j])
				return
			}
		}
	}
	inc.holder[i] = c.id
	w.redeliver[i] = false
	ep := c.epoch
	w.on(inc, w.delay(), fmt.Sprintf("deliver %d to %d", i, c.id), func() {
		if c.epoch != ep {
			return // the client subscribed again meanwhile: it drops the message
		}
		w.receive(inc, c, i, e.info.Msgs)
	})
}

// The cursor.

func (w *simWorld) entry(i int) Entry {
	return Entry{Pos: simPos(i), Info: w.log[i].info, Data: make([]byte, w.log[i].size)}
}

func (w *simWorld) read(inc *simIncarnation, r Read) {
	w.s.Tracef("  read %d (epoch %d)", r.N, r.Epoch)
	// DR1: a read of new entries is issued only while the dispatch rates have budget left.
	if why := inc.own.exceeded(r.N, w.nowMs()); why != "" {
		w.failf("DR1: read issued beyond the subscription's dispatch rate: %s", why)
	}
	if why := inc.shared.exceeded(r.N, w.nowMs()); why != "" {
		w.failf("DR1: read issued beyond the topic's dispatch rate: %s", why)
	}
	rd := &simRead{inc: inc, epoch: r.Epoch, n: r.N, gen: w.seekGen}
	w.cur.issued = rd
	if w.s.Chance(w.p.readFail) {
		w.stats.ReadRetries++
		w.on(inc, w.delay(), "read fails", func() {
			w.feedRead(inc, rd, nil, ReadRetry)
		})
		return
	}
	// The read runs on the cursor's owner, in no order with the acks and resets queued
	// before it (broker/mlog.go queues those on a worker).
	w.on(inc, w.delay(), "cursor read", func() { w.tryRead(rd) })
}

func (w *simWorld) cancelled(rd *simRead) {
	w.on(rd.inc, w.delay(), "read cancelled", func() { w.feedRead(rd.inc, rd, nil, ReadIdle) })
}

// tryRead completes rd if the log has unread entries, else parks it until a publish.
func (w *simWorld) tryRead(rd *simRead) {
	if rd.cancelled {
		w.cancelled(rd)
		return
	}
	var es []Entry
	for w.cur.readPos < len(w.log) && w.log[w.cur.readPos].published && len(es) < rd.n {
		if !w.cur.acked[w.cur.readPos] {
			es = append(es, w.entry(w.cur.readPos))
		}
		w.cur.readPos++
	}
	if len(es) == 0 {
		w.cur.parked = rd
		return
	}
	w.on(rd.inc, w.delay(), fmt.Sprintf("read of %d done", len(es)), func() { w.feedRead(rd.inc, rd, es, ReadOK) })
}

func (w *simWorld) feedRead(inc *simIncarnation, rd *simRead, es []Entry, st ReadStatus) {
	w.input(inc, "read done", func(d *Core) {
		if rd.epoch != d.Epoch() {
			w.stats.StaleDropped++
		}
		w.inputGen = rd.gen
		for _, e := range es {
			for _, b := range []*simBudget{&inc.own, &inc.shared} {
				b.usedMsgs += float64(e.Info.Msgs)
				b.usedBytes += float64(len(e.Data))
			}
		}
		d.ReadDone(rd.epoch, es, st, w.nowMs())
	})
	w.inputGen = -1
}

func (w *simWorld) replay(inc *simIncarnation, r Replay) {
	w.stats.Replays++
	w.s.Tracef("  replay %v (epoch %d)", r.Positions, r.Epoch)
	gen := w.seekGen
	lookup := func() []Entry {
		var es []Entry
		for _, p := range r.Positions {
			if i := simIndex(p); !w.cur.acked[i] {
				es = append(es, w.entry(i))
			}
		}
		return es
	}
	fail := w.s.Chance(w.p.readFail)
	var es []Entry
	at := w.delay()
	w.on(inc, at, "cursor re-read", func() { es = lookup() })
	w.on(inc, at+w.delay(), "replay done", func() {
		st := ReadOK
		if fail {
			st, es = ReadRetry, nil
		}
		w.input(inc, "replay done", func(d *Core) {
			w.inputGen = gen
			d.ReplayDone(r.Epoch, r.Positions, es, st, w.nowMs())
		})
		w.inputGen = -1
	})
}

// mutate applies fn to the cursor after the mutations before it.
func (w *simWorld) mutate(name string, fn func()) {
	at := max(w.s.Now()+w.delay(), w.cur.lastApply)
	w.cur.lastApply = at
	inc := w.inc
	w.s.After(at-w.s.Now(), name, func() {
		if inc.alive { // a crash drops the mutations in flight
			fn()
		}
	})
}

func (w *simWorld) cursorAck(a CursorAck) {
	switch a.Kind {
	case AckIndividual:
		ps := slices.Clone(a.Positions)
		for _, p := range ps {
			w.ackQueued[simIndex(p)]++
		}
		w.mutate("cursor ack", func() {
			for _, p := range ps {
				w.ackQueued[simIndex(p)]--
				w.cur.acked[simIndex(p)] = true
				w.ackedSeen[simIndex(p)] = true // also when it lands after a reset
				w.redeliver[simIndex(p)] = false
			}
			if a.Done != nil {
				a.Done(nil)
			}
		})
	case AckCumulative:
		upTo := min(simIndex(a.Pos), len(w.log)-1)
		for j := 0; j <= upTo; j++ {
			w.ackQueued[j]++
		}
		w.mutate("cursor ack cumulative", func() {
			for j := 0; j <= upTo; j++ {
				w.ackQueued[j]--
				w.cur.acked[j] = true
				w.ackedSeen[j] = true
				w.redeliver[j] = false
			}
			if a.Done != nil {
				a.Done(nil)
			}
		})
	default:
		w.failf("unexpected cursor ack kind %v", a.Kind)
	}
}

func (w *simWorld) reset(inc *simIncarnation, t SeekTarget) {
	fail := w.s.Chance(w.p.resetFail)
	w.mutate("cursor reset", func() {
		if fail {
			w.input(inc, "reset failed", func(d *Core) { d.ResetDone(errors.New("reset failed")) })
			return
		}
		to := 0
		switch {
		case t.Pos == mledger.Earliest:
		case t.Pos == mledger.Latest:
			to = len(w.log)
		default:
			to = simIndex(t.Pos)
		}
		for j := range w.log {
			w.cur.acked[j] = j < to
			w.ackedSeen[j] = j < to
			w.redeliver[j] = j >= to && w.log[j].published
		}
		w.cur.readPos = to
		w.cur.parked = nil
		w.stats.Resets++
		w.input(inc, fmt.Sprintf("reset to %d done", to), func(d *Core) {
			clear(inc.holder)
			for _, id := range d.ResetDone(nil) {
				if c := inc.cons[id]; c != nil {
					c.closed = true
					w.on(inc, w.delay()+time.Millisecond, "consumer reconnects", func() { w.arrive(inc) })
				}
			}
		})
	})
}

func (w *simWorld) persist() {
	copy(w.cur.persisted, w.cur.acked)
}

// The world's own events.

func (w *simWorld) publish(i int) {
	w.log[i].published = true
	if rd := w.cur.parked; rd != nil && rd.inc.alive {
		w.cur.parked = nil
		w.tryRead(rd)
	}
}

func (w *simWorld) seek() {
	inc := w.inc
	r := w.s.Rand()
	t := SeekTarget{Pos: mledger.Earliest}
	if n := w.publishedCount(); n > 0 && r.IntN(3) > 0 {
		t.Pos = simPos(r.IntN(n))
	}
	w.input(inc, fmt.Sprintf("seek to %v", t.Pos), func(d *Core) {
		if err := d.Seek(t); err == nil {
			w.seekGen++
			w.stats.Seeks++
		} else if !errors.Is(err, ErrResetInProgress) {
			w.failf("seek: %v", err)
		}
	})
}

// changeRate sets a new subscription dispatch rate (a policy update); the checker's budget
// starts again from it.
func (w *simWorld) changeRate() {
	inc := w.inc
	msgs, bytes := randomRate(w.s.Rand())
	w.stats.RateChanges++
	w.input(inc, fmt.Sprintf("rate %d/s %dB/s", msgs, bytes), func(d *Core) {
		d.SetRate(msgs, bytes)
		inc.own = newSimBudget(msgs, bytes, w.nowMs())
	})
}

// drainTime bounds how long the dispatch rates take to deliver the whole log three times.
func (w *simWorld) drainTime() time.Duration {
	msgs, bytes := 0, 0
	for _, e := range w.log {
		msgs += e.info.Msgs
		bytes += e.size
	}
	var secs float64
	if w.p.rateMsgs > 0 || w.p.sharedMsgs > 0 || w.p.rateChanges > 0 {
		secs += float64(msgs) / 50
	}
	if w.p.rateBytes > 0 || w.p.sharedBytes > 0 || w.p.rateChanges > 0 {
		secs += float64(bytes) / 2000
	}
	return time.Duration(3 * secs * float64(time.Second))
}

func (w *simWorld) publishedCount() int {
	n := 0
	for n < len(w.log) && w.log[n].published {
		n++
	}
	return n
}

// check runs after every input.
func (w *simWorld) check(inc *simIncarnation) {
	d := inc.d
	for p := range d.pending {
		if _, ok := d.replay[p]; ok {
			w.failf("entry %v both pending and in the replay set", p)
		}
	}
	for _, e := range d.delayed {
		if _, ok := d.pending[e.pos]; ok {
			w.failf("entry %v both pending and delayed", e.pos)
		}
	}
	if w.p.typ == KeyShared && !w.p.ooo {
		holders := map[uint32]*consumer{}
		for _, pe := range d.pending {
			if h, ok := holders[pe.info.Hash]; ok && h != pe.c {
				w.failf("hash %d pending with two consumers", pe.info.Hash)
			}
			holders[pe.info.Hash] = pe.c
		}
	}
}

func (w *simWorld) run() error {
	p := w.p
	s := w.s
	s.Tracef("params: %v", p)
	w.start()
	// The producer publishes the entries in order over the window.
	ats := make([]time.Duration, len(w.log))
	for i := range ats {
		ats[i] = time.Duration(s.Rand().Int64N(int64(p.window)))
	}
	slices.Sort(ats)
	for i, at := range ats {
		s.After(at, fmt.Sprintf("publish %d", i), func() { w.publish(i) })
	}
	for k := 0; k < p.churn; k++ {
		s.After(s.Between(0, p.window), "churn", func() { w.depart(w.inc) })
	}
	for k := 0; k < p.resubs; k++ {
		s.After(s.Between(0, p.window), "resubscribe", func() { w.resubscribe(w.inc) })
	}
	for k := 0; k < p.seeks; k++ {
		s.After(s.Between(0, p.window), "seek", w.seek)
	}
	for k := 0; k < p.crashes; k++ {
		s.After(s.Between(0, p.window), "crash", w.crash)
	}
	for k := 0; k < p.rateChanges; k++ {
		s.After(s.Between(0, p.window), "rate change", w.changeRate)
	}
	for t := time.Duration(0); t < p.window; t += s.Between(time.Millisecond, 10*time.Millisecond) {
		s.After(t, "persist", w.persist)
	}
	s.After(p.window, "quiesce", func() { w.quiesce = true })
	deadline := p.window + 10*time.Second + w.drainTime()
	for w.err == nil && s.Step() {
		if s.Now() > deadline {
			w.failf("no quiescence by %v (%d events pending)", deadline, s.Pending())
		}
	}
	if w.err != nil {
		return w.err
	}
	// B2: every message was delivered and acknowledged; after a reset, every message at or
	// after its position was delivered again.
	for i := range w.log {
		if w.redeliver[i] {
			return fmt.Errorf("seek: entry %d, at or after a completed reset's position, was not delivered again", i)
		}
		if !w.cur.acked[i] {
			return fmt.Errorf("B2: entry %d was never acknowledged (held by %v, in replay: %v)", i,
				w.inc.holder[i], w.inc.d.replay[simPos(i)].Msgs > 0)
		}
	}
	return nil
}

func runSimSeed(seed int64, mut Mutation, verbose bool) (*simWorld, error) {
	w := newSimWorld(seed, mut, verbose)
	return w, w.run()
}

// TestSim drives the dispatcher core through seeded interleavings (see simWorld) and checks
// B1, B3, B4 and B6 after every step and B2 at the end. Replay a seed with
// go test ./broker/topic/dispatch -run 'TestSim$' -seed S -v; a long run (about 1,000 seeds
// per second without the race detector):
// go test ./broker/topic/dispatch -run 'TestSim$' -seeds 1000000 -timeout 0.
func TestSim(t *testing.T) {
	var st simStats
	ran, failed := sim.RunSeeds(t, sim.Seeds{First: *flags.First, Count: int64(*flags.Count), Replay: *flags.Replay,
		Package: "./broker/topic/dispatch"}, func(seed int64, verbose bool) sim.Outcome {
		w, err := runSimSeed(seed, Mutation{}, verbose)
		sim.AddCounts(&st, w.stats)
		return sim.Outcome{Sim: w.s, Params: w.p, Err: err}
	})
	if failed {
		return
	}
	t.Logf("%+v", st)
	sim.RequireCoverage(t, ran, 500, map[string]int{"sends": st.Sends, "redeliveries": st.Redeliveries, "seeks": st.Seeks,
		"resets": st.Resets, "crashes": st.Crashes, "departures": st.Departures, "resubscribes": st.Resubscribes, "stale reads dropped": st.StaleDropped,
		"replays": st.Replays, "delayed sent": st.DelayedSent, "nacks": st.Nacks, "cumulative acks": st.Cumulative,
		"active switches": st.ActiveSwitches, "batches": st.Batches, "read retries": st.ReadRetries,
		"reads held by a dispatch rate": st.RateWaits, "dispatch rate changes": st.RateChanges})
}

// TestSimDeterministic replays seeds and requires identical traces.
func TestSimDeterministic(t *testing.T) {
	sim.CheckDeterministic(t, 30, func(seed int64) *sim.Sim {
		w, _ := runSimSeed(seed, Mutation{}, true)
		return w.s
	})
}

// TestSimCatchesMutations proves the checker can fail: each deliberately broken core is
// caught by some seed.
func TestSimCatchesMutations(t *testing.T) {
	if *flags.Replay >= 0 {
		t.Skip("replaying one seed")
	}
	sim.CatchMutations(t, 5000, []sim.Mutant[Mutation]{
		{Name: "redelivering an acked message", Mut: Mutation{RedeliverAcked: true}},
		{Name: "dropping a redelivery", Mut: Mutation{DropRedelivery: true}},
		{Name: "ignoring a Key_Shared key hold", Mut: Mutation{IgnoreKeyHold: true}},
		{Name: "accepting a stale read after a seek", Mut: Mutation{AcceptStaleRead: true}},
		{Name: "ignoring permits", Mut: Mutation{IgnorePermits: true}},
		{Name: "new entries before returned ones", Mut: Mutation{NewBeforeReplay: true}},
		{Name: "a consumer subscribed again keeps the entries its client dropped", Mut: Mutation{ReattachKeepsPending: true}},
		{Name: "a consumer subscribed again keeps its permits", Mut: Mutation{ReattachKeepsPermits: true}},
		{Name: "a read issued while the dispatch rates allow none", Mut: Mutation{RateIgnored: true}},
		{Name: "a read's entries not charged to the dispatch rates", Mut: Mutation{RateUncharged: true}},
		{Name: "a read held back by the dispatch rates with no timer", Mut: Mutation{RateNoWake: true}},
		{Name: "a read asking for more entries than the dispatch rates allow", Mut: Mutation{RateUncapped: true}},
		{Name: "markers delivered to consumers", Mut: Mutation{DeliverMarkers: true}},
	}, func(seed int64, mut Mutation) error {
		_, err := runSimSeed(seed, mut, false)
		return err
	})
}
