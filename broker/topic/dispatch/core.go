package dispatch

import (
	"container/heap"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Position is the managed ledger's.
type Position = mledger.Position

// SubType is a subscription type: Exclusive, Shared, Failover or Key_Shared.
type SubType = pb.CommandSubscribe_SubType

// Subscription types.
const (
	Exclusive = pb.CommandSubscribe_Exclusive
	Shared    = pb.CommandSubscribe_Shared
	Failover  = pb.CommandSubscribe_Failover
	KeyShared = pb.CommandSubscribe_Key_Shared
)

// Errors returned by the core's inputs.
var (
	// ErrConsumerBusy: the subscription is Exclusive and has a consumer, or has another type.
	ErrConsumerBusy = errors.New("dispatch: consumer busy")
	// ErrConsumerAssign: a Key_Shared consumer's hash ranges overlap another's, or none are
	// left to split.
	ErrConsumerAssign = errors.New("dispatch: consumer hash ranges conflict")
	// ErrNotAllowed: a cumulative ack on a Shared or Key_Shared subscription.
	ErrNotAllowed = errors.New("dispatch: operation not allowed")
	// ErrResetInProgress: a seek arrived while another one is moving the cursor.
	ErrResetInProgress = errors.New("dispatch: a reset is in progress")
	// ErrStopped: the core was stopped (the subscription is closing or deleting).
	ErrStopped = errors.New("dispatch: stopped")
)

// ReadBatch bounds the entries of one cursor read or re-read.
const ReadBatch = 100

// MaxReplayPerConsumer bounds the look-ahead of Key_Shared: new entries are not read while
// this many entries per consumer wait in the replay set.
const MaxReplayPerConsumer = 1000

// RetryDelay is how long after a failed read the core asks to read again (ms).
const RetryDelay = 100

// Info is what dispatching needs to know about an entry (the owner decodes it from the
// entry's metadata).
type Info struct {
	Msgs      int    // messages in the entry (permits it takes), >= 1
	Hash      uint32 // sticky key slot (Key_Shared), 0..KeyHashRange-1
	DeliverAt int64  // Unix ms; 0: now
	// Marker: the entry is a marker (its metadata has marker_type): never delivered, it is
	// acknowledged on the cursor and handed to the owner in Ready.Markers (Pulsar's
	// filterEntriesForConsumer).
	Marker bool
}

// Entry is one entry read from the cursor.
type Entry struct {
	Pos  Position
	Info Info
	// Data is opaque to the core: it is handed back in the Send that delivers the entry.
	Data []byte
	// AckedBits are the messages of a batch entry that the cursor already has acknowledged
	// (bit i: message i), nil for none.
	AckedBits []uint64
}

// ReadStatus classifies the outcome of a read the owner performed.
type ReadStatus uint8

// Read outcomes.
const (
	// ReadOK: the entries were read.
	ReadOK ReadStatus = iota
	// ReadRetry: a transient failure; the core asks again after RetryDelay.
	ReadRetry
	// ReadIdle: the read ended without entries and should not be retried (cancelled, the
	// log is terminated and drained, or closed).
	ReadIdle
)

// ConsumerSpec describes a consumer that attaches.
type ConsumerSpec struct {
	Type     SubType
	Name     string
	Priority int32
	// Sticky and Ranges configure a Key_Shared consumer in STICKY mode (AUTO_SPLIT
	// otherwise); AllowOutOfOrder is the subscription's allowOutOfOrderDelivery (taken from
	// its first consumer).
	Sticky          bool
	Ranges          []HashRange
	AllowOutOfOrder bool
}

// CID identifies a consumer of the core (assigned by AddConsumer, never reused).
type CID uint64

// AckID is one acknowledged message id.
type AckID struct {
	Pos Position
	// AckSet, for a batch entry, has a bit set for each message still unacknowledged (the
	// protocol's ack_set); nil: the whole entry.
	AckSet []int64
	// BatchSize is the number of messages of the batch entry (0: unknown).
	BatchSize int
}

// Send delivers an entry to a consumer.
type Send struct {
	To    CID
	Entry Entry
	// RedeliveryCount is how many times the entry was delivered and returned before.
	RedeliveryCount uint32
	// AckSet, for a batch entry with some messages acknowledged, has a bit set for each
	// message the client must still deliver; nil otherwise.
	AckSet []int64
}

// Read asks the owner to read up to N new entries from the cursor, tagged with Epoch.
type Read struct {
	Epoch uint64
	N     int
}

// Replay asks the owner to re-read the given positions (skipping acknowledged ones).
type Replay struct {
	Epoch     uint64
	Positions []Position
}

// AckKind says which cursor call a CursorAck is.
type AckKind uint8

// Cursor acknowledgement kinds.
const (
	AckIndividual AckKind = iota + 1 // Positions
	AckCumulative                    // Pos
	AckBatchIndex                    // Pos, Index of Size
)

// CursorAck asks the owner to apply an acknowledgement to the cursor; Done (may be nil) is
// the client's callback, to be called with the cursor's outcome.
type CursorAck struct {
	Kind        AckKind
	Positions   []Position
	Pos         Position
	Index, Size int
	Done        func(error)
}

// Reply asks the owner to call Done with Err (an input that needed no cursor call).
type Reply struct {
	Done func(error)
	Err  error
}

// ActiveChange tells a Failover consumer whether it is the active one.
type ActiveChange struct {
	To     CID
	Active bool
}

// SeekTarget is where a seek moves the cursor: a position (Earliest, Latest or an entry),
// or, with PublishTime > 0, the first entry published at or after it (Unix ms).
type SeekTarget struct {
	Pos         Position
	PublishTime int64
}

// Ready is what the owner must do after an input, in this order: sends, cursor calls,
// replies, active changes, then the read, re-read and reset requests; arm a timer for
// TimerAt (0: none) that calls Tick.
type Ready struct {
	Sends []Send
	// Markers are the marker entries read (acknowledged in Acks, never sent): the owner
	// gives a replicated subscription's snapshot markers to its snapshot cache.
	Markers    []Entry
	Acks       []CursorAck
	Replies    []Reply
	Active     []ActiveChange
	CancelRead bool
	Read       *Read
	Replay     *Replay
	Reset      *SeekTarget
	TimerAt    int64
}

// Config configures a core.
type Config struct {
	// Partition is the topic's partition index (-1 or 0: not partitioned); it picks the
	// active consumer of a Failover subscription, as Pulsar does.
	Partition int
	// Shared is the topic's dispatch rate, which the subscriptions' cores draw on together
	// (nil: none); see rate.go.
	Shared Limiter
	// Mutation deliberately breaks the core (tests only: the simulation must catch it).
	Mutation Mutation
}

// Mutation lists deliberate bugs the simulation must catch. The zero value is the correct
// core.
type Mutation struct {
	RedeliverAcked  bool // an ack leaves the entry in the replay set
	DropRedelivery  bool // a departing consumer's unacknowledged entries are forgotten
	IgnoreKeyHold   bool // Key_Shared: a key moves to another consumer while the first holds entries of it
	AcceptStaleRead bool // a read issued before a seek is dispatched
	IgnorePermits   bool // entries are sent to consumers without permits
	NewBeforeReplay bool // Exclusive/Failover: new entries overtake older returned ones
	// A consumer subscribed again keeps its unacknowledged entries (the client dropped them).
	ReattachKeepsPending bool
	// A consumer subscribed again keeps its permits (the client grants them anew).
	ReattachKeepsPermits bool
	RateIgnored          bool // a read is issued although the dispatch rates allow none now
	RateUncharged        bool // what a read brought is not charged to the dispatch rates
	RateNoWake           bool // a read held back by the dispatch rates asks for no timer
	RateUncapped         bool // a read asks for more entries than the dispatch rates allow
	DeliverMarkers       bool // marker entries are dispatched to consumers like messages
}

type consumer struct {
	id       CID
	name     string
	priority int32
	closed   bool
	flowed   bool // the client sent a FLOW: it can receive ACTIVE_CONSUMER_CHANGE
	// Failover: the last active state decided for the consumer, and whether it was sent.
	active, activeKnown, activeSent bool
	permits                         int
	unacked                         int
}

type pendingEntry struct {
	c    *consumer
	info Info
}

type hashHold struct {
	c *consumer
	n int
}

// Core is a subscription's dispatcher: consumers and their permits, the pending
// (delivered, unacknowledged) set, the replay set, Key_Shared ranges and key holds, the
// delayed-delivery heap, the active consumer of Exclusive and Failover, and the
// subscription's dispatch rate. It is a pure,
// thread-unsafe state machine: inputs are method calls, outputs are collected in a Ready
// that the owner takes with Ready() and performs; it does no I/O, reads no clock and starts
// no goroutine.
//
// Invariants (checked by the simulation, sim_test.go):
//   - pending, replay and delayed are disjoint;
//   - at most one read and one re-read are in flight; a result of an older epoch is dropped;
//   - Key_Shared (in order): every pending entry of a hash is with one consumer;
//   - a read of new entries is issued only when the dispatch rates allow one (DR1).
type Core struct {
	cfg       Config
	mut       Mutation
	ready     Ready
	nextID    CID
	typ       SubType
	typSet    bool
	consumers []*consumer // in attach order
	byID      map[CID]*consumer
	active    *consumer // Exclusive and Failover: the consumer that receives
	ks        keySelector
	ksSticky  bool
	ksOOO     bool // allowOutOfOrderDelivery
	rr        int  // Shared: next consumer to try

	epoch     uint64
	stopped   bool
	reading   bool // a cursor read is in flight (possibly cancelled)
	replaying bool // a re-read of replay positions is in flight
	// replay holds delivered-then-returned, delayed-then-due and undeliverable entries, to
	// be re-read and dispatched before new ones (in position order).
	replay        map[Position]Info
	replayHashes  map[uint32]int // Key_Shared: replay entries per hash
	replayBlocked bool           // the last replay pass could dispatch nothing
	// changes counts unblock calls; a replay pass that dispatched nothing blocks the replay
	// set only if nothing changed while its re-read was in flight (replayFrom).
	changes, replayFrom uint64
	pending             map[Position]*pendingEntry
	pendingHash         map[uint32]*hashHold // Key_Shared: the consumer holding unacked entries of a hash
	redeliver           map[Position]uint32  // redelivery counts
	delayed             delayQueue
	avgMsgs             float64 // messages per entry, smoothed
	// batchAcked holds the acknowledged messages (bit i: message i) of partly acknowledged
	// batch entries, so that a redelivery carries ack_set and the client skips them.
	batchAcked map[Position][]uint64
	// dropped are the entries of reads dropped as stale: the cursor's read position is past
	// them, so if the reset that made them stale fails (or a stopped core restarts) they are
	// redelivered from here.
	dropped map[Position]Info
	// ackedAhead are positions acknowledged before the dispatcher saw them in this epoch
	// (acks that arrive after a reset, of messages delivered before it), and ackFloor the
	// highest cumulative acknowledgement: the cursor applies acks asynchronously, so a read
	// may still bring them back, and an acknowledged entry is never delivered again.
	ackedAhead map[Position]bool
	ackFloor   *Position
	// resetAcks are the acks received after the cursor reset was asked for: the cursor
	// applies them after it (the owner queues both in order), so they still count once it
	// is done.
	resetAcks     []Position
	resetAckFloor *Position
	resetting     *SeekTarget // a seek waiting for the reads in flight, or moving the cursor
	resetSent     bool
	retryAt       int64 // a read failed: read again at this time (0: no)
	// rate is the subscription's dispatch rate (rate.go); rateAt (Unix ms, 0: none) is when
	// the dispatch rates allow the read they held back. Invariant: a read of new entries is
	// issued only when rate and cfg.Shared allow one at now, for at most what they allow.
	rate   Rate
	rateAt int64
	now    int64 // Unix ms: the time of the last input that told it (SetTime, Tick, ReadDone)
	// maxUnackedConsumer and maxUnackedSub bound the unacknowledged messages of a consumer
	// and of the subscription (0: unlimited): at the bound, dispatch stops until acks come.
	maxUnackedConsumer, maxUnackedSub int
	// delayTick (ms) is the delayed-delivery tick time (Pulsar's tickTime, not strict): an
	// entry due within it of now is delivered now, so the timer fires no more precisely.
	delayTick int64
}

// New returns a core with no consumers.
func New(cfg Config) *Core {
	d := &Core{cfg: cfg, mut: cfg.Mutation, byID: map[CID]*consumer{}, avgMsgs: 1}
	d.clear()
	return d
}

func (d *Core) clear() {
	d.pending = map[Position]*pendingEntry{}
	d.pendingHash = map[uint32]*hashHold{}
	d.replay = map[Position]Info{}
	d.replayHashes = map[uint32]int{}
	d.redeliver = map[Position]uint32{}
	d.batchAcked = map[Position][]uint64{}
	d.dropped = map[Position]Info{}
	d.ackedAhead = map[Position]bool{}
	d.ackFloor = nil
	d.delayed = nil
	d.replayBlocked = false
	d.retryAt = 0
	for _, c := range d.consumers {
		c.unacked = 0
	}
}

// Ready returns what the owner must do now and resets it. Its slices are valid until the
// next input: the core reuses them (perform them before calling the core again).
func (d *Core) Ready() Ready {
	r := d.ready
	d.ready = Ready{Sends: r.Sends[:0], Acks: r.Acks[:0], Replies: r.Replies[:0], Active: r.Active[:0]}
	r.TimerAt = d.timerAt()
	return r
}

func (d *Core) timerAt() int64 {
	if d.stopped {
		return 0
	}
	at := d.retryAt
	if d.rateAt != 0 && (at == 0 || d.rateAt < at) {
		at = d.rateAt
	}
	if len(d.delayed) > 0 && (at == 0 || d.delayed[0].at-d.delayTick < at) {
		at = d.delayed[0].at - d.delayTick
	}
	return at
}

// Epoch is the dispatch epoch: reads are issued under it; a seek, a reset and Stop bump it.
func (d *Core) Epoch() uint64 { return d.epoch }

// Type returns the subscription type (that of its consumers; the first consumer's sets it).
func (d *Core) Type() SubType { return d.typ }

// Active returns the consumer that receives on an Exclusive or Failover subscription.
func (d *Core) Active() (CID, bool) {
	if d.active == nil {
		return 0, false
	}
	return d.active.id, true
}

// ConsumerState returns c's available permits and unacknowledged messages.
func (d *Core) ConsumerState(id CID) (permits, unacked int) {
	if c := d.byID[id]; c != nil {
		return c.permits, c.unacked
	}
	return 0, 0
}

// RangesOf returns a Key_Shared consumer's hash ranges, for the statistics.
func (d *Core) RangesOf(id CID) []string {
	if c := d.byID[id]; c != nil && d.typ == KeyShared {
		return d.ks.rangesOf(c)
	}
	return nil
}

// Delayed returns the number of entries waiting for their delivery time.
func (d *Core) Delayed() int { return len(d.delayed) }

// Consumers.

// AddConsumer attaches a consumer. The first consumer sets the subscription type; later
// ones must have the same.
func (d *Core) AddConsumer(spec ConsumerSpec) (CID, error) {
	if d.stopped {
		return 0, ErrStopped
	}
	if len(d.consumers) > 0 && spec.Type != d.typ {
		return 0, fmt.Errorf("%w: the subscription is of type %v, not %v", ErrConsumerBusy, d.typ, spec.Type)
	}
	if len(d.consumers) == 0 && (spec.Type != d.typ || !d.typSet) {
		d.typ, d.typSet = spec.Type, true
		d.ks = keySelector{}
	}
	d.nextID++
	c := &consumer{id: d.nextID, name: spec.Name, priority: spec.Priority}
	switch d.typ {
	case Exclusive:
		if len(d.consumers) > 0 {
			return 0, fmt.Errorf("%w: an exclusive consumer is already connected", ErrConsumerBusy)
		}
	case KeyShared:
		if len(d.consumers) > 0 && spec.Sticky != d.ksSticky {
			return 0, fmt.Errorf("%w: key-shared mode differs from the subscription's", ErrConsumerBusy)
		}
		var ranges []HashRange
		if spec.Sticky {
			ranges = append([]HashRange{}, spec.Ranges...)
		}
		if err := d.ks.add(c, ranges); err != nil {
			return 0, err
		}
		d.ksSticky = spec.Sticky
		if len(d.consumers) == 0 {
			d.ksOOO = spec.AllowOutOfOrder
		}
	}
	d.consumers = append(d.consumers, c)
	d.byID[c.id] = c
	d.pickActive()
	d.unblock()
	d.dispatch()
	return c.id, nil
}

// RemoveConsumer detaches a consumer; its unacknowledged entries go back for the others,
// with a higher redelivery count if countRedelivery (a consumer that closed or
// disconnected, as opposed to one the broker disconnects).
func (d *Core) RemoveConsumer(id CID, countRedelivery bool) {
	c := d.byID[id]
	if c == nil || c.closed {
		return
	}
	c.closed = true
	delete(d.byID, id)
	d.consumers = slices.DeleteFunc(d.consumers, func(x *consumer) bool { return x == c })
	if d.typ == KeyShared {
		d.ks.remove(c, d.ksSticky)
	}
	if d.mut.DropRedelivery {
		for pos, pe := range d.pending {
			if pe.c == c {
				d.unpend(pos, pe) // forgotten, as if acknowledged
			}
		}
	}
	d.returnPending(c, countRedelivery)
	if d.active == c {
		d.active = nil
	}
	d.pickActive()
	d.unblock()
	d.dispatch()
}

// pickActive chooses the consumer of an Exclusive or Failover subscription: the first by
// (priority, name), as Pulsar does for a non-partitioned topic (partition i: the i-th).
// On a change the previous one's unacknowledged entries go back for the new one, and
// Failover consumers are told who is active.
func (d *Core) pickActive() {
	if d.typ != Exclusive && d.typ != Failover {
		d.active = nil
		return
	}
	var next *consumer
	if len(d.consumers) > 0 {
		sorted := slices.Clone(d.consumers)
		sort.SliceStable(sorted, func(i, j int) bool {
			if sorted[i].priority != sorted[j].priority {
				return sorted[i].priority < sorted[j].priority
			}
			return sorted[i].name < sorted[j].name
		})
		idx := 0
		if p := d.cfg.Partition; p > 0 {
			idx = p % len(sorted)
		}
		next = sorted[idx]
	}
	prev := d.active
	d.active = next
	if prev != next && prev != nil && !prev.closed {
		d.returnPending(prev, false)
	}
	if d.typ == Failover && (prev != next || next == nil) {
		for _, c := range d.consumers {
			d.notifyActive(c, c == next)
		}
	} else if d.typ == Failover && next != nil {
		// A new standby consumer learns who is active.
		if c := d.consumers[len(d.consumers)-1]; c != next && !c.activeSent {
			d.notifyActive(c, false)
		}
	}
}

// notifyActive sends ACTIVE_CONSUMER_CHANGE to c — once c has sent its first FLOW: the Go
// client registers the consumer's handler only after SUBSCRIBE succeeded, and drops a
// notification that arrives earlier.
func (d *Core) notifyActive(c *consumer, on bool) {
	c.active = on
	c.activeKnown = true
	if !c.flowed {
		return
	}
	c.activeSent = true
	d.ready.Active = append(d.ready.Active, ActiveChange{To: c.id, Active: on})
}

// returnPending moves c's unacknowledged entries back to the replay set (with a higher
// redelivery count if countRedelivery).
func (d *Core) returnPending(c *consumer, countRedelivery bool) {
	for pos, pe := range d.pending {
		if pe.c != c {
			continue
		}
		d.unpend(pos, pe)
		d.addReplay(pos, pe.info)
		if countRedelivery {
			d.redeliver[pos]++
		}
	}
}

func (d *Core) unpend(pos Position, pe *pendingEntry) {
	delete(d.pending, pos)
	pe.c.unacked -= pe.info.Msgs
	if h := d.pendingHash[pe.info.Hash]; h != nil && h.c == pe.c {
		if h.n--; h.n <= 0 {
			delete(d.pendingHash, pe.info.Hash)
		}
	}
}

func (d *Core) addReplay(pos Position, info Info) {
	if _, ok := d.replay[pos]; ok {
		return
	}
	d.replay[pos] = info
	d.replayHashes[info.Hash]++
}

func (d *Core) dropReplay(pos Position) {
	info, ok := d.replay[pos]
	if !ok {
		return
	}
	delete(d.replay, pos)
	if d.replayHashes[info.Hash]--; d.replayHashes[info.Hash] <= 0 {
		delete(d.replayHashes, info.Hash)
	}
}

// unblock lets the replay set be tried again (something changed: an ack, permits, a
// consumer).
func (d *Core) unblock() {
	d.replayBlocked = false
	d.changes++
}

// Flow adds n permits (messages the consumer can take).
func (d *Core) Flow(id CID, n int) {
	c := d.byID[id]
	if c == nil {
		return
	}
	c.permits += n
	if !c.flowed {
		c.flowed = true
		if c.activeKnown {
			d.notifyActive(c, c.active)
		}
	}
	d.unblock()
	d.dispatch()
}

// Dispatching.

// eligiblePermits is the number of messages the consumers can take now.
func (d *Core) eligiblePermits() int {
	switch d.typ {
	case Exclusive, Failover:
		if d.active == nil {
			return 0
		}
		return max(d.room(d.active), 0)
	}
	n := 0
	for _, c := range d.consumers {
		n += max(d.room(c), 0)
	}
	return n
}

// room is how many more messages c may take now: its permits, bounded by the
// unacknowledged-message limits.
func (d *Core) room(c *consumer) int {
	n := c.permits
	if d.maxUnackedConsumer > 0 {
		n = min(n, d.maxUnackedConsumer-c.unacked)
	}
	if d.maxUnackedSub > 0 {
		n = min(n, d.maxUnackedSub-d.Unacked())
	}
	return n
}

// Unacked is the number of messages delivered to the consumers and not acknowledged.
func (d *Core) Unacked() int {
	n := 0
	for _, c := range d.consumers {
		n += c.unacked
	}
	return n
}

// SetUnackedLimits bounds the unacknowledged messages per consumer and per subscription
// (0: unlimited); dispatch stops at a bound until acknowledgements come.
func (d *Core) SetUnackedLimits(perConsumer, perSubscription int) {
	d.maxUnackedConsumer, d.maxUnackedSub = max(perConsumer, 0), max(perSubscription, 0)
	d.unblock()
	d.dispatch()
}

// SetDelayedTick sets the delayed-delivery tick time in ms (0: exact): entries due within it
// are delivered at once, and the delayed ones that become due within it are released.
func (d *Core) SetDelayedTick(ms int64) {
	d.delayTick = max(ms, 0)
	d.Tick(d.now)
}

// Blocked reports whether consumer id (or, with id 0, the subscription) is at its
// unacknowledged-message limit.
func (d *Core) Blocked(id CID) bool {
	if id == 0 {
		return d.maxUnackedSub > 0 && d.Unacked() >= d.maxUnackedSub
	}
	c := d.byID[id]
	return c != nil && d.maxUnackedConsumer > 0 && c.unacked >= d.maxUnackedConsumer
}

// dispatch asks for the reads the consumers' permits allow: first a re-read of the replay
// set, then (if it is empty or blocked) a read of new entries.
func (d *Core) dispatch() {
	if d.stopped || d.resetting != nil || d.retryAt != 0 {
		return
	}
	permits := d.eligiblePermits()
	if permits <= 0 {
		return
	}
	if len(d.replay) > 0 && !d.replaying && !d.replayBlocked {
		d.readReplay(permits)
	}
	if d.reading || (len(d.replay) > 0 && !d.replayBlocked) {
		return
	}
	if d.typ == KeyShared && len(d.replay) >= MaxReplayPerConsumer*max(len(d.consumers), 1) {
		return
	}
	n := int(float64(permits)/max(d.avgMsgs, 1) + 0.5)
	n = min(max(n, 1), ReadBatch)
	if d.rate.On() || d.cfg.Shared != nil {
		allow, wait := d.rateAllow()
		d.rateAt = 0
		if allow <= 0 && !d.mut.RateIgnored {
			if !d.mut.RateNoWake {
				d.rateAt = d.now + max((wait+999_999)/1_000_000, 1)
			}
			return
		}
		if !d.mut.RateUncapped {
			n = max(min(n, allow), 1)
		}
	}
	d.reading = true
	d.ready.Read = &Read{Epoch: d.epoch, N: n}
}

func (d *Core) readReplay(permits int) {
	ps := make([]Position, 0, len(d.replay))
	for p := range d.replay {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b Position) int { return a.Compare(b) })
	limit := ReadBatch
	if d.typ != KeyShared {
		limit = min(limit, max(int(float64(permits)/max(d.avgMsgs, 1)+0.5), 1))
	}
	if len(ps) > limit {
		ps = ps[:limit]
	}
	d.replaying = true
	d.replayFrom = d.changes
	d.ready.Replay = &Replay{Epoch: d.epoch, Positions: ps}
}

