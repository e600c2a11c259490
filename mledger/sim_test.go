package mledger

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/sim"
)

var flags = sim.NewSeedFlags(1000, "TestSim (TestWorld: half of it)")

const simML = "tenant/ns/topic"

// simParams are one seed's scenario and fault rates.
type simParams struct {
	adds        int
	addWindow   time.Duration
	maxEntries  int64
	maxDelay    time.Duration // port completions take 0..maxDelay
	persistMax  time.Duration // an add reaches the bookies after 0..persistMax
	cbMax       time.Duration // a confirmed add's callback arrives 0..cbMax after its LAC
	addFail     float64
	closeFail   float64
	createFail  float64
	recoverFail float64
	readFail    float64
	metaFail    float64 // ambiguous metadata write failures
	terminate   bool
	terminateAt time.Duration
	crashes     int
	zombie      bool
	cursor      bool
	retainAll   bool
	// mdRate is the mark-delete rate (0: unlimited), flushEvery the flush timer's period.
	mdRate     float64
	flushEvery time.Duration
}

func (p simParams) String() string {
	return fmt.Sprintf("adds=%d maxEntries=%d delay<=%v fail(add=%.2f close=%.2f create=%.2f recover=%.2f read=%.2f meta=%.2f) terminate=%v@%v crashes=%d zombie=%v cursor=%v retainAll=%v mdRate=%.0f/s flush=%v",
		p.adds, p.maxEntries, p.maxDelay, p.addFail, p.closeFail, p.createFail, p.recoverFail, p.readFail, p.metaFail,
		p.terminate, p.terminateAt, p.crashes, p.zombie, p.cursor, p.retainAll, p.mdRate, p.flushEvery)
}

func randomParams(s *sim.Sim) simParams {
	r := s.Rand()
	rate := func(max float64) float64 {
		if r.IntN(3) == 0 {
			return 0
		}
		return r.Float64() * max
	}
	p := simParams{
		adds:        5 + r.IntN(40),
		addWindow:   time.Duration(20+r.IntN(200)) * time.Millisecond,
		maxEntries:  int64(1 + r.IntN(6)),
		maxDelay:    time.Duration(1+r.IntN(8)) * time.Millisecond,
		persistMax:  time.Duration(1+r.IntN(8)) * time.Millisecond,
		cbMax:       time.Duration(r.IntN(8)) * time.Millisecond,
		addFail:     rate(0.04),
		closeFail:   rate(0.2),
		createFail:  rate(0.2),
		recoverFail: rate(0.2),
		readFail:    rate(0.1),
		metaFail:    rate(0.2),
		terminate:   r.IntN(2) == 0,
		crashes:     r.IntN(3),
		zombie:      r.IntN(4) == 0,
		cursor:      r.IntN(10) < 7,
		retainAll:   r.IntN(3) == 0,
	}
	p.terminateAt = time.Duration(r.Int64N(int64(p.addWindow) + 1))
	if r.IntN(2) == 0 {
		p.mdRate = float64(10 + r.IntN(90))
	}
	p.flushEvery = time.Duration(5+r.IntN(60)) * time.Millisecond
	return p
}

// simAdd is one add the world made.
type simAdd struct {
	id      int
	payload []byte
	core    *simCore
	done    int
	pos     Position
	err     error
	acked   bool
}

// simCore is one incarnation of the managed ledger's owner.
type simCore struct {
	simEnv   // alive false once crashed: its events are dropped
	w        *world
	id       int
	c        *core
	opened   bool
	closed   bool
	terminal bool // has been Terminating or Terminated
	lastAck  Position
	hasAck   bool
	cur      *cursor
	born     time.Duration // virtual time of creation
}

// simEnv is the env of a core the simulator drives (simCore, wcore): its closures run as
// simulation events, dropped once the owner crashed (alive false).
type simEnv struct {
	s     *sim.Sim
	start time.Time
	alive bool
}

func (e *simEnv) post(name string, fn func()) {
	e.s.After(0, name, func() {
		if e.alive {
			fn()
		}
	})
}

func (e *simEnv) after(d time.Duration, name string, fn func()) func() {
	cancelled := false
	e.s.After(d, name, func() {
		if e.alive && !cancelled {
			fn()
		}
	})
	return func() { cancelled = true }
}

func (e *simEnv) now() time.Time { return e.start.Add(e.s.Now()) }

type heldEvent struct {
	kind string
	fn   func()
}

// world is one seed's simulation: the ports, the owners, the clients and the checker.
type world struct {
	s     *sim.Sim
	p     simParams
	mut   mutation
	bk    *simLedgers
	ms    *simMeta
	start time.Time
	err   error

	cores     []*simCore
	owner     *simCore // the newest owner
	adds      []*simAdd
	byPayload map[string]*simAdd
	ended     bool // clients stopped; closing down

	terminated *Position // as first seen in the record
	cfg        Config

	// consumer state (the durable cursor "sub")
	maxMD          Position // the highest mark-delete position any owner reached
	durableAtCrash *Position
	// the cursor property simProp: the consumer sets it to ever larger values (propNext);
	// propDurable is the largest whose SetProperty the newest owner confirmed durable, so
	// every later recovery must find at least it (0: none yet, or a zombie made it unsure).
	propNext, propDurable int64
	propSets              map[int]int // by core id: property sets, each a write past the rate (as Flush)
	// the mark-delete rate (MD1, MD2): cursor-state appends by core id, and the last
	// persisted position seen of each core's cursor
	cursorAppends map[int]int
	lastPersisted map[int]Position

	recCache struct {
		v  metadata.Version
		in *Info
	}
	curCache map[string]cachedCursor
	// everRecorded: ledgers the managed ledger's record has named.
	everRecorded map[int64]bool
	// removedBy is the core that removed a ledger from a record (it must delete it).
	removedBy map[int64]*simCore
	// opened: ledgers some owner made its current ledger (LedgerOpened). Only those can be
	// the terminated position's ledger (M3: terminate never switches to a new ledger).
	opened map[int64]bool

	// hold, if set, captures deliveries of a kind instead of scheduling them (scenarios).
	hold func(kind string) bool
	held []heldEvent
	// ambiguousNext makes the next metadata writes apply and then report a timeout.
	ambiguousNext int
	// lateNext makes the next metadata writes report a timeout and apply later.
	lateNext int

	stats simStats

	// off is the offload simulation (sim_offload_test.go); nil: offload off.
	off *simOffload
	// crash crashes the current owner (it restarts shortly after); set by run.
	crash func()
}

