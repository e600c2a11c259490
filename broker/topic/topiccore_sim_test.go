package topic

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/sim"
)

// The topic core's simulation: a seed fixes every add completion and failure, every
// property write's completion, failure or ambiguous failure (applied, then reported failed),
// every producer arrival, departure and reconnect (all four access modes, reconnects with
// the TopicEpoch they were given), a terminate, crashes (a reload builds a new core from
// what the simulated log durably holds), a publish rate that holds SENDs and changes, and
// consumers' subscribes under a subscribe rate. Invariants are checked after every step; see
// (*simWorld).check and the checks at each output.
//
// Long run: go test ./broker/topic -run 'TestSim$' -seeds 1000000 -timeout 0
// Replay a seed with a full trace: go test ./broker/topic -run 'TestSim$' -seed S -v

var flags = sim.NewSeedFlags(2000, "TestSim")

var simModes = []pb.ProducerAccessMode{pb.ProducerAccessMode_Shared, pb.ProducerAccessMode_Exclusive,
	pb.ProducerAccessMode_WaitForExclusive, pb.ProducerAccessMode_ExclusiveWithFencing}

// simParams are one seed's scenario and fault rates.
type simParams struct {
	clients     int
	sends       int // per client
	window      time.Duration
	maxDelay    time.Duration
	dedup       bool
	snapEvery   int
	addFail     float64
	propFail    float64 // a write fails without being applied
	propAmbig   float64 // a write is applied, then reported failed
	termFail    float64
	terminate   bool
	terminateAt time.Duration
	crashes     int
	departures  int
	// The publish rate (0: off) and how many times it changes; the subscribe rate (0: off)
	// per period, and how many subscribes subKeys consumers make.
	pubMsgs, pubBytes int64
	pubChanges        int
	subRate           int
	subPeriod         time.Duration
	subKeys           int
	subscribes        int
	// Timed deduplication snapshots (0: none) and a dispatch rate relative to the publish
	// rate (its measurement ticks every second), both until the end of the run.
	dedupInterval time.Duration
	relative      bool
	// Another cluster's replicator (replicated_sim_test.go), with deduplication on: the
	// messages it publishes (0: none), of how many original producers, its window of
	// SENDs in flight, the share of large messages and until when they are refused.
	repl, replOrigins, replWindow int
	replBig                       float64
	replBigUntil                  time.Duration
}

func (p simParams) String() string {
	return fmt.Sprintf("clients=%d sends=%d window=%v delay<=%v dedup=%v snapEvery=%d fail(add=%.2f prop=%.2f ambiguous=%.2f terminate=%.2f) terminate=%v@%v crashes=%d departures=%d publish=%d/s,%dB/s changes=%d subscribe=%d/%v keys=%d subscribes=%d",
		p.clients, p.sends, p.window, p.maxDelay, p.dedup, p.snapEvery, p.addFail, p.propFail, p.propAmbig,
		p.termFail, p.terminate, p.terminateAt, p.crashes, p.departures, p.pubMsgs, p.pubBytes, p.pubChanges,
		p.subRate, p.subPeriod, p.subKeys, p.subscribes) + fmt.Sprintf(" dedupInterval=%v relative=%v", p.dedupInterval, p.relative) +
		fmt.Sprintf(" repl=%d origins=%d window=%d big=%.2f until %v", p.repl, p.replOrigins, p.replWindow, p.replBig, p.replBigUntil)
}

func randomSimParams(s *sim.Sim) simParams {
	r := s.Rand()
	rate := func(max float64) float64 {
		if r.IntN(3) == 0 {
			return 0
		}
		return r.Float64() * max
	}
	p := simParams{
		clients:    1 + r.IntN(5),
		sends:      1 + r.IntN(20),
		window:     time.Duration(20+r.IntN(150)) * time.Millisecond,
		maxDelay:   time.Duration(1+r.IntN(6)) * time.Millisecond,
		dedup:      r.IntN(4) != 0,
		snapEvery:  1 + r.IntN(6),
		addFail:    rate(0.05),
		propFail:   rate(0.2),
		propAmbig:  rate(0.2),
		termFail:   rate(0.3),
		terminate:  r.IntN(3) == 0,
		crashes:    r.IntN(3),
		departures: r.IntN(4),
	}
	p.terminateAt = time.Duration(r.Int64N(int64(p.window) + 1))
	if r.IntN(2) == 0 {
		p.pubMsgs, p.pubBytes = randomPublishRate(r)
		p.pubChanges = r.IntN(3)
	}
	if r.IntN(3) > 0 {
		p.subRate = r.IntN(4) // 0: off
		p.subPeriod = time.Duration(r.IntN(3000)) * time.Millisecond
		p.subKeys = 1 + r.IntN(4)
		p.subscribes = r.IntN(30)
	}
	if r.IntN(3) == 0 {
		p.dedupInterval = time.Duration(5+r.IntN(40)) * time.Millisecond
	}
	p.relative = r.IntN(4) == 0
	if p.dedup && r.IntN(2) == 0 {
		p.repl, p.replOrigins, p.replWindow = 1+r.IntN(30), 1+r.IntN(3), 1+r.IntN(8)
		if r.IntN(2) == 0 {
			p.replBig = 0.3
			p.replBigUntil = time.Duration(r.Int64N(int64(p.window) + 1))
		}
	}
	return p
}

