package topic

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic/dispatch"
	"github.com/magnetar-io/magnetar/internal/fsm"

	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// topicCore is the topic's sans-I/O state machine: its lifecycle state, the producers and
// their access modes, the topic epoch, the deduplication state, the publish pipeline, and
// the policies' decisions on them (policy.go): which SENDs the publish rate admits, holds
// and releases, which subscribes the subscribe-rate windows admit, the publish rate the
// relative dispatch rates follow, and when timed deduplication snapshots are taken. It
// reads no clock and starts no goroutine: the time is an input (Unix ns) of the calls that
// need it. It is thread-unsafe and owned by the topic goroutine (Topic.run) or by the
// simulator (topiccore_sim_test.go); the owner changes it only through its methods.
//
// Inputs are method calls (a producer arrives or leaves, a SEND, new policies, a subscribe
// to count, a timer fired, an add or property write completed, terminate asked or
// completed); outputs accumulate in ready, which the owner takes with takeReleased and
// takeReady and performs in order: the released SENDs to publish, adds to hand to the log,
// property writes, a terminate, what to tell the clients, relative dispatch rates to set,
// and timers to arm. Completions come back tagged with what they were issued for (the add,
// the write's tag, the terminate attempt, the timer's time); a stale one is dropped.
//
// Durable writes complete before anything that depends on them is reported: an exclusive
// producer is told it is connected (PRODUCER_SUCCESS) only once its topic epoch is stored;
// the epoch writes are serialized (one in flight, the newest queued), so two takeovers never
// store their epochs out of order; the deduplication snapshot covers stored entries only.
type topicCore struct {
	name       string
	dedupEvery int
	m          *Metrics
	mut        coreMutation

	state     State
	producers map[*Producer]struct{}
	byName    map[string]*Producer
	// exclusive holds the topic for an Exclusive or WaitForExclusive producer (ready, or
	// producerStoring while its epoch is written).
	exclusive *Producer
	waiting   []*Producer // queued WaitForExclusive producers, in arrival order
	// epoch is the newest topic epoch issued (being stored or stored); stored is the newest
	// the log confirmed. Invariant: stored <= epoch, and no producer was told an epoch above
	// stored.
	epoch, stored uint64
	// storing is the epoch the exclusive producer waits for (0: none).
	storing uint64
	// epochTag is the tag of the epoch write in flight (0: none); epochNext is the newest
	// epoch wanted after it (0: none).
	epochTag, epochNext uint64
	// dedupTag is the tag of the deduplication snapshot write in flight (0: none).
	dedupTag uint64
	tags     uint64
	// terminateTag tags the terminate in flight (0: none).
	terminateTag uint64
	// writeFenced: an add failed; SENDs and new producers are refused until the adds in
	// flight have completed (see addFailed).
	writeFenced bool

	// inflight are the adds not completed yet, in add order (the log completes them in that
	// order). Invariant: inflight[i].m.SequenceID < inflight[i+1].m.SequenceID per producer.
	inflight []*pubOp
	dedup    dedup
	// last is the newest stored entry and its message count (0: unknown, e.g. after load).
	last        Position
	lastMsgs    int
	lastPublish int64
	rateIn      rate
	// pol are the policies in force (policy.go); quota is what the backlog quota does to
	// producers.
	pol   Policies
	quota QuotaBlock
	// The publish rate (policy.go): its buckets, the SENDs held in arrival order while it
	// is exceeded, the time of the timer asked for to release them (Unix ns, 0: none), and
	// how often holding started. Invariant: a SEND is admitted only while the buckets have
	// tokens, and never ahead of a held one.
	msgLimit, byteLimit dispatch.Bucket
	throttled           []heldSend
	rateLimited         int64
	// subscribeRate counts each consumer's subscribes in its current rate window.
	// Invariant: at most pol.SubscribeRate are admitted per window.
	subscribeRate subscribeWindows
	// relative measures the publish rate for the dispatch rates relative to it: the
	// totals and time (Unix ns) of the last measurement.
	relative struct{ msgs, bytes, at int64 }
	// dedupInterval is the timed deduplication snapshots' interval (0: none).
	dedupInterval time.Duration
	// timerAt is, per kind, the time (Unix ns) of the timer the core asked for (0: none);
	// a timer firing for another time is stale.
	timerAt [numTimers]int64

	ready coreReady
}