// stale reports whether a result issued under epoch must be dropped.
func (d *Core) stale(epoch uint64) bool {
	if d.mut.AcceptStaleRead && !d.stopped {
		return false
	}
	return epoch != d.epoch || d.stopped
}

// ReadDone feeds the outcome of a Read issued under epoch, at time now (Unix ms).
func (d *Core) ReadDone(epoch uint64, es []Entry, status ReadStatus, now int64) {
	d.now = now
	d.reading = false
	d.charge(es)
	defer d.maybeStartReset()
	es = d.dropAcked(es)
	es = d.skipMarkers(es)
	if d.stale(epoch) {
		for _, e := range es {
			d.dropped[e.Pos] = e.Info
		}
		return
	}
	switch status {
	case ReadRetry:
		d.retryAt = now + RetryDelay
		return
	case ReadIdle:
		return
	}
	for _, e := range es {
		d.avgMsgs = 0.9*d.avgMsgs + 0.1*float64(e.Info.Msgs)
		d.mergeBatchAcked(e)
		d.offer(e, e.Info, false)
	}
	d.dispatch()
}

// skipMarkers removes the marker entries from a read, acknowledges them individually on the
// cursor and hands them to the owner (Ready.Markers), as Pulsar's filterEntriesForConsumer
// does: a marker is never delivered, and never holds the mark-delete position back. A
// stale read's markers are acknowledged too (a marker is never delivered, whatever the
// cursor's position).
func (d *Core) skipMarkers(es []Entry) []Entry {
	if d.mut.DeliverMarkers {
		return es
	}
	var ps []Position
	kept := es[:0:0]
	for i, e := range es {
		if !e.Info.Marker {
			if ps != nil {
				kept = append(kept, e)
			}
			continue
		}
		if ps == nil {
			kept = append(kept, es[:i]...)
		}
		ps = append(ps, e.Pos)
		d.ready.Markers = append(d.ready.Markers, e)
	}
	if ps == nil {
		return es
	}
	d.ready.Acks = append(d.ready.Acks, CursorAck{Kind: AckIndividual, Positions: ps})
	return kept
}