// randomPublishRate draws a publish rate (0: off) that holds the simulation's SENDs (each
// about 20 bytes) yet lets them through within seconds.
func randomPublishRate(r interface{ IntN(int) int }) (msgs, bytes int64) {
	switch r.IntN(4) {
	case 0:
		return 0, 0
	case 1:
		return int64(5 + r.IntN(150)), 0
	case 2:
		return 0, int64(100 + r.IntN(3000))
	}
	return int64(5 + r.IntN(150)), int64(100 + r.IntN(3000))
}

// simBaseNs is the Unix ns of the simulation's time 0.
const simBaseNs = 1_700_000_000 * int64(time.Second)

// simRateBudget is what the publish rate allows since it was set at t0 (Unix ns): a
// second's burst plus rate × elapsed, in messages and bytes; used is what it admitted since.
// A token bucket keeps no more (it caps its tokens at the burst), so a SEND admitted when
// the budget is already used up was admitted beyond the rate.
type simRateBudget struct {
	msgs, bytes         float64 // per second; 0: off
	t0                  int64
	usedMsgs, usedBytes float64
}

// admit counts m, admitted at now, and describes how it goes beyond the budget ("" if not).
func (b *simRateBudget) admit(m Message, now int64) string {
	el := float64(now-b.t0) / 1e9
	why := ""
	if b.msgs > 0 {
		if allow := max(b.msgs*publishSpan, 1) + b.msgs*el; b.usedMsgs > allow+1e-6 {
			why = fmt.Sprintf("%.0f messages admitted of %.1f allowed at %.0f/s in %.3fs", b.usedMsgs, allow, b.msgs, el)
		}
	}
	if b.bytes > 0 {
		if allow := max(b.bytes*publishSpan, 1) + b.bytes*el; b.usedBytes > allow+1e-6 {
			why = fmt.Sprintf("%.0f bytes admitted of %.1f allowed at %.0f/s in %.3fs", b.usedBytes, allow, b.bytes, el)
		}
	}
	b.usedMsgs += float64(max(m.NumMessages, 1))
	b.usedBytes += float64(len(m.Data))
	return why
}

// simHeld identifies a SEND held by the publish rate.
type simHeld struct {
	p   *Producer
	seq uint64
}

// simSubWindow is the checker's model of a consumer's subscribe-rate window (Pulsar's
// SubscribeRateLimiter: a fixed window from the first subscribe after the last one ended).
type simSubWindow struct {
	start int64
	n     int
}

// simEntry identifies a stored message.
type simEntry struct {
	name string
	seq  uint64
}

// simLog is what the managed ledger durably holds: entries (ledger 1, entry i), properties
// and whether it is terminated. It is also the entryReader a reload replays.
type simLog struct {
	entries    []simEntry
	data       [][]byte
	props      map[string]string
	terminated bool
}

func (l *simLog) Read(_ context.Context, from Position, n int) ([]Entry, error) {
	var es []Entry
	for i := max(from.EntryID, 0); i < int64(len(l.entries)) && len(es) < n; i++ {
		es = append(es, Entry{Position: Position{LedgerID: 1, EntryID: i}, Data: l.data[i]})
	}
	if len(es) == 0 {
		return nil, mledger.ErrNoMoreEntries
	}
	return es, nil
}

func (l *simLog) stats() mledger.Stats {
	st := mledger.Stats{Properties: map[string]string{}, LastConfirmed: Position{LedgerID: 1, EntryID: int64(len(l.entries)) - 1}}
	for k, v := range l.props {
		st.Properties[k] = v
	}
	if l.terminated {
		pos := st.LastConfirmed
		st.Terminated = &pos
	}
	return st
}

func (l *simLog) epoch() uint64 {
	e, _ := strconv.ParseUint(l.props[propEpoch], 10, 64)
	return e
}

// simAdd is an add handed to the log by the current core.
type simAdd struct {
	op  *pubOp
	err error // decided failure (nil: store it)
}

// simProp is a property write in flight.
type simProp struct {
	w   propWrite
	gen int
}

// simClient models a pulsar-client-go producer: it sends its messages in sequence order,
// keeps them pending until their receipt, and on reconnect resends the pending ones with
// the TopicEpoch it was given.
type simClient struct {
	id       int
	name     string
	mode     pb.ProducerAccessMode
	epoch    *uint64
	next     uint64
	pending  []uint64
	prod     *Producer
	gaveUp   error // the client stopped (the error it reported)
	gone     bool  // closed by the application at the end
	retries  int
	queued   bool
	orphaned bool // its listener was dropped (a SendError TopicTerminated): it hears nothing more
}