// coreMutation deliberately breaks the core, to prove the simulation's checker catches it.
// Only tests set it.
type coreMutation struct {
	readyBeforeEpochStored bool // report an exclusive producer before its epoch is stored
	unserializedEpochs     bool // issue every epoch write at once (they may land out of order)
	dedupSkipReplay        bool // recover the deduplication state from the snapshot only
	sendErrorBeforeClose   bool // fail a terminated topic's SEND before closing its producer
	releaseEarly           bool // a publish timer releases every held SEND, whatever the rate
	overtakeHeld           bool // a SEND the rate admits is published ahead of held ones
	publishNoWake          bool // SENDs held by the publish rate ask for no timer
	subscribeUncounted     bool // an admitted subscribe is not counted in its window
	subscribeWindowSlides  bool // every subscribe, admitted or not, starts its window again
	// replDedupByProducer: a replicator's messages are deduplicated on the replicator's
	// own name and SEND sequence ids, not on their original producer's.
	replDedupByProducer bool
	// replSessionKept: a replicator producer stays open after a refused SEND, so its later
	// SENDs are stored ahead of the refused one (apache/pulsar#26113).
	replSessionKept bool
}

// pubOp is one add in flight.
type pubOp struct {
	p    *Producer
	m    Message
	dups []*pubOp // duplicates of m that arrived while it was in flight
}

// coreReady is what the owner must do next, in order: the SENDs the publish rate released
// (takeReleased: the owner publishes each, which adds to this Ready), then the adds
// (Log.AddAsync, completing with added), the property writes (Log.SetProperty, completing
// with propertyWritten), the terminate (Log.Terminate, completing with terminated), the
// outputs to the clients, the dispatch rates relative to the publish rate to set, and the
// timers to arm: each calls timerFired(kind, at, now) at its time (a timer asked for again
// replaces the one of its kind).
type coreReady struct {
	released  []heldSend
	adds      []*pubOp
	props     []propWrite
	terminate uint64 // tag of a terminate to perform (0: none)
	out       []output
	retune    *relativeRates
	timers    []coreTimer
}

func (r *coreReady) empty() bool {
	return len(r.released) == 0 && len(r.adds) == 0 && len(r.props) == 0 && r.terminate == 0 &&
		len(r.out) == 0 && r.retune == nil && len(r.timers) == 0
}

// timerKind names what a timer of the core is for.
type timerKind uint8

const (
	timerPublish  timerKind = iota // release the SENDs held by the publish rate
	timerRelative                  // measure the publish rate for the relative dispatch rates
	timerDedup                     // take a timed deduplication snapshot
	numTimers
)

// coreTimer asks the owner for a timer of kind at at (Unix ns).
type coreTimer struct {
	kind timerKind
	at   int64
}

// askTimer asks for a timer of kind at at, replacing the one asked for before.
func (c *topicCore) askTimer(kind timerKind, at int64) {
	c.timerAt[kind] = at
	c.ready.timers = append(c.ready.timers, coreTimer{kind, at})
}

// timerFired is the timer of kind asked for at at, firing at now. A timer the core no
// longer waits for (asked for again, or cancelled) is dropped.
func (c *topicCore) timerFired(kind timerKind, at, now int64) {
	if at == 0 || at != c.timerAt[kind] {
		return
	}
	c.timerAt[kind] = 0
	switch kind {
	case timerPublish:
		c.releaseThrottled(now)
	case timerRelative:
		c.relativeTick(now)
	case timerDedup:
		c.dedupTick(now)
	}
}

// propWrite is a managed-ledger property write.
type propWrite struct {
	key, value string
	tag        uint64
}

type outKind uint8

const (
	outReceipt   outKind = iota + 1 // SEND_RECEIPT for m at pos
	outSendError                    // SEND_ERROR for m: code, msg
	outClose                        // the topic closed p: Conn.ProducerClosed, then CLOSE_PRODUCER
	outReady                        // p.cb.Ready(ready)
	outQueued                       // p.cb.Queued()
	outFailed                       // p.cb.Failed(err)
	outRefused                      // the SEND seq (size bytes) is refused: release what it holds, then SEND_ERROR code, msg
)

// output is one thing to tell a client.
type output struct {
	kind  outKind
	p     *Producer
	seq   uint64
	hi    uint64
	pos   Position
	code  pb.ServerError
	msg   string
	err   error
	ready ProducerReady
	size  int
}

