package txn

import (
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/magnetar-io/magnetar/metadata"
)

// Errors a coordinator answers with. The broker maps them to Pulsar's error codes.
var (
	// ErrNotFound: no such transaction, or it has ended already (TransactionNotFound).
	ErrNotFound = errors.New("transaction not found")
	// ErrInvalidStatus: the transaction is not in the state the operation needs
	// (InvalidTxnStatus).
	ErrInvalidStatus = errors.New("invalid transaction status")
	// ErrTooMany: the coordinator holds its maximum of open transactions.
	ErrTooMany = errors.New("too many open transactions")
	// ErrNotReady: the coordinator is loading or closed.
	ErrNotReady = errors.New("transaction coordinator not ready")
	// ErrUnavailable: the metadata store failed the operation; its outcome is not applied.
	ErrUnavailable = errors.New("transaction metadata unavailable")
)

// CoreConfig configures a coordinator core.
type CoreConfig struct {
	// TC is the coordinator's index (the Most bits of its transactions' ids).
	TC uint64
	// MaxActive bounds the open transactions (0: unlimited).
	MaxActive int
	// SeqBlock is how many sequence numbers one reservation takes. Default 1000.
	SeqBlock uint64
	// GCDelayMs is how long after its end a transaction's participants are first checked
	// for garbage collection of the header. Default 1000.
	GCDelayMs int64
	// Owner names the broker serving the coordinator (recorded in new headers).
	Owner string
}

// CoreState is a coordinator core's lifecycle state.
type CoreState uint8

// Core states.
const (
	CoreLoading CoreState = iota + 1
	CoreReady
	CoreClosed
)

func (s CoreState) String() string {
	switch s {
	case CoreLoading:
		return "Loading"
	case CoreReady:
		return "Ready"
	case CoreClosed:
		return "Closed"
	}
	return fmt.Sprintf("CoreState(%d)", uint8(s))
}

// Core is one transaction coordinator, sans I/O: it decides, the owner performs what Ready
// lists and feeds the outcomes back (WriteDone, GetDone, Checked), and time comes in as an
// input. Every header change is a compare-and-swap on the version the core last read; a
// failed or refused write reloads the header before the operation is judged again, so an
// answer is never based on a state the store does not have. Operations on one transaction
// are serialized (one write in flight); different transactions proceed in parallel.
//
// A new transaction's header is created by its first ADD_PARTITION or ADD_SUBSCRIPTION, not
// by NEW_TXN: until then the transaction has nothing to commit or abort, so it lives only
// in memory (a restart forgets it, and its id, never reused, is unknown to the next
// incarnation). Each write that adds participants also creates their records (Write.Added),
// in the same atomic commit: a participant that reads an OPEN header listing it knows its
// record exists (T3) without writing one.
//
// Not safe for concurrent use: one goroutine owns it.
type Core struct {
	cfg   CoreConfig
	state CoreState
	now   int64
	tags  uint64

	txns map[uint64]*entry
	// open counts the transactions not ended (including ones being created).
	open int
	// byTag maps a write or get in flight to its transaction (0: the sequence record).
	byTag map[uint64]uint64
	// timers is nextTimer's heap; touched the entries changed since its last call;
	// timersStale asks for a rebuild.
	timers      timerHeap
	touched     []uint64
	timersStale bool

	seqNext, seqEnd uint64
	seqVer          metadata.Version
	fence           metadata.Version // the epoch record's version this incarnation wrote
	seqTag          uint64           // reservation or reload in flight (0: none)
	seqStale        bool             // reload the sequence record before the next reservation
	waitingNew      []*op

	ready Ready
	mut   CoreMutation

	// OnTimeout, if set, is called when the timeout sweep aborted a transaction.
	OnTimeout func(ID)
}

// CoreMutation deliberately breaks the core, to prove the simulation's checker catches it.
// Only tests set it.
type CoreMutation struct {
	EndWithoutCAS   bool // write a terminal header unconditionally
	TrustFailedEnd  bool // answer a failed end write as done without reloading
	ReuseSeqOnLoad  bool // restart sequence numbers at the loaded record without reserving
	AbortEndedByTTL bool // let the timeout sweep overwrite a committed header
	// AddWithoutRecords: add participants to the header without creating their records.
	AddWithoutRecords bool
	// CreateWithoutFence: create headers whatever incarnation loaded since.
	CreateWithoutFence bool
	// CollectWithoutCheck: delete ended headers without checking their participants.
	CollectWithoutCheck bool
}