type simStats struct {
	Acked, Failed, Terminated, Crashes, Zombies, Fenced, Rollovers, Trims, ReopenReads, CursorReads int
	// Offload (TestSimOffload only).
	Offloaded, BookieDeletes, OffloadReads, OffloadReadFails, UploadFails, UploadCrashes, OrphansCleaned,
	OffloadedTrims, LateDeletes int
}

func newWorld(seed int64, mut mutation, verbose bool) *world {
	return newWorldWith(seed, mut, verbose, false)
}

// newWorldWith is newWorld with the offload simulation on (offload: its parameters are drawn
// after the others, so the seeds of TestSim are unchanged).
func newWorldWith(seed int64, mut mutation, verbose, offload bool) *world {
	s := sim.New(seed)
	s.Verbose = verbose
	w := &world{s: s, mut: mut, start: time.Unix(1_700_000_000, 0), byPayload: map[string]*simAdd{},
		removedBy: map[int64]*simCore{}, everRecorded: map[int64]bool{}, curCache: map[string]cachedCursor{},
		opened: map[int64]bool{}, cursorAppends: map[int]int{}, lastPersisted: map[int]Position{},
		propSets: map[int]int{}}
	w.p = randomParams(s)
	w.bk = &simLedgers{w: w, ls: map[int64]*simLedger{}}
	w.ms = &simMeta{w: w, kv: map[string]simKV{}, inflight: map[string]int{}}
	w.cfg = Config{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, MaxEntriesPerLedger: w.p.maxEntries,
		MaxLedgerRolloverTime: -1, TrimInterval: 20 * time.Millisecond, CursorSnapshotInterval: 15 * time.Millisecond,
		CursorMaxEntriesPerLedger: 3, RetryBackoff: time.Millisecond, OpenAttempts: 1000, CacheSize: 64}
	if w.p.retainAll {
		w.cfg.RetentionTime, w.cfg.RetentionSize = -1, -1
	}
	w.cfg.MaxMarkDeleteRate, w.cfg.CursorFlushInterval = w.p.mdRate, w.p.flushEvery
	if offload {
		newSimOffload(w)
	}
	return w
}

func (w *world) failf(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("at %v: %s", w.s.Now(), fmt.Sprintf(format, args...))
		w.s.Tracef("CHECK FAILED: %v", w.err)
	}
}

func (w *world) delay() time.Duration { return w.s.Between(0, w.p.maxDelay) }

// deliver schedules a port completion, unless a scenario holds that kind.
func (w *world) deliver(kind string, d time.Duration, fn func()) {
	if w.hold != nil && w.hold(kind) {
		w.s.Tracef("held %s", kind)
		w.held = append(w.held, heldEvent{kind, fn})
		return
	}
	w.s.After(d, kind, fn)
}

// release schedules the held deliveries of kind (all, or the first n if n > 0).
func (w *world) release(kind string, n int) int {
	var kept []heldEvent
	released := 0
	for _, h := range w.held {
		if h.kind == kind && (n <= 0 || released < n) {
			w.s.After(0, h.kind+" (released)", h.fn)
			released++
			continue
		}
		kept = append(kept, h)
	}
	w.held = kept
	return released
}

// newCore starts a new owner incarnation and opens it.
func (w *world) newCore(onOpen func(*simCore, error)) *simCore {
	sc := &simCore{w: w, id: len(w.cores) + 1, simEnv: simEnv{s: w.s, start: w.start, alive: true}, born: w.s.Now()}
	sc.c = newCore(simML, w.cfg.withDefaults(), sc, &simLedgerPort{sl: w.bk, sc: sc}, &simMetaPort{m: w.ms, sc: sc},
		fmt.Sprintf("owner%d", sc.id), nil)
	sc.c.mut = w.mut
	sc.c.trace = w.s.Tracef
	if w.off != nil {
		w.off.attach(sc)
	}
	sc.c.hooks = hooks{
		transition: func(from, to State) {
			if from == StateTerminating || from == StateTerminated {
				sc.terminal = true
			}
			if to == StateTerminating || to == StateTerminated {
				sc.terminal = true
			}
			if sc.terminal && to.Writable() {
				w.failf("M1: core %d went %v -> %v after terminate", sc.id, from, to)
			}
			if to == StateFenced {
				w.stats.Fenced++
				if in := w.record(); in != nil && in.Owner == sc.c.token {
					w.failf("M4: core %d fenced while it still owns the record (%v)", sc.id, sc.c.stateErr)
				}
			}
			if from == StateCreatingLedger && to == StateLedgerOpened {
				w.stats.Rollovers++
			}
			if to == StateLedgerOpened {
				w.opened[sc.c.tail.id] = true
			}
		},
		createLedger: func(purpose string, st State) {
			if purpose == "data" && (st == StateTerminating || st == StateTerminated || sc.terminal) {
				w.failf("M3: core %d creates a data ledger in state %v", sc.id, st)
			}
		},
	}
	w.cores = append(w.cores, sc)
	w.owner = sc
	w.s.Tracef("core %d starts opening", sc.id)
	sc.c.open(func(err error) {
		if err == nil {
			sc.opened = true
		}
		w.s.Tracef("core %d opened: %v (state %v)", sc.id, err, sc.c.state)
		if onOpen != nil {
			onOpen(sc, err)
		}
	})
	return sc
}

