package pendingack

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/txn"
)

// Position is the managed ledger's.
type Position = mledger.Position

// State is a pending-ack handle's lifecycle state.
type State uint8

// States.
const (
	// StateNone: the subscription has no pending-ack log yet (no transactional ack so far).
	StateNone State = iota + 1
	// StateOpening: the log is being created for the first transactional ack.
	StateOpening
	// StateReplaying: the log is replayed (an attempt in flight, or a retry scheduled).
	StateReplaying
	StateReady
	// StateFailed: the log cannot be replayed (permanent error); subscribes fail with it.
	StateFailed
	StateClosed
)

func (s State) String() string {
	switch s {
	case StateNone:
		return "None"
	case StateOpening:
		return "Opening"
	case StateReplaying:
		return "Replaying"
	case StateReady:
		return "Ready"
	case StateFailed:
		return "Failed"
	case StateClosed:
		return "Closed"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Errors.
var (
	// ErrConflict: the position is locked by another transaction (or, for a plain ack, by a
	// transaction).
	ErrConflict = errors.New("transaction conflict")
	// ErrNotReady: the handle is replaying or closed.
	ErrNotReady = errors.New("pending acknowledgements not ready")
	// ErrFailed wraps the permanent replay failure.
	ErrFailed = errors.New("pending-ack log unreadable")
)

// Ack is one acknowledged position: a whole entry (Bits nil) or some messages of a batch
// entry (bit i: message i acknowledged).
type Ack struct {
	Pos  Position `json:"p"`
	Bits []uint64 `json:"b,omitempty"`
	Size int      `json:"n,omitempty"`
}

// Record is one entry of the pending-ack log.
type Record struct {
	Op   string `json:"op"` // "ack", "commit", "abort"
	Txn  string `json:"txn"`
	Acks []Ack  `json:"acks,omitempty"`
}

// Encode returns the record's stored form.
func (r Record) Encode() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	return b
}

// LogEntry is one entry read from the log.
type LogEntry struct {
	Pos  Position
	Data []byte
}

type txnState uint8

const (
	txRegistering txnState = iota + 1
	txOpen
	txApplying // outcome known; apply, marker, record delete in progress
)

type txEntry struct {
	id     txn.ID
	state  txnState
	regTag uint64
	acks   []Ack
	// firstLog is the log position of its first ack record (the log is kept from there).
	firstLog *Position
	outcome  txn.Status
	step     applyStep
	stepTag  uint64
	queued   []*pendingAck // acks waiting for the registration
	appends  int           // ack records in flight
	awaiting bool
}

type applyStep uint8

const (
	stepNone applyStep = iota
	stepApply
	stepMarker
	stepDelete
)

type pendingAck struct {
	acks []Ack
	done func(error)
}

// Core is one subscription's pending acknowledgements, sans I/O (designed against
// apache/pulsar#26374). Transactional acks lock their positions until the transaction ends;
// each is durable in the pending-ack log (a managed ledger, group-committed) before it is
// answered; at load the log is replayed.
//
// Replay (T5): an attempt reads the log from its start to its end, one read at a time. A
// failed read ends the attempt: a transient failure schedules a new attempt after a bounded
// exponential backoff (TimerAt: nothing is held meanwhile); a permanent one fails the handle
// with an error that names the cause. Not safe for concurrent use.
type Core struct {
	state State
	now   int64
	tags  uint64
	err   error
	mut   Mutation

	// Replay.
	logOpen   bool
	start     Position // where the log's cursor starts (its mark-delete + 1)
	readTag   uint64
	attempts  int
	retryAt   int64
	replayed  map[txn.ID]*txEntry
	replayLog []txn.ID
	// replayEnded are the transactions whose marker the replay read: their records may
	// remain (a crash before the deletion) and are deleted again.
	replayEnded []txn.ID
	// replayAcks are the ack records read, in log order (locked in that order: a later
	// record of a position shows that an earlier holder had ended).
	replayAcks []replayAck
	// recorded are the transactions with a record when the log was opened (Recorded).
	recorded []txn.ID

	txns  map[txn.ID]*txEntry
	locks map[Position]*lock
	// openTag is the log creation in flight (StateOpening); waiting are the acks behind it.
	openTag uint64
	waiting []func()

	pendingAppends []appendOp
	// lastLog is the newest log position written or replayed; trimmed the last Trim given.
	lastLog, trimmed *Position
	stepRetryAt      int64

	ready Ready
}

type replayAck struct {
	id   txn.ID
	acks []Ack
}

type appendOp struct {
	tag  uint64
	id   txn.ID
	done func(error)
	// marker: the commit or abort record of id.
	marker bool
	acks   []Ack
}

// Mutation deliberately breaks the core (upstream's behaviour), to prove the checker
// catches it. Only tests set it.
type Mutation struct {
	// RetryReadAtOnce re-issues a failed replay read at once, forever (apache/pulsar#26374).
	RetryReadAtOnce bool
	// ReadyOnPermanentFailure ends a replay that hit a permanent failure as if complete.
	ReadyOnPermanentFailure bool
	// RetryPermanentFailure retries a permanent failure like a transient one (apache/pulsar#26374:
	// a deleted ledger is read again forever; the subscribe never completes).
	RetryPermanentFailure bool
	// ApplyBeforeDurable applies an outcome with ack records still in flight.
	ApplyBeforeDurable bool
	// TrimPastOpen trims the log to its end, past the records of open transactions.
	TrimPastOpen bool
	// NoReplayLocks does not lock the acks of the transactions a replay finds open.
	NoReplayLocks bool
	// DropApplying lets an ended notice drop the record of a transaction being applied.
	DropApplying bool
	// OpenFailureTransient retries a permanent failure to open the log like a transient
	// one (the log is gone: the subscribe never completes).
	OpenFailureTransient bool
}

type lock struct {
	whole *txn.ID
	bits  map[txn.ID][]uint64
}

// Ready is what the owner must do next.
type Ready struct {
	// OpenLog opens (Create: creates) the pending-ack log; LogOpened reports it.
	OpenLog *OpenLog
	// ReadLog reads the log's entries from From (up to its end); LogRead reports it.
	ReadLog *ReadLog
	// Registers: make the transaction's pending-ack record durable and confirm with its
	// header that it is open and added this subscription; Registered reports each.
	Registers []Register
	// Appends: append records to the log; Appended reports each.
	Appends []Append
	// Awaits: learn each transaction's outcome (Ended).
	Awaits []txn.ID
	// Applies: commit — acknowledge Acks on the subscription's cursor durably; abort —
	// redeliver them. Applied reports each.
	Applies []Apply
	// Deletes: delete the transaction's pending-ack record; Deleted reports each.
	Deletes []Delete
	// Drops: delete each transaction's pending-ack record, in the background (a failure
	// leaves it to the next replay); see EndedNotice.
	Drops []txn.ID
	// Trim: the log's entries before it are no longer needed (nil: nothing new).
	Trim *Position
	// Replies answer transactional acks.
	Replies []Reply
	// StateChanged: subscribes waiting for the handle can be answered (State, Err).
	StateChanged bool
	// TimerAt asks for a Tick (Unix ms; 0: none).
	TimerAt int64
}

// OpenLog asks to open the log.
type OpenLog struct {
	Tag    uint64
	Create bool
}

// ReadLog asks to read the log.
type ReadLog struct {
	Tag  uint64
	From Position
}

// Register asks to record a transaction.
type Register struct {
	Tag uint64
	ID  txn.ID
}

// Append asks to append a record.
type Append struct {
	Tag    uint64
	Record Record
}

// Apply asks to apply a transaction's outcome.
type Apply struct {
	Tag    uint64
	ID     txn.ID
	Commit bool
	Acks   []Ack
}

// Delete asks to delete a transaction's record.
type Delete struct {
	Tag uint64
	ID  txn.ID
}

// Reply answers one acknowledgement.
type Reply struct {
	Done func(error)
	Err  error
}

// New returns a handle: replaying if the subscription has a pending-ack log, else StateNone.
func New(hasLog bool, now int64) *Core {
	c := &Core{state: StateNone, now: now, txns: map[txn.ID]*txEntry{}, locks: map[Position]*lock{}}
	if hasLog {
		c.state = StateReplaying
		c.openLog(false)
	}
	return c
}

// SetMutation installs a deliberate bug (tests only).
func (c *Core) SetMutation(m Mutation) { c.mut = m }

// State returns the lifecycle state and, in StateFailed, the cause.
func (c *Core) State() (State, error) { return c.state, c.err }

// TakeReady returns what to do and clears it.
func (c *Core) TakeReady() Ready {
	r := c.ready
	if c.retryAt != 0 {
		r.TimerAt = c.retryAt
	}
	if c.stepRetryAt != 0 && (r.TimerAt == 0 || c.stepRetryAt < r.TimerAt) {
		r.TimerAt = c.stepRetryAt
	}
	c.ready = Ready{}
	return r
}

func (c *Core) tag() uint64 {
	c.tags++
	return c.tags
}

func (c *Core) become(s State) {
	if c.state != s {
		c.state = s
		c.ready.StateChanged = true
	}
}

// Close stops the handle; acks waiting fail.
func (c *Core) Close() {
	for _, e := range c.txns {
		for _, q := range e.queued {
			c.reply(q.done, ErrNotReady)
		}
		e.queued = nil
	}
	for _, w := range c.waiting {
		w()
	}
	c.waiting = nil
	c.become(StateClosed)
}

func (c *Core) reply(done func(error), err error) {
	if done != nil {
		c.ready.Replies = append(c.ready.Replies, Reply{Done: done, Err: err})
	}
}

// Replay.

func (c *Core) openLog(create bool) {
	c.openTag = c.tag()
	c.ready.OpenLog = &OpenLog{Tag: c.openTag, Create: create}
}

// LogOpened reports the log's opening at now (Unix ms; a failure's backoff starts then):
// start is the first position to replay. A failure is classified by Permanent.
func (c *Core) LogOpened(now int64, tag uint64, start Position, err error) {
	if tag != c.openTag || c.state == StateClosed {
		return
	}
	c.now = max(c.now, now)
	c.openTag = 0
	if err != nil {
		c.attemptFailed(Permanent(err) && !c.mut.OpenFailureTransient, fmt.Errorf("open pending-ack log: %w", err))
		return
	}
	if c.state == StateOpening {
		c.become(StateReady)
		c.runWaiting()
		return
	}
	c.logOpen = true
	c.start = start
	c.replayed, c.replayLog, c.replayEnded, c.replayAcks = map[txn.ID]*txEntry{}, nil, nil, nil
	c.read(start)
}

// Recorded reports, before LogOpened, the transactions that had a pending-ack record when
// the log was opened. Those the replay finds no pending acks of have their record deleted
// once they have ended (the coordinator creates the record when a transaction adds the
// subscription, and collects a header only once its participants' records are gone).
func (c *Core) Recorded(ids []txn.ID) {
	if c.state == StateReplaying {
		c.recorded = ids
	}
}

// runWaiting takes the acks that waited for the log's creation again.
func (c *Core) runWaiting() {
	ws := c.waiting
	c.waiting = nil
	for _, w := range ws {
		w()
	}
}

func (c *Core) read(from Position) {
	c.readTag = c.tag()
	c.ready.ReadLog = &ReadLog{Tag: c.readTag, From: from}
}

// LogRead reports a read at now (Unix ms; a failure's backoff starts then): entries in log
// order; atEnd tells that the log has nothing after them. A failure is classified by
// Permanent.
func (c *Core) LogRead(now int64, tag uint64, es []LogEntry, atEnd bool, err error) {
	if tag != c.readTag || c.state != StateReplaying {
		return
	}
	c.now = max(c.now, now)
	c.readTag = 0
	if err != nil {
		c.attemptFailed(Permanent(err), fmt.Errorf("read pending-ack log: %w", err))
		return
	}
	for _, e := range es {
		if p := e.Pos; c.lastLog == nil || c.lastLog.Less(p) {
			c.lastLog = &p
		}
		var r Record
		if json.Unmarshal(e.Data, &r) != nil {
			c.attemptFailed(true, fmt.Errorf("pending-ack log entry %v is not a record", e.Pos))
			return
		}
		id, perr := txn.ParseKey(r.Txn)
		if perr != nil {
			continue
		}
		switch r.Op {
		case "ack":
			t := c.replayed[id]
			if t == nil {
				p := e.Pos
				t = &txEntry{id: id, state: txOpen, firstLog: &p}
				c.replayed[id] = t
				c.replayLog = append(c.replayLog, id)
			}
			t.acks = append(t.acks, r.Acks...)
			c.replayAcks = append(c.replayAcks, replayAck{id: id, acks: r.Acks})
		case "commit", "abort":
			delete(c.replayed, id)
			c.replayEnded = append(c.replayEnded, id)
		}
	}
	if !atEnd {
		next := c.start
		if len(es) > 0 {
			last := es[len(es)-1].Pos
			next = Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
		}
		c.read(next)
		return
	}
	c.finishReplay()
}

// Permanent classifies a failure to open or read the pending-ack log (T5): true if
// retrying cannot help, so the handle fails and the subscribes waiting fail with it.
func Permanent(err error) bool {
	switch {
	case errors.Is(err, mledger.ErrNotFound):
		// The log's managed ledger is gone (deleted after the subscription saw it).
		return true
	case errors.Is(err, mledger.ErrNoSuchLedger), errors.Is(err, ledger.ErrNoSuchLedger):
		// A ledger of the log was deleted: its records are lost.
		return true
	case errors.Is(err, ledger.ErrNoSuchEntry):
		// No bookie of the write set has the entry.
		return true
	case errors.Is(err, ledger.ErrDigest), errors.Is(err, mledger.ErrBadRecord), errors.Is(err, ledger.ErrBadMetadata):
		// The data or its metadata is corrupt: reading it again gives the same bytes.
		return true
	case errors.Is(err, mledger.ErrFenced):
		// Another owner opened the log: this instance can read nothing more.
		return true
	}
	// Anything else (bookies or the metadata store unavailable, timeouts, a closed log)
	// may pass.
	return false
}

// attemptFailed ends a replay attempt (T5): permanent failures fail the handle, transient
// ones retry after a bounded exponential backoff.
func (c *Core) attemptFailed(permanent bool, err error) {
	if c.mut.RetryPermanentFailure {
		permanent = false
	}
	if permanent && !c.mut.ReadyOnPermanentFailure {
		c.err = fmt.Errorf("%w: %v", ErrFailed, err)
		c.become(StateFailed)
		c.runWaiting() // the acks behind the log's creation fail with it
		return
	}
	if permanent {
		c.finishReplay()
		return
	}
	c.attempts++
	if c.mut.RetryReadAtOnce {
		c.read(c.start)
		return
	}
	c.retryAt = c.now + RetryDelay(c.attempts)
}

// RetryDelay is the wait before replay attempt n+1: 100 ms doubling up to 30 s.
func RetryDelay(n int) int64 { return min(int64(100)<<min(n-1, 10), 30_000) }

// Attempts returns how many replay attempts failed so far.
func (c *Core) Attempts() int { return c.attempts }

func (c *Core) finishReplay() {
	for _, id := range c.replayLog {
		t := c.replayed[id]
		if t == nil {
			continue
		}
		c.txns[id] = t
		c.await(t)
	}
	for _, ra := range c.replayAcks {
		if t := c.replayed[ra.id]; t != nil && !c.mut.NoReplayLocks {
			c.lockSome(t, ra.acks)
		}
	}
	for _, id := range c.replayEnded {
		if c.replayed[id] == nil && c.txns[id] == nil {
			t := &txEntry{id: id, state: txApplying, step: stepDelete}
			c.txns[id] = t
			c.pumpApply(t)
		}
	}
	for _, id := range c.recorded {
		// A record without acks: the coordinator created it when the transaction added the
		// subscription, and the transaction may still be open. Its next ack registers again;
		// its end deletes the record.
		if c.replayed[id] == nil && c.txns[id] == nil {
			t := &txEntry{id: id, state: txRegistering}
			c.txns[id] = t
			c.await(t)
		}
	}
	c.replayed, c.replayLog, c.replayEnded, c.recorded, c.replayAcks = nil, nil, nil, nil, nil
	c.become(StateReady)
	c.trim()
}

// Tick advances time (replay and apply retries).
func (c *Core) Tick(now int64) {
	c.now = now
	if c.stepRetryAt != 0 && c.stepRetryAt <= now {
		c.stepRetryAt = 0
		for _, id := range c.sortedTxns() {
			if t := c.txns[id]; t.state == txApplying && t.stepTag == 0 {
				c.pumpApply(t)
			}
		}
	}
	if c.retryAt != 0 && c.retryAt <= now {
		c.retryAt = 0
		switch c.state {
		case StateOpening: // creating the log for the first transactional ack failed
			c.openLog(true)
		case StateReplaying:
			if !c.logOpen {
				c.openLog(false)
			} else {
				c.replayed, c.replayLog, c.replayEnded, c.replayAcks = map[txn.ID]*txEntry{}, nil, nil, nil
				c.read(c.start)
			}
		}
	}
}

// Locks.

func (c *Core) conflicts(id *txn.ID, a Ack) bool {
	l := c.locks[a.Pos]
	if l == nil {
		return false
	}
	other := func(x txn.ID) bool { return id == nil || x != *id }
	if l.whole != nil && other(*l.whole) {
		return true
	}
	for x, bs := range l.bits {
		if !other(x) {
			continue
		}
		if a.Bits == nil || intersects(a.Bits, bs) {
			return true
		}
	}
	return false
}

func intersects(a, b []uint64) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i]&b[i] != 0 {
			return true
		}
	}
	return false
}

