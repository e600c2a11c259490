package replication

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/sim"
)

var flags = sim.NewSeedFlags(200, "TestSim")

func init() { panicOnAssert = true }

// The simulation drives the replicator of one local topic to one remote cluster through
// seeded interleavings of everything around it. The local topic grows while it is read
// (several producers, batches, messages restricted by replicate_to, messages that arrived
// replicated from a third cluster, markers of every type); the replication cursor's reads,
// mark-delete writes and resets complete late, fail, and are applied in order on the
// cursor's owner; the remote cluster deduplicates by (original producer name, sequence id)
// with a highest-sequence-id watermark as Pulsar does, refuses sends, drops the producer's
// connection, answers slowly, has outages, refuses a second producer of the same name while
// the first is open (ProducerBusy), and some receipts are delivered twice or late, after
// their epoch ended. The replicating broker crashes (a new core from the persisted cursor
// position only; its connection to the remote lingers until a keep-alive closes it) or
// unloads the topic (a graceful close and a new core, as a transfer to another broker);
// an operator resets the cursor forward (skipping entries) or backward (re-sending them).
// After every step the checker verifies R1, R2, R4 and R5 (doc.go); at the end, with the
// faults stopped, R7 (liveness).

const (
	simBase          = 1_700_000_000_000 // Unix ms of the simulation's time 0
	simLocal         = "east"
	simRemoteCluster = "west"
	simOther         = "north"
	simPerLedger     = 5 // entries per ledger: the log spans several ledgers
)

var errSim = errors.New("simulated failure")

func simPos(i int) Position {
	return Position{LedgerID: int64(1 + i/simPerLedger), EntryID: int64(i % simPerLedger)}
}

// simIndex is the log index of p; -1 for a position before the first entry.
func simIndex(p Position) int {
	if p.LedgerID < 1 {
		return -1
	}
	return int(p.LedgerID-1)*simPerLedger + int(p.EntryID)
}

type simParams struct {
	entries, producers, batchMax int
	window                       time.Duration // publishing and faults happen in [0, window)
	maxPending, readBatch        int
	replSubs                     bool
	// shares of the log: replicated from another cluster, markers, restricted by
	// replicate_to, aborted
	replFrom, markers, restricted, aborted float64
	maxDelay                               time.Duration
	slowAck                                float64 // share of receipts delayed up to 40 ms more
	staleAck                               float64 // share of receipts delivered again, late
	sendFail                               float64 // share of sends the remote refuses
	slowConnect                            float64 // share of connects slower than the timeout
	readFail, mdFail, resetFail            float64
	disconnects, crashes, unloads, resets  int
	outages                                int
	rateMsgs, rateBytes                    int64
	rateChanges                            int // policy updates of the dispatch rate
	ttlMs                                  int64
}

func (p simParams) String() string {
	return fmt.Sprintf("entries=%d producers=%d batch<=%d window=%v pending=%d batch=%d replsubs=%v share(from=%.2f markers=%.2f restricted=%.2f aborted=%.2f) delay<=%v acks(slow=%.2f stale=%.2f) fail(send=%.2f read=%.2f md=%.2f reset=%.2f) slowconnect=%.2f disconnects=%d crashes=%d unloads=%d resets=%d outages=%d rate=%d/%dB changes=%d ttl=%dms",
		p.entries, p.producers, p.batchMax, p.window, p.maxPending, p.readBatch, p.replSubs, p.replFrom, p.markers,
		p.restricted, p.aborted, p.maxDelay, p.slowAck, p.staleAck, p.sendFail, p.readFail, p.mdFail, p.resetFail,
		p.slowConnect, p.disconnects, p.crashes, p.unloads, p.resets, p.outages, p.rateMsgs, p.rateBytes, p.rateChanges, p.ttlMs)
}

func randomSimParams(s *sim.Sim) simParams {
	r := s.Rand()
	share := func(max float64) float64 {
		if r.IntN(3) == 0 {
			return 0
		}
		return r.Float64() * max
	}
	p := simParams{
		entries:     10 + r.IntN(120),
		producers:   1 + r.IntN(4),
		batchMax:    1 + r.IntN(3),
		window:      time.Duration(30+r.IntN(250)) * time.Millisecond,
		maxPending:  1 + r.IntN(20),
		readBatch:   1 + r.IntN(10),
		replSubs:    r.IntN(2) == 0,
		replFrom:    share(0.2),
		markers:     share(0.2),
		restricted:  share(0.3),
		aborted:     share(0.05),
		maxDelay:    time.Duration(1+r.IntN(5)) * time.Millisecond,
		slowAck:     share(0.2),
		staleAck:    share(0.5),
		sendFail:    share(0.08),
		slowConnect: share(0.3),
		readFail:    share(0.1),
		mdFail:      share(0.2),
		resetFail:   share(0.3),
		disconnects: r.IntN(5),
		crashes:     r.IntN(3),
		unloads:     r.IntN(3),
		resets:      r.IntN(4),
		outages:     r.IntN(2),
	}
	if r.IntN(3) == 0 {
		p.rateMsgs, p.rateBytes = simRandomRate(s)
		p.rateChanges = r.IntN(3)
	}
	if r.IntN(3) == 0 {
		p.ttlMs = int64(20 + r.IntN(250))
	}
	return p
}

// simRandomRate draws a replicator dispatch rate that throttles the reads yet drains the
// log within seconds.
func simRandomRate(s *sim.Sim) (msgs, bytes int64) {
	r := s.Rand()
	switch r.IntN(3) {
	case 0:
		return int64(100 + r.IntN(900)), 0
	case 1:
		return 0, int64(5000 + r.IntN(45000))
	}
	return int64(100 + r.IntN(900)), int64(5000 + r.IntN(45000))
}