// simProducer is the checker's view of one producer object.
type simProducer struct {
	c       *simClient
	lastSeq int64
	closed  bool
}

type simTopicStats struct {
	Receipts, Takeovers, Resumes, Fenced, Waits, DedupHits, Crashes, Terminated, TerminatedSends,
	EpochFails, RefusedStale int
	Held, Released, RateChanges, Subscribes, SubscribesRefused, SubWindows int
	DedupTicks, Retunes                                                    int
	ReplSends, ReplSessions, ReplRefused, ReplDups                         int
}

// simWorld is one seed's simulation.
type simWorld struct {
	s    *sim.Sim
	p    simParams
	mut  coreMutation
	err  error
	log  simLog
	core *topicCore // nil while reloading
	gen  int        // the core's incarnation; events of older ones are dropped

	adds      []simAdd // in flight on the log, in order
	ticking   bool
	props     []simProp
	terminate uint64 // terminate in flight (tag)

	clients  []*simClient
	prods    map[*Producer]*simProducer
	nextID   uint64
	maxGiven uint64
	stored   map[simEntry]int
	ended    bool
	stats    simTopicStats

	// pol are the policies in force; budget the publish rate's since it was set; held the
	// SENDs the core holds, in arrival order; subWins the subscribe-rate model.
	pol     Policies
	budget  simRateBudget
	held    []simHeld
	subWins map[consumerKey]*simSubWindow

	repl      *simRepl // nil: no replicator
	prodsRepl map[*Producer]bool
}

func newSimWorld(seed int64, mut coreMutation, verbose bool) *simWorld {
	s := sim.New(seed)
	s.Verbose = verbose
	w := &simWorld{s: s, mut: mut, prods: map[*Producer]*simProducer{}, stored: map[simEntry]int{},
		prodsRepl: map[*Producer]bool{}}
	w.log.props = map[string]string{}
	w.p = randomSimParams(s)
	w.pol = Policies{PublishRateMsgs: w.p.pubMsgs, PublishRateBytes: w.p.pubBytes,
		SubscribeRate: w.p.subRate, SubscribeRatePeriod: w.p.subPeriod, DedupSnapshotInterval: w.p.dedupInterval}
	if w.p.relative {
		w.pol.DispatchRateMsgs, w.pol.DispatchRelative = 100, true
	}
	if w.p.replBig > 0 {
		w.pol.MaxMessageSize = 100
	}
	return w
}

func (w *simWorld) nowNs() int64 { return simBaseNs + int64(w.s.Now()) }

func (w *simWorld) failf(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("at %v: %s", w.s.Now(), fmt.Sprintf(format, args...))
		w.s.Tracef("CHECK FAILED: %v", w.err)
	}
}

func (w *simWorld) delay() time.Duration { return w.s.Between(0, w.p.maxDelay) }

// at schedules fn for the current core's incarnation: dropped if the core crashed.
func (w *simWorld) at(d time.Duration, name string, fn func()) {
	gen := w.gen
	w.s.After(d, name, func() {
		if gen == w.gen && w.core != nil {
			fn()
		}
	})
}

// load builds a core from the log's durable state.
func (w *simWorld) load() {
	c := newTopicCore("sim", w.p.dedup, w.p.snapEvery, NewMetrics(nil))
	c.mut = w.mut
	if err := c.load(context.Background(), w.log.stats(), &w.log); err != nil {
		w.failf("load: %v", err)
		return
	}
	w.s.Tracef("core %d loaded: epoch %d, state %v, %d entries", w.gen, c.epoch, c.state, len(w.log.entries))
	if c.epoch < w.maxGiven {
		w.failf("a reload sees topic epoch %d, older than %d given to a producer", c.epoch, w.maxGiven)
	}
	if w.log.terminated && c.state != StateTerminated {
		w.failf("a terminated log reloads in state %v", c.state)
	}
	w.core = c
	w.setPolicies(w.pol)
	w.subWins = map[consumerKey]*simSubWindow{} // the windows are the loaded topic's
}

// setPolicies puts p in force on the core; the checker's budget starts again from it.
func (w *simWorld) setPolicies(p Policies) {
	w.pol = p
	now := w.nowNs()
	w.budget = simRateBudget{msgs: float64(p.PublishRateMsgs), bytes: float64(p.PublishRateBytes), t0: now}
	if w.core == nil {
		return
	}
	w.core.setPolicies(p, now)
	w.perform()
	w.core.setDedupPolicy(p, now)
	w.perform()
}

// changeRate is a policy update of the publish rate.
func (w *simWorld) changeRate() {
	p := w.pol
	p.PublishRateMsgs, p.PublishRateBytes = randomPublishRate(w.s.Rand())
	w.stats.RateChanges++
	w.s.Tracef("publish rate %d/s %dB/s", p.PublishRateMsgs, p.PublishRateBytes)
	w.setPolicies(p)
}

