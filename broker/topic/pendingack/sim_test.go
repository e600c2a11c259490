package pendingack

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/sim"
	"github.com/magnetar-io/magnetar/txn"
)

// The pending-ack simulation drives one Core — the pending acknowledgements of one
// subscription — through seeded interleavings of everything around it: transactions acking
// positions of the topic (some conflicting, some of batch entries by bits), plain acks, a
// pending-ack log whose appends complete in order after seeded delays (some fail), the
// owner's performance of Ready on a model metadata store (a registration puts the record,
// reads the header, and deletes the record and rejects if it is not OPEN or does not list
// the subscription), a model coordinator whose transactions commit, abort and time out and
// whose headers are collected once the subscription's record is gone, outcomes arriving
// late through Ended (0 for a collected header), a cursor whose flushes fail, and crashes:
// a new core replays the model log from its durable mark-delete, while the bookies may be
// out (reads fail transiently, some only after a timeout) or a ledger of the log may have
// been deleted (reads fail permanently). The checks run after every step (check, grant,
// applyCheck, trimCheck, attempt); at the end, after a last reload with the faults stopped,
// every committed transaction's acks are on the cursor and nothing is left.
//
// Long run: go test ./broker/topic/pendingack -run 'TestSim$' -seeds 1000000 -timeout 0
// Replay a seed with a full trace: go test ./broker/topic/pendingack -run 'TestSim$' -seed S -v

var flags = sim.NewSeedFlags(1000, "TestSim")

const (
	// simEntriesPerLedger makes the log span several ledgers.
	simEntriesPerLedger = 4
	// simBatch is the size of the topic's batch entries (every third entry).
	simBatch = 8
	// simTopicLedger is the ledger of the topic's messages.
	simTopicLedger = 1000
)

var (
	errSimDown     = errors.New("sim: store unavailable")
	errSimBookie   = errors.New("sim: bookie handle not available")
	errSimGone     = fmt.Errorf("sim: %w", mledger.ErrNoSuchLedger)
	errSimLogGone  = fmt.Errorf("sim: %w", mledger.ErrNotFound)
	errSimAdd      = errors.New("sim: add failed")
	errSimFlush    = errors.New("sim: cursor flush failed")
	errSimCrash    = errors.New("sim: connection closed")
	errSimRejected = errors.New("sim: header not open or subscription not added")
)

type simParams struct {
	txns, plains, msgs int
	window             time.Duration
	maxDelay           time.Duration
	lateEnd            time.Duration // outcomes may reach the core this late
	addFail            float64
	storeFail          float64 // a record put or delete fails
	headerFail         float64 // a registration's header read fails
	flushFail          float64 // a commit's cursor flush fails
	readFail           float64 // a log open or read fails transiently
	slowFail           bool    // failed reads fail after a timeout (up to 3 s)
	crashes            int
	outage             [2]time.Duration // the bookies are down in [from, to) (to 0: never)
	gone               bool             // a ledger of the log is deleted at a crash
	logGone            bool             // the whole log is deleted at a crash (opens fail)
}

func (p simParams) String() string {
	return fmt.Sprintf("txns=%d plains=%d msgs=%d window=%v delay<=%v lateEnd<=%v fail(add=%.2f store=%.2f header=%.2f flush=%.2f read=%.2f slow=%v) crashes=%d outage=%v-%v gone=%v logGone=%v",
		p.txns, p.plains, p.msgs, p.window, p.maxDelay, p.lateEnd, p.addFail, p.storeFail, p.headerFail, p.flushFail,
		p.readFail, p.slowFail, p.crashes, p.outage[0], p.outage[1], p.gone, p.logGone)
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
		txns:       1 + r.IntN(10),
		plains:     r.IntN(8),
		msgs:       3 + r.IntN(10),
		window:     time.Duration(20+r.IntN(200)) * time.Millisecond,
		maxDelay:   time.Duration(1+r.IntN(5)) * time.Millisecond,
		lateEnd:    time.Duration(r.IntN(40)) * time.Millisecond,
		addFail:    rate(0.15),
		storeFail:  rate(0.15),
		headerFail: rate(0.15),
		flushFail:  rate(0.2),
		readFail:   rate(0.3),
		slowFail:   r.IntN(3) == 0,
		crashes:    r.IntN(4),
		gone:       r.IntN(8) == 0,
		logGone:    r.IntN(10) == 0,
	}
	if r.IntN(3) == 0 {
		from := s.Between(0, p.window)
		p.outage = [2]time.Duration{from, from + s.Between(50*time.Millisecond, 5*time.Second)}
	}
	return p
}

type simHeader struct {
	status txn.Status
	listed bool // the client added this subscription
}

// simAck is one acknowledgement request (txn nil: plain); answered counts its answers.
type simAck struct {
	txn      *txn.ID
	acks     []Ack
	answered int
	done     func(error)
}

type simLogEntry struct {
	pos Position
	rec Record
}