func (c *Core) lockAll(t *txEntry) {
	for _, a := range t.acks {
		l := c.locks[a.Pos]
		if l == nil {
			l = &lock{}
			c.locks[a.Pos] = l
		}
		if a.Bits == nil {
			id := t.id
			l.whole = &id
			continue
		}
		if l.bits == nil {
			l.bits = map[txn.ID][]uint64{}
		}
		bs := l.bits[t.id]
		for len(bs) < len(a.Bits) {
			bs = append(bs, 0)
		}
		for i, w := range a.Bits {
			bs[i] |= w
		}
		l.bits[t.id] = bs
	}
}

func (c *Core) unlockAll(t *txEntry) {
	for _, a := range t.acks {
		l := c.locks[a.Pos]
		if l == nil {
			continue
		}
		if l.whole != nil && *l.whole == t.id {
			l.whole = nil
		}
		delete(l.bits, t.id)
		if l.whole == nil && len(l.bits) == 0 {
			delete(c.locks, a.Pos)
		}
	}
}

// CheckPlain reports whether a plain acknowledgement conflicts with a pending one.
func (c *Core) CheckPlain(acks []Ack) error {
	for _, a := range acks {
		if c.conflicts(nil, a) {
			return fmt.Errorf("%w: %v is acknowledged by an open transaction", ErrConflict, a.Pos)
		}
	}
	return nil
}