// maxAckedAhead bounds ackedAhead (acks of positions far ahead of the reads are not
// remembered beyond it).
const maxAckedAhead = 10000

// dropAcked removes from a read's entries those acknowledged already (see ackedAhead) and
// forgets the acknowledgements the read went past.
func (d *Core) dropAcked(es []Entry) []Entry {
	if len(es) == 0 || (len(d.ackedAhead) == 0 && d.ackFloor == nil) {
		return es
	}
	last := es[len(es)-1].Pos
	floor := d.ackFloor
	es = slices.DeleteFunc(es, func(e Entry) bool { return d.ackedAhead[e.Pos] || (floor != nil && !floor.Less(e.Pos)) })
	for p := range d.ackedAhead {
		if !last.Less(p) {
			delete(d.ackedAhead, p)
		}
	}
	return es
}

// ReplayDone feeds the outcome of a Replay issued under epoch: es are the entries found
// (acknowledged ones are missing).
func (d *Core) ReplayDone(epoch uint64, asked []Position, es []Entry, status ReadStatus, now int64) {
	d.now = now
	d.replaying = false
	defer d.maybeStartReset()
	if d.stale(epoch) {
		return
	}
	if status != ReadOK {
		if status == ReadRetry {
			d.retryAt = now + RetryDelay
		}
		return
	}
	got := make(map[Position]bool, len(es))
	for _, e := range es {
		got[e.Pos] = true
	}
	for _, p := range asked {
		if !got[p] { // acknowledged meanwhile (or trimmed)
			d.dropReplay(p)
			delete(d.redeliver, p)
		}
	}
	blocked := map[uint32]bool{}
	keyOrder := d.typ == KeyShared && !d.ksOOO
	// Entries returned to the replay set while this re-read was in flight (a consumer left)
	// may be older than what it brought back: a key's entries wait for its oldest one.
	oldest := map[uint32]Position{}
	if keyOrder {
		for p, info := range d.replay {
			if !got[p] {
				if o, ok := oldest[info.Hash]; !ok || p.Less(o) {
					oldest[info.Hash] = p
				}
			}
		}
	}
	// Exclusive and Failover: likewise, nothing overtakes an older entry returned meanwhile.
	var first Position
	haveFirst := false
	if d.typ == Exclusive || d.typ == Failover {
		for p := range d.replay {
			if !got[p] && (!haveFirst || p.Less(first)) {
				first, haveFirst = p, true
			}
		}
	}
	sent := 0
	for _, e := range es {
		info, ok := d.replay[e.Pos]
		if !ok {
			continue // acknowledged or already dispatched
		}
		if info.Msgs == 0 {
			info = e.Info
		}
		if keyOrder {
			if o, ok := oldest[info.Hash]; ok && o.Less(e.Pos) {
				blocked[info.Hash] = true
			}
			if blocked[info.Hash] {
				continue
			}
		}
		if haveFirst && first.Less(e.Pos) && !d.mut.NewBeforeReplay {
			continue
		}
		d.mergeBatchAcked(e)
		d.dropReplay(e.Pos)
		if d.offer(e, info, true) {
			sent++
			continue
		}
		// Back in the replay set: later entries of its key (of the subscription, for
		// Exclusive and Failover) wait behind it.
		if keyOrder {
			blocked[info.Hash] = true
		}
		if (d.typ == Exclusive || d.typ == Failover) && !haveFirst {
			first, haveFirst = e.Pos, true
		}
	}
	// Nothing could go out: wait for a change (an ack, permits, a consumer) before trying
	// again — unless one came while the re-read was in flight (an entry returned then may
	// be the one the others wait for).
	if sent == 0 && len(d.replay) > 0 && d.changes == d.replayFrom {
		d.replayBlocked = true
	}
	d.dispatch()
}

