package txn

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/sim"
)

// The coordinator core's simulation: clients open transactions, add partitions and
// subscriptions, commit, abort, end twice, end concurrently, end near or after the
// deadline, abandon transactions and send requests for unknown ones; a model metadata
// store applies the core's writes after seeded delays, in any order, fails some (not
// applied), applies some and reports them failed, and fails reads and participant checks;
// participants put their records while the header is open and delete them a while after
// it ended; the coordinator crashes and a new core is loaded from the store, as
// StartCoordinator does, while writes of the crashed one may still land (even after the
// reload: that is what the compare-and-swaps are for). Invariants are checked at every
// store change, every reply and after every step; at the end, with the faults stopped,
// every open transaction has timed out and every ended one was garbage-collected.
//
// Long run: go test ./txn -run 'TestSim$' -seeds 1000000 -timeout 0
// Replay a seed with a full trace: go test ./txn -run 'TestSim$' -seed S -v

var flags = sim.NewSeedFlags(600, "TestSim")

// simBase is the Unix ms of the simulation's time 0; simTC the coordinator's index.
const (
	simBase = 1_700_000_000_000
	simTC   = 3
)

var (
	errSimDown  = errors.New("sim: store unavailable")
	errSimAmbig = errors.New("sim: timed out (applied)")
)

type simParams struct {
	clients    int
	txns       int // per client
	window     time.Duration
	maxDelay   time.Duration
	maxActive  int
	seqBlock   uint64
	gcDelay    int64
	hold       time.Duration // participants keep their records up to this long after the end
	writeFail  float64       // a write fails, not applied
	writeAmbig float64       // a write is applied, then reported failed
	readFail   float64
	checkFail  float64
	crashes    int
}

func (p simParams) String() string {
	return fmt.Sprintf("clients=%d txns=%d window=%v delay<=%v maxActive=%d seqBlock=%d gcDelay=%dms hold<=%v fail(write=%.2f ambiguous=%.2f read=%.2f check=%.2f) crashes=%d",
		p.clients, p.txns, p.window, p.maxDelay, p.maxActive, p.seqBlock, p.gcDelay, p.hold,
		p.writeFail, p.writeAmbig, p.readFail, p.checkFail, p.crashes)
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
		clients:    1 + r.IntN(5),
		txns:       1 + r.IntN(8),
		window:     time.Duration(20+r.IntN(200)) * time.Millisecond,
		maxDelay:   time.Duration(1+r.IntN(6)) * time.Millisecond,
		seqBlock:   uint64(1 + r.IntN(6)),
		gcDelay:    int64(1 + r.IntN(40)),
		hold:       time.Duration(r.IntN(60)) * time.Millisecond,
		writeFail:  rate(0.2),
		writeAmbig: rate(0.2),
		readFail:   rate(0.2),
		checkFail:  rate(0.3),
		crashes:    r.IntN(4),
	}
	if r.IntN(2) == 0 {
		p.maxActive = 1 + r.IntN(6)
	}
	return p
}

type simKV struct {
	val []byte
	ver metadata.Version
	hdr Header // decoded, for header keys
}

// simInc is one incarnation of the coordinator: a core, until it crashes.
type simInc struct {
	id      int
	c       *Core
	alive   bool
	timerAt int64
	// open is the core's open count after the last step.
	open int
}

// simReq is one request a client sent; the checker counts its answers.
type simReq struct {
	n        int
	kind     opKind
	seq      uint64
	commit   bool
	topics   []string
	subs     []SubRef
	answers  int
	afterEnd bool // an End sent after an End of the same transaction succeeded
}

type simStats struct {
	Created, Committed, Aborted, TimedOut, SecondEnds, Crashes, LateWrites, Ambiguous, Rejected,
	TooMany, GCDeleted, GCPending, Records, Orphans, EmptyEnds, Fenced int
}