// Locked reports whether the whole entry at p is locked by a transaction.
func (c *Core) Locked(p Position) bool {
	l := c.locks[p]
	return l != nil && l.whole != nil
}

// Pending returns the number of transactions with pending acks and of locked positions.
func (c *Core) Pending() (txns, positions int) { return len(c.txns), len(c.locks) }

// Unknown tells that id is surely not registered on the subscription: it is loaded (or has
// no log) and holds nothing of id.
func (c *Core) Unknown(id txn.ID) bool {
	t := c.txns[id]
	return (c.state == StateNone || c.state == StateReady) &&
		(t == nil || c.mut.DropApplying && t.state == txApplying)
}

// EndedNotice reports that the coordinator says id, which listed the subscription, has
// ended. If the handle holds nothing of id (Unknown), its pending-ack record is dropped
// (Ready.Drops), so that the header can be collected; a transaction being applied keeps
// its record until the apply is done (Deletes), since a replay after a crash learns its
// outcome from the header the record keeps.
func (c *Core) EndedNotice(id txn.ID) {
	if c.Unknown(id) {
		c.ready.Drops = append(c.ready.Drops, id)
	}
}

// Transactional acknowledgements.

// Ack takes a transactional acknowledgement of acks by id; done answers it once it is
// durable (or refused).
func (c *Core) Ack(id txn.ID, acks []Ack, done func(error)) {
	switch c.state {
	case StateNone:
		c.become(StateOpening)
		c.openLog(true)
		fallthrough
	case StateOpening:
		c.waiting = append(c.waiting, func() { c.Ack(id, acks, done) })
		return
	case StateReady:
	case StateFailed:
		c.reply(done, c.err)
		return
	default:
		c.reply(done, fmt.Errorf("%w: %v", ErrNotReady, c.state))
		return
	}
	for _, a := range acks {
		if c.conflicts(&id, a) {
			c.reply(done, fmt.Errorf("%w: %v is acknowledged by another transaction", ErrConflict, a.Pos))
			return
		}
	}
	t := c.txns[id]
	if t == nil {
		t = &txEntry{id: id, state: txRegistering, regTag: c.tag()}
		c.txns[id] = t
		c.ready.Registers = append(c.ready.Registers, Register{Tag: t.regTag, ID: id})
	}
	switch t.state {
	case txRegistering:
		if t.regTag == 0 { // the last registration failed: try again
			t.regTag = c.tag()
			c.ready.Registers = append(c.ready.Registers, Register{Tag: t.regTag, ID: id})
		}
		t.queued = append(t.queued, &pendingAck{acks: acks, done: done})
		c.lockSome(t, acks)
		return
	case txApplying:
		c.reply(done, fmt.Errorf("%w: transaction %v has ended", txn.ErrNotFound, id))
		return
	}
	c.appendAcks(t, acks, done)
}

