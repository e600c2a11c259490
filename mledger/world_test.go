package mledger

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
	"github.com/magnetar-io/magnetar/sim"
)

// The composed world: the managed ledger's core on the real ledger.Writer and ledger.Recovery
// cores over simulated bookies, network and metadata store (worldports_test.go), where sim_test.go
// runs it on a hand-written model of the ledger layer. One seed fixes every message delay, loss
// and ghost (a request that lands after its caller timed out: late ledger adds, late metadata
// applies), every bookie crash, owner crash and zombie owner, and the adds and terminate. After
// every step: M1–M4 on every owner and on the record, the bookies' fencing (L2), and every
// confirmed add durable on AQ bookies of its write set (L1 across the layers). At the end: every
// add completed exactly once, a reopened log holds every confirmed add in order (and is
// Terminated if the record says so), and no ledger an owner made is leaked.

const ms = time.Millisecond

type worldParams struct {
	bookies, e, wq, aq int
	adds               int
	addWindow          time.Duration
	maxEntries         int64
	dropRate, slowRate float64
	bookieCrashes      int
	terminate          bool
	terminateAt        time.Duration
	crashes            int
	zombie             bool
}

func (p worldParams) String() string {
	return fmt.Sprintf("bookies=%d E=%d WQ=%d AQ=%d adds=%d maxEntries=%d drop=%.3f slow=%.3f bookieCrashes=%d terminate=%v@%v crashes=%d zombie=%v",
		p.bookies, p.e, p.wq, p.aq, p.adds, p.maxEntries, p.dropRate, p.slowRate, p.bookieCrashes, p.terminate, p.terminateAt,
		p.crashes, p.zombie)
}

func randomWorldParams(s *sim.Sim) worldParams {
	r := s.Rand()
	p := worldParams{e: 1 + r.IntN(3)}
	p.wq = 1 + r.IntN(p.e)
	p.aq = 1 + r.IntN(p.wq)
	p.bookies = p.e + 1 + r.IntN(2)
	p.adds = 5 + r.IntN(30)
	p.addWindow = time.Duration(20+r.IntN(150)) * ms
	p.maxEntries = int64(1 + r.IntN(6))
	if r.IntN(2) == 0 {
		p.dropRate = r.Float64() * 0.02
	}
	if r.IntN(2) == 0 {
		p.slowRate = r.Float64() * 0.05
	}
	p.bookieCrashes = r.IntN(3)
	p.terminate = r.IntN(2) == 0
	p.terminateAt = s.Between(0, p.addWindow)
	p.crashes = r.IntN(3)
	p.zombie = r.IntN(4) == 0
	return p
}

// wcore is one incarnation of the managed ledger's owner in the composed world.
type wcore struct {
	simEnv
	w        *cworld
	id       int
	c        *core
	opened   bool
	closed   bool
	terminal bool // has been Terminating or Terminated
}

type worldAdd struct {
	id      int
	payload []byte
	core    *wcore
	done    int
	pos     Position
	err     error
}

type worldStats struct {
	Acked, Failed, Terminated, Crashes, Zombies, Fenced, Rollovers, EnsembleChanges, Recoveries, BookieCrashes,
	ReopenReads int
}

// cworld is one seed of the composed world.
type cworld struct {
	s       *sim.Sim
	net     *sim.Network
	store   *sim.MetaStore
	bookies map[string]*sim.Bookie
	ids     []string
	p       worldParams
	mut     mutation
	start   time.Time
	err     error
	ended   bool

	nextLedger int64
	writers    map[int64]*worldWriter
	made       map[int64]*wcore // ledgers whose Create reported success, by creator
	removedBy  map[int64]*wcore // who removed a ledger from the record (it must delete it)
	opened     map[int64]bool   // ledgers an owner made current (LedgerOpened)
	gc         map[int64]bool   // ledgers whose delete failed: left to garbage collection
	cores      []*wcore
	owner      *wcore
	adds       []*worldAdd
	terminated *Position
	cfg        Config
	stats      worldStats
	rec        struct {
		v  int64
		in *Info
	}
}