type simWorld struct {
	s     *sim.Sim
	p     simParams
	mut   CoreMutation
	err   error
	quiet bool // the window is over: no faults, no crashes, no new transactions

	kv      map[string]simKV
	hdrs    map[uint64]Header // the headers in kv, by sequence
	rev     int64
	created map[uint64]bool   // header keys ever created, by sequence
	outcome map[uint64]Status // the status a success reply to End promised
	given   map[uint64]bool   // sequence numbers handed to clients
	orphans map[uint64]bool   // headers created by a crashed incarnation's write after the reload

	inc     *simInc
	incs    int
	reqs    int
	pending map[*simReq]bool
	sameMs  int
	lastMs  int64
	stats   simStats
}

func newSimWorld(seed int64, mut CoreMutation, verbose bool) *simWorld {
	s := sim.New(seed)
	s.Verbose = verbose
	w := &simWorld{s: s, mut: mut, kv: map[string]simKV{}, hdrs: map[uint64]Header{}, created: map[uint64]bool{},
		outcome: map[uint64]Status{}, given: map[uint64]bool{}, orphans: map[uint64]bool{},
		pending: map[*simReq]bool{}}
	w.p = randomSimParams(s)
	return w
}

func (w *simWorld) failf(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("at %v: %s", w.s.Now(), fmt.Sprintf(format, args...))
		w.s.Tracef("CHECK FAILED: %v", w.err)
	}
}

func (w *simWorld) nowMs() int64 { return simBase + int64(w.s.Now()/time.Millisecond) }

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

// The model store.

func simHeaderSeq(key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, metadata.TxnHeaderPrefix(simTC))
	if !ok {
		return 0, false
	}
	var seq uint64
	_, err := fmt.Sscanf(rest, "%d", &seq)
	return seq, err == nil
}

func simCanon(s string) (string, error) { return s, nil }

func (w *simWorld) header(seq uint64) (Header, bool) {
	h, ok := w.hdrs[seq]
	return h, ok
}

// apply performs a compare-and-swap put or delete on the store and checks the change.
func (w *simWorld) apply(inc *simInc, wr Write) (metadata.Version, error) {
	if ep := w.kv[metadata.TxnEpochKey(simTC)]; wr.Fence != 0 && ep.ver != wr.Fence {
		w.stats.Fenced++
		return 0, fmt.Errorf("sim: epoch is %d, not %d: %w", ep.ver, wr.Fence, metadata.ErrBadVersion)
	}
	cur, exists := w.kv[wr.Key]
	switch {
	case wr.Expected == metadata.AnyVersion:
	case wr.Expected == metadata.NotExists && !exists:
	case exists && cur.ver == wr.Expected:
	default:
		return 0, fmt.Errorf("sim: %s expected version %d, have %d: %w", wr.Key, wr.Expected, cur.ver, metadata.ErrBadVersion)
	}
	if wr.Delete && !exists {
		return 0, nil
	}
	var h Header
	seq, isHeader := simHeaderSeq(wr.Key)
	if isHeader {
		h = w.headerChange(inc, seq, cur, exists, wr)
		w.hdrs[seq] = h
	}
	if wr.Delete {
		delete(w.kv, wr.Key)
		delete(w.hdrs, seq)
		return 0, nil
	}
	w.rev++
	w.kv[wr.Key] = simKV{val: wr.Value, ver: metadata.Version(w.rev), hdr: h}
	// The records of the participants the write adds, in the same commit.
	for _, k := range ParticipantKeys(wr.ID, wr.Added, simCanon) {
		w.kv[k] = simKV{val: []byte("r"), ver: metadata.Version(w.rev)}
		w.stats.Records++
	}
	return metadata.Version(w.rev), nil
}