// simEntry is one entry of the local log.
type simEntry struct {
	meta      Meta
	size      int
	published bool
	// replicable is the simulation's own verdict (simExpect), independent of Classify.
	replicable bool
	why        string
}

// simExpect says whether an entry must reach the remote cluster, from the rules of Pulsar's
// replicator written out again (1(b), 1(c)).
func simExpect(m Meta, replSubs bool) (bool, string) {
	if m.Aborted {
		return false, "aborted transaction"
	}
	if m.Marker {
		switch m.MarkerType {
		case MarkerSnapshotRequest, MarkerUpdate:
			return replSubs, "marker " + fmt.Sprint(m.MarkerType)
		case MarkerSnapshotResponse:
			return replSubs && slices.Contains(m.ReplicateTo, simRemoteCluster), "marker 11"
		}
		return false, "marker " + fmt.Sprint(m.MarkerType)
	}
	if m.ReplicatedFrom != "" {
		return false, "replicated from " + m.ReplicatedFrom
	}
	if len(m.ReplicateTo) > 0 && !slices.Contains(m.ReplicateTo, simRemoteCluster) {
		return false, fmt.Sprintf("replicate_to %v", m.ReplicateTo)
	}
	return true, "data"
}

// simInc is one broker lifetime of the replicator: a core and its connections. A crash ends
// it abruptly (its events are dropped), an unload gracefully.
type simInc struct {
	id      int
	c       *Core
	alive   bool
	crashed bool
	timerAt int64
	// sessions are the producers this incarnation's connects opened, by epoch.
	sessions map[uint64]*simSession
	// budget is the checker's view of the dispatch rate (R8).
	budget simBudget
	// expired are the entries this incarnation read past the message TTL (R9).
	expired map[int]bool
}

// simSession is one producer session on the remote cluster.
type simSession struct {
	inc   *simInc
	epoch uint64
	open  bool // at the remote
	// lastArrive and lastReceipt keep the connection's two directions in order (TCP).
	lastArrive, lastReceipt time.Duration
	ended                   bool // the driver learnt the session ended
}

// simRemoteTopic is the topic on the remote cluster.
type simRemoteTopic struct {
	session *simSession // the replicator producer open there (nil: none)
	down    bool
	// persisted is the deduplication watermark per original producer name.
	persisted map[string]uint64
	has       map[string]bool
	count     []int          // copies stored per local index
	lastIdx   map[string]int // the last local index stored per original producer (order)
}

// simRead is a read the cursor's owner performs.
type simRead struct {
	inc *simInc
	r   Read
}

// simBudget is what the dispatch rate allows since t0 (Unix ms): its burst plus rate ×
// elapsed, in messages and bytes; used is what the reads brought to send.
type simBudget struct {
	msgs, bytes         float64
	t0                  int64
	usedMsgs, usedBytes float64
}

func (b *simBudget) exceeded(n int, now int64) string {
	el := float64(now-b.t0) / 1000
	if b.msgs > 0 {
		left := max(b.msgs/10, 1) + b.msgs*el - b.usedMsgs
		if limit := max(int(left+0.999+1e-6), 1); n > limit {
			return fmt.Sprintf("a read of %d entries with %.2f messages left at %.0f/s", n, left, b.msgs)
		}
		if allow := max(b.msgs/10, 1) + b.msgs*el; b.usedMsgs > allow+1e-6 {
			return fmt.Sprintf("%.0f messages read of %.1f allowed", b.usedMsgs, allow)
		}
	}
	if b.bytes > 0 {
		if allow := max(b.bytes/10, 1) + b.bytes*el; b.usedBytes > allow+1e-6 {
			return fmt.Sprintf("%.0f bytes read of %.1f allowed", b.usedBytes, allow)
		}
	}
	return ""
}

// simStats are the coverage counters of a run (summed over seeds by sim.AddCounts).
type simStats struct {
	Sends, Resends, RemoteDups, Filtered, MarkersStored, Refusals, Disconnects, Outages int
	Crashes, Unloads, ResetsForward, ResetsBackward, ResetFails, Skipped                int
	StaleReceipts, StaleReads, ConnectBusy, ConnectTimeouts, AbandonedClosed            int
	ReadFails, MarkDeleteFails, RateWaits, RateChanges, WindowFull, SlowAcks            int
	StaleAckCopies, Expired                                                             int
}

type simWorld struct {
	s   *sim.Sim
	p   simParams
	mut Mutation
	log []simEntry
	inc *simInc
	// incs counts incarnations; the cursor's persisted mark-delete is persisted (log index,
	// -1: none); lastApply orders the cursor's operations.
	incs      int
	persisted int
	lastApply time.Duration
	parked    []*simRead
	remote    simRemoteTopic
	// skipped: entries a forward reset passed before they reached the remote; they may
	// stay missing (and may still arrive, once).
	skipped []bool
	// readExpired: entries a read brought past the message TTL; they may stay missing.
	readExpired []bool
	quiesce     bool
	// noIdentityCheck turns off the check of a stored message's identity, so that a wrong
	// identity shows as what it does on the remote (TestSimFreshSequenceStoresDuplicates).
	noIdentityCheck bool
	// headOnlyRefusal makes the remote break its contract as Pulsar's does: a refused send
	// leaves the producer's session open (TestSimRefusalMustEndTheSession).
	headOnlyRefusal bool
	err             error
	stats           simStats
}