// admitted checks a SEND the core admits at now (P1: within the publish rate's budget).
func (w *simWorld) admitted(m Message) {
	if w.core.state != StateActive || (w.pol.PublishRateMsgs == 0 && w.pol.PublishRateBytes == 0) {
		return // released without the rate: the topic answers it
	}
	if why := w.budget.admit(m, w.nowNs()); why != "" {
		w.failf("P1: SEND admitted beyond the publish rate: %s", why)
	}
}

// release checks a SEND the core releases (P2: the oldest held one) and publishes it.
func (w *simWorld) release(h heldSend) {
	w.stats.Released++
	if len(w.held) == 0 || w.held[0] != (simHeld{h.p, h.m.SequenceID}) {
		w.failf("P2: released SEND %d of producer %d is not the oldest held (%v)", h.m.SequenceID, h.p.ID, w.held)
		return
	}
	w.held = w.held[1:]
	w.admitted(h.m)
	w.core.publish(h.p, h.m)
}

// subscribe is a consumer's subscribe, checked against the model of its rate window (S1:
// admitted exactly when its window has room).
func (w *simWorld) subscribe(k consumerKey) {
	if w.core == nil {
		return
	}
	now := w.nowNs()
	w.stats.Subscribes++
	err := w.core.subscribeRateAdmits(k, now)
	want := true
	if w.pol.SubscribeRate > 0 {
		win := w.subWins[k]
		if win == nil || now-win.start >= int64(max(w.pol.SubscribeRatePeriod, time.Second)) {
			if win != nil {
				w.stats.SubWindows++
			}
			win = &simSubWindow{start: now}
			w.subWins[k] = win
		}
		want = win.n < w.pol.SubscribeRate
		if want {
			win.n++
		}
	}
	if !want {
		w.stats.SubscribesRefused++
	}
	w.s.Tracef("consumer %v subscribes: %v", k, err)
	if (err == nil) != want {
		w.failf("S1: subscribe of %v admitted=%v, its window (rate %d per %v) admits=%v", k, err == nil,
			w.pol.SubscribeRate, w.pol.SubscribeRatePeriod, want)
	}
}

// perform does what the core asked for, as Topic.perform does, on the simulated log.
func (w *simWorld) perform() {
	c := w.core
	if c == nil || c.ready.empty() {
		return
	}
	for _, h := range c.takeReleased() {
		w.release(h)
	}
	rd := c.takeReady()
	if len(rd.adds) > 0 && c.state != StateActive {
		w.failf("adds issued in state %v", c.state)
	}
	for _, op := range rd.adds {
		w.adds = append(w.adds, simAdd{op: op})
		w.tick()
	}
	for _, pw := range rd.props {
		sp := simProp{w: pw, gen: w.gen}
		w.props = append(w.props, sp)
		w.at(w.delay(), "log.property "+pw.key+"="+pw.value, func() { w.propDone(sp) })
	}
	if rd.terminate != 0 {
		w.terminate = rd.terminate
		tag := rd.terminate
		w.at(w.delay(), "log.terminate", func() { w.terminated(tag) })
	}
	for i := range rd.out {
		w.deliver(rd.out[i])
	}
	if rd.retune != nil {
		w.stats.Retunes++
	}
	for _, ct := range rd.timers {
		if ct.kind == timerDedup {
			w.stats.DedupTicks++
		}
		w.at(time.Duration(ct.at-w.nowNs()), fmt.Sprintf("timer %d", ct.kind), func() {
			w.core.timerFired(ct.kind, ct.at, w.nowNs())
			w.perform()
		})
	}
	c.recycle(&rd)
}

// tick completes the log's adds in order, one per tick.
func (w *simWorld) tick() {
	if w.ticking || len(w.adds) == 0 {
		return
	}
	w.ticking = true
	w.at(w.delay(), "log.add", func() {
		w.ticking = false
		if len(w.adds) == 0 {
			return
		}
		if w.s.Chance(w.p.addFail) {
			// An add failure fails every add in flight (as a fenced, closed or failed log does).
			err := errors.New("sim: add failed")
			for i := range w.adds {
				w.adds[i].err = err
			}
		}
		a := w.adds[0]
		w.adds = w.adds[1:]
		w.complete(a)
		w.tick()
	})
}

// complete stores a (or fails it) and reports it to the core.
func (w *simWorld) complete(a simAdd) {
	var pos Position
	if a.err == nil && w.log.terminated {
		a.err = fmt.Errorf("sim: %w", mledger.ErrTerminated)
	}
	if a.err == nil {
		pos = w.store(a.op)
	}
	w.s.Tracef("log: add %s/%d of producer %d: %v %v", a.op.p.Name, a.op.m.SequenceID, a.op.p.ID, pos, a.err)
	w.core.added(a.op, pos, a.err, int64(w.s.Now()/time.Millisecond))
	w.perform()
}