// headerChange checks one change of a header: created OPEN once (sequence numbers are never
// reused), then only OPEN→OPEN (participants added, none lost) or OPEN→terminal; deleted only
// when terminal and no participant record remains.
func (w *simWorld) headerChange(inc *simInc, seq uint64, cur simKV, exists bool, wr Write) Header {
	id := ID{simTC, seq}
	old := cur.hdr
	if wr.Delete {
		if !old.Status.Ended() {
			w.failf("header %v deleted while %v", id, old.Status)
		}
		for _, k := range ParticipantKeys(id, old, simCanon) {
			if _, ok := w.kv[k]; ok {
				w.failf("header %v garbage-collected while participant record %s remains", id, k)
			}
		}
		w.stats.GCDeleted++
		return Header{}
	}
	h, err := DecodeHeader(wr.Value)
	if err != nil {
		w.failf("header %v: %v", id, err)
		return h
	}
	if !exists {
		if w.created[seq] {
			w.failf("header %v created again: its sequence number was reused", id)
		}
		w.created[seq] = true
		if h.Status != Open {
			w.failf("header %v created %v", id, h.Status)
		}
		if inc != w.inc {
			w.orphans[seq] = true
			w.stats.Orphans++
		}
		return h
	}
	if old.Status != Open {
		w.failf("header %v changed after it ended: %v → %v", id, old.Status, h.Status)
		return h
	}
	for _, p := range old.Partitions {
		if !slices.Contains(h.Partitions, p) {
			w.failf("header %v lost partition %s", id, p)
		}
	}
	for _, s := range old.Subscriptions {
		if !slices.Contains(h.Subscriptions, s) {
			w.failf("header %v lost subscription %v", id, s)
		}
	}
	if h.Status.Ended() {
		switch {
		case h.TimedOut:
			w.stats.TimedOut++
		case h.Status == Committed:
			w.stats.Committed++
		default:
			w.stats.Aborted++
		}
		// The participants learn the outcome and drop their records a while later.
		for _, k := range ParticipantKeys(id, h, simCanon) {
			w.s.After(w.s.Between(0, w.p.hold), "participant drops "+k, func() { delete(w.kv, k) })
		}
	}
	return h
}

// register is a participant's first transactional write: when the header is open and lists
// it, its record must exist (the coordinator created it with the header: T3).
func (w *simWorld) register(seq uint64, topic, sub string) {
	h, ok := w.header(seq)
	if !ok || h.Status != Open {
		w.stats.Rejected++
		return
	}
	id := ID{simTC, seq}
	key := metadata.TxnOpenKey(topic, id.Key())
	listed := h.HasPartition(topic, func(s string) string { return s })
	if sub != "" {
		key = metadata.TxnPendingAckKey(topic, sub, id.Key())
		listed = h.HasSubscription(topic, sub, func(s string) string { return s })
	}
	if !listed {
		w.failf("participant %s of %v registers but the header does not list it", key, id)
		return
	}
	if _, ok := w.kv[key]; !ok {
		w.failf("participant %s of %v registers: the header lists it, but its record is missing", key, id)
	}
}

// The coordinator's owner.

func (w *simWorld) start() {
	w.incs++
	inc := &simInc{id: w.incs, alive: true}
	c := NewCore(CoreConfig{TC: simTC, MaxActive: w.p.maxActive, SeqBlock: w.p.seqBlock, GCDelayMs: w.p.gcDelay, Owner: "sim"})
	c.SetMutation(w.mut)
	c.OnTimeout = func(ID) {}
	inc.c = c
	w.inc = inc
	// loadCoordinator: the sequence record and every header.
	var seq SeqRecord
	var seqVer metadata.Version
	if kv, ok := w.kv[metadata.TxnSeqKey(simTC)]; ok {
		if err := json.Unmarshal(kv.val, &seq); err != nil {
			w.failf("sequence record: %v", err)
		}
		seqVer = kv.ver
	}
	var hs []Loaded
	for _, k := range slices.Sorted(maps.Keys(w.kv)) {
		if s, ok := simHeaderSeq(k); ok {
			hs = append(hs, Loaded{Seq: s, Header: w.kv[k].hdr, Version: w.kv[k].ver})
		}
	}
	for _, l := range hs {
		if l.Header.Status == Open {
			inc.open++
		}
	}
	w.s.Tracef("incarnation %d loads: next %d, %d headers", inc.id, seq.Next, len(hs))
	// The epoch record, bumped first (fencing the crashed incarnation's creates).
	w.rev++
	fence := metadata.Version(w.rev)
	w.kv[metadata.TxnEpochKey(simTC)] = simKV{val: []byte("{}"), ver: fence}
	w.input(inc, "load", func(c *Core) { c.Load(seq, seqVer, fence, hs, w.nowMs()) })
}