func newSimWorld(seed int64, mut Mutation, verbose bool) *simWorld {
	s := sim.New(seed)
	s.Verbose = verbose
	w := &simWorld{s: s, mut: mut, persisted: -1}
	w.p = randomSimParams(s)
	r := s.Rand()
	seqs := make([]uint64, w.p.producers)
	for i := range seqs {
		seqs[i] = uint64(r.IntN(5))
	}
	var otherSeq uint64
	for range w.p.entries {
		var m Meta
		switch x := r.Float64(); {
		case x < w.p.replFrom:
			otherSeq += uint64(1 + r.IntN(2))
			m = Meta{ProducerName: fmt.Sprintf("%s-q%d", simOther, r.IntN(2)), SequenceID: otherSeq, ReplicatedFrom: simOther}
		case x < w.p.replFrom+w.p.markers:
			m = Meta{ProducerName: "pulsar.marker", Marker: true}
			m.MarkerType = []int32{MarkerSnapshotRequest, MarkerSnapshotResponse, MarkerSnapshot, MarkerUpdate,
				MarkerTxnCommitting, MarkerTxnCommit, MarkerTxnAbort, 0}[r.IntN(8)]
			switch m.MarkerType {
			case MarkerSnapshotResponse:
				m.ReplicateTo = []string{[]string{simRemoteCluster, simOther}[r.IntN(2)]}
			case MarkerSnapshot:
				m.ReplicateTo = []string{simLocal}
			case MarkerTxnCommitting, MarkerTxnCommit, MarkerTxnAbort:
				m.ProducerName = "pulsar.txn.marker"
			}
		default:
			k := r.IntN(w.p.producers)
			n := 1 + r.IntN(w.p.batchMax)
			m = Meta{ProducerName: fmt.Sprintf("%s-p%d", simLocal, k), SequenceID: seqs[k], NumMessages: n}
			m.HighestSequenceID = m.SequenceID + uint64(n-1)
			seqs[k] += uint64(n + r.IntN(2))
			if s.Chance(w.p.restricted) {
				m.ReplicateTo = [][]string{{"__local__"}, {simOther}, {simRemoteCluster}, {simRemoteCluster, simOther}}[r.IntN(4)]
			}
			m.Aborted = s.Chance(w.p.aborted)
		}
		e := simEntry{meta: m, size: 1 + r.IntN(300)}
		e.replicable, e.why = simExpect(m, w.p.replSubs)
		w.log = append(w.log, e)
	}
	w.remote = simRemoteTopic{persisted: map[string]uint64{}, has: map[string]bool{}, count: make([]int, len(w.log)),
		lastIdx: map[string]int{}}
	w.skipped = make([]bool, len(w.log))
	w.readExpired = make([]bool, len(w.log))
	return w
}

func (w *simWorld) failf(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("at %v: %s", w.s.Now(), fmt.Sprintf(format, args...))
	}
}

func (w *simWorld) nowMs() int64 { return simBase + int64(w.s.Now()/time.Millisecond) }

func (w *simWorld) delay() time.Duration { return w.s.Between(0, w.p.maxDelay) }

// on schedules fn for inc; it is dropped if inc ended meanwhile.
func (w *simWorld) on(inc *simInc, d time.Duration, name string, fn func()) {
	w.s.After(d, name, func() {
		if inc.alive && w.err == nil {
			fn()
		}
	})
}

// Incarnations.

func (w *simWorld) start() {
	w.incs++
	md := Earliest
	if w.persisted >= 0 {
		md = simPos(w.persisted)
	}
	r := w.s.Rand()
	cfg := Config{LocalCluster: simLocal, RemoteCluster: simRemoteCluster, MaxPending: w.p.maxPending, ReadBatch: w.p.readBatch,
		ReplicatedSubscriptions: w.p.replSubs, RateMsgs: w.p.rateMsgs, RateBytes: w.p.rateBytes,
		Reconnect:        backoff.Policy{Base: 5 * time.Millisecond, Max: 200 * time.Millisecond, Jitter: 0.3, Rand: r.Float64},
		ReadRetry:        backoff.Policy{Base: 5 * time.Millisecond, Max: 100 * time.Millisecond},
		ConnectTimeoutMs: int64(20 + r.IntN(40)), MarkDeleteRetryMs: 10, MessageTTLMs: w.p.ttlMs, Mutation: w.mut}
	inc := &simInc{id: w.incs, alive: true, c: New(cfg, md), sessions: map[uint64]*simSession{}, expired: map[int]bool{}}
	now := w.nowMs()
	inc.budget = simBudget{msgs: float64(w.p.rateMsgs), bytes: float64(w.p.rateBytes), t0: now}
	w.inc = inc
	w.s.Tracef("START incarnation %d from %v", inc.id, md)
	w.input(inc, "start", func(c *Core) { c.Start(now) })
}

func (w *simWorld) endInc(inc *simInc) {
	st := inc.c.Stats()
	w.stats.Sends += int(st.Sent)
	w.stats.Resends += int(st.Resent)
	w.stats.StaleReceipts += int(st.StaleReceipts)
	w.stats.StaleReads += int(st.StaleReads)
	w.stats.ConnectTimeouts += int(st.ConnectTimeouts)
	w.stats.AbandonedClosed += int(st.AbandonedClosed)
	w.stats.RateWaits += int(st.RateWaits)
	w.stats.WindowFull += int(st.WindowFull)
	for r := Reason(1); r < numReasons; r++ {
		w.stats.Filtered += int(st.Filtered[r])
	}
}