// simInc is one incarnation of the subscription: a core and what its owner holds.
type simInc struct {
	id       int
	c        *Core
	alive    bool
	timerAt  int64
	adds     []Append
	acks     []*simAck // the acks sent to this incarnation
	ticking  bool
	awaiting map[txn.ID]bool
	applied  map[txn.ID]bool // commits applied (reported) by this incarnation
	// lastFail is when a replay attempt failed (-1: the last attempt did not fail); attempts
	// are the start times of the attempts so far.
	lastFail time.Duration
	attempts []time.Duration
	// sub is the subscribe waiting for the handle since the load: answered once.
	subAnswered int
	subErr      error
	loadedAt    time.Duration
}

type simStats struct {
	Acks, Granted, Conflicts, Plain, PlainRefused, Committed, Aborted, TimedOut, Rejected, RegFailed,
	AddFailed, Crashes, Replays, ReadFails, SlowFails, Outages, Gone, LogGone, FailedHandles, Trims, FlushFails,
	Reapplied, EndedUnknown, Batch, Dropped int
}

type simWorld struct {
	s     *sim.Sim
	p     simParams
	mut   Mutation
	err   error
	quiet bool

	// The pending-ack log: its entries (none is removed: trimmed ones stay visible to the
	// checks), the ledger and entry of the next append, the cursor's durable mark-delete,
	// and the deleted ledger (0: none).
	log       []simLogEntry
	logExists bool
	ledger    int64
	entry     int64
	md        Position
	gone      int64
	// logGone: the log's managed ledger was deleted after the subscription saw it (a race
	// with a deletion): opening it fails permanently.
	logGone bool
	// failed: the handle failed permanently (the run ends there).
	failed bool

	// The metadata store's pending-ack records; the model coordinator's headers and every
	// transaction's final status.
	records map[txn.ID]bool
	headers map[txn.ID]*simHeader
	final   map[txn.ID]txn.Status
	nextTxn uint64

	// What is durable per transaction: its acks in the log, its marker; finished: its
	// outcome was applied (locks released); granted: its acks answered OK.
	durable  map[txn.ID][]Ack
	marker   map[txn.ID]bool
	finished map[txn.ID]bool
	granted  map[txn.ID][]Ack
	// cursor is the subscription's durable acknowledgements (bits; ^0: the whole entry).
	cursor map[Position]uint64

	inc   *simInc
	incs  int
	acks  []*simAck
	stats simStats
}

func newSimWorld(seed int64, mut Mutation, verbose bool) *simWorld {
	s := sim.New(seed)
	s.Verbose = verbose
	w := newWorld(s, mut)
	w.p = randomSimParams(s)
	return w
}

func newWorld(s *sim.Sim, mut Mutation) *simWorld {
	return &simWorld{s: s, mut: mut, records: map[txn.ID]bool{}, headers: map[txn.ID]*simHeader{},
		final: map[txn.ID]txn.Status{}, durable: map[txn.ID][]Ack{}, marker: map[txn.ID]bool{},
		finished: map[txn.ID]bool{}, granted: map[txn.ID][]Ack{}, cursor: map[Position]uint64{}}
}

func (w *simWorld) failf(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("at %v: %s", w.s.Now(), fmt.Sprintf(format, args...))
		w.s.Tracef("CHECK FAILED: %v", w.err)
	}
}

func (w *simWorld) nowMs() int64 { return int64(w.s.Now() / time.Millisecond) }

func (w *simWorld) delay() time.Duration { return w.s.Between(0, w.p.maxDelay) }

func (w *simWorld) chance(p float64) bool { return !w.quiet && w.s.Chance(p) }

func (w *simWorld) bookiesDown() bool {
	o := w.p.outage
	return !w.quiet && o[1] > 0 && w.s.Now() >= o[0] && w.s.Now() < o[1]
}

// on schedules fn for incarnation inc: dropped if it crashed meanwhile.
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
	inc := &simInc{id: w.incs, alive: true, awaiting: map[txn.ID]bool{}, applied: map[txn.ID]bool{},
		lastFail: -1, loadedAt: w.s.Now()}
	w.inc = inc
	w.s.Tracef("incarnation %d loads: log %v (mark-delete %v, %d entries, ledger %d deleted)", inc.id, w.logExists, w.md, len(w.log), w.gone)
	inc.c = New(w.logExists, w.nowMs())
	inc.c.SetMutation(w.mut)
	if w.logExists {
		w.stats.Replays++
		inc.attempts = append(inc.attempts, w.s.Now())
	}
	w.input(inc, "load", func(*Core) {})
	w.subscribeAnswer(inc)
}

func (w *simWorld) crash() {
	inc := w.inc
	if w.quiet || !inc.alive || w.failed {
		return
	}
	w.stats.Crashes++
	inc.alive = false
	// The appends in flight: a prefix of them may have been stored (recovery of the ledger).
	stored := w.s.Rand().IntN(len(inc.adds) + 1)
	w.s.Tracef("CRASH incarnation %d: %d of %d appends in flight stored", inc.id, stored, len(inc.adds))
	for _, a := range inc.adds[:stored] {
		w.store(a.Record)
	}
	for _, x := range inc.acks {
		if x.answered == 0 {
			w.answer(x, errSimCrash)
		}
	}
	// A ledger of the log is deleted (the operator, or a bug elsewhere): one the replay reads.
	if w.p.gone && w.gone == 0 {
		for _, e := range w.log {
			if w.md.Less(e.pos) {
				w.gone = e.pos.LedgerID
				w.stats.Gone++
				w.s.Tracef("ledger %d of the log deleted", w.gone)
				break
			}
		}
	}
	// The whole log is deleted (its subscription's listing of it raced the deletion).
	if w.p.logGone && !w.logGone && w.logExists {
		w.logGone = true
		w.stats.LogGone++
		w.s.Tracef("the log is deleted")
	}
	w.s.After(w.s.Between(0, 3*w.p.maxDelay), "restart", w.start)
}