func (w *simWorld) crash() {
	inc := w.inc
	if w.quiet || !inc.alive {
		return
	}
	w.stats.Crashes++
	w.s.Tracef("CRASH incarnation %d", inc.id)
	inc.c.Close()
	w.perform(inc, inc.c.TakeReady())
	inc.alive = false
	w.s.After(w.s.Between(0, 3*w.p.maxDelay), "restart", w.start)
}

// input runs one input on inc's core, performs its effects and checks.
func (w *simWorld) input(inc *simInc, name string, fn func(c *Core)) {
	if !inc.alive || w.err != nil {
		return
	}
	w.s.Tracef(" %s", name)
	fn(inc.c)
	r := inc.c.TakeReady()
	if want := inc.c.scanTimer(); r.TimerAt != want {
		w.failf("after %s: next timer %d, a scan of the transactions says %d", name, r.TimerAt, want)
		return
	}
	w.perform(inc, r)
	w.check()
}

func (w *simWorld) perform(inc *simInc, r Ready) {
	for _, wr := range r.Writes {
		w.write(inc, wr)
	}
	for _, g := range r.Gets {
		w.get(inc, g)
	}
	for _, ch := range r.Checks {
		w.checkParticipants(inc, ch)
	}
	for _, rep := range r.Replies {
		rep.Done(rep.ID, rep.Err)
	}
	if r.TimerAt != 0 && inc.alive && (inc.timerAt == 0 || r.TimerAt < inc.timerAt) {
		inc.timerAt = r.TimerAt
		d := time.Duration(r.TimerAt-simBase)*time.Millisecond - w.s.Now()
		w.on(inc, d, "timer", func() {
			inc.timerAt = 0
			if ms := w.nowMs(); ms == w.lastMs {
				w.sameMs++
				if w.sameMs > 100 {
					w.failf("the timer fires in a loop at %d", ms)
				}
			} else {
				w.lastMs, w.sameMs = ms, 0
			}
			w.input(inc, "tick", func(c *Core) { c.Tick(w.nowMs()) })
		})
	}
}

// write applies wr after a delay (also if inc crashed meanwhile, unless the crash lost it)
// and reports it after another.
func (w *simWorld) write(inc *simInc, wr Write) {
	name := fmt.Sprintf("store: put %s@%d", wr.Key, wr.Expected)
	if wr.Delete {
		name = fmt.Sprintf("store: delete %s@%d", wr.Key, wr.Expected)
	}
	w.s.After(w.delay(), name, func() {
		if w.err != nil || (!inc.alive && w.s.Chance(0.5)) {
			return
		}
		var ver metadata.Version
		var err error
		if w.chance(w.p.writeFail) {
			err = errSimDown
		} else {
			ver, err = w.apply(inc, wr)
			if err == nil && w.chance(w.p.writeAmbig) {
				err = errSimAmbig
				w.stats.Ambiguous++
			}
		}
		if !inc.alive {
			w.stats.LateWrites++
		}
		w.s.Tracef("  -> %v %v", ver, err)
		w.check()
		w.on(inc, w.delay(), "write done", func() {
			w.input(inc, fmt.Sprintf("WriteDone %d %v", wr.Tag, err), func(c *Core) { c.WriteDone(wr.Tag, ver, err) })
		})
	})
}

func (w *simWorld) get(inc *simInc, g Get) {
	w.on(inc, w.delay(), "store: get "+g.Key, func() {
		var kv *metadata.KV
		var err error
		if w.chance(w.p.readFail) {
			err = errSimDown
		} else if v, ok := w.kv[g.Key]; ok {
			kv = &metadata.KV{Key: g.Key, Value: v.val, Version: v.ver}
		}
		w.on(inc, w.delay(), "get done", func() {
			w.input(inc, fmt.Sprintf("GetDone %d found=%v %v", g.Tag, kv != nil, err), func(c *Core) { c.GetDone(g.Tag, kv, err) })
		})
	})
}