// store makes op durable and returns its position.
func (w *simWorld) store(op *pubOp) Position {
	e := simEntry{op.p.Name, op.m.HighestSequenceID}
	if w.prodsRepl[op.p] {
		o := OriginOf(op.m.Data)
		e = simEntry{o.ProducerName, o.SequenceID}
		w.replStored(e)
	}
	w.stored[e]++
	if w.p.dedup && w.stored[e] > 1 {
		w.failf("with deduplication on, %s/%d is stored %d times", e.name, e.seq, w.stored[e])
	}
	w.log.entries = append(w.log.entries, e)
	w.log.data = append(w.log.data, op.m.Data)
	return Position{LedgerID: 1, EntryID: int64(len(w.log.entries)) - 1}
}

func (w *simWorld) propDone(sp simProp) {
	i := slices.Index(w.props, sp)
	w.props = slices.Delete(w.props, i, i+1)
	var err error
	switch r := w.s.Rand().Float64(); {
	case r < w.p.propFail:
		err = errors.New("sim: property write failed")
	case r < w.p.propFail+w.p.propAmbig:
		w.apply(sp.w)
		err = errors.New("sim: property write timed out (applied)")
	default:
		w.apply(sp.w)
	}
	if err != nil && sp.w.key == propEpoch {
		w.stats.EpochFails++
	}
	w.core.propertyWritten(sp.w.key, sp.w.value, sp.w.tag, err)
	w.perform()
}

func (w *simWorld) apply(pw propWrite) {
	w.s.Tracef("log: %s=%s durable", pw.key, pw.value)
	w.log.props[pw.key] = pw.value
}

func (w *simWorld) terminated(tag uint64) {
	w.terminate = 0
	if w.s.Chance(w.p.termFail) {
		w.core.terminated(tag, errors.New("sim: terminate failed"))
		w.perform()
		return
	}
	// Adds in flight fail with ErrTerminated, then the log reports its end.
	w.log.terminated = true
	w.s.Tracef("log: terminated at %d entries", len(w.log.entries))
	for len(w.adds) > 0 && w.core != nil {
		a := w.adds[0]
		w.adds = w.adds[1:]
		w.complete(a)
	}
	w.core.terminated(tag, nil)
	w.perform()
}

// crash loses the core: of the adds in flight a prefix is durable, each property write and
// the terminate in flight may have been applied; every client is disconnected.
func (w *simWorld) crash() {
	if w.core == nil || w.ended {
		return
	}
	w.stats.Crashes++
	w.s.Tracef("core %d crashes", w.gen)
	keep := w.s.Rand().IntN(len(w.adds) + 1)
	for _, a := range w.adds[:keep] {
		if a.err != nil || w.log.terminated {
			break // a failing add is not stored
		}
		w.store(a.op)
	}
	for _, sp := range w.props {
		if w.s.Chance(0.5) {
			w.apply(sp.w)
		}
	}
	if w.terminate != 0 && w.s.Chance(0.5) {
		w.log.terminated = true
	}
	w.adds, w.props, w.terminate, w.ticking = nil, nil, 0, false
	w.held = nil // lost with the core: the clients send them again
	w.core = nil
	w.replCrash()
	w.gen++
	for _, c := range w.clients {
		if c.prod != nil {
			w.prods[c.prod].closed = true
			c.prod = nil
			w.reconnectLater(c)
		}
	}
	w.s.After(w.delay(), "reload", w.load)
}

// Clients.

func (w *simWorld) connect(c *simClient) {
	if c.gaveUp != nil || c.gone || c.prod != nil {
		return
	}
	if w.core == nil {
		w.reconnectLater(c)
		return
	}
	w.nextID++
	p := &Producer{ID: w.nextID, Name: c.name, AccessMode: c.mode}
	if c.epoch != nil {
		e := *c.epoch
		p.TopicEpoch = &e
	}
	w.s.Tracef("client %d connects as producer %d (%v, epoch %v)", c.id, p.ID, c.mode, c.epoch != nil && *c.epoch > 0)
	c.prod, c.queued = p, false
	w.prods[p] = &simProducer{c: c, lastSeq: -1}
	w.core.addProducer(p)
	w.perform()
}

func (w *simWorld) reconnectLater(c *simClient) {
	w.s.After(w.s.Between(time.Millisecond, 5*time.Millisecond), fmt.Sprintf("client %d reconnect", c.id), func() { w.connect(c) })
}

func (w *simWorld) message(c *simClient, seq uint64) Message {
	meta := &pb.MessageMetadata{ProducerName: proto.String(c.name), SequenceId: proto.Uint64(seq), PublishTime: proto.Uint64(1)}
	data, err := pulsar.AppendHeadersAndPayload(nil, meta, []byte("m"))
	if err != nil {
		w.failf("encode: %v", err)
	}
	return Message{SequenceID: seq, HighestSequenceID: seq, NumMessages: 1, Data: data}
}

// send publishes seq on the client's producer if it is ready.
func (w *simWorld) send(c *simClient, seq uint64) {
	p := c.prod
	if p == nil || w.core == nil || p.state != producerReady || c.orphaned {
		return
	}
	w.submit(p, w.message(c, seq))
}