// input runs one input on inc's core, performs its Ready (once, as the owner does) and
// checks.
func (w *simWorld) input(inc *simInc, name string, fn func(c *Core)) {
	if !inc.alive || w.err != nil {
		return
	}
	w.s.Tracef(" %s", name)
	fn(inc.c)
	w.perform(inc, inc.c.TakeReady())
	w.check()
}

func (w *simWorld) perform(inc *simInc, r Ready) {
	if o := r.OpenLog; o != nil {
		w.attempt(inc, "open")
		w.openLog(inc, *o)
	}
	if rd := r.ReadLog; rd != nil {
		if inc.lastFail >= 0 {
			w.attempt(inc, "read")
		}
		w.readLog(inc, *rd)
	}
	for _, rg := range r.Registers {
		w.register(inc, rg)
	}
	for _, a := range r.Appends {
		w.appendLog(inc, a)
	}
	for _, id := range r.Awaits {
		inc.awaiting[id] = true
		w.notify(inc, id)
	}
	for _, ap := range r.Applies {
		w.apply(inc, ap)
	}
	for _, d := range r.Deletes {
		id := d.ID
		w.storeOp(inc, "delete record "+id.String(), func() { delete(w.records, id) }, func(err error) {
			w.input(inc, fmt.Sprintf("deleted %v %v", id, err), func(c *Core) { c.Deleted(d.Tag, err) })
		})
	}
	for _, id := range r.Drops {
		w.storeOp(inc, "drop record "+id.String(), func() {
			if w.records[id] {
				w.stats.Dropped++
			}
			delete(w.records, id)
		}, func(error) {})
	}
	if r.Trim != nil {
		w.trim(inc, *r.Trim)
	}
	for _, rep := range r.Replies {
		rep.Done(rep.Err)
	}
	if r.StateChanged {
		w.subscribeAnswer(inc)
	}
	if r.TimerAt != 0 && (inc.timerAt == 0 || r.TimerAt < inc.timerAt) {
		inc.timerAt = r.TimerAt
		d := time.Duration(r.TimerAt)*time.Millisecond - w.s.Now()
		w.on(inc, d, "timer", func() {
			inc.timerAt = 0
			w.input(inc, "tick", func(c *Core) { c.Tick(w.nowMs()) })
		})
	}
}

// subscribeAnswer answers the subscribe waiting since the load once the handle is ready or
// failed (the owner's attachWhenReady).
func (w *simWorld) subscribeAnswer(inc *simInc) {
	st, err := inc.c.State()
	if inc.subAnswered > 0 || st == StateReplaying {
		return
	}
	inc.subAnswered++
	inc.subErr = err
	w.s.Tracef("  subscribe answered: %v %v", st, err)
}

// The log.

// attempt checks T5 at the start of a replay attempt after a failed one: not before the
// backoff, and never more than 10 attempts in a second.
func (w *simWorld) attempt(inc *simInc, what string) {
	now := w.s.Now()
	if inc.lastFail >= 0 {
		// (The core's clock has millisecond resolution.)
		if now-inc.lastFail < time.Duration(RetryDelay(1)-1)*time.Millisecond {
			w.failf("T5: %s retried %v after a failed attempt, without backoff", what, now-inc.lastFail)
		}
		inc.lastFail = -1
		inc.attempts = append(inc.attempts, now)
	}
	n := 0
	for _, at := range inc.attempts {
		if now-at < time.Second {
			n++
		}
	}
	if n > 10 {
		w.failf("T5: %d replay attempts within a second", n)
	}
}

func (w *simWorld) readFails() (time.Duration, error) {
	if w.bookiesDown() || w.chance(w.p.readFail) {
		w.stats.ReadFails++
		if w.p.slowFail && w.s.Chance(0.5) {
			w.stats.SlowFails++
			return w.s.Between(0, 3*time.Second), errSimBookie
		}
		return w.delay(), errSimBookie
	}
	return w.delay(), nil
}

func (w *simWorld) openLog(inc *simInc, o OpenLog) {
	d, err := w.readFails()
	w.on(inc, d, fmt.Sprintf("open log create=%v", o.Create), func() {
		var start Position
		gone := err == nil && w.logGone && !o.Create
		if gone {
			err = fmt.Errorf("open the log: %w", errSimLogGone)
		}
		if err == nil {
			if o.Create {
				w.logExists = true
				w.ledger++
				w.md = Position{LedgerID: w.ledger, EntryID: -1}
			}
			start = Position{LedgerID: w.md.LedgerID, EntryID: w.md.EntryID + 1}
			// A reopened managed ledger writes to a new ledger.
			w.ledger++
			w.entry = 0
		} else {
			inc.lastFail = w.s.Now()
		}
		recorded := slices.SortedFunc(maps.Keys(w.records), cmpID)
		w.input(inc, fmt.Sprintf("log opened %v %v (records %v)", start, err, recorded), func(c *Core) {
			if err == nil && !o.Create {
				c.Recorded(recorded)
			}
			c.LogOpened(w.nowMs(), o.Tag, start, err)
		})
		if gone {
			w.permanentCheck(inc, errSimLogGone)
		}
	})
}

