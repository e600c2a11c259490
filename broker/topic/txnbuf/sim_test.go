package txnbuf

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/sim"
	"github.com/magnetar-io/magnetar/txn"
)

// The transaction buffer's simulation drives one Core — the buffer of one topic — through
// seeded interleavings of everything around it: producers sending transactional and plain
// messages, a topic log whose adds complete in order after seeded delays (some fail), the
// owner's performance of Ready on a model metadata store (registrations put the open record,
// then read the header and reject if it is not OPEN or does not list the topic; record writes
// and the watermark's compare-and-swap are delayed, failed, and applied but reported failed),
// a model coordinator whose transactions commit, abort, time out and have their headers
// garbage-collected once the topic's open record is gone, outcomes arriving late through
// Ended (0 for a collected header), trims of the log, and crashes (a new core loaded from the
// store and the log, while writes of the crashed one may still land). T1–T4 are checked after
// every step and at every store change (see check, storeChange and appendChecked); at the
// end, after a last reload with the faults stopped, every committed entry is readable.
//
// Long run: go test ./broker/topic/txnbuf -run 'TestSim$' -seeds 1000000 -timeout 0
// Replay a seed with a full trace: go test ./broker/topic/txnbuf -run 'TestSim$' -seed S -v

var flags = sim.NewSeedFlags(1000, "TestSim")

// simEntriesPerLedger makes the log span several ledgers.
const simEntriesPerLedger = 5

var (
	errSimDown  = errors.New("sim: store unavailable")
	errSimAmbig = errors.New("sim: timed out (applied)")
	errSimAdd   = errors.New("sim: add failed")
	errSimGone  = errors.New("sim: header not open or topic not added")
	errSimCrash = errors.New("sim: connection closed")
)

type simParams struct {
	txns       int
	plain      int // non-transactional sends
	window     time.Duration
	maxDelay   time.Duration
	lateEnd    time.Duration // outcomes may reach the buffer this late
	addFail    float64
	writeFail  float64 // a record write fails, not applied
	writeAmbig float64 // a record write is applied, then reported failed
	readFail   float64 // a registration's header read fails
	crashes    int
	trims      int
}

func (p simParams) String() string {
	return fmt.Sprintf("txns=%d plain=%d window=%v delay<=%v lateEnd<=%v fail(add=%.2f write=%.2f ambiguous=%.2f read=%.2f) crashes=%d trims=%d",
		p.txns, p.plain, p.window, p.maxDelay, p.lateEnd, p.addFail, p.writeFail, p.writeAmbig, p.readFail, p.crashes, p.trims)
}

func randomSimParams(s *sim.Sim) simParams {
	r := s.Rand()
	rate := func(max float64) float64 {
		if r.IntN(3) == 0 {
			return 0
		}
		return r.Float64() * max
	}
	return simParams{
		txns:       1 + r.IntN(12),
		plain:      r.IntN(10),
		window:     time.Duration(20+r.IntN(150)) * time.Millisecond,
		maxDelay:   time.Duration(1+r.IntN(5)) * time.Millisecond,
		lateEnd:    time.Duration(r.IntN(40)) * time.Millisecond,
		addFail:    rate(0.15),
		writeFail:  rate(0.2),
		writeAmbig: rate(0.2),
		readFail:   rate(0.2),
		crashes:    r.IntN(4),
		trims:      r.IntN(4),
	}
}

// simEntry is one entry of the log: a plain message (txn nil) or one of a transaction.
type simEntry struct {
	pos Position
	txn *txn.ID
}

// simHeader is a transaction's header at the model coordinator.
type simHeader struct {
	status   txn.Status
	listed   bool // the client added this topic
	deadline time.Duration
}

// simSend is one send of a producer; done is called once with its receipt or error.
type simSend struct {
	txn  *txn.ID
	n    int
	done func(error)
	// answered counts the answers (exactly one).
	answered int
}

// simAdd is an add handed to the log.
type simAdd struct {
	s *simSend
}