// record returns the managed ledger's record as stored.
func (w *world) record() *Info {
	e, ok := w.ms.kv[metadata.ManagedLedgerKey(simML)]
	if !ok {
		return nil
	}
	if w.recCache.v == e.version && w.recCache.in != nil {
		return w.recCache.in
	}
	in, err := decodeInfo(e.value)
	if err != nil {
		w.failf("record does not decode: %v", err)
		return nil
	}
	w.recCache.v, w.recCache.in = e.version, in
	return in
}

// cursorRecord decodes a cursor record (cached by version).
func (w *world) cursorRecord(key string) (*CursorInfo, error) {
	e := w.ms.kv[key]
	if c, ok := w.curCache[key]; ok && c.v == e.version {
		return c.ci, nil
	}
	ci, err := decodeCursorInfo(e.value)
	if err != nil {
		return nil, err
	}
	w.curCache[key] = cachedCursor{e.version, ci}
	return ci, nil
}

type cachedCursor struct {
	v  metadata.Version
	ci *CursorInfo
}

// durableCursorMD is what recovering cursor key would find: the newer of the record's
// snapshot and the last durable state in its ledger.
func (w *world) durableCursorMD(key string) (Position, bool) {
	st, ok := w.durableCursorState(key)
	return st.MarkDelete, ok
}

// durableCursorState is the state recovering cursor key would find.
func (w *world) durableCursorState(key string) (CursorState, bool) {
	e, ok := w.ms.kv[key]
	if !ok {
		return CursorState{}, false
	}
	ci, err := decodeCursorInfo(e.value)
	if err != nil {
		w.failf("cursor record %s does not decode: %v", key, err)
		return CursorState{}, false
	}
	best := ci.State
	if l := w.bk.ls[ci.Ledger]; ci.Ledger >= 0 && l != nil && !l.deleted && l.end() >= 0 {
		st, err := decodeCursorState(l.data[l.end()])
		if err != nil {
			w.failf("cursor ledger %d: %v", ci.Ledger, err)
		} else if st.Seq > best.Seq {
			best = *st
		}
	}
	return best, true
}

// onMetaChange checks every change of the managed ledger's record as it is applied.
func (w *world) onMetaChange(by *simCore, key string, oldV, newV []byte) {
	if key != metadata.ManagedLedgerKey(simML) {
		if oldV != nil {
			if ci, err := decodeCursorInfo(oldV); err == nil && ci.Ledger >= 0 {
				if nci, err := decodeCursorInfo(newV); newV == nil || err == nil && nci.Ledger != ci.Ledger {
					w.removedBy[ci.Ledger] = by
				}
			}
		}
		return
	}
	if newV == nil {
		if old, err := decodeInfo(oldV); err == nil {
			for _, l := range old.Ledgers {
				w.removedBy[l.ID] = by
			}
			if w.off != nil {
				w.off.onRecordChange(by, old, nil)
			}
		}
		return
	}
	nw, err := decodeInfo(newV)
	if err != nil {
		w.failf("core %d wrote an invalid record: %v", by.id, err)
		return
	}
	for _, l := range nw.Ledgers {
		w.everRecorded[l.ID] = true
	}
	if w.terminated != nil {
		if nw.Terminated == nil || *nw.Terminated != *w.terminated {
			w.failf("M1: terminated position changed from %v to %v", *w.terminated, nw.Terminated)
		}
	} else if nw.Terminated != nil {
		t := *nw.Terminated
		w.terminated = &t
		w.checkTerminatedLedger(nw)
	}
	if oldV == nil {
		return
	}
	old, err := decodeInfo(oldV)
	if err != nil {
		return
	}
	if w.off != nil {
		w.off.onRecordChange(by, old, nw)
	}
	first := int64(-1)
	if len(nw.Ledgers) > 0 {
		first = nw.Ledgers[0].ID
	}
	for _, l := range old.Ledgers {
		if nw.has(l.ID) {
			continue
		}
		w.removedBy[l.ID] = by
		sl := w.bk.ls[l.ID]
		if first >= 0 && l.ID > first || first < 0 {
			// Removed from the tail: a rollover ledger that lost the race, or an empty
			// recovered ledger. It must hold nothing confirmed.
			if sl != nil && sl.end() >= 0 {
				w.failf("ledger %d with entries 0..%d removed from the tail of the record", l.ID, sl.end())
			}
			continue
		}
		// Trimmed: every durable cursor must have consumed it.
		w.stats.Trims++
		last := l.Entries - 1
		if l.Closed == 0 && sl != nil {
			last = sl.end()
		}
		for k := range w.ms.kv {
			if len(k) <= len(metadata.ManagedCursorPrefix(simML)) || k[:len(metadata.ManagedCursorPrefix(simML))] != metadata.ManagedCursorPrefix(simML) {
				continue
			}
			if ci, err := decodeCursorInfo(w.ms.kv[k].value); err == nil && ci.Epoch < nw.Epoch {
				// A cursor record an older owner wrote after the trimming owner claimed the log
				// and listed the cursors (a subscription created during the ownership
				// change): the trimming owner cannot know it.
				continue
			}
			md, _ := w.durableCursorMD(k)
			if md.Less(Position{LedgerID: l.ID, EntryID: last}) && last >= 0 {
				w.failf("ledger %d (entries ..%d) trimmed but cursor %s durably at %v", l.ID, last, k, md)
			}
		}
	}
}