func newCWorld(seed int64, mut mutation, verbose bool) *cworld {
	s := sim.New(seed)
	s.Verbose = verbose
	w := &cworld{s: s, store: sim.NewMetaStore(), bookies: map[string]*sim.Bookie{}, mut: mut, start: time.Unix(1_700_000_000, 0),
		writers: map[int64]*worldWriter{}, made: map[int64]*wcore{}, removedBy: map[int64]*wcore{}, opened: map[int64]bool{},
		gc: map[int64]bool{}}
	w.p = randomWorldParams(s)
	w.net = sim.NewNetwork(s, sim.NetConfig{MinDelay: 100 * time.Microsecond, MaxDelay: 2 * ms, DropRate: w.p.dropRate,
		SlowRate: w.p.slowRate, SlowDelay: 40 * ms, Timeout: 20 * ms})
	w.net.Add("meta", w.store)
	for i := 0; i < w.p.bookies; i++ {
		id := fmt.Sprintf("10.0.0.%d:3181", i+1)
		b := sim.NewBookie(s, id, sim.BookieConfig{FsyncMin: 200 * time.Microsecond, FsyncMax: 2 * ms,
			EntryLAC: func(body []byte) int64 {
				if e, err := bk.DecodeEntry(body, bk.DigestCRC32C); err == nil {
					return e.LAC
				}
				return -1
			}})
		w.bookies[id] = b
		w.ids = append(w.ids, id)
		w.net.Add(id, b)
	}
	w.store.OnChange = w.onMetaChange
	w.cfg = Config{Ensemble: w.p.e, WriteQuorum: w.p.wq, AckQuorum: w.p.aq, Password: worldPassword,
		MaxEntriesPerLedger: w.p.maxEntries, MaxLedgerRolloverTime: -1, RetentionTime: -1, RetentionSize: -1,
		RetryBackoff: ms, OpenAttempts: 1000, CacheSize: 64}
	s.Tracef("params %v", w.p)
	return w
}

func (w *cworld) failf(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("at %v: %s", w.s.Now(), fmt.Sprintf(format, args...))
		w.s.Tracef("CHECK FAILED: %v", w.err)
	}
}

func (w *cworld) coreByToken(token string) *wcore {
	for _, sc := range w.cores {
		if sc.c.token == token {
			return sc
		}
	}
	return nil
}

// newCore starts an owner incarnation and opens it.
func (w *cworld) newCore(onOpen func(*wcore)) *wcore {
	sc := &wcore{w: w, id: len(w.cores) + 1, simEnv: simEnv{s: w.s, start: w.start, alive: true}}
	sc.c = newCore(simML, w.cfg.withDefaults(), sc, &worldLedgers{w: w, sc: sc}, worldMeta{w}, fmt.Sprintf("owner%d", sc.id), nil)
	sc.c.mut = w.mut
	sc.c.trace = w.s.Tracef
	sc.c.hooks = hooks{transition: func(from, to State) {
		switch {
		case to == StateFenced:
			w.stats.Fenced++
			if in := w.record(); in != nil && in.Owner == sc.c.token {
				w.failf("M4: core %d fenced while it still owns the record (%v)", sc.id, sc.c.stateErr)
			}
		case to == StateLedgerOpened:
			w.opened[sc.c.tail.id] = true
			if from == StateCreatingLedger {
				w.stats.Rollovers++
			}
		}
	}, createLedger: func(purpose string, st State) {
		if purpose == "data" && (st == StateTerminating || st == StateTerminated || sc.terminal) {
			w.failf("M3: core %d creates a data ledger in state %v", sc.id, st)
		}
	}}
	w.cores = append(w.cores, sc)
	w.owner = sc
	w.s.Tracef("core %d starts opening", sc.id)
	sc.c.open(func(err error) {
		w.s.Tracef("core %d opened: %v (state %v)", sc.id, err, sc.c.state)
		if err == nil {
			sc.opened = true
			if onOpen != nil {
				onOpen(sc)
			}
		}
	})
	return sc
}

// record returns the managed ledger's record as stored (decoded once per version).
func (w *cworld) record() *Info {
	v, ver, ok := w.store.Get(metadata.ManagedLedgerKey(simML))
	if !ok {
		return nil
	}
	if w.rec.in != nil && w.rec.v == ver {
		return w.rec.in
	}
	in, err := decodeInfo(v)
	if err != nil {
		w.failf("record does not decode: %v", err)
		return nil
	}
	w.rec.v, w.rec.in = ver, in
	return in
}

func (w *cworld) ledgerMeta(id int64) *ledger.Metadata {
	v, _, ok := w.store.Get(metadata.LedgerKey(id))
	if !ok {
		return nil
	}
	m, err := ledger.UnmarshalMetadata(v)
	if err != nil {
		w.failf("ledger %d: record does not decode: %v", id, err)
		return nil
	}
	return m
}