// lockSome locks acks for t at once (so that conflicting acks fail while it registers).
func (c *Core) lockSome(t *txEntry, acks []Ack) {
	saved := t.acks
	t.acks = acks
	c.lockAll(t)
	t.acks = saved
}

func (c *Core) appendAcks(t *txEntry, acks []Ack, done func(error)) {
	tag := c.tag()
	t.appends++
	t.acks = append(t.acks, acks...)
	c.lockAll(t)
	c.pendingAppends = append(c.pendingAppends, appendOp{tag: tag, id: t.id, done: done, acks: acks})
	c.ready.Appends = append(c.ready.Appends, Append{Tag: tag, Record: Record{Op: "ack", Txn: t.id.Key(), Acks: acks}})
}

// dropAcks forgets acks of t whose record failed: they are neither locked nor applied.
func (c *Core) dropAcks(t *txEntry, acks []Ack) {
	for _, a := range acks {
		for i, b := range t.acks {
			if a.Pos == b.Pos && slices.Equal(a.Bits, b.Bits) {
				t.acks = append(t.acks[:i:i], t.acks[i+1:]...)
				break
			}
		}
	}
	saved := t.acks
	t.acks = acks
	c.unlockAll(t)
	t.acks = saved
	c.lockAll(t) // what is durable stays locked
}