type entry struct {
	seq uint64
	hdr Header
	ver metadata.Version // 0: not created yet
	// unstored: answered to NEW_TXN, no participant yet, nothing written (ver 0).
	unstored bool
	tag      uint64  // write or get in flight (0: none)
	want     *Header // the header being written
	cur      *op     // the operation the write or get is for
	stale    bool    // reload before the next write
	queue    []*op
	gcAt     int64 // ended: next participant check (0: not scheduled)
	gcTag    uint64
	gcDelay  int64
}

type opKind uint8

const (
	opCreate opKind = iota + 1
	opAddPartitions
	opAddSubscriptions
	opEnd
	opTimeout
)

type op struct {
	kind     opKind
	timeout  int64
	topics   []string
	subs     []SubRef
	commit   bool
	done     func(ID, error)
	attempts int
}

// Ready is what the owner must do next.
type Ready struct {
	// Writes are compare-and-swap puts (Delete: deletes) to perform; WriteDone reports each.
	Writes []Write
	// Gets reload keys; GetDone reports each.
	Gets []Get
	// Checks collect ended transactions: each deletes the header at its version if no
	// participant holds its record, atomically; Checked reports each.
	Checks []Check
	// Replies answer requests, in order.
	Replies []Reply
	// TimerAt asks for a Tick at that time (Unix ms; 0: none needed).
	TimerAt int64
}

// Write is one conditional put or delete. A header write that adds participants lists them
// in Added: the owner creates their records (ParticipantKeys of ID and Added) in the same
// atomic commit as the header.
type Write struct {
	Tag      uint64
	Key      string
	Value    []byte
	Expected metadata.Version
	Delete   bool
	ID       ID
	Added    Header
	// Fence, if not 0, is the version the epoch record (metadata.TxnEpochKey) must still
	// have: a header creation of an incarnation that a newer one replaced fails.
	Fence metadata.Version
}

// Get is one read.
type Get struct {
	Tag uint64
	Key string
}

// Check collects an ended transaction: its header (key, at Version) is deleted in the same
// commit that checks the records of Header's participants are all gone.
type Check struct {
	Tag     uint64
	ID      ID
	Header  Header
	Key     string
	Version metadata.Version
}

// Reply answers one request.
type Reply struct {
	Done func(ID, error)
	ID   ID
	Err  error
}

// NewCore returns a core in CoreLoading; Loaded makes it ready.
func NewCore(cfg CoreConfig) *Core {
	if cfg.SeqBlock == 0 {
		cfg.SeqBlock = 1000
	}
	if cfg.GCDelayMs <= 0 {
		cfg.GCDelayMs = 1000
	}
	return &Core{cfg: cfg, state: CoreLoading, txns: map[uint64]*entry{}, byTag: map[uint64]uint64{}}
}

// SetMutation installs a deliberate bug (tests only).
func (c *Core) SetMutation(m CoreMutation) { c.mut = m }

// State returns the lifecycle state.
func (c *Core) State() CoreState { return c.state }

// Open returns the number of open transactions.
func (c *Core) Open() int { return c.open }

// Lookup returns a transaction's header as the core knows it.
func (c *Core) Lookup(seq uint64) (Header, bool) {
	e := c.txns[seq]
	if e == nil || (e.ver == 0 && !e.unstored) {
		return Header{}, false
	}
	return e.hdr, true
}

// Settled returns transaction seq's header if the core's copy is the stored one: loaded or
// written by this core, with no write or reload in flight; or the header of a transaction
// not stored yet (open, without participants).
func (c *Core) Settled(seq uint64) (Header, bool) {
	e := c.txns[seq]
	if c.state != CoreReady || e == nil || (e.ver == 0 && !e.unstored) || e.tag != 0 || e.stale {
		return Header{}, false
	}
	return e.hdr, true
}