// onMetaChange sees every change the store applies, when it applies it (late ones too).
func (w *cworld) onMetaChange(ch sim.MetaChange) {
	switch {
	case strings.HasPrefix(ch.Key, metadata.PrefixLedgers):
		if ch.Old == nil || ch.New == nil {
			return
		}
		old, err1 := ledger.UnmarshalMetadata(ch.Old)
		nm, err2 := ledger.UnmarshalMetadata(ch.New)
		if err1 == nil && err2 == nil && old.State == ledger.StateOpen && nm.State == ledger.StateOpen {
			w.stats.EnsembleChanges++
		}
		return
	case ch.Key != metadata.ManagedLedgerKey(simML) || ch.New == nil:
		return
	}
	nw, err := decodeInfo(ch.New)
	if err != nil {
		w.failf("an invalid record was stored: %v", err)
		return
	}
	if ch.Old != nil {
		if old, err := decodeInfo(ch.Old); err == nil {
			for _, l := range old.Ledgers {
				if !nw.has(l.ID) {
					w.removedBy[l.ID] = w.coreByToken(nw.Owner)
				}
			}
		}
	}
	if w.terminated != nil {
		if nw.Terminated == nil || *nw.Terminated != *w.terminated {
			w.failf("M1: terminated position changed from %v to %v", *w.terminated, nw.Terminated)
		}
		return
	}
	if nw.Terminated == nil {
		return
	}
	t := *nw.Terminated
	w.terminated = &t
	// M3: it names the ledger the log was writing, sealed there, last in the record.
	if err := checkTerminatedRecord(nw, w.opened); err != nil {
		w.failf("%v", err)
	} else if m := w.ledgerMeta(t.LedgerID); m == nil || m.State != ledger.StateClosed || m.LastEntryID != t.EntryID {
		w.failf("M3: terminated at %v but ledger %d is not closed there (%+v)", t, t.LedgerID, m)
	}
}

// check runs after every step.
func (w *cworld) check() {
	for _, sc := range w.cores {
		if sc.alive {
			if err := checkTerminalOwner(sc.c, sc.id, &sc.terminal); err != nil {
				w.failf("%v", err)
			}
		}
	}
	for _, id := range w.ids {
		if v := w.bookies[id].Violations(); len(v) > 0 {
			w.failf("L2: %s", v[0])
		}
	}
	in := w.record()
	if in == nil {
		return
	}
	for _, l := range in.Ledgers {
		if _, _, ok := w.store.Get(metadata.LedgerKey(l.ID)); !ok {
			w.failf("the record names ledger %d, which is deleted", l.ID)
		}
	}
}

// checkDurable: every confirmed add is in the record's ledgers (or trimmed: never here), at or
// below the terminated position, and durable on AQ bookies of its write set.
func (w *cworld) checkDurable() {
	in := w.record()
	for _, a := range w.adds {
		if a.err != nil || a.done == 0 {
			continue
		}
		if in == nil || !in.has(a.pos.LedgerID) {
			w.failf("add %d confirmed at %v, but its ledger is not in the record", a.id, a.pos)
			return
		}
		if in.Terminated != nil && in.Terminated.Less(a.pos) {
			w.failf("M2: add %d confirmed at %v, after the terminated position %v", a.id, a.pos, *in.Terminated)
		}
		m := w.ledgerMeta(a.pos.LedgerID)
		if m.State == ledger.StateClosed && m.LastEntryID < a.pos.EntryID {
			w.failf("L2: add %d confirmed at %v, ledger closed at %d", a.id, a.pos, m.LastEntryID)
		}
		n := 0
		for _, b := range m.WriteSet(a.pos.EntryID) {
			body, ok := w.bookies[b].DurableEntry(a.pos.LedgerID, a.pos.EntryID)
			if !ok {
				continue
			}
			if e, err := bk.DecodeEntry(body, bk.DigestCRC32C); err != nil || string(e.Payload) != string(a.payload) {
				w.failf("L1: bookie %s holds a wrong entry %v", b, a.pos)
				return
			}
			n++
		}
		if n < m.AckQuorum {
			w.failf("L1: add %d confirmed at %v is durable on %d bookies of %v, want %d", a.id, a.pos, n, m.WriteSet(a.pos.EntryID), m.AckQuorum)
		}
	}
}

func (w *cworld) addOn(sc *wcore, a *worldAdd) {
	a.core = sc
	sc.c.add(a.payload, func(p Position, err error) {
		a.done++
		if a.done > 1 {
			w.failf("M2: add %d completed %d times", a.id, a.done)
			return
		}
		a.pos, a.err = p, err
		if err != nil {
			w.stats.Failed++
			if errors.Is(err, ErrTerminated) {
				w.stats.Terminated++
			}
			if sc.terminal && !errors.Is(err, ErrTerminated) && !errors.Is(err, ErrFenced) {
				w.failf("M2: add %d failed with %v after terminate started on core %d (want ErrTerminated)", a.id, err, sc.id)
			}
			return
		}
		w.stats.Acked++
		w.checkDurable()
	})
}