// newTopicCore returns an Active core with no producers.
func newTopicCore(name string, dedupOn bool, dedupEvery int, m *Metrics) *topicCore {
	c := &topicCore{name: name, dedupEvery: dedupEvery, m: m, state: StateActive,
		producers: map[*Producer]struct{}{}, byName: map[string]*Producer{}}
	c.dedup.init(dedupOn)
	return c
}

// entryReader reads a log's entries (for the deduplication replay).
type entryReader interface {
	Read(ctx context.Context, from Position, max int) ([]Entry, error)
}

// load restores what the log durably holds: the topic epoch, whether the log is terminated,
// and the deduplication state (the last snapshot plus a replay of the entries after it).
func (c *topicCore) load(ctx context.Context, st mledger.Stats, r entryReader) error {
	if v := st.Properties[propEpoch]; v != "" {
		c.epoch, _ = strconv.ParseUint(v, 10, 64)
		c.stored = c.epoch
	}
	if st.Terminated != nil {
		c.state = StateTerminated
	}
	if !c.dedup.on {
		return nil
	}
	end := lastEntry(st)
	if c.mut.dedupSkipReplay {
		end = Position{LedgerID: -1, EntryID: -1}
	}
	n, err := c.dedup.recover(ctx, r, st.Properties[propDedup], end)
	if err != nil {
		return fmt.Errorf("recover deduplication state: %w", err)
	}
	c.dedup.sinceSnapshot = n
	return nil
}

// takeReady returns what the owner must do and clears it. The owner performs it before it
// feeds the core the next input.
func (c *topicCore) takeReady() coreReady {
	r := c.ready
	c.ready = coreReady{adds: r.adds[len(r.adds):], props: r.props[len(r.props):], out: r.out[len(r.out):]}
	return r
}

// takeReleased returns the SENDs the publish rate released, in arrival order, and clears
// them. The owner publishes each (which may add to the Ready) before it takes the Ready.
func (c *topicCore) takeReleased() []heldSend {
	r := c.ready.released
	c.ready.released = nil
	return r
}

// recycle hands a performed Ready's slices back for reuse (optional).
func (c *topicCore) recycle(r *coreReady) {
	if len(c.ready.adds) == 0 && cap(r.adds) > cap(c.ready.adds) {
		clear(r.adds)
		c.ready.adds = r.adds[:0]
	}
	if len(c.ready.out) == 0 && cap(r.out) > cap(c.ready.out) {
		clear(r.out)
		c.ready.out = r.out[:0]
	}
	*r = coreReady{}
}

func (c *topicCore) emit(o output) { c.ready.out = append(c.ready.out, o) }

func (c *topicCore) become(to State) error {
	if !topicEdges.Legal(c.state, to) {
		return fsm.Illegal(ErrIllegalTransition, "topic "+c.name, c.state, to)
	}
	c.state = to
	return nil
}

func (c *topicCore) nextTag() uint64 {
	c.tags++
	return c.tags
}

// Producers.

// addProducer attaches p (whose exported fields the caller set): it is told Ready (now, or
// once its topic epoch is stored), Queued or Failed.
func (c *topicCore) addProducer(p *Producer) {
	switch c.state {
	case StateTerminating, StateTerminated:
		c.fail(p, fmt.Errorf("%w: topic %s", ErrTerminated, c.name))
		return
	case StateActive:
		if c.writeFenced {
			c.fail(p, fmt.Errorf("%w: topic %s is recovering from a failed write", ErrClosed, c.name))
			return
		}
	default:
		c.fail(p, ErrClosed)
		return
	}
	if old := c.byName[p.Name]; old != nil {
		if old.Conn != p.Conn || old.ID != p.ID {
			c.fail(p, fmt.Errorf("%w: producer named %q is already connected", ErrProducerBusy, p.Name))
			return
		}
		c.removeProducer(old, false) // the same client re-creating it
	}
	if err := c.admitProducer(p); err != nil {
		c.fail(p, err)
		return
	}
	others := len(c.producers) > 0
	switch p.AccessMode {
	case pb.ProducerAccessMode_Shared:
		if c.exclusive != nil || len(c.waiting) > 0 {
			c.fail(p, fmt.Errorf("%w: topic has an exclusive producer", ErrProducerBusy))
			return
		}
		c.ready1(p, c.stored)
	case pb.ProducerAccessMode_Exclusive, pb.ProducerAccessMode_ExclusiveWithFencing:
		if p.AccessMode == pb.ProducerAccessMode_ExclusiveWithFencing {
			c.fenceAll()
			others = false
		}
		switch {
		case c.exclusive != nil || len(c.waiting) > 0:
			c.fail(p, fmt.Errorf("%w: topic has an exclusive producer", ErrProducerFenced))
		case others:
			c.fail(p, fmt.Errorf("%w: topic has shared producers", ErrProducerFenced))
		case p.TopicEpoch != nil && *p.TopicEpoch < c.stored:
			c.fail(p, fmt.Errorf("%w: topic epoch %d is older than %d", ErrProducerFenced, *p.TopicEpoch, c.stored))
		default:
			c.takeExclusive(p)
		}
	case pb.ProducerAccessMode_WaitForExclusive:
		if c.exclusive != nil || others || len(c.waiting) > 0 {
			p.state = producerWaiting
			c.waiting = append(c.waiting, p)
			c.m.waitingProducers.Inc()
			c.emit(output{kind: outQueued, p: p})
			return
		}
		c.takeExclusive(p)
	default:
		c.fail(p, fmt.Errorf("%w: access mode %v", ErrInvalid, p.AccessMode))
	}
}