// checkTerminatedLedger (M3): the record's first terminated position names the ledger the log
// was writing when terminate started, sealed at that entry, and is the record's last ledger.
func (w *world) checkTerminatedLedger(in *Info) {
	t := *in.Terminated
	if err := checkTerminatedRecord(in, w.opened); err != nil {
		w.failf("%v", err)
		return
	}
	if sl := w.bk.ls[t.LedgerID]; sl == nil || !sl.closed || sl.last != t.EntryID {
		w.failf("M3: terminated at %v but ledger %d is not sealed there (%+v)", t, t.LedgerID, sl)
	}
}

// checkCores runs after every step: M1 (once terminate started on an owner, no state of it is
// writable, whether or not it got there through a transition the hook saw) and M2 (a
// Terminated owner has no add left waiting).
func (w *world) checkCores() {
	for _, sc := range w.cores {
		if sc.alive {
			if err := checkTerminalOwner(sc.c, sc.id, &sc.terminal); err != nil {
				w.failf("%v", err)
			}
		}
	}
}

// checkTerminalOwner is M1 and M2 for one live owner, after every step of either world: once
// terminate has started on it (*terminal records that), none of its states is writable,
// whether or not it got there through a transition the hook saw; once Terminated, no add of
// it is left waiting.
func checkTerminalOwner(c *core, id int, terminal *bool) error {
	st := c.state
	if st == StateTerminating || st == StateTerminated {
		*terminal = true
	}
	if *terminal && st.Writable() {
		return fmt.Errorf("M1: core %d is %v after terminate started", id, st)
	}
	if st == StateTerminated && c.adds.len() > 0 {
		return fmt.Errorf("M2: core %d is Terminated with %d adds still waiting", id, c.adds.len())
	}
	return nil
}

// checkTerminatedRecord is the part of M3 that needs only the record: its terminated
// position is the last entry of its last ledger, a ledger some owner wrote (opened), not a
// racing rollover's.
func checkTerminatedRecord(in *Info, opened map[int64]bool) error {
	t := *in.Terminated
	if last := in.last(); last == nil || last.ID != t.LedgerID || last.Entries-1 != t.EntryID {
		return fmt.Errorf("M3: terminated at %v but the record ends with %+v", t, last)
	}
	if !opened[t.LedgerID] {
		return fmt.Errorf("M3: terminated at %v, a ledger no owner ever wrote (a rollover's ledger)", t)
	}
	return nil
}

// check runs after every step.
func (w *world) check() {
	w.checkCores()
	w.checkMarkDelete()
	in := w.record()
	if in == nil {
		return
	}
	for _, l := range in.Ledgers {
		if sl := w.bk.ls[l.ID]; (sl == nil || sl.deleted) && !w.offloadedCopy(l) {
			w.failf("record names ledger %d, which is deleted (and has no complete offloaded copy)", l.ID)
		}
	}
	w.checkOffload(in)
	prefix := metadata.ManagedCursorPrefix(simML)
	for k := range w.ms.kv {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			ci, err := w.cursorRecord(k)
			if err == nil && ci.Ledger >= 0 {
				if sl := w.bk.ls[ci.Ledger]; sl == nil || sl.deleted {
					w.failf("cursor record %s names ledger %d, which is deleted", k, ci.Ledger)
				}
			}
		}
	}
	first := int64(-1)
	if len(in.Ledgers) > 0 {
		first = in.Ledgers[0].ID
	}
	for _, a := range w.adds {
		if !a.acked {
			continue
		}
		if in.Terminated != nil && in.Terminated.Less(a.pos) {
			w.failf("M2: add %d confirmed at %v, after the terminated position %v", a.id, a.pos, *in.Terminated)
		}
		if !in.has(a.pos.LedgerID) {
			if first >= 0 && a.pos.LedgerID < first {
				continue // trimmed (checked when it happened)
			}
			w.failf("add %d confirmed at %v, but its ledger is not in the record %v", a.id, a.pos, ledgerIDs(in))
			continue
		}
		sl := w.bk.ls[a.pos.LedgerID]
		if sl.deleted {
			continue // offloaded: checkOffload compares its offloaded copy with the ledger's entries
		}
		if a.pos.EntryID > sl.end() || string(sl.data[a.pos.EntryID]) != string(a.payload) {
			w.failf("add %d confirmed at %v is not durable there (end %d)", a.id, a.pos, sl.end())
		}
	}
}