func (w *simWorld) readLog(inc *simInc, rd ReadLog) {
	d, err := w.readFails()
	w.on(inc, d, "read log from "+rd.From.String(), func() {
		var es []LogEntry
		permanent := false
		atEnd := true
		if err == nil {
			max := 1 + w.s.Rand().IntN(6)
			for _, e := range w.log {
				if e.pos.Less(rd.From) {
					continue
				}
				if len(es) == max {
					atEnd = false
					break
				}
				if e.pos.LedgerID == w.gone {
					err, permanent = fmt.Errorf("read ledger %d: %w", w.gone, errSimGone), true
					es = nil
					break
				}
				es = append(es, LogEntry{Pos: e.pos, Data: e.rec.Encode()})
			}
		}
		if err != nil {
			inc.lastFail = w.s.Now()
		}
		w.input(inc, fmt.Sprintf("log read %d entries atEnd=%v %v", len(es), atEnd, err), func(c *Core) {
			c.LogRead(w.nowMs(), rd.Tag, es, atEnd, err)
		})
		if permanent {
			w.permanentCheck(inc, errSimGone)
		}
	})
}

// permanentCheck: T5, a permanent failure (cause) fails the handle at once, with its
// cause, and the subscribe waiting is answered with it.
func (w *simWorld) permanentCheck(inc *simInc, cause error) {
	if w.err != nil {
		return
	}
	st, err := inc.c.State()
	if st != StateFailed {
		w.failf("T5: %v leaves the handle %v", cause, st)
		return
	}
	if !errors.Is(err, ErrFailed) || !errors.Is(err, cause) && !strings.Contains(err.Error(), cause.Error()) {
		w.failf("T5: the handle fails with %v, which does not name the cause", err)
	}
	if inc.subAnswered != 1 || inc.subErr == nil {
		w.failf("T5: the subscribe waiting for the failed handle is not failed (answers %d, %v)", inc.subAnswered, inc.subErr)
	}
	w.failed = true
	w.stats.FailedHandles++
}

// appendLog appends a record: appends complete in order after seeded delays.
func (w *simWorld) appendLog(inc *simInc, a Append) {
	inc.adds = append(inc.adds, a)
	if inc.ticking {
		return
	}
	inc.ticking = true
	var tick func()
	tick = func() {
		x := inc.adds[0]
		inc.adds = inc.adds[1:]
		var pos Position
		var err error
		if w.bookiesDown() || w.chance(w.p.addFail) {
			w.stats.AddFailed++
			err = errSimAdd
		} else {
			pos = w.store(x.Record)
		}
		w.input(inc, fmt.Sprintf("appended %s %v %v", x.Record.Op, pos, err), func(c *Core) { c.Appended(x.Tag, pos, err) })
		if len(inc.adds) > 0 {
			w.on(inc, w.delay(), "log append", tick)
		} else {
			inc.ticking = false
		}
	}
	w.on(inc, w.delay(), "log append", tick)
}

// store makes a record durable in the log.
func (w *simWorld) store(r Record) Position {
	if w.entry == simEntriesPerLedger {
		w.ledger, w.entry = w.ledger+1, 0
	}
	pos := Position{LedgerID: w.ledger, EntryID: w.entry}
	w.entry++
	w.log = append(w.log, simLogEntry{pos: pos, rec: r})
	id, _ := txn.ParseKey(r.Txn)
	switch r.Op {
	case "ack":
		w.durable[id] = append(w.durable[id], r.Acks...)
	case "commit":
		// The commit marker comes after the acks are on the cursor, all of them.
		for _, a := range w.durable[id] {
			if !w.onCursor(a) {
				w.failf("the commit marker of %v is durable while its ack %v is not on the cursor", id, a.Pos)
			}
		}
		w.marker[id] = true
	case "abort":
		w.marker[id] = true
	}
	return pos
}

// trim checks that the log is never trimmed past a record a live transaction still needs
// (its acks, with no marker durable), then moves the durable mark-delete after a delay.
func (w *simWorld) trim(inc *simInc, upTo Position) {
	w.stats.Trims++
	for _, e := range w.log {
		id, _ := txn.ParseKey(e.rec.Txn)
		if e.rec.Op == "ack" && !w.marker[id] && !upTo.Less(e.pos) {
			w.failf("trim to %v passes %v, an ack record of live %v", upTo, e.pos, id)
			return
		}
	}
	w.on(inc, w.delay(), "mark-delete "+upTo.String(), func() {
		if w.md.Less(upTo) {
			w.md = upTo
		}
	})
}

// The metadata store and the coordinator.

