package autorecovery

import (
	"errors"
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/internal/fsm"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// Outcome is how one replication attempt of a ledger ended.
type Outcome uint8

// Outcomes.
const (
	// Replicated: no fragment references a lost bookie and every suspect bookie holds its
	// entries; the mark can be cleared.
	Replicated Outcome = iota + 1
	// Deferred: the closed part is replicated, but a fragment with a lost bookie is not closed
	// (the ledger is open and its writer may be alive): try again later.
	Deferred
	// Failed: the attempt could not finish (bookie or metadata errors); back off and retry.
	Failed
)

var outcomeNames = map[Outcome]string{Replicated: "replicated", Deferred: "deferred", Failed: "failed"}

func (o Outcome) String() string {
	if n, ok := outcomeNames[o]; ok {
		return n
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Errors.
var (
	// ErrNoReplica: an entry to copy could not be read from any surviving replica.
	ErrNoReplica = errors.New("autorecovery: no readable replica")
	// ErrBookieUp: decommission of a bookie that is still registered.
	ErrBookieUp = errors.New("autorecovery: bookie is up")
	// ErrStopped: the component was stopped.
	ErrStopped = errors.New("autorecovery: stopped")
)

// ReplicatorState is the phase of a Replicator.
type ReplicatorState uint8

// Replicator states. Legal edges:
//
//	ReadingLAC → Planning
//	Planning   → Copying | Listing | Recovering | Done
//	Listing    → Copying | Planning
//	Copying    → Updating (replacement: compare-and-swap) | Planning (in-place repair)
//	Updating   → Planning (swapped, or adopted a newer record) | Updating (retry on a newer record)
//	Recovering → Planning
//	any non-final → Failed
//
// Done and Failed are final.
const (
	// RepReadingLAC: asking the last ensemble for the LAC (ledgers that are not CLOSED).
	RepReadingLAC ReplicatorState = iota + 1
	// RepPlanning: choosing the next task from the current record (transient).
	RepPlanning
	// RepListing: listing the entries a suspect bookie holds.
	RepListing
	// RepCopying: reading entries from surviving replicas and recovery-adding them to the
	// target bookie.
	RepCopying
	// RepUpdating: compare-and-swap of the record that swaps the lost bookie for the target.
	RepUpdating
	// RepRecovering: the driver is recovering (fencing and closing) the ledger.
	RepRecovering
	// RepDone: finished with Replicated or Deferred.
	RepDone
	// RepFailed: finished with Failed.
	RepFailed
)

var repStateNames = map[ReplicatorState]string{
	RepReadingLAC: "ReadingLAC", RepPlanning: "Planning", RepListing: "Listing", RepCopying: "Copying",
	RepUpdating: "Updating", RepRecovering: "Recovering", RepDone: "Done", RepFailed: "Failed",
}

func (s ReplicatorState) String() string {
	if n, ok := repStateNames[s]; ok {
		return n
	}
	return fmt.Sprintf("ReplicatorState(%d)", uint8(s))
}

func (s ReplicatorState) final() bool { return s == RepDone || s == RepFailed }

// repEdges are the edges of the diagram above (0: not started).
var repEdges = fsm.Edges[ReplicatorState]{
	0:             {RepReadingLAC, RepPlanning, RepFailed},
	RepReadingLAC: {RepPlanning, RepFailed},
	RepPlanning:   {RepCopying, RepListing, RepRecovering, RepDone, RepFailed},
	RepListing:    {RepCopying, RepPlanning, RepFailed},
	RepCopying:    {RepUpdating, RepPlanning, RepFailed},
	RepUpdating:   {RepPlanning, RepUpdating, RepFailed},
	RepRecovering: {RepPlanning, RepFailed},
}

// ReplicatorConfig configures one replication attempt of one ledger.
type ReplicatorConfig struct {
	// Meta is the ledger's record and Version its version.
	Meta    *ledger.Metadata
	Version metadata.Version
	// Live reports whether a bookie is registered (writable or read-only). A bookie of an
	// ensemble that is not live is lost: it is replaced in every closed fragment.
	Live func(bookie string) bool
	// Suspects are live bookies that may lack entries (the full check said so): their closed
	// fragments are listed and missing entries copied back to them in place.
	Suspects []string
	// Placement picks the bookie that replaces a lost one. Required.
	Placement ledger.Placement
	// Recover decides, from the LAC learned, whether the writer of a ledger that is not
	// CLOSED is gone, so that the ledger may be recovered (fenced and closed) when a fragment
	// with a lost bookie is not closed. Nil: never (the attempt is Deferred).
	Recover func(lac int64) bool
	// Window bounds the entries being copied at once (0: 256), and WindowBytes the bytes
	// read and not yet written (0: 8 MiB; one entry may exceed it).
	Window      int
	WindowBytes int

	// swapWithoutCopy is a test-only mutation: swap the bookie without copying.
	swapWithoutCopy bool
}

// BookieRequest asks the driver to send Req to Bookie and to answer with a BookieResult
// carrying the same Token.
type BookieRequest struct {
	Token  uint64
	Bookie string
	Req    *bk.Request
}

// BookieResult is the answer to a BookieRequest (Err: transport failure or timeout).
type BookieResult struct {
	Token uint64
	Resp  bk.Response
	Err   error
}

// RecoverResult answers Ready.Recover: the ledger's CLOSED record, or an error.
type RecoverResult struct {
	Meta    *ledger.Metadata
	Version metadata.Version
	Err     error
}

// Result is the outcome of a Replicator.
type Result struct {
	Outcome Outcome
	Err     error // Failed only
	// Meta and Version are the last record the replicator knew.
	Meta    *ledger.Metadata
	Version metadata.Version
	// LAC is the LAC learned (the last entry once CLOSED).
	LAC int64
	// Recovered reports that the attempt recovered (fenced and closed) the ledger.
	Recovered bool
	// Progress.
	Fragments, Entries int
	Bytes              int64
}

// RepReady is what a Replicator asks its driver to do next.
type RepReady struct {
	Bookies    []BookieRequest
	MetaWrites []ledger.MetaWrite
	// Recover asks the driver to recover the ledger (ledger.Recovery with a placement) and to
	// answer with a RecoverResult.
	Recover bool
	Done    *Result
}

func (r *RepReady) empty() bool {
	return len(r.Bookies) == 0 && len(r.MetaWrites) == 0 && !r.Recover && r.Done == nil
}

// Replicator is the sans-I/O core of one replication attempt of one ledger, in the style of
// ledger.Recovery: Start, then Step(BookieResult | ledger.MetaResult | RecoverResult), and
// perform Ready. It learns the LAC (unless the ledger is CLOSED), splits the ledger into
// fragments (Fragments, rule L4), and for every closed fragment that references a lost bookie
// copies the entries that bookie stored from surviving replicas to a new bookie
// (recovery-adds) and then swaps the bookie in that fragment's ensemble by compare-and-swap.
// Suspect bookies get their missing entries copied back in place. A fragment with a lost
// bookie that is not closed is left alone unless Recover allows recovering the ledger first.
// It never reads an entry beyond the LAC it knows of a ledger that is not CLOSED, and never
// writes a record that is IN_RECOVERY.
//
// Replicator is thread-unsafe; the driver obligations of ledger's cores apply (core.go): one
// result per request, delivered by the owner goroutine; MetaWrites are compare-and-swaps whose
// conflicts return the current record.
type Replicator struct {
	cfg     ReplicatorConfig
	meta    *ledger.Metadata
	version metadata.Version
	key     [bk.MasterKeyLen]byte
	state   ReplicatorState
	// lac is the LAC known. Invariant: no entry > lac of a ledger that is not CLOSED is ever
	// read.
	lac       int64
	recovered bool

	reqs      map[uint64]repRef // outstanding bookie requests; absent = stale
	nextToken uint64
	seq       uint64 // Seq of the in-flight MetaWrite
	lacWait   int    // LAC answers still awaited

	suspects []string // not yet checked
	task     *copyTask
	// buffered is the bytes read and not yet written to the target (bounded by WindowBytes).
	buffered int

	res   Result
	ready RepReady
}

type repKind uint8

const (
	repLAC repKind = iota + 1
	repList
	repRead
	repAdd
)

type repRef struct {
	kind  repKind
	entry int64
}

// copyTask copies entries to one target bookie: a replacement for a lost bookie (swap set)
// or the suspect itself (in place).
type copyTask struct {
	frag    Fragment
	idx     int    // ensemble index of the replaced bookie
	from    string // the lost bookie ("" for in place)
	target  string
	entries []int64
	next    int // entries[:next] were started
	copying map[int64]*entryCopy
	done    int
	// proposed is the record of the in-flight swap (Updating).
	proposed *ledger.Metadata
}

type entryCopy struct {
	sources  []string
	tried    int
	bytes    int // payload
	buffered int // stored bytes held until the add is acknowledged
}

// NewReplicator returns a replicator; call Start.
func NewReplicator(cfg ReplicatorConfig) (*Replicator, error) {
	if cfg.Meta == nil || cfg.Live == nil || cfg.Placement == nil {
		return nil, fmt.Errorf("%w: replicator needs metadata, liveness and placement", ledger.ErrInvalidConfig)
	}
	if err := cfg.Meta.Validate(); err != nil {
		return nil, err
	}
	if cfg.Window <= 0 {
		cfg.Window = 256
	}
	if cfg.WindowBytes <= 0 {
		cfg.WindowBytes = 8 << 20
	}
	s := slices.Clone(cfg.Suspects)
	slices.Sort(s)
	return &Replicator{cfg: cfg, meta: cfg.Meta, version: cfg.Version, key: bk.MasterKey(cfg.Meta.Password),
		lac: -1, reqs: map[uint64]repRef{}, suspects: slices.Compact(s)}, nil
}

// State returns the replicator's phase (0 before Start).
func (r *Replicator) State() ReplicatorState { return r.state }

// LAC returns the LAC the replicator knows.
func (r *Replicator) LAC() int64 { return r.lac }

// HasReady reports whether Ready would return work.
func (r *Replicator) HasReady() bool { return !r.ready.empty() }

// Ready returns and clears what the driver must do next.
func (r *Replicator) Ready() RepReady {
	rd := r.ready
	r.ready = RepReady{}
	return rd
}

func (r *Replicator) become(to ReplicatorState) {
	r.state = repEdges.Must(ErrIllegalTransition, "replicator", r.state, to)
}

// Start begins the attempt.
func (r *Replicator) Start() {
	if r.state != 0 {
		return
	}
	if r.meta.State == ledger.StateClosed {
		r.lac = r.meta.LastEntryID
		r.become(RepPlanning)
		r.plan()
		return
	}
	// The LAC bounds what is known to exist (L4). Any answer is a safe lower bound, so there
	// is no coverage rule here: wait for every bookie of the last ensemble (or its timeout).
	r.become(RepReadingLAC)
	for _, b := range r.meta.LastEnsemble().Bookies {
		r.send(b, repRef{kind: repLAC}, &bk.Request{Op: bk.OpReadLAC, LedgerID: r.meta.LedgerID, MasterKey: r.key})
		r.lacWait++
	}
}

func (r *Replicator) send(b string, ref repRef, req *bk.Request) {
	r.nextToken++
	r.reqs[r.nextToken] = ref
	r.ready.Bookies = append(r.ready.Bookies, BookieRequest{Token: r.nextToken, Bookie: b, Req: req})
}

// Step feeds the replicator a result: BookieResult, ledger.MetaResult or RecoverResult.
func (r *Replicator) Step(msg any) {
	if r.state.final() {
		return
	}
	switch m := msg.(type) {
	case BookieResult:
		ref, ok := r.reqs[m.Token]
		if !ok {
			return
		}
		delete(r.reqs, m.Token)
		switch {
		case ref.kind == repLAC && r.state == RepReadingLAC:
			r.onLAC(m)
		case ref.kind == repList && r.state == RepListing:
			r.onList(m)
		case ref.kind == repRead && r.state == RepCopying:
			r.onRead(ref, m)
		case ref.kind == repAdd && r.state == RepCopying:
			r.onAdd(ref, m)
		}
	case ledger.MetaResult:
		if m.Seq == r.seq && r.state == RepUpdating {
			r.onMeta(m)
		}
	case RecoverResult:
		if r.state == RepRecovering {
			r.onRecovered(m)
		}
	default:
		_ = assertionFailedf("replicator: unexpected message %T", msg)
	}
}

func (r *Replicator) onLAC(m BookieResult) {
	r.lacWait--
	if m.Err == nil {
		r.lac = max(r.lac, lacOf(r.meta, m.Resp))
	}
	if r.lacWait == 0 {
		r.become(RepPlanning)
		r.plan()
	}
}

// plan picks the next task from the current record: replace a lost bookie of a closed
// fragment, repair a suspect, recover the ledger, or finish.
func (r *Replicator) plan() {
	frags := Fragments(r.meta, r.lac)
	canSwap := r.meta.State != ledger.StateInRecovery // never write under a recovery
	pending := false                                  // a lost bookie we may not replace now
	for _, f := range frags {
		for idx, b := range f.Bookies {
			if r.cfg.Live(b) {
				continue
			}
			if !f.Closed || !canSwap {
				pending = true
				continue
			}
			r.startReplace(f, idx)
			return
		}
	}
	for len(r.suspects) > 0 {
		s := r.suspects[0]
		r.suspects = r.suspects[1:]
		if !r.cfg.Live(s) {
			continue // lost: handled by replacement
		}
		for _, f := range frags {
			if f.Closed && slices.Contains(f.Bookies, s) {
				r.become(RepListing)
				r.task = &copyTask{target: s}
				r.send(s, repRef{kind: repList}, &bk.Request{Op: bk.OpListEntries, LedgerID: r.meta.LedgerID, MasterKey: r.key})
				return
			}
		}
	}
	if pending {
		if !r.recovered && r.cfg.Recover != nil && r.cfg.Recover(r.lac) {
			r.become(RepRecovering)
			r.ready.Recover = true
			return
		}
		r.finish(Deferred, nil)
		return
	}
	r.finish(Replicated, nil)
}

func (r *Replicator) startReplace(f Fragment, idx int) {
	target, err := r.cfg.Placement.Replace(f.Bookies)
	if err != nil {
		r.finish(Failed, fmt.Errorf("ledger %d: replace %s in fragment %d..%d: %w", r.meta.LedgerID, f.Bookies[idx], f.First, f.Last, err))
		return
	}
	r.task = &copyTask{frag: f, idx: idx, from: f.Bookies[idx], target: target, entries: f.Entries(r.meta, idx)}
	if r.cfg.swapWithoutCopy {
		r.task.entries = nil
	}
	r.startCopy()
}

func (r *Replicator) onList(m BookieResult) {
	t := r.task
	have := func(int64) bool { return false }
	switch {
	case m.Err == nil && m.Resp.Status == bk.StatusOK:
		have = func(e int64) bool {
			for _, rg := range m.Resp.Ranges {
				if e >= rg.First && e <= rg.Last {
					return true
				}
			}
			return false
		}
	case m.Err == nil && m.Resp.Status == bk.StatusNoSuchLedger:
	default:
		r.finish(Failed, fmt.Errorf("ledger %d: list entries on %s: %w", r.meta.LedgerID, t.target,
			&ledger.BookieError{Bookie: t.target, Status: m.Resp.Status, Err: m.Err}))
		return
	}
	for _, f := range Fragments(r.meta, r.lac) {
		idx := slices.Index(f.Bookies, t.target)
		if !f.Closed || idx < 0 {
			continue
		}
		for _, e := range f.Entries(r.meta, idx) {
			if !have(e) {
				t.entries = append(t.entries, e)
			}
		}
	}
	if len(t.entries) == 0 {
		r.task = nil
		r.become(RepPlanning)
		r.plan()
		return
	}
	r.startCopy()
}

func (r *Replicator) startCopy() {
	r.become(RepCopying)
	r.task.copying = map[int64]*entryCopy{}
	r.fillCopies()
	r.maybeCopied()
}

// fillCopies keeps Window entries of the task in flight.
func (r *Replicator) fillCopies() {
	t := r.task
	for len(t.copying) < r.cfg.Window && r.buffered < r.cfg.WindowBytes && t.next < len(t.entries) && !r.state.final() {
		e := t.entries[t.next]
		t.next++
		var srcs []string
		for _, b := range r.meta.WriteSet(e) {
			if b != t.target && b != t.from && r.cfg.Live(b) {
				srcs = append(srcs, b)
			}
		}
		if len(srcs) == 0 {
			r.finish(Failed, fmt.Errorf("%w: ledger %d entry %d: no live replica in %v", ErrNoReplica,
				r.meta.LedgerID, e, r.meta.WriteSet(e)))
			return
		}
		// Spread the reads over the replicas.
		first := int(e) % len(srcs)
		srcs = append(srcs[first:], srcs[:first]...)
		ec := &entryCopy{sources: srcs}
		t.copying[e] = ec
		r.readNext(e, ec)
	}
}

func (r *Replicator) readNext(e int64, ec *entryCopy) {
	if r.meta.State != ledger.StateClosed && e > r.lac && !mutationNoReadGuard {
		r.finish(Failed, assertionFailedf("replicator: ledger %d: read of entry %d beyond known LAC %d", r.meta.LedgerID, e, r.lac))
		return
	}
	b := ec.sources[ec.tried]
	ec.tried++
	r.send(b, repRef{kind: repRead, entry: e}, &bk.Request{Op: bk.OpReadEntry, LedgerID: r.meta.LedgerID, EntryID: e, MasterKey: r.key})
}

func (r *Replicator) onRead(ref repRef, m BookieResult) {
	t := r.task
	ec := t.copying[ref.entry]
	if ec == nil {
		return
	}
	if m.Err == nil && m.Resp.Status == bk.StatusOK {
		ent, err := bk.DecodeEntry(m.Resp.Body, r.meta.Digest.Wire())
		if err == nil && ent.LedgerID == r.meta.LedgerID && ent.EntryID == ref.entry {
			ec.bytes = len(ent.Payload)
			ec.buffered = len(m.Resp.Body)
			r.buffered += ec.buffered
			r.send(t.target, repRef{kind: repAdd, entry: ref.entry}, &bk.Request{Op: bk.OpAddEntry, Flags: bk.FlagRecovery,
				LedgerID: r.meta.LedgerID, EntryID: ref.entry, MasterKey: r.key, Digest: r.meta.Digest.Wire(), Body: m.Resp.Body})
			return
		}
	}
	if ec.tried < len(ec.sources) {
		r.readNext(ref.entry, ec)
		return
	}
	r.finish(Failed, fmt.Errorf("%w: ledger %d entry %d from %v: %w", ErrNoReplica, r.meta.LedgerID, ref.entry, ec.sources,
		&ledger.BookieError{Bookie: ec.sources[len(ec.sources)-1], Status: m.Resp.Status, Err: m.Err}))
}

func (r *Replicator) onAdd(ref repRef, m BookieResult) {
	t := r.task
	ec := t.copying[ref.entry]
	if ec == nil {
		return
	}
	if m.Err != nil || m.Resp.Status != bk.StatusOK {
		r.finish(Failed, fmt.Errorf("ledger %d: copy entry %d to %s: %w", r.meta.LedgerID, ref.entry, t.target,
			&ledger.BookieError{Bookie: t.target, Status: m.Resp.Status, Err: m.Err}))
		return
	}
	delete(t.copying, ref.entry)
	r.buffered -= ec.buffered
	t.done++
	r.res.Entries++
	r.res.Bytes += int64(ec.bytes)
	r.fillCopies()
	r.maybeCopied()
}

// maybeCopied moves on once every entry of the task is on the target.
func (r *Replicator) maybeCopied() {
	t := r.task
	if r.state != RepCopying || t.done < len(t.entries) {
		return
	}
	if t.from == "" { // in place: no metadata change
		r.task = nil
		r.become(RepPlanning)
		r.plan()
		return
	}
	r.become(RepUpdating)
	r.swap(r.meta, r.version)
}

// swap proposes cur with the task's lost bookie replaced by its target, if that still
// applies to cur; otherwise it adopts cur and plans again.
func (r *Replicator) swap(cur *ledger.Metadata, v metadata.Version) {
	t := r.task
	if !r.swapApplies(cur) {
		r.meta, r.version, r.task = cur, v, nil
		if cur.State == ledger.StateClosed {
			r.lac = cur.LastEntryID
		}
		r.become(RepPlanning)
		r.plan()
		return
	}
	t.proposed = cur.Clone()
	t.proposed.Ensembles[t.frag.Index].Bookies[t.idx] = t.target
	r.seq++
	r.ready.MetaWrites = append(r.ready.MetaWrites, ledger.MetaWrite{Seq: r.seq, Meta: t.proposed, Expected: v})
}

// swapApplies reports whether the copied fragment is still there, unchanged and closed in
// cur, with the lost bookie at the same place: then the copy is valid for cur.
func (r *Replicator) swapApplies(cur *ledger.Metadata) bool {
	t := r.task
	if cur.State == ledger.StateInRecovery || t.frag.Index >= len(cur.Ensembles) {
		return false
	}
	lac := r.lac
	if cur.State == ledger.StateClosed {
		lac = cur.LastEntryID
	}
	f := Fragments(cur, lac)[t.frag.Index]
	return f.Closed && f.First == t.frag.First && f.Last == t.frag.Last && f.Bookies[t.idx] == t.from &&
		!slices.Contains(f.Bookies, t.target)
}

func (r *Replicator) onMeta(m ledger.MetaResult) {
	switch {
	case m.Err == nil:
		r.meta, r.version, r.task = r.task.proposed, m.Version, nil
		if r.meta.State == ledger.StateClosed {
			r.lac = r.meta.LastEntryID
		}
		r.res.Fragments++
		r.become(RepPlanning)
		r.plan()
	case m.Current != nil && errors.Is(m.Err, ledger.ErrMetadataConflict):
		// A writer, a recovery or another worker changed the record (or our write landed and
		// its answer was lost, then the swap no longer applies): decide again from it.
		r.become(RepUpdating)
		r.swap(m.Current, m.CurrentVersion)
	default:
		r.finish(Failed, fmt.Errorf("ledger %d: swap bookie: %w", r.meta.LedgerID, m.Err))
	}
}

func (r *Replicator) onRecovered(m RecoverResult) {
	if m.Err != nil {
		r.finish(Failed, fmt.Errorf("ledger %d: recover: %w", r.meta.LedgerID, m.Err))
		return
	}
	if m.Meta == nil || m.Meta.State != ledger.StateClosed {
		r.finish(Failed, assertionFailedf("replicator: ledger %d: recovery returned no CLOSED record", r.meta.LedgerID))
		return
	}
	r.meta, r.version, r.lac, r.recovered = m.Meta, m.Version, m.Meta.LastEntryID, true
	r.res.Recovered = true
	r.become(RepPlanning)
	r.plan()
}

func (r *Replicator) finish(o Outcome, err error) {
	if r.state.final() {
		return
	}
	if o == Failed {
		r.become(RepFailed)
	} else {
		r.become(RepDone)
	}
	r.res.Outcome, r.res.Err = o, err
	r.res.Meta, r.res.Version, r.res.LAC = r.meta, r.version, r.lac
	res := r.res
	r.ready.Done = &res
	clear(r.reqs)
}

// lacOf returns what a ReadLAC answer proves confirmed: the highest of the bookie's LAC, its
// explicit LAC and the LAC piggybacked on its last entry (-1 if none). Every one of them is a
// LAC the writer had, so any answer is a safe lower bound of the ledger's LAC.
func lacOf(m *ledger.Metadata, resp bk.Response) int64 {
	if resp.Status != bk.StatusOK {
		return -1
	}
	d := m.Digest.Wire()
	lac := max(resp.MaxLAC, -1)
	if len(resp.LACBody) > 0 {
		if id, l, err := bk.DecodeLACBody(resp.LACBody, d); err == nil && id == m.LedgerID {
			lac = max(lac, l)
		}
	}
	if len(resp.Body) > 0 {
		if e, err := bk.DecodeEntry(resp.Body, d); err == nil && e.LedgerID == m.LedgerID {
			lac = max(lac, e.LAC)
		}
	}
	return lac
}