// checkMarkDelete checks the mark-delete rate's invariants on every live owner's cursor:
//
//   - MD1: the persisted mark-delete position never moves backwards, is never ahead of the
//     in-memory one (the simulation does not reset cursors), and the owner of the cursor
//     record has it durable (recovery would find at least it);
//   - MD2: a core's cursor-state writes are within the rate (a full bucket, the tokens since
//     it started, one forced write per flush-timer period, and one per property set, which
//     waits for durability as Flush does), and no state stays held longer than the flush
//     period. (finish checks that a graceful close persists the in-memory state: the record
//     then has exactly it.);
//   - a cursor property the newest owner confirmed durable is in the state recovery would
//     find (and startConsumer checks that a recovered cursor has it).
func (w *world) checkMarkDelete() {
	key := metadata.ManagedCursorKey(simML, "sub")
	for _, sc := range w.cores {
		cur := sc.cur
		if !sc.alive || cur == nil {
			continue
		}
		if last, ok := w.lastPersisted[sc.id]; ok && cur.persistedMD.Less(last) {
			w.failf("MD1: core %d's persisted mark-delete went back from %v to %v", sc.id, last, cur.persistedMD)
		}
		w.lastPersisted[sc.id] = cur.persistedMD
		if cur.md.Less(cur.persistedMD) {
			w.failf("MD1: core %d's persisted mark-delete %v is ahead of the in-memory %v", sc.id, cur.persistedMD, cur.md)
		}
		if sc.c.state != StateFenced {
			if ci, err := w.cursorRecord(key); err == nil && ci.Owner == sc.c.token {
				if st, ok := w.durableCursorState(key); ok && st.MarkDelete.Less(cur.persistedMD) {
					w.failf("MD1: core %d reports %v persisted, but recovery would find %v", sc.id, cur.persistedMD, st.MarkDelete)
				} else if ok && sc == w.owner && st.Properties[simProp] < w.propDurable {
					w.failf("core %d confirmed property %s=%d durable, but recovery would find %d", sc.id, simProp,
						w.propDurable, st.Properties[simProp])
				}
			}
		}
		now := w.s.Now()
		if r := w.cfg.MaxMarkDeleteRate; r > 0 {
			el := now - sc.born
			bound := 2 + r*el.Seconds() + float64(el/w.cfg.CursorFlushInterval) + float64(w.propSets[sc.id])
			if n := w.cursorAppends[sc.id]; float64(n) > bound {
				w.failf("MD2: core %d wrote %d cursor states in %v, over the rate %.0f/s (bound %.1f)", sc.id, n, el, r, bound)
			}
		}
		switch sc.c.state {
		case StateClosing, StateClosed, StateFenced:
		default:
			if cur.hold == persistHeld && w.now().Sub(cur.heldSince) > w.cfg.CursorFlushInterval {
				w.failf("MD2: core %d's cursor held since %v, longer than the flush period %v", sc.id,
					cur.heldSince.Sub(w.start), w.cfg.CursorFlushInterval)
			}
		}
	}
}

func (w *world) now() time.Time { return w.start.Add(w.s.Now()) }

func ledgerIDs(in *Info) []int64 {
	var ids []int64
	for _, l := range in.Ledgers {
		ids = append(ids, l.ID)
	}
	return ids
}

// addOn makes add a on core sc.
func (w *world) addOn(sc *simCore, a *simAdd) {
	a.core = sc
	sc.c.add(a.payload, func(p Position, err error) {
		a.done++
		if a.done > 1 {
			w.failf("M2: add %d completed %d times", a.id, a.done)
			return
		}
		a.pos, a.err = p, err
		if err != nil {
			if sc.terminal && !errors.Is(err, ErrTerminated) && !errors.Is(err, ErrFenced) {
				w.failf("M2: add %d failed with %v after terminate started on core %d (want ErrTerminated)", a.id, err, sc.id)
			}
			w.stats.Failed++
			if errors.Is(err, ErrTerminated) {
				w.stats.Terminated++
			}
			return
		}
		a.acked = true
		w.stats.Acked++
		if sc.hasAck && !sc.lastAck.Less(p) {
			w.failf("add %d confirmed at %v after an earlier add at %v (core %d)", a.id, p, sc.lastAck, sc.id)
		}
		sc.lastAck, sc.hasAck = p, true
	})
}

// scheduleAdd issues add number i at time at (retrying while no owner is open).
func (w *world) scheduleAdd(a *simAdd, at time.Duration) {
	w.s.After(at, "client.add", func() {
		if w.ended {
			return
		}
		sc := w.owner
		if w.p.zombie && len(w.cores) > 1 && w.s.Chance(0.3) {
			if z := w.cores[len(w.cores)-2]; z.alive && z.opened && !z.closed {
				sc = z
			}
		}
		if !sc.alive || !sc.opened || sc.closed {
			w.scheduleAdd(a, 3*time.Millisecond)
			return
		}
		w.addOn(sc, a)
	})
}