// simInc is one incarnation of the topic: a core and what its owner holds, until a crash.
type simInc struct {
	id       int
	c        *Core
	alive    bool
	timerAt  int64
	held     map[txn.ID][]*simSend
	regErr   map[txn.ID]error
	awaiting map[txn.ID]bool
	// unresolved: transactions found open at load whose outcome was not fed yet.
	unresolved map[txn.ID]bool
	adds       []simAdd
	ticking    bool
	// applying counts the apply writes (aborted record, watermark, open record deletion) in
	// flight: applies are serialized (T4), so at most one.
	applying int
	failedAt time.Duration // the last apply write reported failed (-1: none since)
	// lookupFailed: when the last read of a transaction's aborted record failed.
	lookupFailed map[txn.ID]time.Duration
}

type simStats struct {
	Appended, Committed, Aborted, TimedOut, Holds, Rejected, RegFailed, Refused, Crashes, Trims,
	Pruned, LateWrites, Ambiguous, WatermarkCAS, Reloaded, GCed, EndedUnknown, Visible, Orphans, Dropped,
	Lookups, LookupFailed int
}

type simWorld struct {
	s     *sim.Sim
	p     simParams
	mut   Mutation
	err   error
	quiet bool // the window is over: no faults, no crashes, no new transactions

	// The log.
	log     []simEntry
	trimmed int // entries before this index were trimmed
	ledger  int64
	entry   int64

	// The metadata store: open records, aborted records, the watermark.
	open    map[txn.ID]bool
	aborted map[txn.ID]Position
	wm      Position
	wmVer   metadata.Version
	rev     int64
	// The model coordinator: headers, and every transaction's final status (kept after
	// its header is collected).
	headers map[txn.ID]*simHeader
	final   map[txn.ID]txn.Status
	// orphans are open records a crashed incarnation's registration put after the reload:
	// no core knows them until the next load.
	orphans map[txn.ID]bool
	nextTxn uint64

	inc   *simInc
	incs  int
	sends []*simSend
	stats simStats
}

func newSimWorld(seed int64, mut Mutation, verbose bool) *simWorld {
	s := sim.New(seed)
	s.Verbose = verbose
	w := &simWorld{s: s, mut: mut, open: map[txn.ID]bool{}, aborted: map[txn.ID]Position{},
		headers: map[txn.ID]*simHeader{}, final: map[txn.ID]txn.Status{}, orphans: map[txn.ID]bool{}}
	w.p = randomSimParams(s)
	return w
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
	inc := &simInc{id: w.incs, alive: true, held: map[txn.ID][]*simSend{}, regErr: map[txn.ID]error{},
		awaiting: map[txn.ID]bool{}, unresolved: map[txn.ID]bool{}, failedAt: -1,
		lookupFailed: map[txn.ID]time.Duration{}}
	inc.c = New()
	inc.c.SetMutation(w.mut)
	w.inc = inc
	// A reopened managed ledger writes to a new ledger.
	w.ledger++
	w.entry = 0
	l := Loaded{Watermark: w.wm, WatermarkVer: w.wmVer, Aborted: maps.Clone(w.aborted)}
	for _, id := range slices.SortedFunc(maps.Keys(w.open), cmpID) {
		l.Open = append(l.Open, id)
		inc.unresolved[id] = true
	}
	if n := len(w.log); n > 0 {
		l.Last = w.log[n-1].pos
	}
	w.s.Tracef("incarnation %d loads: watermark %v, %d aborted, open %v, last %v", inc.id, l.Watermark, len(l.Aborted), l.Open, l.Last)
	w.input(inc, "load", func(c *Core) { c.Load(l) })
}

func cmpID(a, b txn.ID) int {
	if a.Most != b.Most {
		return int(a.Most) - int(b.Most)
	}
	return int(a.Least) - int(b.Least)
}

func (w *simWorld) crash() {
	inc := w.inc
	if w.quiet || !inc.alive {
		return
	}
	w.stats.Crashes++
	inc.alive = false
	// The adds in flight: a prefix of them may have been stored (recovery of the ledger).
	stored := w.s.Rand().IntN(len(inc.adds) + 1)
	w.s.Tracef("CRASH incarnation %d: %d of %d adds in flight stored", inc.id, stored, len(inc.adds))
	for i, a := range inc.adds {
		if i < stored {
			w.store(a.s)
		}
		w.answer(a.s, errSimCrash)
	}
	for _, id := range slices.SortedFunc(maps.Keys(inc.held), cmpID) {
		for _, s := range inc.held[id] {
			w.answer(s, errSimCrash)
		}
	}
	w.s.After(w.s.Between(0, 3*w.p.maxDelay), "restart", w.start)
}