// storeOp applies a store operation after a delay (unless it fails) and reports it after
// another; a crashed incarnation's operation may still land.
func (w *simWorld) storeOp(inc *simInc, name string, apply func(), done func(error)) {
	w.s.After(w.delay(), "store: "+name, func() {
		if w.err != nil || (!inc.alive && w.s.Chance(0.5)) {
			return
		}
		var err error
		if w.chance(w.p.storeFail) {
			err = errSimDown
		} else {
			apply()
		}
		w.on(inc, w.delay(), "", func() { done(err) })
	})
}

// register performs a registration: put the record, then read the header; reject (and
// delete the record) if it is not OPEN or does not list the subscription.
func (w *simWorld) register(inc *simInc, rg Register) {
	id := rg.ID
	report := func(ok, rejected bool, err error) {
		w.input(inc, fmt.Sprintf("registered %v ok=%v rejected=%v %v", id, ok, rejected, err), func(c *Core) {
			c.Registered(rg.Tag, ok, rejected, err)
		})
	}
	w.storeOp(inc, "put record "+id.String(), func() { w.records[id] = true }, func(err error) {
		if err != nil {
			w.stats.RegFailed++
			report(false, false, err)
			return
		}
		w.on(inc, w.delay(), "read header "+id.String(), func() {
			if w.chance(w.p.headerFail) {
				w.stats.RegFailed++
				report(false, false, errSimDown)
				return
			}
			if h := w.headers[id]; h != nil && h.status == txn.Open && h.listed {
				report(true, false, nil)
				return
			}
			w.storeOp(inc, "delete record "+id.String(), func() { delete(w.records, id) }, func(err error) {
				if err != nil {
					w.stats.RegFailed++
					report(false, false, err)
					return
				}
				w.stats.Rejected++
				report(false, true, errSimRejected)
			})
		})
	})
}

func (w *simWorld) truth(id txn.ID) txn.Status {
	if h := w.headers[id]; h != nil {
		return h.status
	}
	return w.final[id]
}

// begin opens a transaction (listed: the client added this subscription).
func (w *simWorld) begin(listed bool, ttl time.Duration) txn.ID {
	w.nextTxn++
	id := txn.ID{Most: 1, Least: w.nextTxn}
	w.headers[id] = &simHeader{status: txn.Open, listed: listed}
	w.s.After(ttl, "deadline "+id.String(), func() {
		if w.endTxn(id, txn.Aborted) {
			w.stats.TimedOut++
		}
	})
	return id
}

// endTxn is the header's compare-and-swap from OPEN.
func (w *simWorld) endTxn(id txn.ID, s txn.Status) bool {
	h := w.headers[id]
	if h == nil || h.status != txn.Open {
		return false
	}
	w.s.Tracef("coordinator: %v %v", id, s)
	h.status = s
	w.final[id] = s
	if s == txn.Committed {
		w.stats.Committed++
	} else {
		w.stats.Aborted++
	}
	if inc := w.inc; inc.awaiting[id] {
		w.notify(inc, id)
	}
	w.endedNotice(id)
	w.gc(id, w.s.Between(time.Millisecond, 20*time.Millisecond))
	return true
}

// endedNotice is the coordinator's broker telling the subscription that id ended
// (Topic.TxnEnded), at any time relative to the outcome's arrival through the tracker.
func (w *simWorld) endedNotice(id txn.ID) {
	w.s.After(w.delay()+w.s.Between(0, w.p.lateEnd), "ended notice "+id.String(), func() {
		inc := w.inc
		w.input(inc, fmt.Sprintf("ended notice %v", id), func(c *Core) { c.EndedNotice(id) })
	})
}

// gc deletes the header once the subscription's record is gone (checking with backoff).
func (w *simWorld) gc(id txn.ID, d time.Duration) {
	w.s.After(d, "gc "+id.String(), func() {
		if w.records[id] {
			if d < 10*time.Second {
				w.gc(id, 2*d)
			}
			return
		}
		delete(w.headers, id)
	})
}

// notify feeds inc the outcome of id once it has one (0: its header is gone), late.
func (w *simWorld) notify(inc *simInc, id txn.ID) {
	if h := w.headers[id]; h != nil && h.status == txn.Open {
		return // endTxn notifies
	}
	w.on(inc, w.delay()+w.s.Between(0, w.p.lateEnd), "", func() {
		var s txn.Status
		if h := w.headers[id]; h != nil {
			s = h.status
		} else {
			w.stats.EndedUnknown++
		}
		w.input(inc, fmt.Sprintf("ended %v %v", id, s), func(c *Core) { c.Ended(id, s) })
	})
}

// Applies and the cursor.

func ackEqual(a, b Ack) bool { return a.Pos == b.Pos && slices.Equal(a.Bits, b.Bits) }

func ackBits(a Ack) uint64 {
	if a.Bits == nil {
		return ^uint64(0)
	}
	return a.Bits[0]
}

func (w *simWorld) onCursor(a Ack) bool {
	b := ackBits(a)
	return w.cursor[a.Pos]&b == b
}