func (d *Core) mergeBatchAcked(e Entry) {
	if e.AckedBits == nil {
		return
	}
	words := d.batchAcked[e.Pos]
	for i, w := range e.AckedBits {
		if i >= len(words) {
			words = append(words, 0)
		}
		words[i] |= w
	}
	d.batchAcked[e.Pos] = words
}

// offer delivers one entry if a consumer can take it now; otherwise it goes to the replay
// set (or the delayed queue). It reports whether the entry was sent.
func (d *Core) offer(e Entry, info Info, replayed bool) bool {
	if _, dup := d.pending[e.Pos]; dup {
		return false // already with a consumer
	}
	shared := d.typ == Shared || d.typ == KeyShared
	if shared && info.DeliverAt > d.now+d.delayTick && !replayed {
		heap.Push(&d.delayed, delayedEntry{at: info.DeliverAt, pos: e.Pos, info: info})
		return false
	}
	if !replayed && (d.typ == Exclusive || d.typ == Failover) && !d.mut.NewBeforeReplay && d.olderInReplay(e.Pos) {
		d.addReplay(e.Pos, info) // an older entry was returned: it goes first
		return false
	}
	c := d.pick(info, replayed)
	if c == nil {
		d.addReplay(e.Pos, info)
		return false
	}
	d.send(c, e, info)
	return true
}

