package sim

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/magnetar-io/magnetar/proto/bk"
)

// BookieConfig describes a simulated bookie.
type BookieConfig struct {
	// A group commit fsyncs the journal a uniform [FsyncMin, FsyncMax] after its first
	// unsynced record.
	FsyncMin, FsyncMax time.Duration
	// EntryLAC extracts the piggybacked LAC from a stored entry (for MaxLAC); nil: -1.
	EntryLAC func(body []byte) int64
}

// Bookie is a simulated storage node with journal semantics: a request is applied to memory at
// once (and is visible to reads), journaled, and answered only after the group commit that
// makes it durable. A crash loses everything not yet fsynced, including the answers waiting
// for it; Restart brings the bookie back with exactly its durable state. Fencing follows
// BookKeeper: a fencing read durably fences the ledger before it is answered, and a fenced
// ledger refuses non-recovery adds with bk.StatusFenced.
type Bookie struct {
	s   *Sim
	id  string
	cfg BookieConfig

	up          bool
	incarnation int
	mem         map[int64]*ledgerState // what requests see
	durable     map[int64]*ledgerState // what survives a crash
	journal     []journalOp            // applied to mem, not yet durable
	syncing     bool

	// fenceAnswered records ledgers for which a fencing read was answered. The bookie must
	// never accept a non-recovery add for them afterwards (checked, see Violations).
	fenceAnswered map[int64]bool
	violations    []string
	crashes       int
	// knownLAC: the highest LAC the bookie ever held per ledger (an observer's record: it
	// survives crashes), see KnownLAC.
	knownLAC map[int64]int64
}

type ledgerState struct {
	entries   map[int64][]byte
	fenced    bool
	lac       int64 // explicit LAC
	masterKey [bk.MasterKeyLen]byte
}

func (l *ledgerState) clone() *ledgerState {
	c := *l
	c.entries = maps.Clone(l.entries)
	return &c
}

type journalOp struct {
	ledger int64
	apply  func(durable *ledgerState) // nil: a waiter for an earlier record
	reply  func()
}

// NewBookie returns a running bookie with empty storage.
func NewBookie(s *Sim, id string, cfg BookieConfig) *Bookie {
	return &Bookie{s: s, id: id, cfg: cfg, up: true, mem: map[int64]*ledgerState{},
		durable: map[int64]*ledgerState{}, fenceAnswered: map[int64]bool{}, knownLAC: map[int64]int64{}}
}

// KnownLAC returns the highest LAC the bookie ever held for a ledger — explicit, or
// piggybacked on a stored entry (BookieConfig.EntryLAC) — even if a crash lost it since; -1 if
// none. The maximum over a ledger's bookies bounds the LAC any reader could have learned: an
// entry beyond it is not known to be confirmed (L4).
func (b *Bookie) KnownLAC(ledger int64) int64 {
	if lac, ok := b.knownLAC[ledger]; ok {
		return lac
	}
	return -1
}

func (b *Bookie) learnLAC(ledger, lac int64) {
	if cur, ok := b.knownLAC[ledger]; !ok || lac > cur {
		b.knownLAC[ledger] = lac
	}
}

// ID returns the bookie's address.
func (b *Bookie) ID() string { return b.id }

// Up implements Node.
func (b *Bookie) Up() bool { return b.up }

// Crashes returns how many times the bookie crashed.
func (b *Bookie) Crashes() int { return b.crashes }

// Crash stops the bookie and discards everything not fsynced, with the answers that waited for
// it.
func (b *Bookie) Crash() {
	if !b.up {
		return
	}
	b.s.Tracef("bookie %s crash (%d unsynced)", b.id, len(b.journal))
	b.up = false
	b.crashes++
	b.incarnation++
	b.journal, b.syncing = nil, false
	b.mem = map[int64]*ledgerState{}
	for id, l := range b.durable {
		b.mem[id] = l.clone()
	}
}

// Restart brings a crashed bookie back with its durable state.
func (b *Bookie) Restart() {
	if !b.up {
		b.s.Tracef("bookie %s restart", b.id)
		b.up = true
	}
}