// submit hands a SEND of p to the core: refused, held by the publish rate, or published.
func (w *simWorld) submit(p *Producer, m Message) {
	before := w.core.state
	if !w.core.send(p, m, w.nowNs()) {
		refused := false
		for _, o := range w.core.ready.out {
			refused = refused || (o.kind == outRefused && o.p == p && o.seq == m.SequenceID)
		}
		if !refused {
			w.stats.Held++
			w.held = append(w.held, simHeld{p, m.SequenceID})
		}
		w.perform()
		return
	}
	if len(w.held) > 0 {
		w.failf("P2: SEND %d of producer %d admitted ahead of %d held", m.SequenceID, p.ID, len(w.held))
	}
	w.admitted(m)
	if !w.core.publish(p, m) && before == StateActive && len(w.core.ready.out) == 0 && p.state == producerReady {
		w.stats.DedupHits++ // attached to its original in flight
	}
	w.perform()
}

func (w *simWorld) newMessage(c *simClient) {
	if c.gaveUp != nil || c.gone || w.ended {
		return
	}
	seq := c.next
	c.next++
	c.pending = append(c.pending, seq)
	w.send(c, seq)
}

// deliver hands an output of the core to the client that owns its producer, checking it.
func (w *simWorld) deliver(o output) {
	if w.prodsRepl[o.p] {
		w.replDeliver(o)
		return
	}
	sp := w.prods[o.p]
	if sp == nil {
		w.failf("output %v for an unknown producer", o.kind)
		return
	}
	c := sp.c
	current := c.prod == o.p && !c.orphaned
	if o.kind == outReceipt || o.kind == outSendError {
		w.s.Tracef("producer %d: %s %d at %v %v", o.p.ID, map[outKind]string{outReceipt: "receipt", outSendError: "send error"}[o.kind], o.seq, o.pos, o.code)
	}
	switch o.kind {
	case outReady:
		w.s.Tracef("producer %d ready: epoch %d last %d", o.p.ID, o.ready.TopicEpoch, o.ready.LastSequenceID)
		if st := w.core.state; st != StateActive {
			w.failf("producer %d told it is connected in state %v", o.p.ID, st)
		}
		if e := w.log.epoch(); e < o.ready.TopicEpoch {
			w.failf("B5: producer %d told it is connected under epoch %d, stored epoch is %d", o.p.ID, o.ready.TopicEpoch, e)
		}
		if o.ready.TopicEpoch < w.maxGiven {
			w.failf("B5: producer %d accepted under epoch %d after epoch %d was given", o.p.ID, o.ready.TopicEpoch, w.maxGiven)
		}
		if o.p.AccessMode != pb.ProducerAccessMode_Shared {
			switch {
			case o.p.TopicEpoch != nil:
				w.stats.Resumes++
			case o.ready.TopicEpoch > w.maxGiven:
				w.stats.Takeovers++
			}
		}
		if c.queued {
			w.stats.Waits++
		}
		w.maxGiven = max(w.maxGiven, o.ready.TopicEpoch)
		if !current {
			return
		}
		c.retries, c.queued = 0, false
		e := o.ready.TopicEpoch
		c.epoch = &e
		for _, seq := range c.pending {
			w.send(c, seq)
			if c.prod != o.p {
				return
			}
		}
		w.maybeLeave(c)
	case outQueued:
		c.queued = true
	case outFailed:
		sp.closed = true
		if !current {
			return
		}
		c.prod = nil
		w.s.Tracef("producer %d refused: %v", o.p.ID, o.err)
		switch {
		case errors.Is(o.err, ErrTerminated):
			c.gaveUp = o.err
			if !w.log.terminated && w.core.state != StateTerminating {
				w.failf("producer %d refused as terminated, but the topic is not", o.p.ID)
			}
		case errors.Is(o.err, ErrProducerFenced):
			w.stats.Fenced++
			if o.p.TopicEpoch != nil && *o.p.TopicEpoch < w.core.stored {
				w.stats.RefusedStale++
			}
			c.gaveUp = o.err
		default:
			c.retries++
			if c.retries > 30 {
				c.gaveUp = o.err
				return
			}
			w.reconnectLater(c)
		}
	case outClose:
		sp.closed = true
		if current {
			c.prod = nil
			w.reconnectLater(c)
		}
	case outSendError:
		if o.code == pb.ServerError_TopicTerminatedError {
			w.stats.TerminatedSends++
			if current {
				// pulsar-client-go drops the producer's listener: unless the topic closed
				// the producer first, it never hears of it again and its sends time out.
				c.orphaned = true
			}
			return
		}
		if current {
			// pulsar-client-go closes the connection and reconnects.
			w.core.removeProducer(o.p, false)
			sp.closed = true
			c.prod = nil
			w.reconnectLater(c)
		}
	case outReceipt:
		w.stats.Receipts++
		if int64(o.seq) <= sp.lastSeq {
			w.failf("producer %d: receipt for %d after %d", o.p.ID, o.seq, sp.lastSeq)
		}
		sp.lastSeq = int64(o.seq)
		e := simEntry{o.p.Name, o.hi}
		if o.pos.EntryID < 0 {
			w.stats.DedupHits++
			if w.stored[e] == 0 {
				w.failf("producer %d: duplicate receipt for %s/%d, which is not stored", o.p.ID, e.name, e.seq)
			}
		} else if o.pos.EntryID >= int64(len(w.log.entries)) || w.log.entries[o.pos.EntryID] != e {
			w.failf("producer %d: receipt for %s/%d at %v, which does not hold it", o.p.ID, e.name, e.seq, o.pos)
		}
		if !current {
			return
		}
		switch {
		case len(c.pending) > 0 && c.pending[0] == o.seq:
			c.pending = c.pending[1:]
			w.maybeLeave(c)
		case len(c.pending) > 0 && c.pending[0] < o.seq:
			// Out of order for the client: it closes the connection and resends.
			w.core.removeProducer(o.p, false)
			sp.closed = true
			c.prod = nil
			w.reconnectLater(c)
		}
	}
}