// checkParticipants is the owner's collection (doCheck): the header is deleted at its
// version in one commit that requires every participant record gone.
func (w *simWorld) checkParticipants(inc *simInc, ch Check) {
	keys := ParticipantKeys(ch.ID, ch.Header, simCanon)
	w.on(inc, w.delay(), "collect "+ch.ID.String(), func() {
		pending := false
		var err error
		if w.chance(w.p.checkFail) {
			err = errSimDown
		}
		for _, k := range keys {
			if _, ok := w.kv[k]; ok && err == nil {
				pending = true
			}
		}
		if pending {
			w.stats.GCPending++
		} else if err == nil {
			if _, aerr := w.apply(inc, Write{Key: ch.Key, Expected: ch.Version, Delete: true}); errors.Is(aerr, metadata.ErrBadVersion) {
				pending = true
			} else if aerr != nil {
				err = aerr
			} else if w.chance(w.p.writeAmbig) {
				err = errSimAmbig
				w.stats.Ambiguous++
			}
		}
		w.on(inc, w.delay(), "checked", func() {
			w.input(inc, fmt.Sprintf("Checked %d pending=%v %v", ch.Tag, pending, err), func(c *Core) { c.Checked(ch.Tag, pending, err) })
		})
	})
}

// Clients.

var simTopics = []string{"t/a", "t/b", "t/c"}

// send issues a request to the current coordinator; then is called with its answer (the
// client hears it a delay later). Without a coordinator the client retries later.
func (w *simWorld) send(r *simReq, then func(ID, error)) {
	inc := w.inc
	if !inc.alive {
		w.s.After(w.s.Between(w.p.maxDelay, 3*w.p.maxDelay), "client retries", func() { w.send(r, then) })
		return
	}
	w.reqs++
	r.n, r.answers = w.reqs, 0
	w.pending[r] = true
	done := func(id ID, err error) {
		w.answered(r, id, err)
		w.s.After(w.delay(), "", func() {
			if w.err == nil && then != nil {
				then(id, err)
			}
		})
	}
	var name string
	w.input(inc, "", func(c *Core) {
		switch r.kind {
		case opCreate:
			name = "NewTxn"
		case opAddPartitions:
			name = fmt.Sprintf("AddPartitions %d %v", r.seq, r.topics)
		case opAddSubscriptions:
			name = fmt.Sprintf("AddSubscriptions %d %v", r.seq, r.subs)
		case opEnd:
			name = fmt.Sprintf("End %d commit=%v", r.seq, r.commit)
		}
		w.s.Tracef(" request %d: %s", r.n, name)
		switch r.kind {
		case opCreate:
			c.NewTxn(int64(5+w.s.Rand().IntN(80)), w.nowMs(), done)
		case opAddPartitions:
			c.AddPartitions(r.seq, r.topics, done)
		case opAddSubscriptions:
			c.AddSubscriptions(r.seq, r.subs, done)
		case opEnd:
			c.End(r.seq, r.commit, w.nowMs(), done)
		}
	})
}