// input runs one input on inc's core, performs its effects and checks.
func (w *simWorld) input(inc *simInc, name string, fn func(c *Core)) {
	if !inc.alive || w.err != nil {
		return
	}
	w.s.Tracef(" %s", name)
	fn(inc.c)
	// Performing may give the core inputs (held sends judged again): until nothing is left.
	for {
		r := inc.c.TakeReady()
		w.perform(inc, r)
		if len(r.Registers)+len(r.Awaits)+len(r.Writes)+len(r.Released)+len(r.Lookups)+len(r.Drops) == 0 {
			break
		}
	}
	w.check()
}

func (w *simWorld) perform(inc *simInc, r Ready) {
	for _, rg := range r.Registers {
		w.register(inc, rg)
	}
	for _, id := range r.Awaits {
		inc.awaiting[id] = true
		w.notify(inc, id)
	}
	for _, wr := range r.Writes {
		w.write(inc, wr)
	}
	for _, id := range r.Lookups {
		w.lookup(inc, id)
	}
	for _, id := range r.Drops {
		w.drop(inc, id)
	}
	for _, id := range r.Released {
		ss := inc.held[id]
		delete(inc.held, id)
		err := inc.regErr[id]
		delete(inc.regErr, id)
		for _, s := range ss {
			if err != nil {
				w.answer(s, err)
			} else {
				w.admit(inc, s)
			}
		}
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

// Sends.

// send hands s to the current incarnation's owner.
func (w *simWorld) send(s *simSend) {
	inc := w.inc
	if !inc.alive {
		w.answer(s, errSimCrash)
		return
	}
	w.sends = append(w.sends, s)
	if s.txn == nil {
		w.input(inc, fmt.Sprintf("send plain %d", s.n), func(*Core) { w.appendAdd(inc, s) })
		return
	}
	w.input(inc, fmt.Sprintf("send %v/%d", *s.txn, s.n), func(*Core) { w.admit(inc, s) })
}

func (w *simWorld) admit(inc *simInc, s *simSend) {
	v, err := inc.c.Admit(*s.txn)
	switch v {
	case Append:
		// T3: the transaction's open record is durable before its entry is handed to the log.
		if !w.open[*s.txn] {
			w.failf("T3: %v appends with no durable open record", *s.txn)
		}
		inc.c.Appending(*s.txn)
		w.appendAdd(inc, s)
	case Hold:
		w.stats.Holds++
		inc.held[*s.txn] = append(inc.held[*s.txn], s)
	case Refuse:
		w.stats.Refused++
		w.answer(s, err)
	}
}

func (w *simWorld) appendAdd(inc *simInc, s *simSend) {
	inc.adds = append(inc.adds, simAdd{s: s})
	if inc.ticking {
		return
	}
	inc.ticking = true
	var tick func()
	tick = func() {
		a := inc.adds[0]
		inc.adds = inc.adds[1:]
		ok := !w.chance(w.p.addFail)
		var pos Position
		if ok {
			pos = w.store(a.s)
		}
		w.input(inc, fmt.Sprintf("added %v ok=%v", pos, ok), func(c *Core) { c.Added(a.s.txn, pos, ok) })
		if ok {
			w.answer(a.s, nil)
		} else {
			w.answer(a.s, errSimAdd)
		}
		if len(inc.adds) > 0 {
			w.on(inc, w.delay(), "log add", tick)
		} else {
			inc.ticking = false
		}
	}
	w.on(inc, w.delay(), "log add", tick)
}

// store appends s's entry to the log.
func (w *simWorld) store(s *simSend) Position {
	if w.entry == simEntriesPerLedger {
		w.ledger, w.entry = w.ledger+1, 0
	}
	pos := Position{LedgerID: w.ledger, EntryID: w.entry}
	w.entry++
	w.log = append(w.log, simEntry{pos: pos, txn: s.txn})
	if s.txn != nil {
		w.stats.Appended++
	}
	return pos
}

func (w *simWorld) answer(s *simSend, err error) {
	s.answered++
	if s.answered > 1 {
		w.failf("send %d answered %d times", s.n, s.answered)
		return
	}
	if s.done != nil {
		w.s.After(w.delay(), "", func() {
			if w.err == nil {
				s.done(err)
			}
		})
	}
}

// The owner's performance of Ready.

// register performs a registration: put the open record, then read the header; reject (and
// delete the record) if it is not OPEN or does not list the topic.
func (w *simWorld) register(inc *simInc, rg Register) {
	id := rg.ID
	report := func(out RegisterOutcome, err error) {
		w.input(inc, fmt.Sprintf("registered %v %v %v", id, out, err), func(c *Core) {
			inc.regErr[id] = c.Registered(rg.Tag, out, err)
		})
	}
	w.storeOp(inc, "put open record "+id.String(), func() {
		if inc != w.inc && !w.open[id] {
			w.orphans[id] = true
			w.stats.Orphans++
		}
		w.open[id] = true
	}, func(err error) {
		if err != nil {
			w.stats.RegFailed++
			report(Failed, err)
			return
		}
		w.on(inc, w.delay(), "read header "+id.String(), func() {
			if w.chance(w.p.readFail) {
				w.stats.RegFailed++
				report(Failed, errSimDown)
				return
			}
			if h := w.headers[id]; h != nil && h.status == txn.Open && h.listed {
				report(Registered, nil)
				return
			}
			w.storeOp(inc, "delete open record "+id.String(), func() { delete(w.open, id) }, func(err error) {
				if err != nil {
					w.stats.RegFailed++
					report(Failed, err)
					return
				}
				w.stats.Rejected++
				report(Rejected, errSimGone)
			})
		})
	})
}

// storeOp applies a store operation after a delay (unless it fails; also if inc crashed
// meanwhile, unless the crash lost it) and reports it after another.
func (w *simWorld) storeOp(inc *simInc, name string, apply func(), done func(error)) {
	w.s.After(w.delay(), "store: "+name, func() {
		if w.err != nil || (!inc.alive && w.s.Chance(0.5)) {
			return
		}
		var err error
		if w.chance(w.p.writeFail) {
			err = errSimDown
		} else {
			apply()
			if !inc.alive {
				w.stats.LateWrites++
			}
			if w.chance(w.p.writeAmbig) {
				w.stats.Ambiguous++
				err = errSimAmbig
			}
		}
		w.s.Tracef("  -> %v", err)
		w.check()
		w.on(inc, w.delay(), "", func() { done(err) })
	})
}

// write performs a record write of Ready.Writes.
func (w *simWorld) write(inc *simInc, wr Write) {
	if wr.Kind != WriteDeleteAborted {
		inc.applying++
		if inc.applying > 1 {
			w.failf("T4: %d apply writes in flight at once", inc.applying)
		}
		if inc.failedAt >= 0 && w.s.Now()-inc.failedAt < 100*time.Millisecond {
			w.failf("an apply write retried %v after a failure, without backoff", w.s.Now()-inc.failedAt)
		}
	}
	var apply func()
	var name string
	var reloaded *Position
	var reloadedVer, ver metadata.Version
	switch wr.Kind {
	case WriteApply:
		// One atomic commit: the watermark's compare-and-swap fails it whole.
		name = fmt.Sprintf("apply %v: aborted %v", wr.Applied, wr.Aborted)
		if wr.Watermark != nil {
			name += fmt.Sprintf(", CAS watermark %v@%d", *wr.Watermark, wr.Expected)
		}
		apply = func() {
			if wr.Watermark != nil && wr.Expected != w.wmVer {
				cur := w.wm
				reloaded, reloadedVer = &cur, w.wmVer
				return
			}
			ids := slices.Collect(maps.Keys(wr.Aborted))
			slices.SortFunc(ids, func(a, b txn.ID) int { return cmp.Compare(a.Least, b.Least) })
			for _, id := range ids {
				w.putAborted(id, wr.Aborted[id])
			}
			if wr.Watermark != nil {
				w.casWatermark(*wr.Watermark, wr.Expected, &reloaded, &reloadedVer)
				ver = w.wmVer
			}
			for _, id := range wr.Applied {
				delete(w.open, id)
			}
		}
	case WriteDeleteAborted:
		name = "prune aborted record " + wr.ID.String()
		apply = func() { w.pruneAborted(wr.ID) }
	}
	w.storeOp(inc, name, apply, func(err error) {
		if reloaded != nil { // the compare-and-swap found another version
			err = metadata.ErrBadVersion
			p, v := *reloaded, reloadedVer
			w.stats.Reloaded++
			w.input(inc, fmt.Sprintf("watermark reloaded %v@%d", p, v), func(c *Core) { c.WatermarkReloaded(p, v) })
		}
		if wr.Kind != WriteDeleteAborted {
			inc.applying--
			inc.failedAt = -1
			if err != nil {
				inc.failedAt = w.s.Now()
			}
		}
		if err != nil {
			ver = 0
		}
		w.input(inc, fmt.Sprintf("written %d %v", wr.Tag, err), func(c *Core) { c.Written(w.nowMs(), wr.Tag, ver, err) })
	})
}

// Store changes and their checks.

func (w *simWorld) truth(id txn.ID) txn.Status {
	if h := w.headers[id]; h != nil {
		return h.status
	}
	return w.final[id]
}

func (w *simWorld) putAborted(id txn.ID, pos Position) {
	if s := w.truth(id); s != txn.Aborted {
		w.failf("T1: an aborted record for %v, which is %v", id, s)
	}
	w.aborted[id] = pos
}

// casWatermark is the watermark's compare-and-swap (T4: only forward; everything below it is
// resolved, and an aborted transaction's entries below it are in the durable aborted set).
func (w *simWorld) casWatermark(pos Position, exp metadata.Version, reloaded **Position, ver *metadata.Version) {
	if exp != w.wmVer {
		cur := w.wm
		*reloaded, *ver = &cur, w.wmVer
		return
	}
	w.stats.WatermarkCAS++
	if pos.Less(w.wm) {
		w.failf("T4: the watermark moves back from %v to %v", w.wm, pos)
	}
	for _, e := range w.log[w.trimmed:] {
		if e.txn == nil || !e.pos.Less(pos) {
			continue
		}
		switch s := w.truth(*e.txn); {
		case s == txn.Open:
			w.failf("T4: the watermark passes %v at %v, an entry of open %v", pos, e.pos, *e.txn)
		case s == txn.Aborted:
			if _, ok := w.aborted[*e.txn]; !ok {
				w.failf("T4: the watermark passes %v at %v, an entry of aborted %v without its aborted record", pos, e.pos, *e.txn)
			}
		}
	}
	w.rev++
	w.wm, w.wmVer = pos, metadata.Version(w.rev)
}

func (w *simWorld) pruneAborted(id txn.ID) {
	for _, e := range w.log[w.trimmed:] {
		if e.txn != nil && *e.txn == id {
			w.failf("the aborted record of %v pruned while its entry %v remains", id, e.pos)
		}
	}
	delete(w.aborted, id)
	w.stats.Pruned++
}

// The model coordinator and the tracker.

// begin opens a transaction (listed: the client added this topic).
func (w *simWorld) begin(listed bool, ttl time.Duration) txn.ID {
	w.nextTxn++
	id := txn.ID{Most: 1, Least: w.nextTxn}
	w.headers[id] = &simHeader{status: txn.Open, listed: listed, deadline: w.s.Now() + ttl}
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
	w.check()
	if inc := w.inc; inc.awaiting[id] {
		w.notify(inc, id)
	}
	w.endedNotice(id)
	w.gc(id, w.s.Between(time.Millisecond, 20*time.Millisecond))
	return true
}

// endedNotice is the coordinator's broker telling the loaded topic that id ended
// (Topic.TxnEnded), at any time relative to the outcome's arrival through the tracker.
func (w *simWorld) endedNotice(id txn.ID) {
	w.s.After(w.delay()+w.s.Between(0, w.p.lateEnd), "ended notice "+id.String(), func() {
		inc := w.inc
		w.input(inc, fmt.Sprintf("ended notice %v", id), func(c *Core) { c.EndedNotice(id) })
	})
}

// drop performs Ready.Drops: the open record's deletion, in the background (a failure
// leaves it to the next load).
func (w *simWorld) drop(inc *simInc, id txn.ID) {
	w.storeOp(inc, "drop open record "+id.String(), func() {
		if w.open[id] {
			w.stats.Dropped++
		}
		delete(w.open, id)
		delete(w.orphans, id)
	}, func(error) {})
}

// lookup performs Ready.Lookups: a read of the topic's aborted record of id (it may fail).
func (w *simWorld) lookup(inc *simInc, id txn.ID) {
	w.stats.Lookups++
	if at, ok := inc.lookupFailed[id]; ok && w.s.Now()-at < 100*time.Millisecond {
		w.failf("the read of %v's aborted record retried %v after a failure, without backoff", id, w.s.Now()-at)
	}
	w.on(inc, w.delay(), "read aborted record "+id.String(), func() {
		var err error
		_, found := w.aborted[id]
		delete(inc.lookupFailed, id)
		if w.chance(w.p.readFail) {
			err, found = errSimDown, false
			w.stats.LookupFailed++
			inc.lookupFailed[id] = w.s.Now()
		} else {
			delete(inc.unresolved, id)
		}
		w.input(inc, fmt.Sprintf("aborted record of %v: %v %v", id, found, err), func(c *Core) { c.LookedUp(w.nowMs(), id, found, err) })
	})
}

// gc deletes the header once the topic's open record is gone (checking with backoff).
func (w *simWorld) gc(id txn.ID, d time.Duration) {
	w.s.After(d, "gc "+id.String(), func() {
		if w.open[id] {
			w.gc(id, min(2*d, 10*time.Second))
			return
		}
		w.stats.GCed++
		delete(w.headers, id)
	})
}

// notify feeds inc the outcome of id once it has one (0: its header is gone), late.
func (w *simWorld) notify(inc *simInc, id txn.ID) {
	if h := w.headers[id]; h != nil && h.status == txn.Open {
		return // endTxn notifies
	}
	w.on(inc, w.delay()+w.s.Between(0, w.p.lateEnd), "", func() {
		// The tracker's Await: the header's status, 0 if it is gone.
		var s txn.Status
		if h := w.headers[id]; h != nil {
			s = h.status
		} else {
			w.stats.EndedUnknown++
		}
		if s != 0 {
			delete(inc.unresolved, id)
		} else {
			// A new resolution (the transaction registered again after it was forgotten):
			// its first read of the aborted record is not a retry.
			delete(inc.lookupFailed, id)
		}
		w.input(inc, fmt.Sprintf("ended %v %v", id, s), func(c *Core) { c.Ended(id, s) })
	})
}

// Trims and reads.

// trim removes a prefix of the log that readers have passed.
func (w *simWorld) trim() {
	inc := w.inc
	if !inc.alive {
		return
	}
	b := inc.c.MaxRead()
	n := w.trimmed
	for n < len(w.log) && (b == nil || w.log[n].pos.Less(b.Pos)) {
		n++
	}
	n = w.trimmed + w.s.Rand().IntN(n-w.trimmed+1)
	if n == w.trimmed {
		return
	}
	w.stats.Trims++
	w.trimmed = n
	first := Position{LedgerID: w.ledger, EntryID: w.entry}
	if n < len(w.log) {
		first = w.log[n].pos
	}
	w.input(inc, fmt.Sprintf("trimmed before %v", first), func(c *Core) { c.Trimmed(first) })
}

// visible returns the entries a reader from the earliest position gets: those before the
// read bound, without the aborted ones.
func (w *simWorld) visible(c *Core) []simEntry {
	b := c.MaxRead()
	var out []simEntry
	for _, e := range w.log[w.trimmed:] {
		if b != nil && !e.pos.Less(b.Pos) {
			break
		}
		if e.txn == nil || !c.IsAborted(*e.txn) {
			out = append(out, e)
		}
	}
	return out
}

// check runs after every step: T2 (a reader sees no entry of an aborted or open transaction,
// and nothing past the stored watermark while a transaction found open at load is
// unresolved) and the aborted records' positions cover their transactions' entries.
func (w *simWorld) check() {
	if inc := w.inc; inc.alive && inc.c.State() == StateReady {
		for _, e := range w.visible(inc.c) {
			if e.txn == nil {
				continue
			}
			if s := w.truth(*e.txn); s != txn.Committed {
				w.failf("T2: a reader sees %v, an entry of %v %v", e.pos, s, *e.txn)
			}
			if len(inc.unresolved) > 0 && !e.pos.Less(w.wm) {
				w.failf("T2: a reader sees %v, past the watermark %v, while %v found open at load are unresolved",
					e.pos, w.wm, slices.SortedFunc(maps.Keys(inc.unresolved), cmpID))
			}
		}
	}
	for _, e := range w.log[w.trimmed:] {
		if e.txn == nil {
			continue
		}
		if p, ok := w.aborted[*e.txn]; ok && p.Less(e.pos) {
			w.failf("the aborted record of %v ends at %v, before its entry %v", *e.txn, p, e.pos)
		}
	}
}

// checkEnd runs with the faults stopped, after a last reload and nothing left to do: T1
// (every committed entry is readable), every send was answered, no transaction is left.
func (w *simWorld) checkEnd() {
	c := w.inc.c
	vis := map[Position]bool{}
	for _, e := range w.visible(c) {
		vis[e.pos] = true
		if e.txn != nil {
			w.stats.Visible++
		}
	}
	for _, e := range w.log[w.trimmed:] {
		if (e.txn == nil || w.truth(*e.txn) == txn.Committed) && !vis[e.pos] {
			w.failf("T1: entry %v (txn %v) is not readable after the reload", e.pos, e.txn)
			return
		}
	}
	for _, s := range w.sends {
		if s.answered != 1 {
			w.failf("send %d answered %d times", s.n, s.answered)
		}
	}
	if len(w.open) > 0 || c.Open() > 0 || len(w.headers) > 0 {
		w.failf("left: open records %v, %d in the buffer, %d headers", slices.SortedFunc(maps.Keys(w.open), cmpID), c.Open(), len(w.headers))
	}
}

// Producers.

// txnClient runs one transaction: k sends (retrying a failed one once, or aborting), then a
// commit, an abort, or nothing (it times out); sometimes the end does not wait for the last
// receipt, and sometimes a send comes after the end.
func (w *simWorld) txnClient(n int) {
	if w.quiet {
		return
	}
	r := w.s.Rand()
	ttl := time.Duration(10+r.IntN(80)) * time.Millisecond
	id := w.begin(r.IntN(10) != 0, ttl)
	if r.IntN(15) == 0 { // a transaction the coordinator never heard of
		id = txn.ID{Most: 1, Least: 1 << 40}
	}
	k := r.IntN(5)
	end := func() {
		w.s.After(w.delay(), "", func() {
			switch x := r.IntN(20); {
			case x < 12:
				w.endTxn(id, txn.Committed)
			case x < 17:
				w.endTxn(id, txn.Aborted)
			}
			if r.IntN(6) == 0 {
				w.s.After(w.delay(), "", func() { w.send(&simSend{txn: &id, n: n*100 + 99}) })
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
		s := &simSend{txn: &id, n: n*100 + i}
		s.done = func(err error) {
			switch {
			case eager:
			case err == nil:
				next(i+1, false)
			case !retried && r.IntN(2) == 0:
				w.s.After(w.delay(), "", func() { next(i, true) })
			default:
				w.endTxn(id, txn.Aborted)
			}
		}
		w.send(s)
		if eager {
			end()
		}
	}
	next(0, false)
}

func (w *simWorld) run() error {
	p := w.p
	s := w.s
	s.Tracef("params: %v", p)
	w.start()
	for i := 0; i < p.txns; i++ {
		s.After(s.Between(0, p.window), fmt.Sprintf("transaction %d", i), func() { w.txnClient(i) })
	}
	for i := 0; i < p.plain; i++ {
		s.After(s.Between(0, p.window), "", func() { w.send(&simSend{n: -1 - i}) })
	}
	for k := 0; k < p.crashes; k++ {
		s.After(s.Between(0, p.window), "crash", w.crash)
	}
	for k := 0; k < p.trims; k++ {
		s.After(s.Between(0, p.window+100*time.Millisecond), "trim", w.trim)
	}
	s.After(p.window, "quiesce", func() { w.quiet = true })
	w.settle(p.window+time.Minute, true)
	for id := range w.open {
		if !w.orphans[id] {
			w.failf("the open record of %v is left (%v)", id, w.truth(id))
		}
	}
	if w.err == nil {
		// T1 after a reload: with every outcome applied and the headers collected.
		w.reload()
		w.settle(s.Now()+time.Minute, false)
	}
	if w.err == nil {
		w.checkEnd()
	}
	return w.err
}

// reload replaces the incarnation (nothing of the old one is in flight).
func (w *simWorld) reload() {
	w.inc.alive = false
	w.start()
}

// settle runs events until none is left or the deadline (an error unless orphans keep
// the model coordinator checking).
func (w *simWorld) settle(deadline time.Duration, orphansOK bool) {
	for w.err == nil && w.s.Step() {
		if w.s.Now() > deadline {
			if !orphansOK || len(w.orphans) == 0 {
				w.failf("no quiescence by %v (%d events pending)", deadline, w.s.Pending())
			}
			return
		}
	}
}

func runSimSeed(seed int64, mut Mutation, verbose bool) (*simWorld, error) {
	w := newSimWorld(seed, mut, verbose)
	return w, w.run()
}

// TestSim drives the transaction buffer core through seeded interleavings (see simWorld).
func TestSim(t *testing.T) {
	var st simStats
	ran, failed := sim.RunSeeds(t, flags.Seeds("./broker/topic/txnbuf", 0), func(seed int64, verbose bool) sim.Outcome {
		w, err := runSimSeed(seed, Mutation{}, verbose)
		sim.AddCounts(&st, w.stats)
		return sim.Outcome{Sim: w.s, Params: w.p, Err: err}
	})
	if failed {
		return
	}
	t.Logf("%+v", st)
	sim.RequireCoverage(t, ran, 300, map[string]int{"appends": st.Appended, "commits": st.Committed, "aborts": st.Aborted,
		"timeouts": st.TimedOut, "holds": st.Holds, "rejected registrations": st.Rejected,
		"failed registrations": st.RegFailed, "refused sends": st.Refused, "crashes": st.Crashes, "trims": st.Trims,
		"pruned records": st.Pruned, "late writes": st.LateWrites, "ambiguous writes": st.Ambiguous,
		"watermark moves": st.WatermarkCAS, "watermark reloads": st.Reloaded, "collected headers": st.GCed,
		"outcomes of collected headers": st.EndedUnknown, "visible transactional entries": st.Visible,
		"dropped open records": st.Dropped, "aborted-record reads": st.Lookups, "failed aborted-record reads": st.LookupFailed})
}

// TestSimDeterministic replays seeds and requires identical traces.
func TestSimDeterministic(t *testing.T) {
	sim.CheckDeterministic(t, 30, func(seed int64) *sim.Sim {
		w, _ := runSimSeed(seed, Mutation{}, true)
		return w.s
	})
}

// simMutants are upstream's behaviours (apache/pulsar#25768) and an apply that does not wait.
var simMutants = []sim.Mutant[Mutation]{
	{Name: "unknown transactions read as aborted (apache/pulsar#25768)", Mut: Mutation{UnknownIsAborted: true}},
	{Name: "the append before the open record (apache/pulsar#25768)", Mut: Mutation{AppendBeforeRecord: true}},
	{Name: "no pin at a transaction found open at recovery", Mut: Mutation{NoPinAtRecovery: true}},
	{Name: "the watermark past an abort without its aborted record", Mut: Mutation{SkipAbortRecord: true}},
	{Name: "an outcome applied with appends in flight", Mut: Mutation{ApplyWithInflight: true}},
	{Name: "the open record dropped while its apply is in flight", Mut: Mutation{ForgetApplying: true}},
	{Name: "a collected header read as aborted", Mut: Mutation{GoneIsAborted: true}},
	{Name: "a failed write's backoff measured from the last tick", Mut: Mutation{StaleRetryClock: true}},
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