// crash ends the incarnation abruptly: its cursor operations in flight are lost, its
// producer's connection lingers on the remote until a keep-alive closes it.
func (w *simWorld) crash() {
	inc := w.inc
	if !inc.alive {
		return
	}
	w.stats.Crashes++
	w.s.Tracef("CRASH incarnation %d", inc.id)
	inc.alive, inc.crashed = false, true
	w.endInc(inc)
	w.parked = nil
	if sess := w.remote.session; sess != nil && sess.inc == inc {
		w.s.After(w.s.Between(time.Millisecond, 40*time.Millisecond), "keep-alive closes the old producer", func() {
			w.closeSession(sess)
		})
	}
	w.s.After(w.s.Between(time.Millisecond, 20*time.Millisecond), "restart", w.start)
}

// unload closes the replicator gracefully (an unload, a transfer to another broker) and
// starts a new one from the persisted cursor.
func (w *simWorld) unload() {
	inc := w.inc
	if !inc.alive {
		return
	}
	w.stats.Unloads++
	w.input(inc, "close (unload)", func(c *Core) { c.Close() })
	inc.alive = false
	// The owner closes every producer it created, also one whose connect the core gave up.
	if sess := w.remote.session; sess != nil && sess.inc == inc {
		w.s.After(w.delay(), "close the unloaded replicator's producer", func() { w.closeSession(sess) })
	}
	w.endInc(inc)
	w.parked = nil
	w.s.After(w.s.Between(time.Millisecond, 20*time.Millisecond), "load elsewhere", w.start)
}

// input runs one input on inc's core, performs its Ready and checks the invariants.
func (w *simWorld) input(inc *simInc, name string, fn func(c *Core)) {
	if !inc.alive || w.err != nil {
		return
	}
	w.s.Tracef(" %s", name)
	inc.c.SetTime(w.nowMs())
	fn(inc.c)
	w.perform(inc, inc.c.Ready())
	w.check(inc)
}

// Effects.

func (w *simWorld) perform(inc *simInc, r Ready) {
	for _, e := range r.CloseProducer {
		w.closeProducer(inc, e)
	}
	if r.Connect != nil {
		w.connect(inc, *r.Connect)
	}
	for _, snd := range r.Sends {
		w.send(inc, snd)
	}
	if r.CancelRead != 0 {
		w.cancelRead(inc, r.CancelRead)
	}
	if r.MarkDelete != nil {
		w.markDelete(inc, *r.MarkDelete)
	}
	if r.Reset != nil {
		w.reset(inc, *r.Reset)
	}
	if r.Read != nil {
		w.read(inc, *r.Read)
	}
	if r.TimerAt != 0 && (inc.timerAt == 0 || r.TimerAt < inc.timerAt || inc.timerAt < w.nowMs()) {
		inc.timerAt = r.TimerAt
		at := time.Duration(r.TimerAt-simBase) * time.Millisecond
		w.on(inc, at-w.s.Now(), "timer", func() {
			if inc.timerAt == r.TimerAt {
				inc.timerAt = 0
			}
			w.input(inc, "tick", func(c *Core) { c.Tick(w.nowMs()) })
		})
	}
}

// The remote cluster.

func (w *simWorld) connect(inc *simInc, cn Connect) {
	if cn.ProducerName != ProducerName(simLocal, simRemoteCluster) {
		w.failf("connect with producer name %q", cn.ProducerName)
	}
	d := w.delay()
	if !w.quiesce && w.s.Chance(w.p.slowConnect) {
		d += 60 * time.Millisecond // past the core's connect timeout
	}
	w.s.After(d, fmt.Sprintf("connect %d arrives", cn.Epoch), func() {
		if !inc.alive || w.err != nil {
			return // the connection died with its broker
		}
		switch {
		case w.remote.down:
			w.on(inc, w.delay(), "connect fails: unreachable", func() {
				w.input(inc, fmt.Sprintf("connect %d failed", cn.Epoch), func(c *Core) { c.ConnectFailed(cn.Epoch, errSim) })
			})
		case w.remote.session != nil:
			w.stats.ConnectBusy++
			w.on(inc, w.delay(), "connect fails: producer busy", func() {
				w.input(inc, fmt.Sprintf("connect %d failed (busy)", cn.Epoch), func(c *Core) { c.ConnectFailed(cn.Epoch, errSim) })
			})
		default:
			sess := &simSession{inc: inc, epoch: cn.Epoch, open: true, lastArrive: w.s.Now(), lastReceipt: w.s.Now()}
			w.remote.session = sess
			inc.sessions[cn.Epoch] = sess
			w.s.Tracef("  remote: producer of incarnation %d epoch %d open", inc.id, cn.Epoch)
			at := max(w.s.Now()+w.delay(), sess.lastReceipt)
			sess.lastReceipt = at
			w.on(inc, at-w.s.Now(), "producer connected", func() {
				w.input(inc, fmt.Sprintf("producer %d connected", cn.Epoch), func(c *Core) { c.ProducerConnected(cn.Epoch) })
			})
		}
	})
}

// closeSession closes sess at the remote; later sends on it are dropped.
func (w *simWorld) closeSession(sess *simSession) {
	if !sess.open {
		return
	}
	sess.open = false
	if w.remote.session == sess {
		w.remote.session = nil
	}
	w.s.Tracef("  remote: producer of incarnation %d epoch %d closed", sess.inc.id, sess.epoch)
}

// closeProducer performs CloseProducer: the close reaches the remote after a delay and
// closes the session of that epoch if it is open by then (a connect still on its way is
// not affected: the core must close its producer again when it connects).
func (w *simWorld) closeProducer(inc *simInc, epoch uint64) {
	sess := inc.sessions[epoch]
	if sess == nil {
		return
	}
	sess.ended = true
	w.s.After(w.delay(), fmt.Sprintf("close producer %d arrives", epoch), func() { w.closeSession(sess) })
}