// answered checks a reply against the store at the moment it is given.
func (w *simWorld) answered(r *simReq, id ID, err error) {
	r.answers++
	delete(w.pending, r)
	w.s.Tracef(" reply %d: %v %v", r.n, id, err)
	if r.answers > 1 {
		w.failf("request %d answered %d times", r.n, r.answers)
	}
	h, found := w.header(r.seq)
	switch r.kind {
	case opCreate:
		if err != nil {
			if errors.Is(err, ErrTooMany) {
				w.stats.TooMany++
				if w.p.maxActive == 0 {
					w.failf("NewTxn: %v without a limit", err)
				}
			}
			return
		}
		if id.Most != simTC {
			w.failf("NewTxn answered %v of another coordinator", id)
		}
		if w.given[id.Least] {
			w.failf("NewTxn answered %v twice: a sequence number was reused", id)
		}
		w.given[id.Least] = true
		w.stats.Created++
		if w.created[id.Least] {
			w.failf("NewTxn answered %v, whose header was created before", id)
		}
	case opAddPartitions, opAddSubscriptions:
		switch {
		case err == nil:
			if !found || h.Status != Open {
				w.failf("add to %d answered ok, but its header is %v (found %v)", r.seq, h.Status, found)
			}
			for _, t := range r.topics {
				if !slices.Contains(h.Partitions, t) {
					w.failf("add of %s to %d answered ok, but its header lacks it", t, r.seq)
				}
			}
			for _, s := range r.subs {
				if !slices.Contains(h.Subscriptions, s) {
					w.failf("add of %v to %d answered ok, but its header lacks it", s, r.seq)
				}
			}
		case errors.Is(err, ErrInvalidStatus), errors.Is(err, ErrNotFound):
			if found && h.Status == Open {
				w.failf("add to %d answered %v, but its header is OPEN", r.seq, err)
			}
		}
	case opEnd:
		want := Aborted
		if r.commit {
			want = Committed
		}
		switch {
		case err == nil:
			if r.afterEnd {
				w.failf("a second End of %d answered ok", r.seq)
			}
			switch {
			case !found && !w.created[r.seq]:
				w.stats.EmptyEnds++ // no participant: nothing was stored, nothing to end
			case !found || h.Status != want:
				w.failf("End %d commit=%v answered ok, but its header is %v (found %v)", r.seq, r.commit, h.Status, found)
			}
			if s, ok := w.outcome[r.seq]; ok && s != want {
				w.failf("End %d answered %v after an End answered %v", r.seq, want, s)
			}
			w.outcome[r.seq] = want
		case errors.Is(err, ErrNotFound):
			if found && h.Status == Open {
				w.failf("End %d answered %v, but its header is OPEN", r.seq, err)
			}
			if r.afterEnd {
				w.stats.SecondEnds++
			}
		}
	}
}

// session is one client transaction: open, add participants (which register), end it
// (commit, abort, both at once, twice, late) or abandon it.
func (w *simWorld) session(left int) {
	if left == 0 || w.quiet || w.err != nil {
		return
	}
	next := func() { w.s.After(w.delay(), "", func() { w.session(left - 1) }) }
	var open func()
	open = func() {
		w.send(&simReq{kind: opCreate}, func(id ID, err error) {
			switch {
			case errors.Is(err, ErrNotReady), errors.Is(err, ErrUnavailable), errors.Is(err, ErrTooMany):
				if !w.quiet {
					w.s.After(w.delay()+time.Millisecond, "", open)
				}
			case err != nil:
				w.failf("NewTxn: unexpected %v", err)
			default:
				w.adds(id.Least, w.s.Rand().IntN(4), next)
			}
		})
	}
	open()
}

// retry resends r while the coordinator was not there for it.
func (w *simWorld) retry(r *simReq, then func(ID, error)) {
	w.send(r, func(id ID, err error) {
		if errors.Is(err, ErrNotReady) && !w.quiet {
			w.retry(r, then)
			return
		}
		if then != nil {
			then(id, err)
		}
	})
}

func (w *simWorld) adds(seq uint64, n int, next func()) {
	if n == 0 {
		w.end(seq, next)
		return
	}
	rnd := w.s.Rand()
	mk := func() *simReq {
		t := simTopics[rnd.IntN(len(simTopics))]
		if rnd.IntN(3) == 0 {
			return &simReq{kind: opAddSubscriptions, seq: seq, subs: []SubRef{{Topic: t, Subscription: fmt.Sprintf("s%d", rnd.IntN(2))}}}
		}
		return &simReq{kind: opAddPartitions, seq: seq, topics: []string{t}}
	}
	after := func(r *simReq) func(ID, error) {
		return func(_ ID, err error) {
			if err == nil {
				// The client writes or acknowledges: the participant registers.
				w.s.After(w.delay(), "participant registers", func() {
					for _, t := range r.topics {
						w.register(seq, t, "")
					}
					for _, s := range r.subs {
						w.register(seq, s.Topic, s.Subscription)
					}
				})
			}
		}
	}
	if rnd.IntN(5) == 0 { // two at once
		a := mk()
		w.retry(a, after(a))
	}
	r := mk()
	w.retry(r, func(id ID, err error) {
		after(r)(id, err)
		w.adds(seq, n-1, next)
	})
}