// maybeLeave closes the client's producer once the run is over and nothing is pending.
func (w *simWorld) maybeLeave(c *simClient) {
	if !w.ended || len(c.pending) > 0 || c.prod == nil || c.gone {
		return
	}
	c.gone = true
	p := c.prod
	c.prod = nil
	w.prods[p].closed = true
	w.s.After(0, fmt.Sprintf("client %d leaves", c.id), func() {
		if w.core != nil {
			w.core.removeProducer(p, false)
			w.perform()
		}
	})
}

// depart closes a client's producer; it comes back later.
func (w *simWorld) depart(c *simClient) {
	if c.prod == nil || w.core == nil || c.orphaned {
		return
	}
	p := c.prod
	c.prod = nil
	w.prods[p].closed = true
	w.s.Tracef("client %d departs", c.id)
	w.core.removeProducer(p, false)
	w.perform()
	w.s.After(w.s.Between(time.Millisecond, 20*time.Millisecond), fmt.Sprintf("client %d arrives", c.id), func() { w.connect(c) })
}

// check runs after every step.
func (w *simWorld) check() {
	if e := w.log.epoch(); e < w.maxGiven {
		w.failf("stored topic epoch %d is older than %d given to a producer", e, w.maxGiven)
	}
	if c := w.core; c != nil {
		if c.stored > c.epoch {
			w.failf("core: stored epoch %d above issued %d", c.stored, c.epoch)
		}
		if c.state == StateTerminated && len(c.producers) > 0 {
			for _, p := range sortedProducers(c.producers) {
				w.failf("core: terminated with producer %d (%v)", p.ID, p.state)
			}
		}
	}
}

func (w *simWorld) run() error {
	p := w.p
	for i := 0; i < p.clients; i++ {
		c := &simClient{id: i, name: fmt.Sprintf("p%d", i), mode: simModes[w.s.Rand().IntN(len(simModes))]}
		w.clients = append(w.clients, c)
		w.s.After(w.s.Between(0, p.window/4), fmt.Sprintf("client %d arrives", i), func() { w.connect(c) })
		for j := 0; j < p.sends; j++ {
			w.s.After(w.s.Between(0, p.window), fmt.Sprintf("client %d sends", i), func() { w.newMessage(c) })
		}
	}
	for i := 0; i < p.departures; i++ {
		c := w.clients[w.s.Rand().IntN(len(w.clients))]
		w.s.After(w.s.Between(0, p.window), fmt.Sprintf("client %d departure", c.id), func() { w.depart(c) })
	}
	if p.terminate {
		w.s.After(p.terminateAt, "terminate", func() {
			if w.core != nil {
				w.core.terminate()
				w.perform()
			}
		})
	}
	for i := 0; i < p.crashes; i++ {
		w.s.After(w.s.Between(0, p.window), "crash", w.crash)
	}
	for i := 0; i < p.pubChanges; i++ {
		w.s.After(w.s.Between(0, p.window), "publish rate change", w.changeRate)
	}
	for i := 0; i < p.subscribes; i++ {
		k := consumerKey{host: "10.0.0.1", name: "c", id: uint64(w.s.Rand().IntN(p.subKeys))}
		at := w.s.Between(0, 5*max(p.subPeriod, time.Second)/2)
		w.s.After(at, fmt.Sprintf("consumer %d subscribes", k.id), func() { w.subscribe(k) })
	}
	if p.repl > 0 {
		w.newRepl()
	}
	if p.replBig > 0 {
		w.s.After(p.replBigUntil, "max message size off", func() {
			pol := w.pol
			pol.MaxMessageSize = 0
			w.setPolicies(pol)
		})
	}
	w.load()
	for w.err == nil && w.s.Now() < p.window && w.s.Step() {
		w.check()
	}
	w.ended = true
	for _, c := range w.clients {
		w.maybeLeave(c)
	}
	w.replMaybeLeave()
	// The periodic timers stop with their policies, so that the run quiesces.
	w.s.After(0, "periodic policies off", func() {
		pol := w.pol
		pol.DedupSnapshotInterval, pol.DispatchRelative = 0, false
		w.setPolicies(pol)
	})
	for steps := 0; w.err == nil && w.s.Step(); steps++ {
		w.check()
		if steps > 200000 {
			w.failf("no quiescence after %d steps", steps)
		}
	}
	if w.err != nil {
		return w.err
	}
	if w.log.terminated {
		w.stats.Terminated++
	}
	w.replLiveness()
	// Liveness: every client that did not give up got every message receipted.
	for _, c := range w.clients {
		if c.gaveUp == nil && len(c.pending) > 0 {
			w.failf("client %d (%v): messages %v never completed (orphaned %v, producer %v): they would time out",
				c.id, c.mode, c.pending, c.orphaned, c.prod != nil)
		}
	}
	return w.err
}