// Violations lists protocol violations the bookie observed in itself.
func (b *Bookie) Violations() []string { return b.violations }

// DurableEntry returns the fsynced bytes of an entry.
func (b *Bookie) DurableEntry(ledger, entry int64) ([]byte, bool) {
	l := b.durable[ledger]
	if l == nil {
		return nil, false
	}
	body, ok := l.entries[entry]
	return body, ok
}

// DurableEntries returns the ids of the fsynced entries of a ledger, sorted.
func (b *Bookie) DurableEntries(ledger int64) []int64 {
	l := b.durable[ledger]
	if l == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(l.entries))
}

// Fenced reports whether the ledger is durably fenced.
func (b *Bookie) Fenced(ledger int64) bool {
	l := b.durable[ledger]
	return l != nil && l.fenced
}

func (b *Bookie) ledger(id int64, key [bk.MasterKeyLen]byte, create bool) (*ledgerState, bool) {
	l := b.mem[id]
	if l == nil {
		if !create {
			return nil, true
		}
		l = &ledgerState{entries: map[int64][]byte{}, lac: -1, masterKey: key}
		b.mem[id] = l
		b.journalOp(id, func(d *ledgerState) {}, nil) // the ledger (and its key) becomes durable
	}
	return l, l.masterKey == key
}

// journalOp appends a record applied to the durable state (and reply called) at the next group
// commit.
func (b *Bookie) journalOp(ledger int64, apply func(*ledgerState), reply func()) {
	b.journal = append(b.journal, journalOp{ledger: ledger, apply: apply, reply: reply})
	if b.syncing {
		return
	}
	b.syncing = true
	inc := b.incarnation
	b.s.After(b.s.Between(b.cfg.FsyncMin, b.cfg.FsyncMax), "", func() {
		if b.incarnation != inc {
			return
		}
		b.sync()
	})
}

func (b *Bookie) sync() {
	ops := b.journal
	b.journal, b.syncing = nil, false
	for _, op := range ops {
		if op.apply != nil {
			d := b.durable[op.ledger]
			if d == nil {
				m := b.mem[op.ledger]
				d = &ledgerState{entries: map[int64][]byte{}, lac: -1, masterKey: m.masterKey}
				b.durable[op.ledger] = d
			}
			op.apply(d)
		}
	}
	for _, op := range ops {
		if op.reply != nil {
			op.reply()
		}
	}
}

// Handle implements Node for *bk.Request messages, answering *bk.Response.
func (b *Bookie) Handle(msg any, reply func(any)) {
	req := msg.(*bk.Request)
	inc := b.incarnation
	respond := func(r *bk.Response) {
		if b.incarnation != inc {
			return // crashed since: the answer is lost
		}
		r.Op, r.RequestID, r.LedgerID = req.Op, req.RequestID, req.LedgerID
		reply(r)
	}
	switch req.Op {
	case bk.OpAddEntry:
		b.add(req, respond)
	case bk.OpReadEntry:
		b.read(req, respond)
	case bk.OpWriteLAC:
		l, ok := b.ledger(req.LedgerID, req.MasterKey, true)
		if !ok {
			respond(&bk.Response{Status: bk.StatusUnauthorized})
			return
		}
		lac := req.LAC
		l.lac = max(l.lac, lac)
		b.learnLAC(req.LedgerID, lac)
		b.journalOp(req.LedgerID, func(d *ledgerState) { d.lac = max(d.lac, lac) },
			func() { respond(&bk.Response{Status: bk.StatusOK}) })
	case bk.OpListEntries:
		l := b.mem[req.LedgerID]
		if l == nil {
			respond(&bk.Response{Status: bk.StatusNoSuchLedger})
			return
		}
		respond(&bk.Response{Status: bk.StatusOK, Ranges: ranges(slices.Sorted(maps.Keys(l.entries)))})
	case bk.OpReadLAC:
		l, _ := b.ledger(req.LedgerID, req.MasterKey, false)
		if l == nil {
			respond(&bk.Response{Status: bk.StatusNoSuchLedger, MaxLAC: -1})
			return
		}
		r := &bk.Response{Status: bk.StatusOK, MaxLAC: b.maxLAC(l), EntryID: -1}
		if last, ok := lastKey(l.entries); ok {
			r.EntryID, r.Body = last, l.entries[last]
		}
		respond(r)
	default:
		respond(&bk.Response{Status: bk.StatusBadRequest})
	}
}