func (d *Core) olderInReplay(p Position) bool {
	for q := range d.replay {
		if q.Less(p) {
			return true
		}
	}
	return false
}

// pick chooses the consumer for an entry, nil if none can take it now.
func (d *Core) pick(info Info, replayed bool) *consumer {
	ok := func(c *consumer) bool { return c != nil && (d.room(c) > 0 || d.mut.IgnorePermits) }
	switch d.typ {
	case Exclusive, Failover:
		if ok(d.active) {
			return d.active
		}
		return nil
	case Shared:
		n := len(d.consumers)
		for i := 0; i < n; i++ {
			c := d.consumers[(d.rr+i)%n]
			if ok(c) {
				d.rr = (d.rr + i + 1) % n
				return c
			}
		}
		return nil
	case KeyShared:
		c := d.ks.pick(info.Hash)
		if !ok(c) {
			return nil
		}
		if d.ksOOO {
			return c
		}
		// Per-key order: older entries of this key still waiting for redelivery go first,
		// and a key moves to a new consumer only once its previous consumer acknowledged
		// everything it got of it.
		if !replayed && d.replayHashes[info.Hash] > 0 {
			return nil
		}
		if h := d.pendingHash[info.Hash]; h != nil && h.c != c && !d.mut.IgnoreKeyHold {
			return nil
		}
		return c
	}
	return nil
}