// Registered reports a registration (the header read: the coordinator created the record
// with the header's listing of the subscription; a rejected one leaves none behind).
func (c *Core) Registered(tag uint64, ok, rejected bool, err error) {
	var t *txEntry
	for _, x := range c.txns {
		if x.regTag == tag && x.state == txRegistering {
			t = x
		}
	}
	if t == nil || c.state != StateReady {
		return
	}
	t.regTag = 0
	q := t.queued
	t.queued = nil
	if !ok {
		for _, a := range q {
			saved := t.acks
			t.acks = a.acks
			c.unlockAll(t)
			t.acks = saved
			c.reply(a.done, err)
		}
		c.lockAll(t) // what is durable stays locked
		if rejected && len(t.acks) == 0 {
			delete(c.txns, t.id)
			return
		}
		c.await(t) // the record may exist: wait for the outcome to clean it up
		if t.outcome != 0 {
			c.startApply(t)
		}
		return
	}
	t.state = txOpen
	c.await(t)
	for _, a := range q {
		c.appendAcks(t, a.acks, a.done)
	}
	if t.outcome != 0 {
		c.startApply(t)
	}
}

func (c *Core) await(t *txEntry) {
	if !t.awaiting {
		t.awaiting = true
		c.ready.Awaits = append(c.ready.Awaits, t.id)
	}
}