func (b *Bookie) add(req *bk.Request, respond func(*bk.Response)) {
	l, ok := b.ledger(req.LedgerID, req.MasterKey, true)
	if !ok {
		respond(&bk.Response{Status: bk.StatusUnauthorized, EntryID: req.EntryID})
		return
	}
	recovery := req.Flags&bk.FlagRecovery != 0
	if l.fenced && !recovery {
		respond(&bk.Response{Status: bk.StatusFenced, EntryID: req.EntryID})
		return
	}
	if b.fenceAnswered[req.LedgerID] && !recovery {
		b.violations = append(b.violations, fmt.Sprintf(
			"bookie %s accepted non-recovery add %d/%d after answering a fencing read", b.id, req.LedgerID, req.EntryID))
	}
	body, entry := slices.Clone(req.Body), req.EntryID
	l.entries[entry] = body
	if b.cfg.EntryLAC != nil {
		b.learnLAC(req.LedgerID, b.cfg.EntryLAC(body))
	}
	b.journalOp(req.LedgerID, func(d *ledgerState) { d.entries[entry] = body },
		func() { respond(&bk.Response{Status: bk.StatusOK, EntryID: entry}) })
}

func (b *Bookie) read(req *bk.Request, respond func(*bk.Response)) {
	fence := req.Flags&bk.FlagFence != 0
	l, ok := b.ledger(req.LedgerID, req.MasterKey, fence)
	if !ok && fence {
		respond(&bk.Response{Status: bk.StatusUnauthorized, EntryID: req.EntryID})
		return
	}
	// The answer reflects the state when the request is processed.
	r := &bk.Response{EntryID: req.EntryID, MaxLAC: -1}
	switch {
	case l == nil:
		r.Status = bk.StatusNoSuchLedger
	case req.EntryID == bk.LastEntry:
		if last, ok := lastKey(l.entries); ok {
			r.Status, r.EntryID, r.Body = bk.StatusOK, last, l.entries[last]
		} else {
			r.Status = bk.StatusNoSuchEntry
		}
		r.MaxLAC = b.maxLAC(l)
	default:
		if body, ok := l.entries[req.EntryID]; ok {
			r.Status, r.Body = bk.StatusOK, body
		} else {
			r.Status = bk.StatusNoSuchEntry
		}
		r.MaxLAC = b.maxLAC(l)
	}
	if !fence {
		respond(r)
		return
	}
	ledger := req.LedgerID
	answer := func() {
		b.fenceAnswered[ledger] = true
		respond(r)
	}
	switch {
	case !l.fenced:
		l.fenced = true
		b.journalOp(ledger, func(d *ledgerState) { d.fenced = true }, answer)
	case !b.durable[ledger].isFenced():
		b.journalOp(ledger, nil, answer) // wait for the pending fence record
	default:
		answer()
	}
}

func (l *ledgerState) isFenced() bool { return l != nil && l.fenced }

func (b *Bookie) maxLAC(l *ledgerState) int64 {
	lac := l.lac
	if b.cfg.EntryLAC != nil {
		if last, ok := lastKey(l.entries); ok {
			lac = max(lac, b.cfg.EntryLAC(l.entries[last]))
		}
	}
	return lac
}

// ranges compresses sorted entry ids into inclusive ranges.
func ranges(ids []int64) []bk.Range {
	var out []bk.Range
	for _, id := range ids {
		if n := len(out); n > 0 && out[n-1].Last == id-1 {
			out[n-1].Last = id
			continue
		}
		out = append(out, bk.Range{First: id, Last: id})
	}
	return out
}

func lastKey(m map[int64][]byte) (int64, bool) {
	last, ok := int64(-1), false
	for k := range m {
		if !ok || k > last {
			last, ok = k, true
		}
	}
	return last, ok
}