func (d *Core) send(c *consumer, e Entry, info Info) {
	s := Send{To: c.id, Entry: e, RedeliveryCount: d.redeliver[e.Pos]}
	if words := d.batchAcked[e.Pos]; words != nil && info.Msgs > 1 {
		// A set bit of ack_set is a message the client must still deliver.
		set := make([]int64, (info.Msgs+63)/64)
		for i := 0; i < info.Msgs; i++ {
			if i/64 >= len(words) || words[i/64]&(1<<(i%64)) == 0 {
				set[i/64] |= 1 << (i % 64)
			}
		}
		s.AckSet = set
	}
	d.ready.Sends = append(d.ready.Sends, s)
	c.permits -= info.Msgs
	c.unacked += info.Msgs
	d.pending[e.Pos] = &pendingEntry{c: c, info: info}
	if d.typ == KeyShared {
		h := d.pendingHash[info.Hash]
		if h == nil || h.c != c {
			h = &hashHold{c: c}
			d.pendingHash[info.Hash] = h
		}
		h.n++
	}
}

// Tick tells the core the time (Unix ms): due delayed entries become deliverable and a
// failed read is retried.
func (d *Core) Tick(now int64) {
	d.now = now
	if d.stopped {
		return
	}
	if d.retryAt != 0 && d.retryAt <= now {
		d.retryAt = 0
	}
	if d.rateAt != 0 && d.rateAt <= now {
		d.rateAt = 0
	}
	for len(d.delayed) > 0 && d.delayed[0].at <= now+d.delayTick {
		e := heap.Pop(&d.delayed).(delayedEntry)
		e.info.DeliverAt = 0
		d.addReplay(e.pos, e.info)
	}
	d.unblock()
	d.dispatch()
}