func (w *cworld) scheduleAdd(a *worldAdd, at time.Duration) {
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
			w.scheduleAdd(a, 3*ms)
			return
		}
		w.addOn(sc, a)
	})
}

// reopenCheck reads the whole log through core sc: every add confirmed before is there, in
// order, with its payload.
func (w *cworld) reopenCheck(sc *wcore, attempt int) {
	var want []*worldAdd
	for _, a := range w.adds {
		if a.done == 1 && a.err == nil {
			want = append(want, a)
		}
	}
	sc.c.startRead(&readOp{from: Earliest, max: 1 << 20, reply: func(es []Entry, err error) {
		if errors.Is(err, ErrNoMoreEntries) {
			es, err = nil, nil
		}
		if err != nil {
			if attempt < 50 && sc.alive && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFenced) {
				sc.after(2*ms, "reopen-check.retry", func() { w.reopenCheck(sc, attempt+1) })
			} else {
				w.failf("reading the reopened log: %v", err)
			}
			return
		}
		w.stats.ReopenReads++
		got := map[Position]string{}
		for i, e := range es {
			if i > 0 && !es[i-1].Position.Less(e.Position) {
				w.failf("read after reopen out of order: %v then %v", es[i-1].Position, e.Position)
			}
			got[e.Position] = string(e.Data)
		}
		for _, a := range want {
			if got[a.pos] != string(a.payload) {
				w.failf("add %d confirmed at %v is not readable after reopen", a.id, a.pos)
			}
		}
	}})
}

func (w *cworld) run() error {
	p := w.p
	for i := 0; i < p.adds; i++ {
		a := &worldAdd{id: i, payload: []byte(fmt.Sprintf("add-%d", i))}
		w.adds = append(w.adds, a)
		w.scheduleAdd(a, w.s.Between(0, p.addWindow))
	}
	w.newCore(nil)
	if p.terminate {
		var term func()
		term = func() {
			sc := w.owner
			if !sc.opened || !sc.alive {
				if !w.ended {
					w.s.After(5*ms, "client.terminate", term)
				}
				return
			}
			sc.c.terminate(func(pos Position, err error) {
				w.s.Tracef("terminate on core %d: %v %v", sc.id, pos, err)
				if err == nil && (w.terminated == nil || *w.terminated != pos) {
					w.failf("terminate reported %v before the record says so (%v)", pos, w.terminated)
				}
			})
		}
		w.s.After(p.terminateAt, "client.terminate", term)
	}
	for i := 0; i < p.crashes; i++ {
		w.s.After(w.s.Between(0, p.addWindow), "crash", func() {
			old := w.owner
			if !old.alive || w.ended {
				return
			}
			old.alive = false
			w.stats.Crashes++
			w.s.Tracef("core %d crashes", old.id)
			w.s.After(w.s.Between(0, 10*ms), "restart", func() { w.newCore(nil) })
		})
	}
	if p.zombie {
		w.s.After(w.s.Between(0, p.addWindow), "zombie", func() {
			if w.ended || !w.owner.alive {
				return
			}
			w.stats.Zombies++
			w.s.Tracef("core %d is partitioned; a new owner opens", w.owner.id)
			w.newCore(nil)
		})
	}
	for i := 0; i < p.bookieCrashes; i++ {
		id := w.ids[w.s.Rand().IntN(len(w.ids))]
		w.s.After(w.s.Between(0, p.addWindow), "crash "+id, func() {
			w.stats.BookieCrashes++
			w.bookies[id].Crash()
			w.s.After(w.s.Between(5*ms, 40*ms), "restart "+id, w.bookies[id].Restart)
		})
	}
	w.s.After(p.addWindow+60*ms, "heal", func() { w.net.Cfg.DropRate, w.net.Cfg.SlowRate = 0, 0 })
	end := p.addWindow + 80*ms
	for w.err == nil && w.s.Now() < end && w.s.Step() {
		w.check()
	}
	if w.err != nil {
		return w.err
	}
	return w.finish()
}

func (w *cworld) drain() {
	for steps := 0; w.err == nil && w.s.Step(); steps++ {
		w.check()
		if steps > 500000 {
			w.failf("no quiescence after %d steps", steps)
		}
	}
}