// dropSession is a remote fault: the remote closes the producer's connection; the driver
// learns it after the receipts already on their way.
func (w *simWorld) dropSession(name string) {
	sess := w.remote.session
	if sess == nil {
		return
	}
	w.closeSession(sess)
	inc := sess.inc
	at := max(w.s.Now()+w.delay(), sess.lastReceipt)
	sess.lastReceipt = at
	w.on(inc, at-w.s.Now(), name, func() {
		if sess.ended {
			return
		}
		sess.ended = true
		w.input(inc, fmt.Sprintf("producer %d disconnected", sess.epoch), func(c *Core) { c.Disconnected(sess.epoch, errSim) })
	})
}

func (w *simWorld) send(inc *simInc, snd Send) {
	sess := inc.sessions[snd.Ticket.Epoch]
	i := simIndex(snd.Pos)
	w.s.Tracef("  send %d as %v (%s seq %d)", i, snd.Ticket, snd.ProducerName, snd.SequenceID)
	if i < 0 || i >= len(w.log) {
		w.failf("send of unknown position %v", snd.Pos)
		return
	}
	if sess == nil || sess.ended {
		w.failf("send %v on epoch %d with no connected producer", snd.Ticket, snd.Ticket.Epoch)
		return
	}
	if inc.expired[i] {
		w.failf("R9: entry %d sent after a read brought it past the message TTL", i)
		return
	}
	at := max(w.s.Now()+w.delay(), sess.lastArrive)
	sess.lastArrive = at
	w.s.After(at-w.s.Now(), fmt.Sprintf("send %d arrives", i), func() { w.arrive(sess, snd, i) })
}

// arrive is the remote broker taking a send: refused (the session ends, as the contract in
// doc.go requires), deduplicated, or stored.
func (w *simWorld) arrive(sess *simSession, snd Send, i int) {
	if !sess.open || w.err != nil {
		return
	}
	rm := &w.remote
	if !w.quiesce && w.s.Chance(w.p.sendFail) {
		w.stats.Refusals++
		w.s.Tracef("  remote: refuses %d (ends the session: %v)", i, !w.headOnlyRefusal)
		w.receipt(sess, snd.Ticket, i, false, true)
		if !w.headOnlyRefusal {
			w.dropSession("the remote closed the producer after the refusal")
		}
		return
	}
	e := w.log[i]
	if !snd.Marker {
		if rm.has[snd.ProducerName] && snd.SequenceID <= rm.persisted[snd.ProducerName] {
			w.stats.RemoteDups++
			w.s.Tracef("  remote: %d is a duplicate", i)
			w.receipt(sess, snd.Ticket, i, true, false)
			return
		}
		rm.has[snd.ProducerName] = true
		rm.persisted[snd.ProducerName] = max(snd.HighestSequenceID, snd.SequenceID)
	} else {
		w.stats.MarkersStored++
	}
	rm.count[i]++
	w.s.Tracef("  remote: stores %d", i)
	// R2: nothing filtered reaches the remote cluster.
	if !e.replicable {
		w.failf("R2: entry %d (%s) reached the remote cluster", i, e.why)
		return
	}
	// R1: the original identity, once, in per-producer order.
	switch {
	case snd.ReplicatedFrom != simLocal:
		w.failf("R1: entry %d stored with replicated_from %q", i, snd.ReplicatedFrom)
	case !w.noIdentityCheck && (snd.ProducerName != e.meta.ProducerName || snd.SequenceID != e.meta.SequenceID):
		w.failf("R1: entry %d (%s seq %d) stored as %s seq %d: not its dedup identity", i, e.meta.ProducerName,
			e.meta.SequenceID, snd.ProducerName, snd.SequenceID)
	case !snd.Marker && rm.count[i] > 1:
		w.failf("R1: entry %d stored %d times on the remote cluster", i, rm.count[i])
	}
	if !snd.Marker {
		if last, ok := rm.lastIdx[snd.ProducerName]; ok && last > i {
			w.failf("R1: entry %d of %s stored after its later entry %d", i, snd.ProducerName, last)
		}
		rm.lastIdx[snd.ProducerName] = max(rm.lastIdx[snd.ProducerName], i)
	}
	w.receipt(sess, snd.Ticket, i, false, false)
}

// receipt sends the answer back on sess's connection, in order; some are slow, and some are
// delivered once more, late (after their epoch ended, or twice in it).
func (w *simWorld) receipt(sess *simSession, t Ticket, i int, dup, failed bool) {
	inc := sess.inc
	d := w.delay()
	if w.s.Chance(w.p.slowAck) {
		w.stats.SlowAcks++
		d += w.s.Between(0, 40*time.Millisecond)
	}
	at := max(w.s.Now()+d, sess.lastReceipt)
	sess.lastReceipt = at
	deliver := func(what string) {
		if failed {
			w.input(inc, fmt.Sprintf("%s: send %d %v failed", what, i, t), func(c *Core) { c.SendFailed(t, errSim) })
		} else {
			w.input(inc, fmt.Sprintf("%s: send %d %v acked (dup %v)", what, i, t, dup), func(c *Core) { c.SendAcked(t, dup) })
		}
	}
	w.on(inc, at-w.s.Now(), "receipt", func() {
		if !sess.ended {
			deliver("receipt")
		}
	})
	if w.s.Chance(w.p.staleAck) {
		w.stats.StaleAckCopies++
		w.on(inc, w.s.Between(10*time.Millisecond, 150*time.Millisecond), "late receipt copy", func() { deliver("late copy") })
	}
}