// Acknowledgements.

// Ack applies an acknowledgement of consumer id; done (may be nil) is handed back in the
// CursorAck or Reply that completes it.
func (d *Core) Ack(id CID, cumulative bool, ids []AckID, done func(error)) {
	if cumulative {
		d.ackCumulative(ids, done)
	} else {
		d.ackIndividual(ids, done)
	}
	d.unblock()
	d.dispatch()
}

func (d *Core) reply(done func(error), err error) {
	if done != nil {
		d.ready.Replies = append(d.ready.Replies, Reply{Done: done, Err: err})
	}
}

// AckUpTo acknowledges every entry up to pos, on a subscription of any type: the update of
// a replicated subscription from another cluster (package replication/replsub), which
// Pulsar applies as a cumulative acknowledgement. done (may be nil) is handed back in the
// CursorAck.
func (d *Core) AckUpTo(pos Position, done func(error)) {
	d.ackUpTo(pos, done)
	d.unblock()
	d.dispatch()
}

func (d *Core) ackCumulative(ids []AckID, done func(error)) {
	if d.typ == Shared || d.typ == KeyShared {
		d.reply(done, fmt.Errorf("%w: cumulative ack on a %v subscription", ErrNotAllowed, d.typ))
		return
	}
	if len(ids) == 0 {
		d.reply(done, nil)
		return
	}
	id := ids[0]
	pos := id.Pos
	if len(id.AckSet) > 0 {
		// A batch acknowledged up to some index: everything before the entry, and the
		// acknowledged messages of the entry.
		d.ackBatchBits(id)
		if pos.EntryID == 0 {
			d.reply(done, nil)
			return
		}
		pos.EntryID--
	}
	d.ackUpTo(pos, done)
}

func (d *Core) ackUpTo(pos Position, done func(error)) {
	for p, pe := range d.pending {
		if !pos.Less(p) {
			d.unpend(p, pe)
			delete(d.redeliver, p)
		}
	}
	for p := range d.replay {
		if !pos.Less(p) && !d.mut.RedeliverAcked {
			d.dropReplay(p)
			delete(d.redeliver, p)
		}
	}
	for p := range d.batchAcked {
		if !pos.Less(p) {
			delete(d.batchAcked, p)
		}
	}
	for p := range d.dropped {
		if !pos.Less(p) {
			delete(d.dropped, p)
		}
	}
	if d.ackFloor == nil || d.ackFloor.Less(pos) {
		d.ackFloor = &pos
	}
	if d.resetSent && d.resetting != nil && (d.resetAckFloor == nil || d.resetAckFloor.Less(pos)) {
		d.resetAckFloor = &pos
	}
	d.ready.Acks = append(d.ready.Acks, CursorAck{Kind: AckCumulative, Pos: pos, Done: done})
}

func (d *Core) ackIndividual(ids []AckID, done func(error)) {
	var ps []Position
	for _, id := range ids {
		if len(id.AckSet) > 0 {
			if d.ackBatchBits(id) {
				ps = append(ps, id.Pos)
			}
			continue
		}
		ps = append(ps, id.Pos)
	}
	for _, p := range ps {
		_, replayed := d.replay[p]
		if pe := d.pending[p]; pe != nil {
			d.unpend(p, pe)
		} else if !replayed && len(d.ackedAhead) < maxAckedAhead {
			d.ackedAhead[p] = true
		}
		if d.resetSent && d.resetting != nil && len(d.resetAcks) < maxAckedAhead {
			d.resetAcks = append(d.resetAcks, p)
		}
		if !d.mut.RedeliverAcked {
			d.dropReplay(p)
		}
		delete(d.redeliver, p)
		delete(d.batchAcked, p)
		delete(d.dropped, p)
	}
	if len(ps) > 0 {
		d.ready.Acks = append(d.ready.Acks, CursorAck{Kind: AckIndividual, Positions: ps, Done: done})
	} else {
		d.reply(done, nil)
	}
}