// Appended reports a log append.
func (c *Core) Appended(tag uint64, pos Position, err error) {
	i := -1
	for j, a := range c.pendingAppends {
		if a.tag == tag {
			i = j
		}
	}
	if i < 0 {
		return
	}
	op := c.pendingAppends[i]
	c.pendingAppends = append(c.pendingAppends[:i], c.pendingAppends[i+1:]...)
	if err == nil && (c.lastLog == nil || c.lastLog.Less(pos)) {
		p := pos
		c.lastLog = &p
	}
	t := c.txns[op.id]
	if op.marker {
		if t == nil || t.stepTag != tag {
			return
		}
		t.stepTag = 0
		if err != nil {
			c.scheduleStepRetry()
			return
		}
		t.step = stepDelete
		c.pumpApply(t)
		return
	}
	if t != nil {
		t.appends--
		if err == nil && t.firstLog == nil {
			p := pos
			t.firstLog = &p
		}
		if err != nil {
			c.dropAcks(t, op.acks)
		}
	}
	if err != nil {
		c.reply(op.done, fmt.Errorf("record transactional ack: %w", err))
	} else {
		c.reply(op.done, nil)
	}
	if t != nil && t.state == txApplying && t.step == stepNone {
		c.pumpApply(t)
	}
}

// Ended reports a transaction's outcome (0: its header is gone — treated as aborted, so its
// messages are redelivered rather than lost).
func (c *Core) Ended(id txn.ID, s txn.Status) {
	t := c.txns[id]
	if t == nil || t.outcome != 0 || c.state == StateClosed {
		return
	}
	if s == 0 {
		s = txn.Aborted
	}
	t.outcome = s
	if t.regTag != 0 {
		return // Registered applies it
	}
	c.startApply(t)
}