// Transactions returns the sequence numbers the core holds, in order.
func (c *Core) Transactions() []uint64 {
	out := make([]uint64, 0, len(c.txns))
	for s, e := range c.txns {
		if e.ver != 0 || e.unstored {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// SeqRecord is the stored form of the sequence record.
type SeqRecord struct {
	Next uint64 `json:"next"`
}

// Loaded is one stored header found at load.
type Loaded struct {
	Seq     uint64
	Header  Header
	Version metadata.Version
}

// Load feeds what the owner read at start: the sequence record (version 0: none), the
// version of the epoch record the owner bumped before reading (fence), and the
// coordinator's headers. Transactions open in them keep their deadlines; ended ones are
// scheduled for garbage collection.
func (c *Core) Load(seq SeqRecord, seqVer, fence metadata.Version, hs []Loaded, now int64) {
	if c.state != CoreLoading {
		return
	}
	c.now, c.fence = now, fence
	c.seqNext, c.seqEnd, c.seqVer = max(seq.Next, 1), max(seq.Next, 1), seqVer
	if c.mut.ReuseSeqOnLoad {
		c.seqEnd = c.seqNext + c.cfg.SeqBlock
	}
	for _, l := range hs {
		e := &entry{seq: l.Seq, hdr: l.Header, ver: l.Version}
		c.txns[l.Seq] = e
		if l.Header.Status == Open {
			c.open++
		} else {
			e.gcAt, e.gcDelay = now, c.cfg.GCDelayMs
		}
	}
	c.state = CoreReady
	c.Tick(now)
}

// Close fails every waiting request with ErrNotReady; results still in flight are dropped.
func (c *Core) Close() {
	if c.state == CoreClosed {
		return
	}
	c.state = CoreClosed
	for _, seq := range c.sortedSeqs() { // in order: the core stays deterministic
		e := c.txns[seq]
		if e.cur != nil {
			c.reply(e.cur, ID{}, ErrNotReady)
		}
		for _, o := range e.queue {
			c.reply(o, ID{}, ErrNotReady)
		}
	}
	for _, o := range c.waitingNew {
		c.reply(o, ID{}, ErrNotReady)
	}
	c.txns, c.waitingNew, c.byTag = map[uint64]*entry{}, nil, map[uint64]uint64{}
}

// TakeReady returns what to do and clears it. The slices are reused by later inputs.
func (c *Core) TakeReady() Ready {
	r := c.ready
	r.TimerAt = c.nextTimer()
	c.ready = Ready{Writes: r.Writes[:0:0], Gets: r.Gets[:0:0], Checks: r.Checks[:0:0], Replies: r.Replies[:0:0]}
	return r
}

func (c *Core) id(seq uint64) ID { return ID{Most: c.cfg.TC, Least: seq} }

func (c *Core) tag() uint64 {
	c.tags++
	return c.tags
}

func (c *Core) reply(o *op, id ID, err error) {
	c.ready.Replies = append(c.ready.Replies, Reply{Done: o.done, ID: id, Err: err})
}

// Requests.

// NewTxn opens a transaction that times out timeoutMs after now.
func (c *Core) NewTxn(timeoutMs, now int64, done func(ID, error)) {
	c.now = now
	o := &op{kind: opCreate, timeout: timeoutMs, done: done}
	switch {
	case c.state != CoreReady:
		c.reply(o, ID{}, ErrNotReady)
		return
	case c.cfg.MaxActive > 0 && c.open >= c.cfg.MaxActive:
		c.reply(o, ID{}, fmt.Errorf("%w: coordinator %d holds its maximum of %d", ErrTooMany, c.cfg.TC, c.cfg.MaxActive))
		return
	}
	c.open++
	c.waitingNew = append(c.waitingNew, o)
	c.pumpNew()
}

// AddPartitions records topics as written by transaction seq.
func (c *Core) AddPartitions(seq uint64, topics []string, done func(ID, error)) {
	c.enqueue(seq, &op{kind: opAddPartitions, topics: topics, done: done})
}

// AddSubscriptions records subscriptions as acknowledged on by transaction seq.
func (c *Core) AddSubscriptions(seq uint64, subs []SubRef, done func(ID, error)) {
	c.enqueue(seq, &op{kind: opAddSubscriptions, subs: subs, done: done})
}

// End commits or aborts transaction seq at now.
func (c *Core) End(seq uint64, commit bool, now int64, done func(ID, error)) {
	c.now = now
	c.enqueue(seq, &op{kind: opEnd, commit: commit, done: done})
}

func (c *Core) enqueue(seq uint64, o *op) {
	if c.state != CoreReady {
		c.reply(o, c.id(seq), ErrNotReady)
		return
	}
	e := c.txns[seq]
	if e == nil { // unknown, or ended and forgotten
		c.reply(o, c.id(seq), fmt.Errorf("%w: %v", ErrNotFound, c.id(seq)))
		return
	}
	e.queue = append(e.queue, o)
	c.touch(seq)
	c.pump(e)
}

// Tick advances time: open transactions past their deadline are aborted, ended ones due
// are checked for garbage collection.
func (c *Core) Tick(now int64) {
	c.now = now
	c.timersStale = true
	if c.state != CoreReady {
		return
	}
	for _, seq := range c.sortedSeqs() {
		e := c.txns[seq]
		switch {
		case e.unstored && e.tag == 0 && e.hdr.TimeoutAtMs <= now:
			c.forget(e, true)
		case e.ver == 0 && !e.stale: // being created
		case e.hdr.Status == Open && e.hdr.TimeoutAtMs <= now && !e.hasTimeout():
			e.queue = append(e.queue, &op{kind: opTimeout, done: c.timedOut})
			c.pump(e)
		case e.hdr.Status.Ended() && e.gcAt != 0 && e.gcAt <= now && e.gcTag == 0 && e.tag == 0:
			if e.stale { // a deletion reported failed may have landed: reload first
				e.tag = c.tag()
				c.byTag[e.tag] = seq
				c.ready.Gets = append(c.ready.Gets, Get{Tag: e.tag, Key: metadata.TxnHeaderKey(c.cfg.TC, seq)})
				continue
			}
			e.gcTag = c.tag()
			c.byTag[e.gcTag] = seq
			ch := Check{Tag: e.gcTag, ID: c.id(seq), Header: e.hdr, Key: metadata.TxnHeaderKey(c.cfg.TC, seq), Version: e.ver}
			if c.mut.CollectWithoutCheck {
				ch.Header = Header{}
			}
			c.ready.Checks = append(c.ready.Checks, ch)
		}
	}
}

// forget drops an unstored transaction (ended or timed out: nothing was written for it);
// operations queued behind find it gone.
func (c *Core) forget(e *entry, timedOut bool) {
	c.open--
	delete(c.txns, e.seq)
	for _, o := range e.queue {
		c.reply(o, c.id(e.seq), fmt.Errorf("%w: %v has ended", ErrNotFound, c.id(e.seq)))
	}
	e.queue = nil
	if timedOut {
		c.timedOut(c.id(e.seq), nil)
	}
}

func (c *Core) timedOut(id ID, err error) {
	if err == nil && c.OnTimeout != nil {
		c.OnTimeout(id)
	}
}

func (e *entry) hasTimeout() bool {
	if e.cur != nil && e.cur.kind == opTimeout {
		return true
	}
	for _, o := range e.queue {
		if o.kind == opTimeout {
			return true
		}
	}
	return false
}

func (c *Core) sortedSeqs() []uint64 {
	out := make([]uint64, 0, len(c.txns))
	for s := range c.txns {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// timerOf is when Tick must next look at e (0: nothing to do). Only what Tick would act on:
// a deadline whose abort is under way, or a check waiting for a write in flight, would fire
// the timer in a loop.
func timerOf(e *entry) int64 {
	switch {
	case e.unstored && e.tag == 0, (e.ver != 0 || e.stale) && e.hdr.Status == Open && !e.hasTimeout():
		return e.hdr.TimeoutAtMs
	case e.ver != 0 && e.gcAt != 0 && e.gcTag == 0 && e.tag == 0:
		return e.gcAt
	}
	return 0
}

// touch notes that a step changed entry seq: nextTimer takes its time again.
func (c *Core) touch(seq uint64) { c.touched = append(c.touched, seq) }

// nextTimer is the earliest timerOf over the transactions. A min-heap of (time, sequence)
// holds each entry's time as of its last change; entries touched since the last call are
// pushed again, and a top that no longer matches its entry (gone, or its time changed) is
// dropped. Steps that change many entries (Load, Tick) rebuild it.
func (c *Core) nextTimer() int64 {
	if c.timersStale || len(c.timers) > 4*len(c.txns)+64 {
		c.timers = c.timers[:0]
		for seq, e := range c.txns {
			if t := timerOf(e); t != 0 {
				c.timers = append(c.timers, timerAt{t, seq})
			}
		}
		heap.Init(&c.timers)
		c.timersStale, c.touched = false, c.touched[:0]
	}
	for _, seq := range c.touched {
		if e := c.txns[seq]; e != nil {
			if t := timerOf(e); t != 0 {
				heap.Push(&c.timers, timerAt{t, seq})
			}
		}
	}
	c.touched = c.touched[:0]
	for len(c.timers) > 0 {
		top := c.timers[0]
		if e := c.txns[top.seq]; e != nil && timerOf(e) == top.at {
			return top.at
		}
		heap.Pop(&c.timers)
	}
	return 0
}

// scanTimer is nextTimer by a scan of every transaction (the simulation checks the heap
// against it).
func (c *Core) scanTimer() int64 {
	var at int64
	for _, e := range c.txns {
		if t := timerOf(e); t != 0 && (at == 0 || t < at) {
			at = t
		}
	}
	return at
}

// timerAt is one entry's time in the timer heap.
type timerAt struct {
	at  int64
	seq uint64
}

// timerHeap is a min-heap of timerAt by time (container/heap).
type timerHeap []timerAt

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timerAt)) }
func (h *timerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Sequence numbers.

func (c *Core) pumpNew() {
	for len(c.waitingNew) > 0 && c.seqNext < c.seqEnd {
		o := c.waitingNew[0]
		c.waitingNew = c.waitingNew[1:]
		seq := c.seqNext
		c.seqNext++
		c.touch(seq)
		c.txns[seq] = &entry{seq: seq, unstored: true,
			hdr: Header{Status: Open, OpenedMs: c.now, TimeoutAtMs: c.now + o.timeout, Owner: c.cfg.Owner}}
		c.reply(o, c.id(seq), nil)
	}
	if len(c.waitingNew) == 0 || c.seqTag != 0 {
		return
	}
	c.seqTag = c.tag()
	c.byTag[c.seqTag] = 0
	if c.seqStale {
		c.ready.Gets = append(c.ready.Gets, Get{Tag: c.seqTag, Key: metadata.TxnSeqKey(c.cfg.TC)})
		return
	}
	v, _ := json.Marshal(SeqRecord{Next: c.seqEnd + c.cfg.SeqBlock})
	c.ready.Writes = append(c.ready.Writes, Write{Tag: c.seqTag, Key: metadata.TxnSeqKey(c.cfg.TC), Value: v, Expected: c.seqVer})
}

func (c *Core) seqWritten(ver metadata.Version, err error) {
	c.seqTag = 0
	if err != nil {
		c.seqStale = true
		if len(c.waitingNew) > 0 {
			o := c.waitingNew[0]
			o.attempts++
			if o.attempts > 3 {
				c.waitingNew = c.waitingNew[1:]
				c.open--
				c.reply(o, ID{}, fmt.Errorf("%w: reserve sequence numbers: %v", ErrUnavailable, err))
			}
		}
		c.pumpNew()
		return
	}
	c.seqVer = ver
	c.seqNext = c.seqEnd
	c.seqEnd += c.cfg.SeqBlock
	c.pumpNew()
}

func (c *Core) seqLoaded(kv *metadata.KV, err error) {
	c.seqTag = 0
	if err == nil {
		c.seqStale = false
		c.seqVer = 0
		next := uint64(1)
		if kv != nil {
			var r SeqRecord
			if json.Unmarshal(kv.Value, &r) == nil {
				next = max(r.Next, 1)
			}
			c.seqVer = kv.Version
		}
		// Everything below the stored value may have been handed out by another owner.
		c.seqNext, c.seqEnd = next, next
	}
	c.pumpNew()
}

// Transactions.

// pump judges the next operation of e against its header, unless a write or get is in
// flight.
func (c *Core) pump(e *entry) {
	for e.tag == 0 && len(e.queue) > 0 && c.state == CoreReady {
		if e.stale {
			e.tag = c.tag()
			c.byTag[e.tag] = e.seq
			c.ready.Gets = append(c.ready.Gets, Get{Tag: e.tag, Key: metadata.TxnHeaderKey(c.cfg.TC, e.seq)})
			return
		}
		o := e.queue[0]
		e.queue = e.queue[1:]
		c.judge(e, o)
	}
}

// judge answers o from e's header or starts the write it needs.
func (c *Core) judge(e *entry, o *op) {
	id := c.id(e.seq)
	h := e.hdr
	switch o.kind {
	case opAddPartitions, opAddSubscriptions:
		if h.Status != Open {
			c.reply(o, id, fmt.Errorf("%w: %v is %v, not OPEN", ErrInvalidStatus, id, h.Status))
			return
		}
		var added Header
		for _, t := range o.topics {
			if !contains(h.Partitions, t) && !contains(added.Partitions, t) {
				added.Partitions = append(added.Partitions, t)
			}
		}
		for _, s := range o.subs {
			if !containsSub(h.Subscriptions, s) && !containsSub(added.Subscriptions, s) {
				added.Subscriptions = append(added.Subscriptions, s)
			}
		}
		if len(added.Partitions) == 0 && len(added.Subscriptions) == 0 {
			c.reply(o, id, nil)
			return
		}
		h.Partitions = append(append([]string(nil), h.Partitions...), added.Partitions...)
		h.Subscriptions = append(append([]SubRef(nil), h.Subscriptions...), added.Subscriptions...)
		exp := e.ver
		if e.unstored {
			exp = metadata.NotExists
		}
		c.write(e, o, &h, exp)
		w := &c.ready.Writes[len(c.ready.Writes)-1]
		if !c.mut.AddWithoutRecords {
			w.Added = added
		}
		if e.unstored && !c.mut.CreateWithoutFence {
			w.Fence = c.fence
		}
	case opEnd, opTimeout:
		want := Aborted
		if o.kind == opEnd && o.commit {
			want = Committed
		}
		if e.unstored {
			// Nothing to commit or abort: no participant, no header.
			c.reply(o, id, nil)
			c.forget(e, o.kind == opTimeout)
			return
		}
		if h.Status.Ended() && !(c.mut.AbortEndedByTTL && o.kind == opTimeout) {
			if o.attempts > 0 && h.Status == want {
				c.reply(o, id, nil) // our own write landed though it was reported failed
				return
			}
			c.reply(o, id, fmt.Errorf("%w: %v has ended (%v)", ErrNotFound, id, h.Status))
			return
		}
		h.Status, h.EndedMs, h.TimedOut = want, c.now, o.kind == opTimeout
		exp := e.ver
		if c.mut.EndWithoutCAS {
			exp = metadata.AnyVersion
		}
		c.write(e, o, &h, exp)
	}
}

func (c *Core) write(e *entry, o *op, h *Header, exp metadata.Version) {
	e.tag, e.want, e.cur = c.tag(), h, o
	c.byTag[e.tag] = e.seq
	c.ready.Writes = append(c.ready.Writes, Write{Tag: e.tag, Key: metadata.TxnHeaderKey(c.cfg.TC, e.seq), Value: h.Encode(),
		Expected: exp, ID: c.id(e.seq)})
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func containsSub(ss []SubRef, s SubRef) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// WriteDone reports a write of Ready.Writes.
func (c *Core) WriteDone(tag uint64, ver metadata.Version, err error) {
	seq, ok := c.byTag[tag]
	if !ok || c.state != CoreReady {
		return
	}
	delete(c.byTag, tag)
	c.touch(seq)
	if seq == 0 {
		if tag == c.seqTag {
			c.seqWritten(ver, err)
		}
		return
	}
	e := c.txns[seq]
	if e == nil {
		return
	}
	if tag != e.tag {
		return
	}
	e.tag = 0
	o := e.cur
	if e.unstored && errors.Is(err, metadata.ErrBadVersion) {
		// The creation was refused, not applied: a newer incarnation has loaded.
		e.cur, e.want = nil, nil
		c.reply(o, c.id(seq), fmt.Errorf("%w: %v: coordinator %d was loaded elsewhere", ErrNotReady, c.id(seq), c.cfg.TC))
		c.forget(e, false)
		return
	}
	if err != nil && !(c.mut.TrustFailedEnd && o.kind == opEnd) {
		o.attempts++
		if e.ver == 0 {
			// The create may have landed: a sequence number is never reused, so give up on it
			// for the client, but keep it (counted open) until its deadline, when a reload
			// tells whether the header exists; if it does, the timeout sweep aborts it.
			e.hdr, e.stale, e.cur, e.want, e.unstored = *e.want, true, nil, nil, false
			c.reply(o, ID{}, fmt.Errorf("%w: create %v: %v", ErrUnavailable, c.id(seq), err))
			return
		}
		e.stale = true
		e.cur, e.want = nil, nil
		if o.attempts > 3 {
			c.reply(o, c.id(seq), fmt.Errorf("%w: %v", ErrUnavailable, err))
		} else {
			e.queue = append([]*op{o}, e.queue...)
		}
		c.pump(e)
		return
	}
	wasOpen := e.ver == 0 || e.hdr.Status == Open
	e.hdr, e.ver, e.cur, e.want, e.unstored = *e.want, ver, nil, nil, false
	c.afterChange(e, wasOpen)
	c.reply(o, c.id(seq), nil)
	c.pump(e)
}

// GetDone reports a read of Ready.Gets (kv nil: not found).
func (c *Core) GetDone(tag uint64, kv *metadata.KV, err error) {
	seq, ok := c.byTag[tag]
	if !ok || c.state != CoreReady {
		return
	}
	delete(c.byTag, tag)
	c.touch(seq)
	if seq == 0 {
		if tag == c.seqTag {
			c.seqLoaded(kv, err)
		}
		return
	}
	e := c.txns[seq]
	if e == nil || tag != e.tag {
		return
	}
	e.tag = 0
	if err != nil {
		// Still stale; fail what waits rather than spin on a broken store.
		if e.hdr.Status.Ended() {
			c.backoffGC(e)
		}
		for _, o := range e.queue {
			c.reply(o, c.id(seq), fmt.Errorf("%w: %v", ErrUnavailable, err))
		}
		e.queue = nil
		return
	}
	e.stale = false
	if kv == nil {
		if e.hdr.Status == Open {
			c.open--
		}
		delete(c.txns, seq)
		for _, o := range e.queue {
			c.reply(o, c.id(seq), fmt.Errorf("%w: %v", ErrNotFound, c.id(seq)))
		}
		return
	}
	h, derr := DecodeHeader(kv.Value)
	if derr != nil {
		for _, o := range e.queue {
			c.reply(o, c.id(seq), derr)
		}
		e.queue = nil
		return
	}
	wasOpen := e.hdr.Status == Open
	e.hdr, e.ver = h, kv.Version
	c.afterChange(e, wasOpen)
	c.pump(e)
}

func (c *Core) afterChange(e *entry, wasOpen bool) {
	if wasOpen && e.hdr.Status.Ended() {
		c.open--
		e.gcAt, e.gcDelay = gcSlot(c.now+c.cfg.GCDelayMs), c.cfg.GCDelayMs
	}
}

// Checked reports a collection (Ready.Checks): done (nil err, not pending) means the header
// is deleted; pending that some participant still holds its record (nothing deleted); an
// error that the deletion may or may not have happened.
func (c *Core) Checked(tag uint64, pending bool, err error) {
	seq, ok := c.byTag[tag]
	if !ok || c.state != CoreReady {
		return
	}
	delete(c.byTag, tag)
	c.touch(seq)
	e := c.txns[seq]
	if e == nil || tag != e.gcTag {
		return
	}
	e.gcTag = 0
	switch {
	case err == nil && !pending:
		delete(c.txns, seq)
		for _, o := range e.queue {
			c.reply(o, c.id(seq), fmt.Errorf("%w: %v has ended (%v)", ErrNotFound, c.id(seq), e.hdr.Status))
		}
	case err != nil:
		e.stale = true // reload before judging anything on it
		c.backoffGC(e)
	default:
		c.backoffGC(e)
	}
}

// gcSlotMs rounds collection times up, so that one Tick collects the transactions ended in
// the same slot together (the owner may collect them in one commit).
const gcSlotMs = 100

func gcSlot(at int64) int64 { return (at + gcSlotMs - 1) / gcSlotMs * gcSlotMs }

func (c *Core) backoffGC(e *entry) {
	e.gcDelay = min(e.gcDelay*2, 60_000)
	e.gcAt = gcSlot(c.now + e.gcDelay)
}