// apply performs an Apply: a commit acknowledges on the cursor and flushes it (the flush
// may fail); an abort hands the messages back, and the owner reports it as an input of its
// own.
func (w *simWorld) apply(inc *simInc, ap Apply) {
	id := ap.ID
	if !ap.Commit {
		if w.truth(id) == txn.Committed && len(ap.Acks) > 0 {
			w.failf("the acks %v of committed %v are dropped as aborted", ap.Acks, id)
		}
		w.on(inc, 0, "", func() {
			w.finished[id] = true
			w.input(inc, "redelivered "+id.String(), func(c *Core) { c.Applied(ap.Tag, nil) })
			w.released(inc, id, ap.Acks)
		})
		return
	}
	switch {
	case w.truth(id) != txn.Committed:
		w.failf("the acks of %v %v are applied", w.truth(id), id)
	case w.marker[id]:
		w.failf("the acks of %v are applied again after its commit marker is durable", id)
	case inc.applied[id]:
		w.failf("the acks of %v are applied twice", id)
	}
	for _, a := range ap.Acks {
		if !slices.ContainsFunc(w.durable[id], func(b Ack) bool { return ackEqual(a, b) }) {
			w.failf("the ack of %v by %v is applied before it is durable", a.Pos, id)
		}
	}
	for _, a := range w.granted[id] {
		if !slices.ContainsFunc(ap.Acks, func(b Ack) bool { return ackEqual(a, b) }) {
			w.failf("the commit of %v misses its acknowledged %v", id, a.Pos)
		}
	}
	w.on(inc, w.delay(), "flush cursor for "+id.String(), func() {
		var err error
		if w.chance(w.p.flushFail) {
			w.stats.FlushFails++
			err = errSimFlush
		} else {
			for _, a := range ap.Acks {
				w.cursor[a.Pos] |= ackBits(a)
			}
			if w.finished[id] {
				w.stats.Reapplied++
			}
			inc.applied[id] = true
			w.finished[id] = true
		}
		w.input(inc, fmt.Sprintf("applied %v %v", id, err), func(c *Core) { c.Applied(ap.Tag, err) })
	})
}

// released checks that the positions of aborted id are free once its abort is applied.
func (w *simWorld) released(inc *simInc, id txn.ID, acks []Ack) {
	if !inc.alive || w.err != nil {
		return
	}
	for _, a := range acks {
		// Another transaction's ack waiting for its registration locks too.
		waiting := slices.ContainsFunc(inc.acks, func(x *simAck) bool {
			return x.answered == 0 && *x.txn != id && slices.ContainsFunc(x.acks, func(b Ack) bool { return b.Pos == a.Pos })
		})
		// A finished transaction whose marker is not durable is locked again by a replay.
		replayed := slices.ContainsFunc(slices.Collect(maps.Keys(w.durable)), func(y txn.ID) bool {
			return y != id && !w.marker[y] && slices.ContainsFunc(w.durable[y], func(b Ack) bool { return b.Pos == a.Pos })
		})
		if !waiting && !replayed && inc.c.CheckPlain([]Ack{a}) != nil && len(w.holders(a, &id)) == 0 {
			w.failf("%v of aborted %v is still locked after the abort is applied", a.Pos, id)
		}
	}
}

// holders returns the live transactions (other than except) holding a position overlapping
// a: acknowledged to their client, or durable in the log, and not finished.
func (w *simWorld) holders(a Ack, except *txn.ID) []txn.ID {
	var out []txn.ID
	for _, m := range []map[txn.ID][]Ack{w.granted, w.durable} {
		for id, as := range m {
			if w.finished[id] || (except != nil && id == *except) || slices.Contains(out, id) {
				continue
			}
			for _, b := range as {
				if b.Pos == a.Pos && ackBits(a)&ackBits(b) != 0 {
					out = append(out, id)
					break
				}
			}
		}
	}
	return out
}

// Acknowledgements.

// answer takes an ack's answer: exactly one; a granted transactional ack is durable and
// holds no position another live transaction holds.
func (w *simWorld) answer(x *simAck, err error) {
	x.answered++
	w.s.Tracef("  answer %v %v: %v", x.txn, x.acks, err)
	if x.answered > 1 {
		w.failf("an ack of %v answered %d times", x.acks, x.answered)
		return
	}
	if err == nil && x.txn != nil {
		id := *x.txn
		w.stats.Granted++
		for _, a := range x.acks {
			if !slices.ContainsFunc(w.durable[id], func(b Ack) bool { return ackEqual(a, b) }) {
				w.failf("the ack of %v by %v is answered before it is durable", a.Pos, id)
			}
			if hs := w.holders(a, &id); len(hs) > 0 {
				w.failf("%v is acknowledged by %v while %v hold it", a.Pos, id, hs)
			}
		}
		w.granted[id] = append(w.granted[id], x.acks...)
	}
	if err != nil && errors.Is(err, ErrConflict) {
		w.stats.Conflicts++
	}
	if x.done != nil {
		w.s.After(w.delay(), "", func() {
			if w.err == nil {
				x.done(err)
			}
		})
	}
}

// randomAcks returns 1-2 acks of the topic's messages (bits for batch entries).
func (w *simWorld) randomAcks() []Ack {
	r := w.s.Rand()
	var out []Ack
	for k := 1 + r.IntN(2); len(out) < k; {
		e := int64(r.IntN(w.p.msgs))
		a := Ack{Pos: Position{LedgerID: simTopicLedger, EntryID: e}}
		if slices.ContainsFunc(out, func(b Ack) bool { return b.Pos == a.Pos }) {
			k--
			continue
		}
		if e%3 == 0 && r.IntN(3) != 0 {
			a.Size = simBatch
			a.Bits = []uint64{1 + r.Uint64N(1<<simBatch-1)}
			w.stats.Batch++
		}
		out = append(out, a)
	}
	return out
}