func (c *Core) startApply(t *txEntry) {
	if t.state == txApplying {
		return
	}
	t.state = txApplying
	c.pumpApply(t)
}

// pumpApply moves t's apply on: apply (after its appends), marker, record deletion.
func (c *Core) pumpApply(t *txEntry) {
	if t.stepTag != 0 {
		return
	}
	switch t.step {
	case stepNone:
		if t.appends > 0 && !c.mut.ApplyBeforeDurable {
			return
		}
		if len(t.acks) == 0 && t.firstLog == nil {
			// Nothing to apply and nothing in the log to mark (a record without acks).
			t.step = stepDelete
			c.pumpApply(t)
			return
		}
		t.step = stepApply
		fallthrough
	case stepApply:
		t.stepTag = c.tag()
		c.ready.Applies = append(c.ready.Applies, Apply{Tag: t.stepTag, ID: t.id, Commit: t.outcome == txn.Committed,
			Acks: append([]Ack(nil), t.acks...)})
	case stepMarker:
		op := "abort"
		if t.outcome == txn.Committed {
			op = "commit"
		}
		t.stepTag = c.tag()
		c.pendingAppends = append(c.pendingAppends, appendOp{tag: t.stepTag, id: t.id, marker: true})
		c.ready.Appends = append(c.ready.Appends, Append{Tag: t.stepTag, Record: Record{Op: op, Txn: t.id.Key()}})
	case stepDelete:
		t.stepTag = c.tag()
		c.ready.Deletes = append(c.ready.Deletes, Delete{Tag: t.stepTag, ID: t.id})
	}
}

func (c *Core) scheduleStepRetry() {
	if c.stepRetryAt == 0 {
		c.stepRetryAt = c.now + 1000
	}
}

// Applied reports an Apply: the commit's acks are durable on the cursor, or the abort's
// messages were handed back for redelivery. The locks are released here.
func (c *Core) Applied(tag uint64, err error) {
	for _, t := range c.txns {
		if t.stepTag != tag || t.step != stepApply {
			continue
		}
		t.stepTag = 0
		if err != nil {
			c.scheduleStepRetry()
			return
		}
		c.unlockAll(t)
		if len(t.acks) == 0 && t.firstLog == nil {
			t.step = stepDelete // nothing in the log to mark
		} else {
			t.step = stepMarker
		}
		c.pumpApply(t)
		return
	}
}

// Deleted reports a record deletion: the transaction is done here.
func (c *Core) Deleted(tag uint64, err error) {
	for id, t := range c.txns {
		if t.stepTag != tag || t.step != stepDelete {
			continue
		}
		t.stepTag = 0
		if err != nil {
			c.scheduleStepRetry()
			return
		}
		delete(c.txns, id)
		c.trim()
		return
	}
}

// trim tells the owner how much of the log no transaction needs any more.
func (c *Core) trim() {
	var keep *Position
	for _, t := range c.txns {
		if t.firstLog != nil && (keep == nil || t.firstLog.Less(*keep)) {
			keep = t.firstLog
		}
	}
	var upTo Position
	switch {
	case keep != nil && !c.mut.TrimPastOpen:
		if keep.EntryID == 0 {
			return // the cursor's mark-delete cannot name "before entry 0" of a ledger
		}
		upTo = Position{LedgerID: keep.LedgerID, EntryID: keep.EntryID - 1}
	case c.lastLog != nil:
		upTo = *c.lastLog
	default:
		return
	}
	if c.trimmed != nil && !c.trimmed.Less(upTo) {
		return
	}
	c.trimmed = &upTo
	c.ready.Trim = &upTo
}

func (c *Core) sortedTxns() []txn.ID {
	out := make([]txn.ID, 0, len(c.txns))
	for id := range c.txns {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Most != out[j].Most {
			return out[i].Most < out[j].Most
		}
		return out[i].Least < out[j].Least
	})
	return out
}

// Transactions lists the transactions with pending acks and their acks (for statistics).
func (c *Core) Transactions() map[txn.ID][]Ack {
	out := map[txn.ID][]Ack{}
	for id, t := range c.txns {
		out[id] = append([]Ack(nil), t.acks...)
	}
	return out
}
