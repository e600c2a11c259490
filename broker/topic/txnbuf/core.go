package txnbuf

import (
	"fmt"
	"slices"
	"sort"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/txn"
)

// Position is the managed ledger's.
type Position = mledger.Position

// State is a transaction buffer's lifecycle state.
type State uint8

// States.
const (
	StateLoading State = iota + 1
	StateReady
	StateClosed
)

func (s State) String() string {
	switch s {
	case StateLoading:
		return "Loading"
	case StateReady:
		return "Ready"
	case StateClosed:
		return "Closed"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// txnState is one transaction's state in the buffer.
type txnState uint8

const (
	// registering: its open record is being written (or it failed and may exist).
	registering txnState = iota + 1
	// open: its record is durable; its entries may be appended.
	open
	// ended: its outcome is known; it waits for its appends in flight and its turn to apply.
	ended
)

type entry struct {
	id     txn.ID
	state  txnState
	regTag uint64
	// first and last are its entries' positions on this topic (hasPos: any is known).
	first, last Position
	hasPos      bool
	inflight    int
	// recovered: found open at load; its positions before the load are unknown.
	recovered bool
	outcome   txn.Status
	awaiting  bool
	// lookup: its header is gone and its aborted record is being read (lookupAt: a retry
	// is due then, 0 if a read is in flight); lookups counts the failed reads.
	lookup   bool
	lookupAt int64
	lookups  int
}

// Core is a topic's transaction buffer, sans I/O (designed against apache/pulsar#25821): it
// decides which transactional sends may be appended, how far readers may read (the max read
// position), and applies each transaction's outcome in order. The owner (the topic
// goroutine) performs what Ready lists and feeds the outcomes back.
//
// Invariants (DESIGN.md T1–T4):
//   - a transaction's open record is durable before any of its entries is appended (T3):
//     Admit answers Append only for a transaction whose registration completed;
//   - readers never read at or after the first entry of a transaction not yet applied, nor,
//     while a transaction found open at load is unresolved, past the durable watermark (T2);
//   - outcomes are applied in the order they arrived, each after the transaction's appends
//     in flight, in batches: one atomic write at a time makes a batch durable (its aborted
//     records, the watermark's compare-and-swap, the deletion of its open records), so an
//     abort is durable in the aborted set no later than the watermark passes it, and the
//     watermark only moves forward (T4);
//   - "not in the aborted set" means visible: an unknown transaction is never taken for
//     aborted (T1).
//
// Not safe for concurrent use.
type Core struct {
	state State
	now   int64
	tags  uint64
	mut   Mutation

	txns    map[txn.ID]*entry
	aborted map[txn.ID]Position // aborted transactions and their last position here
	// last is the newest entry the topic saw stored (in add order).
	last Position
	// wm is the durable watermark (exclusive: every transaction with an entry before it is
	// resolved), wmVer its version; wmTag a write in flight; wmWant the value it writes.
	wm     Position
	wmVer  metadata.Version
	wmWant *Position // the watermark the apply write in flight moves to (nil: unchanged)

	// applyQ are ended transactions in the order their outcomes arrived. batch is its head
	// being applied (in memory already; stepTag its write in flight, 0 if none: a retry is
	// due at retryAt).
	applyQ  []txn.ID
	batch   []txn.ID
	stepTag uint64
	retryAt int64
	retries int

	// pruneTags are aborted-record deletions in flight.
	pruneTags map[uint64]txn.ID

	published *Before // the bound last handed to the owner
	ready     Ready
}

// Mutation deliberately breaks the core (upstream's behaviours), to prove the simulation's
// checker catches it. Only tests set it.
type Mutation struct {
	// UnknownIsAborted filters a transaction without an aborted record or known outcome
	// (upstream before apache/pulsar#25821 fixed apache/pulsar#25768).
	UnknownIsAborted bool
	// AppendBeforeRecord appends a transaction's first entry before its open record is
	// durable.
	AppendBeforeRecord bool
	// NoPinAtRecovery lets readers past a transaction found open at load.
	NoPinAtRecovery bool
	// WatermarkBeforeAbortRecord advances the watermark before the aborted record is durable
	// and deletes the open record without it.
	SkipAbortRecord bool
	// ApplyWithInflight applies an outcome while the transaction's appends are in flight.
	ApplyWithInflight bool
	// ForgetApplying lets an ended notice forget a transaction whose apply write is in
	// flight, so its open record is dropped before the aborted record is durable.
	ForgetApplying bool
	// StaleRetryClock measures a failed write's backoff from the last Tick, not from the
	// failure.
	StaleRetryClock bool
	// GoneIsAborted takes a transaction whose header is gone and that has no aborted record
	// here for aborted (a collected committed header read as aborted).
	GoneIsAborted bool
}

// maxApplyBatch bounds the transactions one apply write makes durable: at most two writes
// each and the watermark stay within etcd's default limit of 128 per transaction.
const maxApplyBatch = 60

// Before bounds reads: an entry is readable only if its position is before Pos.
type Before struct{ Pos Position }

// Ready is what the owner must do next.
type Ready struct {
	// Registers ask to make transaction ID's open record durable and confirm with its header
	// that it is open and writes to this topic; Registered reports each.
	Registers []Register
	// Awaits ask to learn each transaction's outcome (Ended).
	Awaits []txn.ID
	// Writes are record writes; Written reports each.
	Writes []Write
	// Lookups ask to read this topic's aborted record of each transaction (its header is
	// gone); LookedUp reports each.
	Lookups []txn.ID
	// Drops ask to delete the open record of each transaction (the coordinator said it
	// ended and the buffer never knew it), in the background: a failure leaves the record
	// to the next load.
	Drops []txn.ID
	// Released lists transactions whose registration ended: sends held for them can be
	// judged again by Admit.
	Released []txn.ID
	// Bound changed: MaxRead is the new read bound (nil: unbounded).
	BoundChanged bool
	MaxRead      *Before
	// AbortedChanged: the aborted set changed (readers filter by Aborted). The owner publishes
	// it to its readers before it moves their bound: an apply moves both at once.
	AbortedChanged bool
	// TimerAt asks for a Tick (Unix ms; 0: none).
	TimerAt int64
}

// Register is one registration.
type Register struct {
	Tag uint64
	ID  txn.ID
}

// WriteKind tells a record write apart.
type WriteKind uint8

// Record writes.
const (
	// WriteApply makes a batch of outcomes durable, atomically: put the Aborted records,
	// move the watermark to Watermark (if not nil) by compare-and-swap on Expected, delete
	// the open records of Applied.
	WriteApply         WriteKind = iota + 1
	WriteDeleteAborted           // delete ID's aborted record (pruned)
)

// Write is one record write.
type Write struct {
	Tag       uint64
	Kind      WriteKind
	ID        txn.ID
	Aborted   map[txn.ID]Position
	Watermark *Position
	Expected  metadata.Version
	Applied   []txn.ID
}

// Loaded is the buffer's durable state read at load.
type Loaded struct {
	Watermark    Position
	WatermarkVer metadata.Version
	Aborted      map[txn.ID]Position
	Open         []txn.ID
	// Last is the log's last entry.
	Last Position
}

// New returns a core in Loading.
func New() *Core {
	return &Core{state: StateLoading, txns: map[txn.ID]*entry{}, aborted: map[txn.ID]Position{}, pruneTags: map[uint64]txn.ID{}}
}

// SetMutation installs a deliberate bug (tests only).
func (c *Core) SetMutation(m Mutation) { c.mut = m }

// State returns the lifecycle state.
func (c *Core) State() State { return c.state }

func (c *Core) tag() uint64 {
	c.tags++
	return c.tags
}

// Load feeds the durable state; transactions found open are awaited and pin reads at the
// watermark until they resolve.
func (c *Core) Load(l Loaded) {
	if c.state != StateLoading {
		return
	}
	c.wm, c.wmVer, c.last = l.Watermark, l.WatermarkVer, l.Last
	for id, p := range l.Aborted {
		c.aborted[id] = p
	}
	for _, id := range l.Open {
		e := &entry{id: id, state: open, recovered: true}
		c.txns[id] = e
		c.await(e)
	}
	c.state = StateReady
	c.ready.AbortedChanged = true
	c.publishBound()
}

// Close stops the core.
func (c *Core) Close() { c.state = StateClosed }

// TakeReady returns what to do and clears it.
func (c *Core) TakeReady() Ready {
	r := c.ready
	if c.retryAt != 0 {
		r.TimerAt = c.retryAt
	}
	for _, e := range c.txns {
		if e.lookupAt != 0 && (r.TimerAt == 0 || e.lookupAt < r.TimerAt) {
			r.TimerAt = e.lookupAt
		}
	}
	c.ready = Ready{}
	return r
}

// Open returns the number of transactions not applied yet.
func (c *Core) Open() int { return len(c.txns) }

// Knows tells whether id is registered here (or registering), or ended and its outcome not
// yet durably applied.
func (c *Core) Knows(id txn.ID) bool {
	if c.txns[id] != nil {
		return true
	}
	return !c.mut.ForgetApplying && slices.Contains(c.applyQ, id)
}

// EndedNotice reports that the coordinator says id, which listed this topic, has ended. If
// the buffer does not know id (Knows), its open record is dropped (Ready.Drops), so that
// the header can be collected: the coordinator created the record when the transaction
// added the topic, and a transaction that never wrote here never registers. A transaction
// being applied is known until its apply write is durable: until then its open record is
// all a reload would have to learn the outcome, since the core has already forgotten the
// transaction in memory.
func (c *Core) EndedNotice(id txn.ID) {
	if c.state == StateReady && !c.Knows(id) {
		c.ready.Drops = append(c.ready.Drops, id)
	}
}

// Aborted returns a copy of the aborted set.
func (c *Core) Aborted() map[txn.ID]Position {
	out := make(map[txn.ID]Position, len(c.aborted))
	for id, p := range c.aborted {
		out[id] = p
	}
	return out
}

// IsAborted reports whether entries of id are filtered. Unknown is visible (T1).
func (c *Core) IsAborted(id txn.ID) bool {
	if _, ok := c.aborted[id]; ok {
		return true
	}
	if c.mut.UnknownIsAborted {
		if e := c.txns[id]; e == nil || e.outcome != txn.Committed {
			return true
		}
	}
	return false
}

// MaxRead returns the current read bound (nil: unbounded).
func (c *Core) MaxRead() *Before {
	pinned := false
	for _, e := range c.txns {
		if e.recovered && !c.mut.NoPinAtRecovery {
			pinned = true
		}
	}
	if len(c.txns) == 0 {
		return nil
	}
	b := after(c.last)
	for _, e := range c.txns {
		if e.hasPos && !e.recovered && e.first.Less(b) {
			b = e.first
		}
	}
	if pinned && c.wm.Less(b) {
		b = c.wm
	}
	return &Before{Pos: b}
}

func after(p Position) Position { return Position{LedgerID: p.LedgerID, EntryID: p.EntryID + 1} }

// Watermark returns the durable watermark.
func (c *Core) Watermark() Position { return c.wm }

func (c *Core) publishBound() {
	b := c.MaxRead()
	if (b == nil) == (c.published == nil) && (b == nil || b.Pos == c.published.Pos) {
		return
	}
	c.published = b
	c.ready.BoundChanged, c.ready.MaxRead = true, b
}

// Admission of transactional sends.

// Verdict is Admit's answer.
type Verdict uint8

// Verdicts.
const (
	// Append: the transaction is registered here; append the entry (then Appending).
	Append Verdict = iota + 1
	// Hold: its registration is in progress; keep the send (and the producer's later ones)
	// until Released names the transaction.
	Hold
	// Refuse: the transaction cannot write here (err says why).
	Refuse
)

// Errors of Admit.
var (
	ErrEnded    = fmt.Errorf("transaction has ended")
	ErrNotReady = fmt.Errorf("transaction buffer not ready")
	// ErrRecovered: the transaction was open when the buffer loaded. Its open record may
	// be the put of a registration that never checked the header (the transaction may be
	// unknown or ended), so it takes no more entries here; its outcome is still applied.
	ErrRecovered = fmt.Errorf("transaction was open when the topic loaded")
)

// Admit judges a transactional send of id.
func (c *Core) Admit(id txn.ID) (Verdict, error) {
	if c.state != StateReady {
		return Refuse, ErrNotReady
	}
	e := c.txns[id]
	switch {
	case e == nil && slices.Contains(c.applyQ, id):
		// Being applied: a new registration's rejection would delete the open record the
		// apply still needs if the topic reloads before it is done.
		return Refuse, fmt.Errorf("%w: %v is being applied", ErrEnded, id)
	case e == nil:
		e = &entry{id: id, state: registering}
		c.txns[id] = e
		c.publishBound()
		if c.mut.AppendBeforeRecord {
			e.state = open
			c.register(e)
			return Append, nil
		}
		c.register(e)
		return Hold, nil
	case e.state == registering:
		if e.regTag == 0 { // a failed registration: try again
			c.register(e)
		}
		return Hold, nil
	case e.state == ended:
		return Refuse, fmt.Errorf("%w: %v is %v", ErrEnded, id, e.outcome)
	case e.recovered:
		return Refuse, fmt.Errorf("%w: %v", ErrRecovered, id)
	}
	return Append, nil
}

func (c *Core) register(e *entry) {
	e.regTag = c.tag()
	c.ready.Registers = append(c.ready.Registers, Register{Tag: e.regTag, ID: e.id})
}

// RegisterOutcome is how a registration ended.
type RegisterOutcome uint8

// Registration outcomes.
const (
	// Registered: the record is durable and the header says open, with this topic.
	Registered RegisterOutcome = iota + 1
	// Rejected: the header says the transaction cannot write here (ended, gone, or this
	// topic not added); the owner deleted the record. err tells why.
	Rejected
	// Failed: the store failed; the record may exist.
	Failed
)

// Registered reports a registration. It returns the error to fail the held sends with
// (nil: judge them again with Admit).
func (c *Core) Registered(tag uint64, out RegisterOutcome, err error) error {
	var e *entry
	for _, x := range c.txns {
		if x.regTag == tag {
			e = x
		}
	}
	if e == nil || c.state != StateReady {
		return nil
	}
	e.regTag = 0
	c.ready.Released = append(c.ready.Released, e.id)
	switch {
	case out == Rejected:
		// Nothing of it was appended here: forget it (a later send is judged again by the
		// same check). An outcome that arrived meanwhile needs no apply.
		delete(c.txns, e.id)
		c.publishBound()
		return err
	case e.outcome != 0:
		// It ended while registering: apply the outcome (the record may exist).
		c.end(e)
		return fmt.Errorf("%w: %v is %v", ErrEnded, e.id, e.outcome)
	case out == Registered:
		e.state = open
		c.await(e)
		return nil
	}
	// Failed: the record may exist, so the transaction stays and is awaited; its later
	// sends retry the registration.
	c.await(e)
	return err
}

func (c *Core) await(e *entry) {
	if !e.awaiting {
		e.awaiting = true
		c.ready.Awaits = append(c.ready.Awaits, e.id)
	}
}

// Appending counts an append of id handed to the log.
func (c *Core) Appending(id txn.ID) {
	if e := c.txns[id]; e != nil {
		e.inflight++
	}
}

// Added reports an add of the topic completed at pos, in add order (id nil: not
// transactional; ok false: it failed).
func (c *Core) Added(id *txn.ID, pos Position, ok bool) {
	if ok && c.last.Less(pos) {
		c.last = pos
	}
	if id != nil {
		if e := c.txns[*id]; e != nil {
			e.inflight--
			if ok {
				if !e.hasPos {
					e.first, e.hasPos = pos, true
				}
				if e.last.Less(pos) {
					e.last = pos
				}
			}
		}
	}
	c.publishBound()
	c.pump()
}

// Ended reports id's outcome from its header (0: the header is gone). The header is gone
// only after every participant applied the outcome, so a gone header is resolved by this
// topic's aborted record of id (an apply of a crashed incarnation may have landed after
// this one loaded): the core asks for it (Ready.Lookups); if it exists the outcome is
// Aborted, else Committed — unknown is never aborted (T1).
func (c *Core) Ended(id txn.ID, s txn.Status) {
	e := c.txns[id]
	if e == nil || e.state == ended || e.outcome != 0 || c.state != StateReady {
		return
	}
	if s == 0 {
		if !e.lookup {
			e.lookup = true
			c.ready.Lookups = append(c.ready.Lookups, id)
		}
		return
	}
	e.lookup, e.lookupAt = false, 0
	e.outcome = s
	if e.regTag != 0 {
		return // its registration ends first (Registered applies it)
	}
	c.end(e)
}

// LookedUp reports, at now (Unix ms; a failure's backoff starts then), the read of id's
// aborted record that Lookups asked for: found tells that it exists; err that the read
// failed (it is retried after a backoff).
func (c *Core) LookedUp(now int64, id txn.ID, found bool, err error) {
	e := c.txns[id]
	if e == nil || !e.lookup || e.lookupAt != 0 || e.outcome != 0 || c.state != StateReady {
		return
	}
	c.clock(now)
	if err != nil {
		e.lookups++
		e.lookupAt = c.now + RetryDelay(e.lookups)
		return
	}
	e.lookup = false
	if found || c.mut.GoneIsAborted {
		c.Ended(id, txn.Aborted)
		return
	}
	c.Ended(id, txn.Committed)
}

// RetryDelay is the wait (ms) before retry n (n ≥ 1) of a failed store operation, from the
// failure: 200 ms doubling up to 10 s.
func RetryDelay(n int) int64 { return min(int64(100)<<min(n, 8), 10_000) }

func (c *Core) end(e *entry) {
	e.state = ended
	c.applyQ = append(c.applyQ, e.id)
	c.pump()
}

// clock advances the core's time to now, the time of an input that may start a backoff.
func (c *Core) clock(now int64) {
	if !c.mut.StaleRetryClock {
		c.now = max(c.now, now)
	}
}

// Tick advances time (retries).
func (c *Core) Tick(now int64) {
	c.now = now
	if c.state != StateReady {
		return
	}
	for _, id := range c.sortedTxns() {
		if e := c.txns[id]; e.lookupAt != 0 && e.lookupAt <= now {
			e.lookupAt = 0
			c.ready.Lookups = append(c.ready.Lookups, id)
		}
	}
	if c.retryAt != 0 && c.retryAt <= now {
		c.retryAt = 0
		c.pump()
	}
}

// pump applies the head of applyQ: the ended transactions whose appends are done, in
// memory at once, then one write that makes them durable together.
func (c *Core) pump() {
	if c.state != StateReady || c.stepTag != 0 || c.retryAt != 0 {
		return
	}
	if len(c.batch) == 0 {
		n := 0
		for n < len(c.applyQ) && n < maxApplyBatch {
			if e := c.txns[c.applyQ[n]]; e != nil && (e.inflight > 0 || e.regTag != 0) && !c.mut.ApplyWithInflight {
				break
			}
			n++
		}
		if n == 0 {
			return
		}
		c.batch = append([]txn.ID(nil), c.applyQ[:n]...)
		for _, id := range c.batch {
			e := c.txns[id]
			// In memory first: readers may pass it now; an abort is filtered from here on.
			if e != nil && e.outcome == txn.Aborted {
				last := c.last
				if e.hasPos && !e.recovered {
					last = e.last
				}
				c.aborted[id] = last
				c.ready.AbortedChanged = true
			}
			delete(c.txns, id)
		}
		c.publishBound()
	}
	w := Write{Tag: c.tag(), Kind: WriteApply, Applied: c.batch, Expected: c.wmVer}
	if !c.mut.SkipAbortRecord {
		for _, id := range c.batch {
			if p, ok := c.aborted[id]; ok {
				if w.Aborted == nil {
					w.Aborted = map[txn.ID]Position{}
				}
				w.Aborted[id] = p
			}
		}
	}
	want := after(c.last)
	if b := c.MaxRead(); b != nil {
		want = b.Pos
	}
	c.wmWant = nil
	if c.wm.Less(want) {
		c.wmWant, w.Watermark = &want, &want
	}
	c.stepTag = w.Tag
	c.ready.Writes = append(c.ready.Writes, w)
}

// Written reports a record write at now (Unix ms; a failure's backoff starts then). ver is
// the watermark's new version; after a refused compare-and-swap (metadata.ErrBadVersion)
// the owner feeds WatermarkReloaded first.
func (c *Core) Written(now int64, tag uint64, ver metadata.Version, err error) {
	c.clock(now)
	if id, ok := c.pruneTags[tag]; ok {
		delete(c.pruneTags, tag)
		if err == nil {
			delete(c.aborted, id)
			c.ready.AbortedChanged = true
		}
		return
	}
	if tag != c.stepTag || c.state != StateReady {
		return
	}
	c.stepTag = 0
	if err != nil {
		c.retries++
		c.retryAt = c.now + RetryDelay(c.retries)
		return
	}
	c.retries = 0
	if c.wmWant != nil {
		c.wm, c.wmVer, c.wmWant = *c.wmWant, ver, nil
	}
	c.applyQ = c.applyQ[len(c.batch):]
	c.batch = nil
	c.publishBound()
	c.pump()
}

// WatermarkReloaded feeds the stored watermark after a refused compare-and-swap.
func (c *Core) WatermarkReloaded(p Position, ver metadata.Version) {
	if c.wm.Less(p) {
		c.wm = p
	}
	c.wmVer = ver
}

// Trimmed tells that every entry before first was removed from the log: aborted records of
// transactions wholly before it are deleted.
func (c *Core) Trimmed(first Position) {
	if c.state != StateReady {
		return
	}
	ids := make([]txn.ID, 0)
	for id, p := range c.aborted {
		if p.Less(first) {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Least < ids[j].Least })
	for _, id := range ids {
		inFlight := false
		for _, x := range c.pruneTags {
			if x == id {
				inFlight = true
			}
		}
		if inFlight || slices.Contains(c.batch, id) {
			continue
		}
		t := c.tag()
		c.pruneTags[t] = id
		c.ready.Writes = append(c.ready.Writes, Write{Tag: t, Kind: WriteDeleteAborted, ID: id})
	}
}

func (c *Core) sortedTxns() []txn.ID {
	ids := make([]txn.ID, 0, len(c.txns))
	for id := range c.txns {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		if ids[i].Most != ids[j].Most {
			return ids[i].Most < ids[j].Most
		}
		return ids[i].Least < ids[j].Least
	})
	return ids
}

// Start returns the first position of id's entries on this topic, if the buffer knows it
// (ok false: not open here, or found open at load).
func (c *Core) Start(id txn.ID) (Position, bool) {
	e := c.txns[id]
	if e == nil || !e.hasPos || e.recovered {
		return Position{}, false
	}
	return e.first, true
}