// reopenCheck reads the whole log through core sc and compares it with the confirmed adds.
func (w *world) reopenCheck(sc *simCore, attempt int) {
	if !sc.alive || sc.closed || w.err != nil {
		return
	}
	type confirmed struct {
		id      int
		pos     Position
		payload []byte
	}
	var snapshot []confirmed // confirmed before the read starts
	for _, a := range w.adds {
		if a.acked {
			snapshot = append(snapshot, confirmed{a.id, a.pos, a.payload})
		}
	}
	sc.c.startRead(&readOp{from: Earliest, max: 1 << 20, reply: func(es []Entry, err error) {
		if err != nil {
			if errors.Is(err, ErrNoMoreEntries) {
				es = nil
			} else {
				if attempt < 50 && sc.alive && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFenced) {
					sc.after(2*time.Millisecond, "reopen-check.retry", func() { w.reopenCheck(sc, attempt+1) })
				}
				return
			}
		}
		w.stats.ReopenReads++
		got := map[Position]string{}
		for i, e := range es {
			if i > 0 && !es[i-1].Position.Less(e.Position) {
				w.failf("read after reopen out of order: %v then %v", es[i-1].Position, e.Position)
			}
			got[e.Position] = string(e.Data)
			if w.byPayload[string(e.Data)] == nil {
				w.failf("read after reopen returned an entry nobody added at %v", e.Position)
			}
		}
		in := sc.c.info()
		first := int64(-1)
		if len(in.Ledgers) > 0 {
			first = in.Ledgers[0].ID
		}
		for _, a := range snapshot {
			if a.pos.LedgerID < first {
				continue
			}
			if got[a.pos] != string(a.payload) {
				w.failf("add %d confirmed at %v is not readable after reopen by core %d", a.id, a.pos, sc.id)
			}
		}
	}})
}

// Consumer: one durable cursor "sub", reading and acknowledging.

func (w *world) startConsumer(sc *simCore) {
	start := Earliest
	if w.s.Chance(0.3) {
		start = Latest
	}
	sc.c.openCursor("sub", start, func(cur *cursor, err error) {
		if err != nil {
			return
		}
		if w.durableAtCrash != nil && cur.md.Less(*w.durableAtCrash) {
			w.failf("cursor recovered at %v by core %d, below its durable position %v", cur.md, sc.id, *w.durableAtCrash)
		}
		if got := cur.props[simProp]; got < w.propDurable || got > w.propNext {
			w.failf("cursor recovered by core %d with property %s=%d; confirmed durable %d, largest set %d",
				sc.id, simProp, got, w.propDurable, w.propNext-1)
		}
		if w.maxMD.Less(cur.md) && w.maxMD != (Position{}) {
			w.failf("cursor recovered at %v by core %d, beyond any acknowledged position %v", cur.md, sc.id, w.maxMD)
		}
		w.maxMD = maxPos(w.maxMD, cur.md)
		sc.cur = cur
		w.consume(sc)
	})
}

func (w *world) consume(sc *simCore) {
	if !sc.alive || sc.closed || w.ended && w.s.Chance(0.5) {
		return
	}
	cur := sc.cur
	op := &readOp{cur: cur, max: 1 + w.s.Rand().IntN(4), wait: true}
	op.reply = func(es []Entry, err error) {
		switch {
		case errors.Is(err, ErrNoMoreEntries), errors.Is(err, ErrClosed), errors.Is(err, ErrFenced):
			return
		case err != nil:
			sc.after(2*time.Millisecond, "consumer.retry", func() { w.consume(sc) })
			return
		}
		w.stats.CursorReads++
		for i, e := range es {
			if i > 0 && !es[i-1].Position.Less(e.Position) {
				w.failf("cursor read out of order: %v then %v", es[i-1].Position, e.Position)
			}
			a := w.byPayload[string(e.Data)]
			switch {
			case a == nil:
				w.failf("cursor read an entry nobody added at %v", e.Position)
			case a.acked && a.pos != e.Position:
				w.failf("cursor read add %d at %v, it was confirmed at %v", a.id, e.Position, a.pos)
			case cur.acked(e.Position):
				w.failf("cursor delivered acknowledged entry %v (md %v)", e.Position, cur.md)
			}
		}
		sc.after(w.s.Between(0, 3*time.Millisecond), "consumer.ack", func() {
			if sc.closed || cur.closed || sc.c.cursorUsable() != nil {
				return // the API refuses acks then (Cursor.do)
			}
			w.ackSome(sc, es)
			w.maxMD = maxPos(w.maxMD, cur.md)
			if w.s.Chance(0.15) {
				w.setProp(sc)
			}
			if w.s.Chance(0.1) {
				cur.readPos = after(cur.md) // rewind: redeliver what is not acknowledged
			}
			w.consume(sc)
		})
	}
	sc.c.startRead(op)
}

// simProp is the cursor property the simulation's consumer sets.
const simProp = "sim.prop"

// setProp sets the cursor's property to the next value, as Cursor.SetProperty does, and
// records the value once the newest owner confirms it durable.
func (w *world) setProp(sc *simCore) {
	w.propNext++
	w.propSets[sc.id]++
	v := w.propNext
	sc.c.cursorSetProperty(sc.cur, simProp, v, false)
	sc.c.cursorFlushWait(sc.cur, func(err error) {
		if err == nil && sc == w.owner && sc.alive {
			w.propDurable = max(w.propDurable, v)
		}
	})
}

func (w *world) ackSome(sc *simCore, es []Entry) {
	if len(es) == 0 {
		return
	}
	r := w.s.Rand()
	switch n := r.IntN(10); {
	case n < 6:
		var ps []Position
		for _, e := range es {
			if r.IntN(5) > 0 {
				ps = append(ps, e.Position)
			}
		}
		r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
		sc.c.cursorAck(sc.cur, ps)
	case n < 8:
		sc.c.cursorAckCumulative(sc.cur, es[r.IntN(len(es))].Position)
	default:
		for _, e := range es {
			for _, i := range r.Perm(3)[:1+r.IntN(3)] {
				if err := sc.c.cursorAckBatch(sc.cur, e.Position, i, 3); err != nil {
					w.failf("batch ack: %v", err)
				}
			}
		}
	}
}