// txnAck sends a transactional ack to the current incarnation.
func (w *simWorld) txnAck(id txn.ID, acks []Ack, done func(error)) {
	inc := w.inc
	x := &simAck{txn: &id, acks: acks, done: done}
	w.acks = append(w.acks, x)
	inc.acks = append(inc.acks, x)
	w.stats.Acks++
	if !inc.alive {
		w.answer(x, errSimCrash)
		return
	}
	w.input(inc, fmt.Sprintf("ack %v %v", id, acks), func(c *Core) { c.Ack(id, acks, func(err error) { w.answer(x, err) }) })
}

// plainAck is a consumer's plain ack (consumers are attached only once the handle is ready).
func (w *simWorld) plainAck() {
	inc := w.inc
	if w.quiet || !inc.alive {
		return
	}
	if st, _ := inc.c.State(); st != StateReady && st != StateNone {
		return
	}
	acks := w.randomAcks()
	w.input(inc, fmt.Sprintf("plain ack %v", acks), func(c *Core) {
		if err := c.CheckPlain(acks); err != nil {
			w.stats.PlainRefused++
			return
		}
		w.stats.Plain++
		for _, a := range acks {
			if hs := w.holders(a, nil); len(hs) > 0 {
				w.failf("a plain ack of %v passes while %v hold it", a.Pos, hs)
			}
			w.cursor[a.Pos] |= ackBits(a)
		}
	})
}

// txnClient runs one transaction: k acks (retrying a failed one once, or aborting), then a
// commit, an abort, or nothing (it times out); sometimes the end does not wait for the
// last answer, and sometimes an ack comes after the end.
func (w *simWorld) txnClient() {
	if w.quiet {
		return
	}
	r := w.s.Rand()
	ttl := time.Duration(20+r.IntN(150)) * time.Millisecond
	id := w.begin(r.IntN(10) != 0, ttl)
	if r.IntN(15) == 0 { // a transaction the coordinator never heard of
		id = txn.ID{Most: 1, Least: 1 << 40}
	}
	k := 1 + r.IntN(4)
	end := func() {
		w.s.After(w.delay(), "", func() {
			switch x := r.IntN(20); {
			case x < 12:
				w.endTxn(id, txn.Committed)
			case x < 17:
				w.endTxn(id, txn.Aborted)
			}
			if r.IntN(6) == 0 {
				w.s.After(w.delay(), "", func() { w.txnAck(id, w.randomAcks(), nil) })
			}
		})
	}
	var next func(i int, retried bool)
	next = func(i int, retried bool) {
		if i == k {
			end()
			return
		}
		eager := i == k-1 && r.IntN(4) == 0
		acks := w.randomAcks()
		w.txnAck(id, acks, func(err error) {
			switch {
			case eager:
			case err == nil:
				next(i+1, false)
			case !retried && r.IntN(2) == 0:
				w.s.After(w.s.Between(0, 50*time.Millisecond), "", func() { next(i, true) })
			default:
				w.endTxn(id, txn.Aborted)
			}
		})
		if eager {
			end()
		}
	}
	next(0, false)
}

// Checks.

// check runs after every step: the locks the core reports agree with the live holders.
func (w *simWorld) check() {
	inc := w.inc
	if !inc.alive || w.err != nil {
		return
	}
	if st, _ := inc.c.State(); st != StateReady {
		return
	}
	for id, as := range w.durable {
		if w.finished[id] || w.marker[id] {
			continue
		}
		for _, a := range as {
			if inc.c.CheckPlain([]Ack{a}) == nil {
				w.failf("%v, durably acknowledged by live %v, is not locked", a.Pos, id)
				return
			}
		}
	}
}

// checkEnd runs with the faults stopped, after a last reload and nothing left to do.
func (w *simWorld) checkEnd() {
	c := w.inc.c
	if st, err := c.State(); st != StateReady && st != StateNone {
		w.failf("T5: the handle is %v (%v) with the faults stopped", st, err)
		return
	}
	if w.inc.subAnswered != 1 || w.inc.subErr != nil {
		w.failf("the last subscribe is answered %d times (%v)", w.inc.subAnswered, w.inc.subErr)
	}
	for _, x := range w.acks {
		if x.answered != 1 {
			w.failf("an ack of %v by %v answered %d times", x.acks, x.txn, x.answered)
			return
		}
	}
	for id, s := range w.final {
		if s != txn.Committed {
			continue
		}
		for _, a := range append(slices.Clone(w.granted[id]), w.durable[id]...) {
			if !w.onCursor(a) {
				w.failf("the ack of %v by committed %v is not on the cursor", a.Pos, id)
				return
			}
		}
	}
	if txns, pos := c.Pending(); txns+pos > 0 {
		w.failf("left in the core: %d transactions, %d locked positions", txns, pos)
	}
	if len(w.records) > 0 {
		w.failf("records left: %v", slices.SortedFunc(maps.Keys(w.records), cmpID))
	}
}