// The replication cursor: its operations apply in order, on its owner.

// cursorOp applies fn after the cursor operations before it; a crash drops it.
func (w *simWorld) cursorOp(inc *simInc, name string, fn func()) {
	at := max(w.s.Now()+w.delay(), w.lastApply)
	w.lastApply = at
	w.s.After(at-w.s.Now(), name, func() {
		if !inc.crashed && w.err == nil {
			fn()
		}
	})
}

func (w *simWorld) markDelete(inc *simInc, md MarkDelete) {
	i := simIndex(md.Pos)
	fail := w.s.Chance(w.p.mdFail)
	w.cursorOp(inc, fmt.Sprintf("mark-delete %d", i), func() {
		var err error
		switch {
		case fail:
			err = errSim
			w.stats.MarkDeleteFails++
		case i < w.persisted:
			err = errors.New("mark-delete before the cursor's")
		default:
			w.persisted = i
			w.checkCovered("persisted mark-delete", i)
		}
		w.on(inc, w.delay(), "mark-delete done", func() {
			w.input(inc, fmt.Sprintf("mark-delete %d done (%v)", i, err), func(c *Core) { c.MarkDeleteDone(md.Tag, err) })
		})
	})
}

func (w *simWorld) reset(inc *simInc, rs CursorReset) {
	to := simIndex(rs.To)
	fail := w.s.Chance(w.p.resetFail)
	w.cursorOp(inc, fmt.Sprintf("reset to %d", to), func() {
		var err error
		if fail {
			err = errSim
			w.stats.ResetFails++
		} else {
			if to > w.persisted {
				w.stats.ResetsForward++
				for j := max(w.persisted+1, 0); j <= to; j++ {
					if w.log[j].replicable && w.remote.count[j] == 0 && !w.skipped[j] {
						w.skipped[j] = true
						w.stats.Skipped++
					}
				}
			} else {
				w.stats.ResetsBackward++
			}
			w.persisted = to
		}
		w.on(inc, w.delay(), "reset done", func() {
			w.input(inc, fmt.Sprintf("reset to %d done (%v)", to, err), func(c *Core) { c.ResetDone(rs.Tag, err) })
		})
	})
}

func (w *simWorld) read(inc *simInc, r Read) {
	w.s.Tracef("  read %d after %d (tag %d)", r.N, simIndex(r.After), r.Tag)
	if r.N <= 0 {
		w.failf("read of %d entries", r.N)
		return
	}
	// R8: a read is issued only while the dispatch rate has budget left.
	if why := inc.budget.exceeded(r.N, w.nowMs()); why != "" {
		w.failf("R8: read beyond the replicator dispatch rate: %s", why)
		return
	}
	rd := &simRead{inc: inc, r: r}
	if w.s.Chance(w.p.readFail) {
		w.stats.ReadFails++
		w.on(inc, w.delay(), "read fails", func() { w.readDone(rd, nil, errSim) })
		return
	}
	w.on(inc, w.delay(), "cursor read", func() { w.tryRead(rd) })
}

func (w *simWorld) tryRead(rd *simRead) {
	var es []Entry
	for i := simIndex(rd.r.After) + 1; i < len(w.log) && w.log[i].published && len(es) < rd.r.N; i++ {
		e := w.log[i]
		es = append(es, Entry{Pos: simPos(i), Meta: e.meta, Data: make([]byte, e.size)})
	}
	if len(es) == 0 {
		w.parked = append(w.parked, rd)
		return
	}
	w.on(rd.inc, w.delay(), fmt.Sprintf("read of %d done", len(es)), func() { w.readDone(rd, es, nil) })
}

func (w *simWorld) cancelRead(inc *simInc, tag uint64) {
	for k, rd := range w.parked {
		if rd.inc == inc && rd.r.Tag == tag {
			w.parked = slices.Delete(w.parked, k, k+1)
			w.on(inc, w.delay(), "read cancelled", func() { w.readDone(rd, nil, errors.New("cancelled")) })
			return
		}
	}
}

func (w *simWorld) readDone(rd *simRead, es []Entry, err error) {
	inc := rd.inc
	w.input(inc, fmt.Sprintf("read %d done: %d entries (%v)", rd.r.Tag, len(es), err), func(c *Core) {
		if err == nil && c.reading && c.readTag == rd.r.Tag {
			for _, e := range es {
				if ok, _ := simExpect(e.Meta, w.p.replSubs); ok && w.p.ttlMs > 0 && w.nowMs()-e.Meta.PublishTime > w.p.ttlMs {
					w.readExpired[simIndex(e.Pos)] = true
					inc.expired[simIndex(e.Pos)] = true
					w.stats.Expired++
				} else if ok {
					inc.budget.usedMsgs += float64(max(e.Meta.NumMessages, 1))
					inc.budget.usedBytes += float64(len(e.Data))
				}
			}
		}
		if err := c.ReadDone(rd.r.Tag, es, err); err != nil {
			w.failf("read done: %v", err)
		}
	})
}

func (w *simWorld) publish(i int) {
	w.log[i].published = true
	w.log[i].meta.PublishTime = w.nowMs()
	parked := w.parked
	w.parked = nil
	for _, rd := range parked {
		if rd.inc.alive {
			w.tryRead(rd)
		}
	}
}

// Faults.