// ackBatchBits applies a batch-index ack (ack_set: a set bit is a message still
// unacknowledged). It reports whether the whole entry is now acknowledged.
func (d *Core) ackBatchBits(id AckID) bool {
	pos, size := id.Pos, id.BatchSize
	if pe := d.pending[pos]; pe != nil && size <= 0 {
		size = pe.info.Msgs
	}
	if size <= 0 {
		return false // unknown batch size: the entry stays unacknowledged
	}
	all := true
	acked := d.batchAcked[pos]
	for i := 0; i < size; i++ {
		w := i / 64
		unacked := w < len(id.AckSet) && uint64(id.AckSet[w])&(1<<(i%64)) != 0
		if unacked {
			all = false
			continue
		}
		if w >= len(acked) {
			acked = append(acked, make([]uint64, w-len(acked)+1)...)
		}
		if acked[w]&(1<<(i%64)) == 0 {
			acked[w] |= 1 << (i % 64)
			d.ready.Acks = append(d.ready.Acks, CursorAck{Kind: AckBatchIndex, Pos: pos, Index: i, Size: size})
		}
	}
	if all {
		delete(d.batchAcked, pos)
	} else {
		d.batchAcked[pos] = acked
	}
	return all
}

// Reattach restarts consumer id as the client does when it subscribes again on the same
// connection (a repeated SUBSCRIBE of a consumer id that is attached, which Pulsar answers
// with success): the client dropped what it had prefetched and grants its permits anew
// with a first FLOW. So its unacknowledged entries return for redelivery (a reconnection,
// not counted as a redelivery), its permits go to zero, and a Failover consumer is told
// again whether it is active once it flows. Without it the entries the client dropped stay
// with the consumer, unacknowledged and never sent again.
func (d *Core) Reattach(id CID) {
	c := d.byID[id]
	if c == nil {
		return
	}
	if !d.mut.ReattachKeepsPermits {
		c.permits = 0
	}
	c.flowed, c.activeSent = false, false
	if !d.mut.ReattachKeepsPending {
		d.returnPending(c, false)
	}
	d.unblock()
	d.dispatch()
}

// Redeliver returns consumer id's unacknowledged entries at ps (all of them if ps is empty)
// for redelivery with a higher redelivery count.
func (d *Core) Redeliver(id CID, ps []Position) {
	c := d.byID[id]
	if c == nil {
		return
	}
	if len(ps) == 0 {
		d.returnPending(c, true)
	} else {
		for _, pos := range ps {
			pe := d.pending[pos]
			if pe == nil || pe.c != c {
				continue
			}
			d.unpend(pos, pe)
			d.addReplay(pos, pe.info)
			d.redeliver[pos]++
		}
	}
	d.unblock()
	d.dispatch()
}

// Seek.

// Seek starts moving the cursor to t: reads in flight are cancelled and their results
// dropped; once none is in flight, Ready carries Reset for the owner to move the cursor,
// which reports with ResetDone.
func (d *Core) Seek(t SeekTarget) error {
	if d.stopped {
		return ErrStopped
	}
	if d.resetting != nil {
		return ErrResetInProgress
	}
	d.resetting = &t
	d.resetSent = false
	d.epoch++
	if d.reading {
		d.ready.CancelRead = true
	}
	d.maybeStartReset()
	return nil
}

// maybeStartReset asks for the cursor move once no read of it is in flight (a read
// finishing after the reset would move the read position back).
func (d *Core) maybeStartReset() {
	if d.resetting == nil || d.resetSent || d.reading || d.replaying {
		return
	}
	d.resetSent = true
	t := *d.resetting
	d.ready.Reset = &t
}

// ResetDone reports the cursor move. On success every delivered, returned and delayed entry
// is forgotten (the cursor decides again what is delivered) and every consumer is detached,
// as Pulsar does: the owner disconnects the consumers it returns (they reconnect).
func (d *Core) ResetDone(err error) (disconnected []CID) {
	if d.resetting == nil || !d.resetSent {
		return nil
	}
	d.resetting = nil
	if err != nil {
		d.resetAcks, d.resetAckFloor = nil, nil
		d.restoreDropped()
		d.dispatch()
		return nil
	}
	d.epoch++
	acks, floor := d.resetAcks, d.resetAckFloor
	d.resetAcks, d.resetAckFloor = nil, nil
	d.clear()
	for _, p := range acks {
		d.ackedAhead[p] = true
	}
	d.ackFloor = floor
	for _, c := range d.consumers {
		disconnected = append(disconnected, c.id)
		c.closed = true
		delete(d.byID, c.id)
	}
	d.consumers = nil
	d.active = nil
	d.ks = keySelector{}
	return disconnected
}

// restoreDropped returns the entries of stale reads to the replay set (the reset that made
// them stale did not happen).
func (d *Core) restoreDropped() {
	for p, info := range d.dropped {
		if _, ok := d.pending[p]; !ok {
			d.addReplay(p, info)
		}
	}
	clear(d.dropped)
}

// Stop ends dispatching (the subscription is closing or being deleted): reads in flight are
// cancelled and their results dropped; nothing is read again.
func (d *Core) Stop() {
	if d.stopped {
		return
	}
	d.stopped = true
	d.epoch++
	if d.reading {
		d.ready.CancelRead = true
	}
	d.retryAt = 0
}

// Restart undoes Stop (deleting the cursor failed: the subscription is active again).
func (d *Core) Restart() {
	if !d.stopped {
		return
	}
	d.stopped = false
	d.restoreDropped()
	d.unblock()
	d.dispatch()
}

// Delayed delivery.

type delayedEntry struct {
	at   int64
	pos  Position
	info Info
}

// delayQueue is a min-heap of delayed entries by delivery time.
type delayQueue []delayedEntry

func (q delayQueue) Len() int { return len(q) }
func (q delayQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].pos.Less(q[j].pos)
}
func (q delayQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *delayQueue) Push(x any)   { *q = append(*q, x.(delayedEntry)) }
func (q *delayQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