func (c *topicCore) fail(p *Producer, err error) {
	p.state = producerClosed
	c.emit(output{kind: outFailed, p: p, err: err})
}

// fenceAll removes every producer, ready, storing or queued (an ExclusiveWithFencing
// producer takes the topic).
func (c *topicCore) fenceAll() {
	err := fmt.Errorf("%w: fenced by an exclusive producer", ErrProducerFenced)
	for _, q := range c.waiting { // first, or a removal below would promote one
		c.m.waitingProducers.Dec()
		c.fail(q, err)
	}
	c.waiting = nil
	for _, q := range sortedProducers(c.producers) {
		c.removeProducer(q, true)
	}
	if c.exclusive != nil && c.exclusive.state == producerStoring {
		c.dropStoring(err)
	}
}

// takeExclusive gives the topic to exclusive producer p under a new topic epoch (or the
// epoch it resumes), reporting it once that epoch is stored.
func (c *topicCore) takeExclusive(p *Producer) {
	e := c.epoch + 1
	if p.TopicEpoch != nil {
		e = *p.TopicEpoch
		if e < c.stored { // a WaitForExclusive producer queued with a stale epoch
			c.fail(p, fmt.Errorf("%w: topic epoch %d is older than %d", ErrProducerFenced, e, c.stored))
			c.promoteWaiting()
			return
		}
	}
	c.epoch = max(c.epoch, e)
	c.exclusive = p
	if e <= c.stored || c.mut.readyBeforeEpochStored {
		c.storeEpoch(e)
		c.ready1(p, e)
		return
	}
	p.state = producerStoring
	c.storing = e
	c.storeEpoch(e)
}

// storeEpoch makes epoch e durable: one write in flight, the newest epoch queued behind it.
func (c *topicCore) storeEpoch(e uint64) {
	if e <= c.stored {
		return
	}
	if c.epochTag != 0 && !c.mut.unserializedEpochs {
		c.epochNext = max(c.epochNext, e)
		return
	}
	c.epochTag = c.nextTag()
	c.ready.props = append(c.ready.props, propWrite{key: propEpoch, value: strconv.FormatUint(e, 10), tag: c.epochTag})
}

// propertyWritten completes the property write tagged tag (value is what it wrote).
func (c *topicCore) propertyWritten(key, value string, tag uint64, err error) {
	switch key {
	case propDedup:
		if tag == c.dedupTag {
			c.dedupTag = 0
		}
	case propEpoch:
		if tag != c.epochTag && !c.mut.unserializedEpochs {
			return // stale
		}
		c.epochTag = 0
		e, _ := strconv.ParseUint(value, 10, 64)
		if err == nil {
			c.stored = max(c.stored, e)
		}
		if c.storing != 0 && c.exclusive != nil {
			switch {
			case c.state != StateActive:
				// Terminating (the producer would be closed at its end) or closing: it
				// retries and finds out.
				c.dropStoring(fmt.Errorf("%w: topic %s is %v", ErrClosed, c.name, c.state))
			case c.stored >= c.storing:
				p, e := c.exclusive, c.storing
				c.storing = 0
				c.ready1(p, e)
			case err != nil && c.epochNext < c.storing:
				c.dropStoring(fmt.Errorf("%w: store topic epoch %d: %w", ErrClosed, e, err))
				c.promoteWaiting()
			}
		}
		if next := c.epochNext; next != 0 {
			c.epochNext = 0
			c.storeEpoch(next)
		}
	}
}