func (w *simWorld) end(seq uint64, next func()) {
	rnd := w.s.Rand()
	if rnd.IntN(8) == 0 { // abandoned: it times out
		next()
		return
	}
	wait := time.Duration(0)
	if rnd.IntN(4) == 0 { // near or after the deadline
		wait = time.Duration(rnd.IntN(90)) * time.Millisecond
	}
	w.s.After(wait, "", func() {
		if rnd.IntN(8) == 0 { // commit and abort at once
			w.retry(&simReq{kind: opEnd, seq: seq, commit: false}, nil)
		}
		if rnd.IntN(10) == 0 { // an unknown transaction
			w.retry(&simReq{kind: opEnd, seq: seq + 1<<40, commit: true}, func(_ ID, err error) {
				if !errors.Is(err, ErrNotFound) {
					w.failf("End of an unknown transaction answered %v", err)
				}
			})
		}
		commit := rnd.IntN(3) != 0
		w.retry(&simReq{kind: opEnd, seq: seq, commit: commit}, func(_ ID, err error) {
			if err == nil && rnd.IntN(4) == 0 { // a second End: TransactionNotFound
				w.retry(&simReq{kind: opEnd, seq: seq, commit: rnd.IntN(2) == 0, afterEnd: true}, nil)
			}
			if err == nil && rnd.IntN(4) == 0 { // an add after the end
				w.retry(&simReq{kind: opAddPartitions, seq: seq, topics: []string{simTopics[0]}}, func(_ ID, err error) {
					if err == nil {
						w.failf("an add to ended %d answered ok", seq)
					}
				})
			}
			next()
		})
	})
}

// Checks.

// check runs after every step: the open count is bounded, and a promised outcome stays.
func (w *simWorld) check() {
	// Over the maximum only by what a load found (a crashed incarnation's creates may
	// land after the reload): never by a new transaction.
	if c := w.inc.c; w.inc.alive && w.p.maxActive > 0 && c.Open() > max(w.p.maxActive, w.inc.open) {
		w.failf("%d open transactions, over the maximum %d", c.Open(), w.p.maxActive)
	}
	if w.inc.alive {
		w.inc.open = w.inc.c.Open()
	}
	for seq, s := range w.outcome {
		if h, ok := w.header(seq); ok && h.Status != s {
			w.failf("header %d is %v after End answered %v", seq, h.Status, s)
		}
	}
}

// checkEnd runs with the faults stopped and nothing left to do: every request was answered,
// every open transaction timed out and every ended one was garbage-collected.
func (w *simWorld) checkEnd() {
	for r := range w.pending {
		w.failf("request %d (%v %d) never answered", r.n, r.kind, r.seq)
	}
	for _, k := range slices.Sorted(maps.Keys(w.kv)) {
		if seq, ok := simHeaderSeq(k); ok {
			h, _ := w.header(seq)
			w.failf("header %d left %v (deadline %d, now %d)", seq, h.Status, h.TimeoutAtMs, w.nowMs())
		} else if k != metadata.TxnSeqKey(simTC) && k != metadata.TxnEpochKey(simTC) {
			w.failf("participant record %s left", k)
		}
	}
	if n := w.inc.c.Open(); n != 0 {
		w.failf("the core counts %d open transactions, none is stored", n)
	}
	if ts := w.inc.c.Transactions(); len(ts) != 0 {
		w.failf("the core holds transactions %v, none is stored", ts)
	}
}