// run plays the seed and returns the first check failure.
func (w *world) run() error {
	p := w.p
	for i := 0; i < p.adds; i++ {
		a := &simAdd{id: i, payload: []byte(fmt.Sprintf("add-%d", i))}
		w.adds = append(w.adds, a)
		w.byPayload[string(a.payload)] = a
		w.scheduleAdd(a, w.s.Between(0, p.addWindow))
	}
	onOpen := func(sc *simCore, err error) {
		if err != nil {
			return
		}
		w.reopenCheck(sc, 0)
		if p.cursor {
			w.startConsumer(sc)
		}
	}
	w.newCore(onOpen)
	if p.terminate {
		var term func()
		term = func() {
			sc := w.owner
			if !sc.opened || !sc.alive {
				if !w.ended {
					w.s.After(5*time.Millisecond, "client.terminate", term)
				}
				return
			}
			sc.c.terminate(func(pos Position, err error) {
				w.s.Tracef("terminate on core %d: %v %v", sc.id, pos, err)
				if err != nil {
					return
				}
				if w.terminated == nil || *w.terminated != pos {
					w.failf("terminate reported %v before the record says so (%v)", pos, w.terminated)
				}
			})
		}
		w.s.After(p.terminateAt, "client.terminate", term)
	}
	w.crash = func() {
		old := w.owner
		if !old.alive || w.ended {
			return
		}
		old.alive = false
		w.stats.Crashes++
		w.s.Tracef("core %d crashes", old.id)
		if md, ok := w.durableCursorMD(metadata.ManagedCursorKey(simML, "sub")); ok {
			w.durableAtCrash = &md
		}
		w.s.After(w.s.Between(0, 10*time.Millisecond), "restart", func() { w.newCore(onOpen) })
	}
	for i := 0; i < p.crashes; i++ {
		w.s.After(w.s.Between(0, p.addWindow), "crash", w.crash)
	}
	if w.off != nil {
		w.off.schedule()
	}
	if p.zombie {
		w.s.After(w.s.Between(0, p.addWindow), "zombie", func() {
			if w.ended || !w.owner.alive {
				return
			}
			w.stats.Zombies++
			w.durableAtCrash = nil
			w.propDurable = 0
			w.s.Tracef("core %d is partitioned; a new owner opens", w.owner.id)
			w.newCore(onOpen)
		})
	}
	end := p.addWindow + 50*time.Millisecond
	for w.err == nil && w.s.Now() < end && w.s.Step() {
		w.check()
	}
	if w.err != nil {
		return w.err
	}
	return w.finish()
}

// finish stops the clients, closes every live owner, waits for quiescence, then reopens the
// log once more and checks everything confirmed is there.
func (w *world) finish() error {
	w.ended = true
	w.durableAtCrash = nil
	for _, sc := range w.cores {
		if sc.alive {
			sc := sc
			sc.c.closeML(func(err error) { sc.closed = true })
		}
	}
	w.drain()
	if w.err != nil {
		return w.err
	}
	for _, sc := range w.cores {
		if sc.alive && !sc.closed {
			w.failf("core %d did not close (state %v)", sc.id, sc.c.state)
		}
	}
	// (A zombie's writes may land after the owner's: its newer states win the record.)
	if o := w.owner; !w.p.zombie && o.alive && o.closed && o.c.state == StateClosed && o.cur != nil {
		md, _ := w.durableCursorMD(metadata.ManagedCursorKey(simML, "sub"))
		if o.cur.persistedSeq != o.cur.seq || md != o.cur.md {
			w.failf("MD2: core %d closed at %v (seq %d) but persisted %v (seq %d), durable %v", o.id,
				o.cur.md, o.cur.seq, o.cur.persistedMD, o.cur.persistedSeq, md)
		}
	}
	for _, a := range w.adds {
		if a.core != nil && a.core.alive && a.done != 1 {
			w.failf("M2: add %d on core %d completed %d times (core state %v)", a.id, a.core.id, a.done, a.core.c.state)
		}
	}
	if w.err != nil {
		return w.err
	}
	final := w.newCore(func(sc *simCore, err error) {
		if err != nil {
			w.failf("final reopen failed: %v", err)
			return
		}
		if w.terminated != nil {
			if sc.c.state != StateTerminated {
				w.failf("M1: reopened a terminated log in state %v", sc.c.state)
			}
			sc.c.add([]byte("late"), func(_ Position, err error) {
				if !errors.Is(err, ErrTerminated) {
					w.failf("M1: add on a reopened terminated log: %v", err)
				}
			})
		}
		w.reopenCheck(sc, 0)
		sc.after(20*time.Millisecond, "final.close", func() { sc.c.closeML(func(error) { sc.closed = true }) })
	})
	w.drain()
	if w.err == nil && !final.closed {
		w.failf("final core did not close (state %v, open %v)", final.c.state, final.opened)
	}
	w.checkLeaks()
	if w.off != nil {
		w.off.checkBlobLeaks()
	}
	return w.err
}

func (w *world) drain() {
	for steps := 0; w.err == nil && w.s.Step(); steps++ {
		w.check()
		if steps > 200000 {
			w.failf("no quiescence after %d steps", steps)
		}
	}
}