// dropStoring fails the exclusive producer waiting for its epoch to be stored.
func (c *topicCore) dropStoring(err error) {
	p := c.exclusive
	c.exclusive, c.storing = nil, 0
	c.fail(p, err)
}

// ready1 reports p connected under topic epoch e (stored: e <= c.stored).
func (c *topicCore) ready1(p *Producer, e uint64) {
	p.state = producerReady
	c.producers[p] = struct{}{}
	c.byName[p.Name] = p
	c.m.producers.Inc()
	c.emit(output{kind: outReady, p: p, ready: ProducerReady{LastSequenceID: c.dedup.last(p.Name), TopicEpoch: e}})
}

// removeProducer detaches p. notify tells the client (CLOSE_PRODUCER, or Failed for a
// producer not ready yet) — for removals the topic decides; a client that closed its
// producer is not told.
func (c *topicCore) removeProducer(p *Producer, notify bool) {
	switch p.state {
	case producerClosed:
		return
	case producerWaiting:
		p.state = producerClosed
		for i, q := range c.waiting {
			if q == p {
				c.waiting = append(c.waiting[:i], c.waiting[i+1:]...)
				c.m.waitingProducers.Dec()
				break
			}
		}
		if notify {
			c.emit(output{kind: outFailed, p: p, err: ErrClosed})
		}
		return
	case producerStoring:
		p.state = producerClosed
		c.exclusive, c.storing = nil, 0
		if notify {
			c.emit(output{kind: outFailed, p: p, err: ErrClosed})
		}
		c.promoteWaiting()
		return
	}
	p.state = producerClosed
	delete(c.producers, p)
	if c.byName[p.Name] == p {
		delete(c.byName, p.Name)
	}
	c.m.producers.Dec()
	if notify {
		c.emit(output{kind: outClose, p: p})
	}
	if c.exclusive == p {
		c.exclusive = nil
	}
	c.promoteWaiting()
}

// promoteWaiting gives the topic to the first queued WaitForExclusive producer once no
// other producer holds it.
func (c *topicCore) promoteWaiting() {
	if c.exclusive != nil || len(c.producers) > 0 || len(c.waiting) == 0 || c.state != StateActive || c.writeFenced {
		return
	}
	p := c.waiting[0]
	c.waiting = c.waiting[1:]
	c.m.waitingProducers.Dec()
	c.takeExclusive(p)
}

// closeProducers removes every producer (the topic is closing or terminated): ready ones
// are closed (CLOSE_PRODUCER), the others fail with err.
func (c *topicCore) closeProducers(err error) {
	for _, p := range c.waiting {
		c.m.waitingProducers.Dec()
		c.fail(p, err)
	}
	c.waiting = nil
	for _, p := range sortedProducers(c.producers) {
		c.removeProducer(p, true)
	}
	if c.exclusive != nil && c.exclusive.state == producerStoring {
		c.dropStoring(err)
	}
}