func runTopicSeed(seed int64, mut coreMutation, verbose bool) (*simWorld, error) {
	w := newSimWorld(seed, mut, verbose)
	return w, w.run()
}

// TestSim drives the topic core through seeded interleavings and checks, after every step:
// B5 (a producer is told it is connected only once its topic epoch is stored, and never
// under an epoch older than one already given), that the stored epoch and a reload never
// go below an epoch given, that receipts come per producer in sequence order, at most once,
// only for stored entries, that with deduplication no message is stored twice across
// reloads, that nothing is accepted once terminated, and (at the end) that every client's
// messages completed.
func TestSim(t *testing.T) {
	n := int64(*flags.Count)
	if testing.Short() {
		n = min(n, 300)
	}
	var st simTopicStats
	ran, failed := sim.RunSeeds(t, sim.Seeds{First: *flags.First, Count: n, Replay: *flags.Replay, Package: "./broker/topic"},
		func(seed int64, verbose bool) sim.Outcome {
			w, err := runTopicSeed(seed, coreMutation{}, verbose)
			sim.AddCounts(&st, w.stats)
			return sim.Outcome{Sim: w.s, Params: w.p, Err: err}
		})
	if failed {
		return
	}
	t.Logf("%+v", st)
	if ran >= 200 && (st.Receipts == 0 || st.Takeovers == 0 || st.Resumes == 0 || st.Fenced == 0 ||
		st.Waits == 0 || st.DedupHits == 0 || st.Crashes == 0 || st.Terminated == 0 || st.TerminatedSends == 0 ||
		st.EpochFails == 0 || st.RefusedStale == 0 || st.Held == 0 || st.Released == 0 || st.RateChanges == 0 ||
		st.SubscribesRefused == 0 || st.SubWindows == 0 || st.DedupTicks == 0 || st.Retunes == 0 ||
		st.ReplSessions == 0 || st.ReplRefused == 0 || st.ReplDups == 0) {
		t.Errorf("the seeds did not exercise the topic core: %+v", st)
	}
}

// TestSimDeterministic replays seeds and requires identical traces.
func TestSimDeterministic(t *testing.T) {
	sim.CheckDeterministic(t, 20, func(seed int64) *sim.Sim {
		w, _ := runTopicSeed(seed, coreMutation{}, true)
		return w.s
	})
}

// TestSimCatchesMutations proves the checker can fail: each deliberately broken core is
// caught by some seed.
func TestSimCatchesMutations(t *testing.T) {
	if *flags.Replay >= 0 {
		t.Skip("replaying one seed")
	}
	sim.CatchMutations(t, 5000, []sim.Mutant[coreMutation]{
		{Name: "reporting a producer before its epoch is stored", Mut: coreMutation{readyBeforeEpochStored: true}},
		{Name: "storing epochs out of order", Mut: coreMutation{unserializedEpochs: true}},
		{Name: "deduplication not replayed after the snapshot", Mut: coreMutation{dedupSkipReplay: true}},
		{Name: "send error before closing the producer of a terminated topic", Mut: coreMutation{sendErrorBeforeClose: true}},
		{Name: "a publish timer releasing held SENDs the rate does not allow", Mut: coreMutation{releaseEarly: true}},
		{Name: "a SEND published ahead of held ones", Mut: coreMutation{overtakeHeld: true}},
		{Name: "held SENDs with no timer to release them", Mut: coreMutation{publishNoWake: true}},
		{Name: "an admitted subscribe not counted in its window", Mut: coreMutation{subscribeUncounted: true}},
		{Name: "every subscribe restarting its window", Mut: coreMutation{subscribeWindowSlides: true}},
		{Name: "a replicator's messages deduplicated on its own name and ids", Mut: coreMutation{replDedupByProducer: true}},
		{Name: "a replicator's session kept open after a refused SEND", Mut: coreMutation{replSessionKept: true}},
	}, func(seed int64, mut coreMutation) error {
		_, err := runTopicSeed(seed, mut, false)
		return err
	})
}