// checkLeaks: every ledger made by an owner that did not crash is in a record or deleted (M3).
func (w *world) checkLeaks() {
	in := w.record()
	named := map[int64]bool{}
	if in != nil {
		for _, l := range in.Ledgers {
			named[l.ID] = true
		}
	}
	for k, e := range w.ms.kv {
		if ci, err := decodeCursorInfo(e.value); err == nil && k != metadata.ManagedLedgerKey(simML) {
			named[ci.Ledger] = true
		}
	}
	for id, l := range w.bk.ls {
		if l.deleted || named[id] {
			continue
		}
		if by := w.removedBy[id]; by != nil && !by.alive || by == nil && !w.cores[l.creator-1].alive {
			continue // whoever had to delete it crashed (metadata first: a crash leaks, never dangles)
		}
		w.failf("M3: ledger %d (%s) made by core %d is neither recorded nor deleted", id, l.purpose, l.creator)
	}
}

func runSeed(seed int64, mut mutation, verbose bool) (sim.Outcome, simStats) {
	w := newWorld(seed, mut, verbose)
	return w.outcome(w.run())
}

// seeds is the seed range of the command line: n seeds from -first-seed, or -seed alone.
func seeds(n int) sim.Seeds {
	return sim.Seeds{First: *flags.First, Count: int64(n), Replay: *flags.Replay, Package: "./mledger"}
}

// runSeeds runs the seeds with run and sums their coverage counters; it stops at the first
// failing seed, reported through t. The composed world (world_test.go) uses it too.
func runSeeds(t *testing.T, n int, run func(seed int64, verbose bool) (sim.Outcome, simStats)) (st simStats, ran int64, failed bool) {
	ran, failed = sim.RunSeeds(t, seeds(n), func(seed int64, verbose bool) sim.Outcome {
		o, s := run(seed, verbose)
		sim.AddCounts(&st, s)
		return o
	})
	return st, ran, failed
}

// outcome is the seed's result for sim.RunSeeds.
func (w *world) outcome(err error) (sim.Outcome, simStats) {
	return sim.Outcome{Sim: w.s, Params: w.p, Err: err}, w.stats
}

// TestSim drives the managed ledger core through seeded interleavings of delayed, reordered
// and failing ledger and metadata completions, terminates, crashes and a second owner, and
// checks M1–M4 and "every confirmed add is readable after reopen, in order" after every step.
func TestSim(t *testing.T) {
	st, ran, failed := runSeeds(t, *flags.Count, func(seed int64, verbose bool) (sim.Outcome, simStats) {
		return runSeed(seed, mutation{}, verbose)
	})
	if failed {
		return
	}
	t.Logf("%+v", st)
	if *flags.Replay < 0 && ran >= 100 && (st.Acked == 0 || st.Terminated == 0 || st.Crashes == 0 || st.Fenced == 0 ||
		st.Rollovers == 0 || st.Trims == 0 || st.ReopenReads == 0 || st.CursorReads == 0) {
		t.Errorf("the seeds did not exercise the state machine: %+v", st)
	}
}

// TestSimDeterministic replays seeds and requires identical traces.
func TestSimDeterministic(t *testing.T) {
	sim.CheckDeterministic(t, 20, func(seed int64) *sim.Sim {
		o, _ := runSeed(seed, mutation{}, true)
		return o.Sim
	})
}

// namedMutation is a deliberately broken core, by the upstream bug it re-creates.
type namedMutation = sim.Mutant[mutation]

// catchMutations proves a checker can fail: each mutation must be caught by one of seeds
// 1..max of run.
func catchMutations(t *testing.T, max int64, muts []namedMutation, run func(seed int64, mut mutation) error) {
	if *flags.Replay >= 0 {
		t.Skip("replaying one seed")
	}
	sim.CatchMutations(t, max, muts, run)
}

// TestSimCatchesMutations proves the checker can fail: each deliberately broken core is
// caught by some seed.
func TestSimCatchesMutations(t *testing.T) {
	catchMutations(t, 3000, []namedMutation{
		{Name: "late switch reopens a terminated log", Mut: mutation{lateSwitchReopens: true}},
		{Name: "unserialized metadata updates", Mut: mutation{unserializedMeta: true}},
		{Name: "drained adds complete", Mut: mutation{completeDrainedAdds: true}},
		{Name: "lost-race ledger kept in the record", Mut: mutation{keepLostRaceLedger: true}},
		{Name: "M1: a late switch silently reopens, then ends Terminated", Mut: mutation{silentReopen: true}},
		{Name: "M2: terminate leaves queued adds waiting", Mut: mutation{terminateKeepsQueued: true}},
		{Name: "M2: terminate requeues drained adds like a rollover", Mut: mutation{terminateRequeuesDrained: true}},
		{Name: "M3: the terminated position names the racing rollover's ledger", Mut: mutation{terminateNamesRolloverLedger: true}},
		{Name: "M3: a lost-race rollover ledger is never deleted", Mut: mutation{leakLostRaceLedger: true}},
		{Name: "M4: a version conflict fences without re-reading", Mut: mutation{fenceOnConflict: true}},
		{Name: "MD1: the persisted position is taken from memory", Mut: mutation{persistedClaimsHeld: true}},
		{Name: "MD2: the mark-delete rate is ignored", Mut: mutation{ignoreMarkDeleteRate: true}},
		{Name: "MD2: the flush timer persists nothing", Mut: mutation{flushTimerIdle: true}},
		{Name: "MD2: close drops a held state", Mut: mutation{closeDropsHeld: true}},
		{Name: "cursor-ledger states without properties", Mut: mutation{ledgerStatesDropProps: true}},
		{Name: "M3: a failed rollover deletes its ledger before its timed-out switch can land", Mut: mutation{deleteLostRolloverAtOnce: true}},
	}, func(seed int64, mut mutation) error {
		o, _ := runSeed(seed, mut, false)
		return o.Err
	})
}