// sortedProducers returns ps in a deterministic order (by name, then id).
func sortedProducers(ps map[*Producer]struct{}) []*Producer {
	out := make([]*Producer, 0, len(ps))
	for p := range ps {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Producer) int {
		if c := cmp.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}

// Publishing.

// publish takes a SEND of p. It returns true if m was handed to the log (the owner releases
// what the publish holds when the add completes); otherwise the owner releases it now.
func (c *topicCore) publish(p *Producer, m Message) bool {
	if p.state != producerReady {
		return false
	}
	switch c.state {
	case StateActive:
		if c.writeFenced {
			c.emit(output{kind: outSendError, p: p, seq: m.SequenceID, code: pb.ServerError_ServiceNotReady,
				msg: "topic " + c.name + " is recovering from a failed write"})
			c.refused(p)
			return false
		}
	case StateTerminating, StateTerminated:
		c.terminatedSend(p, m.SequenceID)
		return false
	default:
		c.emit(output{kind: outSendError, p: p, seq: m.SequenceID, code: pb.ServerError_ServiceNotReady,
			msg: "topic " + c.name + " is closing"})
		c.refused(p)
		return false
	}
	if id, ok := c.dedupID(p, m); ok && c.dedup.on && (!m.Chunk || m.LastChunk) {
		switch c.dedup.check(id) {
		case dupPersisted:
			c.m.duplicates.Inc()
			c.emit(output{kind: outReceipt, p: p, seq: m.SequenceID, hi: m.HighestSequenceID,
				pos: Position{LedgerID: -1, EntryID: -1}})
			return false
		case dupInFlight:
			c.m.duplicates.Inc()
			if orig := c.findInflight(id); orig != nil {
				orig.dups = append(orig.dups, &pubOp{p: p, m: m})
				return false
			}
			// Not found: its original failed meanwhile; store it.
		}
		c.dedup.pushed(id)
	}
	op := &pubOp{p: p, m: m}
	c.inflight = append(c.inflight, op)
	c.m.pendingAdds.Inc()
	c.ready.adds = append(c.ready.adds, op)
	return true
}

// terminatedSend answers a SEND the terminated topic cannot store as Pulsar does: the
// producer is closed (CLOSE_PRODUCER: the client reconnects, is refused with
// TopicTerminatedError and fails its pending messages with it), then the SEND fails with
// TopicTerminatedError.
func (c *topicCore) terminatedSend(p *Producer, seq uint64) {
	if !c.mut.sendErrorBeforeClose {
		c.removeProducer(p, true)
	}
	c.emit(output{kind: outSendError, p: p, seq: seq, code: pb.ServerError_TopicTerminatedError,
		msg: "topic " + c.name + " is terminated"})
	c.removeProducer(p, true)
}

// findInflight returns the in-flight add whose deduplication identity covers id's.
func (c *topicCore) findInflight(id dedupID) *pubOp {
	for i := len(c.inflight) - 1; i >= 0; i-- {
		op := c.inflight[i]
		if o, ok := c.dedupID(op.p, op.m); ok && o.name == id.name && o.seq <= id.seq && id.seq <= o.hi {
			return op
		}
	}
	return nil
}

// learnLast records the last entry, which a read of the log found (msgs messages), unless
// the core knows a newer one.
func (c *topicCore) learnLast(pos Position, msgs int) {
	if c.lastMsgs == 0 && !pos.Less(c.last) {
		c.last, c.lastMsgs = pos, max(msgs, 1)
	}
}

// added completes add op at pos (or with err); nowMs is the wall clock in milliseconds.
func (c *topicCore) added(op *pubOp, pos Position, err error, nowMs int64) {
	if len(c.inflight) == 0 || c.inflight[0] != op {
		return // stale: the core was reset (closed) or the log broke its order
	}
	c.m.pendingAdds.Dec()
	c.inflight[0] = nil
	c.inflight = c.inflight[1:]
	if err != nil {
		c.addFailed(op, err)
		c.maybeUnfence()
		return
	}
	c.lastPublish = nowMs
	if !isMarkerProducer(op.p) && !op.m.Origin.Marker {
		// A marker is never given to a reader: the last message id is the last data entry
		// (else a reader's HasNext never ends, Pulsar's getLastDispatchablePosition).
		c.last, c.lastMsgs = pos, op.m.NumMessages
	}
	n, size := int64(op.m.NumMessages), int64(len(op.m.Data))
	c.rateIn.add(n, size)
	op.p.msgsIn += n
	op.p.bytesIn += size
	op.p.rateIn.add(n, size)
	c.m.msgsIn.Add(float64(n))
	c.m.bytesIn.Add(float64(size))
	if id, ok := c.dedupID(op.p, op.m); ok && c.dedup.on && (!op.m.Chunk || op.m.LastChunk) {
		c.dedup.persisted(id)
		c.maybeSnapshotDedup()
	}
	c.emit(output{kind: outReceipt, p: op.p, seq: op.m.SequenceID, hi: op.m.HighestSequenceID, pos: pos})
	for _, d := range op.dups {
		c.emit(output{kind: outReceipt, p: d.p, seq: d.m.SequenceID, hi: d.m.HighestSequenceID, pos: pos})
	}
	c.maybeUnfence()
}

// addFailed fails op. Any failure but a terminated log fences writes as Pulsar does: the
// producers are closed (they reconnect and resend) and no SEND is taken until the adds in
// flight have completed; then the deduplication state forgets what was pushed and not
// stored, so that the resends are stored, and never behind a later message of theirs.
func (c *topicCore) addFailed(op *pubOp, err error) {
	c.m.addErrors.Inc()
	terminated := errors.Is(err, mledger.ErrTerminated)
	if !terminated && !c.writeFenced {
		c.writeFenced = true
		for _, p := range sortedProducers(c.producers) {
			c.removeProducer(p, true)
		}
	}
	for _, o := range append([]*pubOp{op}, op.dups...) {
		switch {
		case terminated:
			c.terminatedSend(o.p, o.m.SequenceID)
		case errors.Is(err, mledger.ErrFenced):
			c.emit(output{kind: outSendError, p: o.p, seq: o.m.SequenceID, code: pb.ServerError_ServiceNotReady, msg: err.Error()})
		default:
			c.emit(output{kind: outSendError, p: o.p, seq: o.m.SequenceID, code: pb.ServerError_PersistenceError, msg: err.Error()})
		}
	}
}

// maybeUnfence lifts the write fence once no add is in flight.
func (c *topicCore) maybeUnfence() {
	if !c.writeFenced || len(c.inflight) > 0 {
		return
	}
	c.writeFenced = false
	c.dedup.resetPushed()
	c.promoteWaiting()
}

// failInflight fails every add in flight (the log closed without completing them).
func (c *topicCore) failInflight() {
	for _, op := range c.inflight {
		c.m.pendingAdds.Dec()
		c.emit(output{kind: outSendError, p: op.p, seq: op.m.SequenceID, code: pb.ServerError_ServiceNotReady, msg: "topic closed"})
	}
	clear(c.inflight)
	c.inflight = c.inflight[:0]
}

// Deduplication snapshots.

func (c *topicCore) maybeSnapshotDedup() {
	c.dedup.sinceSnapshot++
	if c.dedup.sinceSnapshot < c.dedupEvery || c.dedupTag != 0 {
		return
	}
	c.takeDedupSnapshot()
}

// snapshotDedupNow records a deduplication snapshot if entries were stored since the last
// one (the timed snapshots).
func (c *topicCore) snapshotDedupNow() {
	if c.dedup.on && c.dedup.sinceSnapshot > 0 && c.dedupTag == 0 {
		c.takeDedupSnapshot()
	}
}

func (c *topicCore) takeDedupSnapshot() {
	c.dedup.sinceSnapshot = 0
	c.dedupTag = c.nextTag()
	c.ready.props = append(c.ready.props, propWrite{key: propDedup, value: c.dedup.snapshot(c.last), tag: c.dedupTag})
}

// setDedup turns deduplication on (from an empty state) or off on the live topic.
func (c *topicCore) setDedup(on bool) {
	if on == c.dedup.on {
		return
	}
	c.dedup.init(on)
	c.dedup.sinceSnapshot = 0
}

// finalSnapshot returns the deduplication snapshot to record on close ("" if none is due).
func (c *topicCore) finalSnapshot() string {
	if c.dedup.on && c.dedup.sinceSnapshot > 0 {
		return c.dedup.snapshot(c.last)
	}
	return ""
}

// Terminating.

// terminate starts sealing the log; false if the topic is not Active.
func (c *topicCore) terminate() bool {
	if c.state != StateActive || c.become(StateTerminating) != nil {
		return false
	}
	c.terminateTag = c.nextTag()
	c.ready.terminate = c.terminateTag
	return true
}

// terminated completes the terminate tagged tag. It returns false if the completion is
// stale.
func (c *topicCore) terminated(tag uint64, err error) bool {
	if tag != c.terminateTag || c.state != StateTerminating {
		return false
	}
	c.terminateTag = 0
	if err != nil {
		if errors.Is(err, mledger.ErrFenced) {
			return c.become(StateFenced) == nil
		}
		c.become(StateActive) //nolint:errcheck // legal edge
		c.promoteWaiting()
		return true
	}
	c.become(StateTerminated) //nolint:errcheck // legal edge
	// Disconnect the producers (as Pulsar does): they reconnect, are refused with
	// TopicTerminatedError, and fail their pending messages with it.
	c.closeProducers(fmt.Errorf("%w: topic %s", ErrTerminated, c.name))
	return true
}