func (w *simWorld) run() error {
	p := w.p
	s := w.s
	s.Tracef("params: %v", p)
	w.start()
	for i := 0; i < p.clients; i++ {
		s.After(s.Between(0, p.window/4), fmt.Sprintf("client %d", i), func() { w.session(p.txns) })
	}
	for k := 0; k < p.crashes; k++ {
		s.After(s.Between(0, p.window), "crash", w.crash)
	}
	s.After(p.window, "quiesce", func() { w.quiet = true })
	deadline := p.window + 10*time.Minute
	drain := func() {
		for w.err == nil && s.Step() {
			if s.Now() > deadline {
				w.failf("no quiescence by %v (%d events pending)", deadline, s.Pending())
			}
		}
	}
	drain()
	if w.err == nil && len(w.orphans) > 0 {
		// Headers a crashed incarnation created after the reload are unknown to the core
		// until the next load, which times them out.
		w.s.Tracef("reload for %d orphaned headers", len(w.orphans))
		w.inc.alive = false
		w.start()
		drain()
	}
	if w.err == nil {
		w.checkEnd()
	}
	return w.err
}

func runSimSeed(seed int64, mut CoreMutation, verbose bool) (*simWorld, error) {
	w := newSimWorld(seed, mut, verbose)
	return w, w.run()
}

// TestSim drives the coordinator core through seeded interleavings (see simWorld).
func TestSim(t *testing.T) {
	var st simStats
	ran, failed := sim.RunSeeds(t, flags.Seeds("./txn", 0), func(seed int64, verbose bool) sim.Outcome {
		w, err := runSimSeed(seed, CoreMutation{}, verbose)
		sim.AddCounts(&st, w.stats)
		return sim.Outcome{Sim: w.s, Params: w.p, Err: err}
	})
	if failed {
		return
	}
	t.Logf("%+v", st)
	sim.RequireCoverage(t, ran, 300, map[string]int{"creates": st.Created, "commits": st.Committed, "aborts": st.Aborted,
		"timeouts": st.TimedOut, "second ends": st.SecondEnds, "crashes": st.Crashes, "late writes": st.LateWrites,
		"ambiguous writes": st.Ambiguous, "rejected registrations": st.Rejected, "too many": st.TooMany,
		"GC deletes": st.GCDeleted, "GC checks pending": st.GCPending, "records": st.Records, "empty ends": st.EmptyEnds,
		"fenced creates": st.Fenced})
}

// TestSimDeterministic replays seeds and requires identical traces.
func TestSimDeterministic(t *testing.T) {
	sim.CheckDeterministic(t, 30, func(seed int64) *sim.Sim {
		w, _ := runSimSeed(seed, CoreMutation{}, true)
		return w.s
	})
}

// TestSimCatchesMutations proves the checkers can fail: each deliberately broken core is
// caught by some seed.
func TestSimCatchesMutations(t *testing.T) {
	if flags.Replaying() {
		t.Skip("replaying one seed")
	}
	sim.CatchMutations(t, 3000, []sim.Mutant[CoreMutation]{
		{Name: "an end written without compare-and-swap", Mut: CoreMutation{EndWithoutCAS: true}},
		{Name: "a failed end answered as done", Mut: CoreMutation{TrustFailedEnd: true}},
		{Name: "sequence numbers reused after a reload", Mut: CoreMutation{ReuseSeqOnLoad: true}},
		{Name: "the timeout sweep overwriting an ended header", Mut: CoreMutation{AbortEndedByTTL: true}},
		{Name: "participants added without their records", Mut: CoreMutation{AddWithoutRecords: true}},
		{Name: "headers created without the epoch fence", Mut: CoreMutation{CreateWithoutFence: true}},
		{Name: "headers collected without checking their participants", Mut: CoreMutation{CollectWithoutCheck: true}},
	}, func(seed int64, mut CoreMutation) error {
		_, err := runSimSeed(seed, mut, false)
		return err
	})
}