// finish closes every live owner, waits for quiescence, checks every add completed once, then
// reopens the log, reads it back and checks for leaked ledgers.
func (w *cworld) finish() error {
	w.ended = true
	for _, sc := range w.cores {
		if sc.alive {
			sc.c.closeML(func(error) { sc.closed = true })
		}
	}
	w.drain()
	for _, sc := range w.cores {
		if sc.alive && !sc.closed {
			w.failf("core %d did not close (state %v)", sc.id, sc.c.state)
		}
	}
	for _, a := range w.adds {
		if a.core != nil && a.core.alive && a.done != 1 {
			w.failf("M2: add %d on core %d completed %d times (core state %v)", a.id, a.core.id, a.done, a.core.c.state)
		}
	}
	w.checkDurable()
	if w.err != nil {
		return w.err
	}
	w.ended = false // the final owner's writer ticks
	final := w.newCore(func(sc *wcore) {
		if w.terminated != nil && sc.c.state != StateTerminated {
			w.failf("M1: reopened a terminated log in state %v", sc.c.state)
		}
		w.reopenCheck(sc, 0)
		sc.after(20*ms, "final.close", func() {
			w.ended = true
			sc.c.closeML(func(error) { sc.closed = true })
		})
	})
	w.drain()
	if w.err == nil && !final.closed {
		w.failf("final core did not close (state %v, open %v)", final.c.state, final.opened)
	}
	w.checkLeaks()
	return w.err
}

// checkLeaks (M3): every ledger an owner that did not crash was given is in the record or
// deleted (whoever removed it from the record deletes it; a crash may leak, never dangle).
func (w *cworld) checkLeaks() {
	in := w.record()
	for _, id := range slices.Sorted(maps.Keys(w.made)) {
		creator := w.made[id]
		if w.ledgerMeta(id) == nil || in != nil && in.has(id) || w.gc[id] {
			continue
		}
		if by, ok := w.removedBy[id]; ok && (by == nil || !by.alive) || !ok && !creator.alive {
			continue
		}
		w.failf("M3: ledger %d made by core %d is neither recorded nor deleted", id, creator.id)
	}
}

func runWorldSeed(seed int64, mut mutation, verbose bool) (*cworld, error) {
	w := newCWorld(seed, mut, verbose)
	return w, w.run()
}

// TestWorld runs the composed world under many seeds (see the top of this file): half of
// -seeds, as one of its seeds costs about twice one of TestSim's.
func TestWorld(t *testing.T) {
	var st worldStats
	n := max(*flags.Count/2, 1)
	_, failed := sim.RunSeeds(t, seeds(n),
		func(seed int64, verbose bool) sim.Outcome {
			w, err := runWorldSeed(seed, mutation{}, verbose)
			sim.AddCounts(&st, w.stats)
			return sim.Outcome{Sim: w.s, Params: w.p, Err: err}
		})
	if failed {
		return
	}
	t.Logf("%+v", st)
	if *flags.Replay < 0 && n >= 100 && (st.Acked == 0 || st.Terminated == 0 || st.Crashes == 0 || st.Zombies == 0 ||
		st.Fenced == 0 || st.Rollovers == 0 || st.EnsembleChanges == 0 || st.Recoveries == 0 || st.BookieCrashes == 0 || st.ReopenReads == 0) {
		t.Errorf("the seeds did not exercise the composed world: %+v", st)
	}
}

// TestWorldDeterministic replays seeds and requires identical traces.
func TestWorldDeterministic(t *testing.T) {
	sim.CheckDeterministic(t, 10, func(seed int64) *sim.Sim {
		w, _ := runWorldSeed(seed, mutation{}, true)
		return w.s
	})
}

// TestWorldCatchesMutations: the composed world's checker catches the managed ledger's
// upstream bugs too.
func TestWorldCatchesMutations(t *testing.T) {
	catchMutations(t, 2000, []namedMutation{
		{Name: "M1: a late switch silently reopens, then ends Terminated", Mut: mutation{silentReopen: true}},
		{Name: "M2: terminate leaves queued adds waiting", Mut: mutation{terminateKeepsQueued: true}},
		{Name: "M2: drained adds complete", Mut: mutation{completeDrainedAdds: true}},
		{Name: "M3: the terminated position names the racing rollover's ledger", Mut: mutation{terminateNamesRolloverLedger: true}},
		{Name: "M4: a version conflict fences without re-reading", Mut: mutation{fenceOnConflict: true}},
	}, func(seed int64, mut mutation) error {
		_, err := runWorldSeed(seed, mut, false)
		return err
	})
}