func cmpID(a, b txn.ID) int {
	if a.Most != b.Most {
		return int(a.Most) - int(b.Most)
	}
	return int(a.Least) - int(b.Least)
}

func (w *simWorld) run() error {
	p := w.p
	s := w.s
	s.Tracef("params: %v", p)
	w.start()
	for i := 0; i < p.txns; i++ {
		s.After(s.Between(0, p.window), fmt.Sprintf("transaction %d", i), w.txnClient)
	}
	for i := 0; i < p.plains; i++ {
		s.After(s.Between(0, p.window), "", w.plainAck)
	}
	for k := 0; k < p.crashes; k++ {
		at := s.Between(0, p.window)
		if p.outage[1] > 0 && k == 0 {
			at = s.Between(p.outage[0], p.outage[1]) // a reload during the outage
		}
		s.After(at, "crash", w.crash)
	}
	if p.outage[1] > 0 {
		w.stats.Outages++
		s.After(p.outage[0], "bookies down", func() {})
		s.After(p.outage[1], "bookies back", func() {})
	}
	quietAt := max(p.window, p.outage[1])
	s.After(quietAt, "quiesce", func() { w.quiet = true })
	w.settle(quietAt + 2*time.Minute)
	if w.err != nil || w.failed {
		return w.err
	}
	// With the faults stopped: one more reload, and everything must come out right.
	w.inc.alive = false
	w.start()
	w.settle(s.Now() + 2*time.Minute)
	if w.err == nil {
		w.checkEnd()
	}
	return w.err
}

// settle runs events until none is left (an error if they go on past the deadline).
func (w *simWorld) settle(deadline time.Duration) {
	for w.err == nil && w.s.Step() {
		if w.s.Now() > deadline {
			w.failf("no quiescence by %v (%d events pending)", deadline, w.s.Pending())
			return
		}
	}
}

func runSimSeed(seed int64, mut Mutation, verbose bool) (*simWorld, error) {
	w := newSimWorld(seed, mut, verbose)
	return w, w.run()
}

// TestSim drives the pending-ack core through seeded interleavings (see simWorld).
func TestSim(t *testing.T) {
	var st simStats
	ran, failed := sim.RunSeeds(t, flags.Seeds("./broker/topic/pendingack", 0), func(seed int64, verbose bool) sim.Outcome {
		w, err := runSimSeed(seed, Mutation{}, verbose)
		sim.AddCounts(&st, w.stats)
		return sim.Outcome{Sim: w.s, Params: w.p, Err: err}
	})
	if failed {
		return
	}
	t.Logf("%+v", st)
	sim.RequireCoverage(t, ran, 300, map[string]int{"granted acks": st.Granted, "conflicts": st.Conflicts, "plain acks": st.Plain,
		"refused plain acks": st.PlainRefused, "commits": st.Committed, "aborts": st.Aborted, "timeouts": st.TimedOut,
		"rejected registrations": st.Rejected, "failed registrations": st.RegFailed, "failed appends": st.AddFailed,
		"crashes": st.Crashes, "replays": st.Replays, "failed reads": st.ReadFails, "slow failures": st.SlowFails,
		"outages": st.Outages, "deleted ledgers": st.Gone, "deleted logs": st.LogGone, "failed handles": st.FailedHandles, "trims": st.Trims,
		"failed flushes": st.FlushFails, "reapplied commits": st.Reapplied, "batch acks": st.Batch})
}

// TestSimDeterministic replays seeds and requires identical traces.
func TestSimDeterministic(t *testing.T) {
	sim.CheckDeterministic(t, 30, func(seed int64) *sim.Sim {
		w, _ := runSimSeed(seed, Mutation{}, true)
		return w.s
	})
}

// simMutants are upstream's behaviours (apache/pulsar#26374) and other deliberate bugs.
var simMutants = []sim.Mutant[Mutation]{
	{Name: "a failed read re-issued at once (apache/pulsar#26374)", Mut: Mutation{RetryReadAtOnce: true}},
	{Name: "a permanent failure ends the replay as complete", Mut: Mutation{ReadyOnPermanentFailure: true}},
	{Name: "a permanent failure retried like a transient one (apache/pulsar#26374)", Mut: Mutation{RetryPermanentFailure: true}},
	{Name: "the acks applied before they are durable", Mut: Mutation{ApplyBeforeDurable: true}},
	{Name: "the log trimmed past open transactions", Mut: Mutation{TrimPastOpen: true}},
	{Name: "replayed acks not locked", Mut: Mutation{NoReplayLocks: true}},
	{Name: "a permanent failure to open the log retried like a transient one", Mut: Mutation{OpenFailureTransient: true}},
	{Name: "an ended notice drops the record of a transaction being applied", Mut: Mutation{DropApplying: true}},
}

// TestSimCatchesMutations proves the checkers can fail: each deliberately broken core is
// caught by some seed of the random simulation.
func TestSimCatchesMutations(t *testing.T) {
	if flags.Replaying() {
		t.Skip("replaying one seed")
	}
	sim.CatchMutations(t, 3000, simMutants, func(seed int64, mut Mutation) error {
		_, err := runSimSeed(seed, mut, false)
		return err
	})
}