func (w *simWorld) adminReset() {
	inc := w.inc
	r := w.s.Rand()
	n := 0
	for n < len(w.log) && w.log[n].published {
		n++
	}
	to := Earliest
	if k := r.IntN(n + 1); k > 0 {
		to = simPos(k - 1)
	}
	w.input(inc, fmt.Sprintf("admin reset to %d", simIndex(to)), func(c *Core) {
		if err := c.Reset(to); err != nil && !errors.Is(err, ErrResetInProgress) {
			w.failf("reset: %v", err)
		}
	})
}

// changeRate is a policy update of the replicator dispatch rate; the checker's budget starts
// again from it.
func (w *simWorld) changeRate() {
	inc := w.inc
	msgs, bytes := simRandomRate(w.s)
	w.stats.RateChanges++
	w.input(inc, fmt.Sprintf("rate %d/s %dB/s", msgs, bytes), func(c *Core) {
		c.SetRate(msgs, bytes)
		inc.budget = simBudget{msgs: float64(msgs), bytes: float64(bytes), t0: w.nowMs()}
	})
}

func (w *simWorld) outage() {
	w.stats.Outages++
	w.remote.down = true
	w.dropSession("producer disconnected (outage)")
	w.s.After(w.s.Between(5*time.Millisecond, 80*time.Millisecond), "remote back", func() { w.remote.down = false })
}

// The checker.

// checkCovered: R4, every entry up to index upTo is on the remote cluster, filtered, or
// skipped by a forward reset.
func (w *simWorld) checkCovered(what string, upTo int) {
	for j := 0; j <= upTo && j < len(w.log); j++ {
		if w.log[j].replicable && w.remote.count[j] == 0 && !w.skipped[j] && !w.readExpired[j] {
			w.failf("R4: the %s (%d) passed entry %d, which is not on the remote cluster", what, upTo, j)
			return
		}
	}
	if upTo >= len(w.log) {
		w.failf("R4: the %s (%d) is past the log's end", what, upTo)
	}
}

// check runs after every input.
func (w *simWorld) check(inc *simInc) {
	c := inc.c
	if c.InFlight() > w.p.maxPending || c.Held() > w.p.maxPending {
		w.failf("R5: %d in flight and %d held, window %d", c.InFlight(), c.Held(), w.p.maxPending)
	}
	w.checkCovered("in-memory mark-delete", simIndex(c.MarkDelete()))
	// R4 ahead of the mark-delete position: the core counts an entry as acknowledged only
	// if the remote cluster has it.
	next := simIndex(c.MarkDelete()) + 1
	for _, sl := range c.win {
		if j := simIndex(sl.e.Pos); j != next {
			// A hole: the mark-delete position would pass entry next unsent.
			w.failf("R4: the window skips entry %d (holds %d after %d)", next, j, next-1)
			return
		}
		next++
		if j := simIndex(sl.e.Pos); sl.st == slotAcked && w.remote.count[j] == 0 && !w.skipped[j] && !w.readExpired[j] {
			w.failf("R4: the core counts entry %d as on the remote cluster, which does not have it", j)
			return
		}
	}
	if w.mut == (Mutation{}) {
		if err := c.invariantErr(); err != nil {
			w.failf("core: %v (%v)", err, c)
		}
	}
}

func (w *simWorld) run() error {
	p, s := w.p, w.s
	s.Tracef("params: %v", p)
	w.start()
	ats := make([]time.Duration, len(w.log))
	for i := range ats {
		ats[i] = time.Duration(s.Rand().Int64N(int64(p.window)))
	}
	slices.Sort(ats)
	for i, at := range ats {
		s.After(at, fmt.Sprintf("publish %d", i), func() { w.publish(i) })
	}
	for range p.disconnects {
		s.After(s.Between(0, p.window), "disconnect", func() { w.stats.Disconnects++; w.dropSession("producer disconnected") })
	}
	for range p.crashes {
		s.After(s.Between(0, p.window), "crash", w.crash)
	}
	for range p.unloads {
		s.After(s.Between(0, p.window), "unload", w.unload)
	}
	for range p.resets {
		s.After(s.Between(0, p.window), "admin reset", w.adminReset)
	}
	for range p.rateChanges {
		s.After(s.Between(0, p.window), "rate change", w.changeRate)
	}
	for range p.outages {
		s.After(s.Between(0, p.window), "remote outage", w.outage)
	}
	s.After(p.window, "quiesce", func() { w.quiesce = true })
	deadline := p.window + 60*time.Second
	for w.err == nil && s.Step() {
		if s.Now() > deadline {
			w.failf("no quiescence by %v (%d events pending)", deadline, s.Pending())
		}
	}
	if w.err != nil {
		return w.err
	}
	w.endInc(w.inc)
	// R7: with the faults healed, replication resumed by itself: everything replicable and
	// not skipped is on the remote cluster, and the cursor's mark-delete is at the log's end.
	for i, e := range w.log {
		if e.replicable && !w.skipped[i] && !w.readExpired[i] && w.remote.count[i] == 0 {
			return fmt.Errorf("R7: entry %d (%s seq %d) never reached the remote cluster (core %v)", i,
				e.meta.ProducerName, e.meta.SequenceID, w.inc.c)
		}
	}
	if w.persisted != len(w.log)-1 {
		return fmt.Errorf("R7: the persisted mark-delete is %d, not the log's end %d (core %v)", w.persisted, len(w.log)-1, w.inc.c)
	}
	if st := w.inc.c.State(); st != StateReplicating {
		return fmt.Errorf("R7: the replicator ends %v", st)
	}
	return nil
}

func runSimSeed(seed int64, mut Mutation, verbose bool) (w *simWorld, err error) {
	w = newSimWorld(seed, mut, verbose)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return w, w.run()
}

// TestSim drives the replicator core through seeded interleavings (see simWorld) and checks
// R1, R2, R4, R5 and R8 after every step and R7 at the end. Replay a seed with
// go test ./replication -run 'TestSim$' -seed S -v; a long run:
// go test ./replication -run 'TestSim$' -seeds 200000 -timeout 0.
func TestSim(t *testing.T) {
	var st simStats
	ran, failed := sim.RunSeeds(t, flags.Seeds("./replication", 0), func(seed int64, verbose bool) sim.Outcome {
		w, err := runSimSeed(seed, Mutation{}, verbose)
		sim.AddCounts(&st, w.stats)
		return sim.Outcome{Sim: w.s, Params: w.p, Err: err}
	})
	if failed {
		return
	}
	t.Logf("%+v", st)
	sim.RequireCoverage(t, ran, 150, map[string]int{"sends": st.Sends, "re-sends": st.Resends,
		"duplicates dropped by the remote": st.RemoteDups, "filtered entries": st.Filtered, "markers stored": st.MarkersStored,
		"refused sends": st.Refusals, "disconnects": st.Disconnects, "outages": st.Outages, "crashes": st.Crashes,
		"unloads": st.Unloads, "forward resets": st.ResetsForward, "backward resets": st.ResetsBackward,
		"failed resets": st.ResetFails, "skipped entries": st.Skipped, "stale receipts": st.StaleReceipts,
		"stale reads": st.StaleReads, "busy producer names": st.ConnectBusy, "connect timeouts": st.ConnectTimeouts,
		"abandoned producers closed": st.AbandonedClosed, "failed reads": st.ReadFails,
		"failed mark-deletes": st.MarkDeleteFails, "rate waits": st.RateWaits, "rate changes": st.RateChanges, "full windows": st.WindowFull,
		"slow receipts": st.SlowAcks, "late receipt copies": st.StaleAckCopies, "entries read past the TTL": st.Expired})
}

// TestSimDeterministic replays seeds and requires identical traces.
func TestSimDeterministic(t *testing.T) {
	sim.CheckDeterministic(t, 10, func(seed int64) *sim.Sim {
		w, _ := runSimSeed(seed, Mutation{}, true)
		return w.s
	})
}

// TestSimCatchesMutations proves the checker can fail: each deliberately broken core is
// caught by some seed.
func TestSimCatchesMutations(t *testing.T) {
	if flags.Replaying() {
		t.Skip("replaying one seed")
	}
	sim.CatchMutations(t, 3000, simMutants, func(seed int64, mut Mutation) error {
		_, err := runSimSeed(seed, mut, false)
		return err
	})
}

// TestSimFreshSequenceStoresDuplicates: without the identity check, a re-send with a fresh
// sequence id is caught by what it does on the remote cluster: the remote's deduplication
// lets it through, and the entry is stored twice.
func TestSimFreshSequenceStoresDuplicates(t *testing.T) {
	if flags.Replaying() {
		t.Skip("replaying one seed")
	}
	sim.CatchMutation(t, "a re-send without its dedup identity, stored twice", 3000, func(seed int64) error {
		w := newSimWorld(seed, Mutation{FreshSequenceOnResend: true}, false)
		w.noIdentityCheck = true
		if err := w.run(); err != nil && strings.Contains(err.Error(), "times on the remote cluster") {
			return err
		}
		return nil
	})
}

// TestSimRefusalMustEndTheSession shows that the remote side's contract (doc.go: a refused
// send ends the producer's session) is needed: with a remote that, as Pulsar's broker and
// client do for a NotAllowedError, keeps the session open and stores the sends pipelined
// behind the refused one, the correct core loses the refused entry — its re-send is
// answered as a duplicate (apache/pulsar#26113).
func TestSimRefusalMustEndTheSession(t *testing.T) {
	if flags.Replaying() {
		t.Skip("replaying one seed")
	}
	sim.CatchMutation(t, "a remote that keeps the session open after a refusal", 3000, func(seed int64) error {
		w := newSimWorld(seed, Mutation{}, false)
		w.headOnlyRefusal = true
		if err := w.run(); err != nil && strings.Contains(err.Error(), "R4") {
			return err
		}
		return nil
	})
}

var simMutants = []sim.Mutant[Mutation]{
	{Name: "a re-send after a rewind without its dedup identity", Mut: Mutation{FreshSequenceOnResend: true}},
	{Name: "the cursor advanced on a failed send", Mut: Mutation{AdvanceOnFailure: true}},
	{Name: "a replicated_from message replicated back", Mut: Mutation{ReplicateReplicated: true}},
	{Name: "markers replicated as data (apache/pulsar#24453)", Mut: Mutation{ReplicateMarkers: true}},
	{Name: "the in-flight window lost on a reconnect", Mut: Mutation{LoseWindowOnReconnect: true}},
	{Name: "a receipt of an old epoch accepted", Mut: Mutation{AcceptStaleEpoch: true}},
	{Name: "a read issued before a reset accepted (apache/pulsar#20128, #26106)", Mut: Mutation{AcceptStaleRead: true}},
	{Name: "no reconnect after a failed connect (apache/pulsar#25097, #26002)", Mut: Mutation{NoRetryAfterConnectFailure: true}},
	{Name: "a producer of an abandoned epoch left open (apache/pulsar#5104)", Mut: Mutation{KeepAbandonedProducer: true}},
	{Name: "reads past the window", Mut: Mutation{ReadPastWindow: true}},
	{Name: "reads past the dispatch rate", Mut: Mutation{RateIgnored: true}},
	{Name: "entries past the message TTL sent", Mut: Mutation{TTLIgnored: true}},
}
