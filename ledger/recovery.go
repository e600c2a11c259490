package ledger

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/magnetar-io/magnetar/internal/fsm"
	"github.com/magnetar-io/magnetar/internal/seqwin"
	"github.com/magnetar-io/magnetar/ledger/quorum"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// RecoveryState is the phase of a Recovery.
type RecoveryState uint8

// Recovery states. Legal edges:
//
//	Marking  → Fencing (record is IN_RECOVERY) | Done (found CLOSED)
//	Fencing  → Reading (coverage reached)
//	Reading  → Closing (end found and re-added)
//	Closing  → Done
//	any non-final → Failed
//
// Done and Failed are final.
const (
	// RecoveryMarking: CAS OPEN → IN_RECOVERY in flight.
	RecoveryMarking RecoveryState = iota + 1
	// RecoveryFencing: fencing reads of the last entry sent to the last ensemble.
	RecoveryFencing
	// RecoveryReading: reading forward from the LAC, re-adding every entry found.
	RecoveryReading
	// RecoveryClosing: CAS IN_RECOVERY → CLOSED in flight.
	RecoveryClosing
	// RecoveryDone: the ledger is CLOSED (by us or by a concurrent recovery).
	RecoveryDone
	// RecoveryFailed: recovery could not finish; retrying from the start is safe.
	RecoveryFailed
)

var recoveryStateNames = map[RecoveryState]string{
	RecoveryMarking: "Marking", RecoveryFencing: "Fencing", RecoveryReading: "Reading",
	RecoveryClosing: "Closing", RecoveryDone: "Done", RecoveryFailed: "Failed",
}

func (s RecoveryState) String() string {
	if n, ok := recoveryStateNames[s]; ok {
		return n
	}
	return fmt.Sprintf("RecoveryState(%d)", uint8(s))
}

func (s RecoveryState) final() bool { return s == RecoveryDone || s == RecoveryFailed }

// recoveryEdges are the edges of the diagram above (0: not started).
var recoveryEdges = fsm.Edges[RecoveryState]{
	0:               {RecoveryFailed},
	RecoveryMarking: {RecoveryFencing, RecoveryDone, RecoveryFailed},
	RecoveryFencing: {RecoveryReading, RecoveryFailed},
	RecoveryReading: {RecoveryClosing, RecoveryFailed},
	RecoveryClosing: {RecoveryDone, RecoveryFailed},
}

// RecoveryConfig configures a Recovery.
type RecoveryConfig struct {
	// Meta is the ledger's record as read from the store and Version its version.
	Meta    *Metadata
	Version metadata.Version
	// ReadWindow is how many entries are read ahead at once (0: 8).
	ReadWindow int
	// Placement replaces a bookie that fails a re-add (BookKeeper's recovery ensemble
	// change). The replacement ensembles are local until the close records them. Nil: a
	// failed re-add fails the recovery with ErrRecoveryIncomplete (retry later).
	Placement Placement
	// MaxEnsembleChanges bounds replacements during one recovery (0: 16).
	MaxEnsembleChanges int

	// ignoreCoverage is a test-only mutation: end fencing at the first answer.
	ignoreCoverage bool
	// noFenceOnRead is a test-only mutation: forward reads do not fence.
	noFenceOnRead bool
	// missingAtOne is a test-only mutation: one "no such entry" ends the ledger.
	missingAtOne bool
	// readOverlay is a test-only mutation: forward reads use the replacement ensembles.
	readOverlay bool
	// dropRecoveryEnsembles is a test-only mutation: the close does not record the
	// replacement ensembles.
	dropRecoveryEnsembles bool
}

// Recovery is the sans-I/O core that closes a ledger whose writer may be gone: it marks the
// record IN_RECOVERY, fences the last ensemble until the coverage rule holds, reads forward from
// the LAC re-adding every entry it finds, stops where the write-set rule proves an entry was
// never acknowledged, and closes the record at the last entry found. Concurrent recoveries
// converge through the compare-and-swap: a loser adopts the CLOSED record it finds.
// Recovery is thread-unsafe; see core.go for the driver's obligations.
type Recovery struct {
	cfg RecoveryConfig
	// meta is the record in the store (version its version): reads and fencing use its
	// ensembles, where the entries are.
	meta    *Metadata
	version metadata.Version
	// recEns are the replacement ensembles of this recovery, in order; addMeta is meta with
	// them applied. Re-adds go to addMeta's write sets and the close records addMeta's
	// ensembles. Invariant: every key in recEns is >= meta's last ensemble key and the keys
	// do not decrease; a later one with the same key supersedes the earlier.
	recEns  []Ensemble
	addMeta *Metadata
	changes int
	state   RecoveryState
	seq     uint64 // Seq of the in-flight MetaWrite
	result  *RecoveryResult

	reqs      seqwin.Window[recRef] // outstanding requests by token; absent = stale
	nextToken uint64

	// Fencing.
	fence    *quorum.CoverageSet
	answered int
	maxLAC   int64
	lengthAt map[int64]int64 // entry id → ledger length, from entries seen

	// Reading. Invariant: entries < scan are decided; lac+1 .. scan-1 were found.
	lac      int64
	scan     int64
	nextRead int64
	end      int64 // last entry of the ledger once known, else -2
	reads    map[int64]*recRead
	// readds are the re-added entries not yet confirmed, in entry order: the head leaves
	// once it reached AQ (so entries below the head are confirmed on their ensemble, and a
	// replacement ensemble starts at the head).
	readds []*reAdd
	// lengthRead tracks the read that learns the length of entry end when neither a re-add
	// nor a fencing answer carried it (end == lac).
	lengthRead *quorum.RecoveryRead

	ready Ready
}

const endUnknown = -2

type recKind uint8

const (
	kindFence recKind = iota + 1
	kindRead
	kindAdd
	kindLength
)

type recRef struct {
	kind  recKind
	entry int64
	slot  int // slot in the write set, or ensemble index for fencing
}

type reAdd struct {
	entry  Entry
	body   []byte
	acks   quorum.AckSet
	tokens []uint64 // outstanding request per slot, 0 if none
}

type recRead struct {
	rr      quorum.RecoveryRead
	outcome quorum.ReadOutcome
	entry   Entry
	body    []byte
}

// NewRecovery returns a recovery for the ledger; call Start.
func NewRecovery(cfg RecoveryConfig) (*Recovery, error) {
	if cfg.Meta == nil {
		return nil, fmt.Errorf("%w: recovery needs metadata", ErrInvalidConfig)
	}
	if err := cfg.Meta.Validate(); err != nil {
		return nil, err
	}
	if cfg.ReadWindow <= 0 {
		cfg.ReadWindow = 8
	}
	if cfg.MaxEnsembleChanges <= 0 {
		cfg.MaxEnsembleChanges = 16
	}
	return &Recovery{
		cfg: cfg, meta: cfg.Meta, addMeta: cfg.Meta, version: cfg.Version,
		maxLAC: -1, lengthAt: map[int64]int64{}, end: endUnknown, reads: map[int64]*recRead{},
	}, nil
}

// State returns the recovery's phase (0 before Start).
func (r *Recovery) State() RecoveryState { return r.state }

// Result returns the outcome once the recovery is Done or Failed, else nil.
func (r *Recovery) Result() *RecoveryResult { return r.result }

// HasReady reports whether Ready would return work.
func (r *Recovery) HasReady() bool { return !r.ready.Empty() }

// Start begins the recovery.
func (r *Recovery) Start() {
	if r.state != 0 {
		return
	}
	switch r.meta.State {
	case StateClosed:
		r.state = RecoveryMarking
		r.done(r.meta, r.version)
	case StateInRecovery:
		r.state = RecoveryMarking
		r.startFencing()
	default:
		r.state = RecoveryMarking
		r.mark()
	}
}

func (r *Recovery) become(to RecoveryState) {
	r.state = recoveryEdges.Must(ErrIllegalTransition, "recovery", r.state, to)
}

// setMeta adopts the store's record m at version v and re-applies the replacement
// ensembles on top of it.
func (r *Recovery) setMeta(m *Metadata, v metadata.Version) {
	r.meta, r.version, r.addMeta = m, v, m
	for _, en := range r.recEns {
		r.addMeta = r.addMeta.withEnsemble(en.FirstEntry, en.Bookies)
	}
}

func (r *Recovery) writeMeta(m *Metadata, expected metadata.Version) {
	r.seq++
	r.ready.MetaWrites = append(r.ready.MetaWrites, MetaWrite{Seq: r.seq, Meta: m, Expected: expected})
}

func (r *Recovery) mark() {
	m := r.meta.Clone()
	m.State = StateInRecovery
	r.writeMeta(m, r.version)
}

func (r *Recovery) token(ref recRef) uint64 {
	r.nextToken++
	r.reqs.Put(r.nextToken, ref)
	return r.nextToken
}

// Step feeds the recovery a result: ReadResult, AddResult or MetaResult.
func (r *Recovery) Step(msg any) {
	switch m := msg.(type) {
	case MetaResult:
		r.onMeta(m)
	case ReadResult:
		ref, ok := r.reqs.Delete(m.Token)
		if !ok {
			return
		}
		switch {
		case ref.kind == kindFence && r.state == RecoveryFencing:
			r.onFence(ref, m)
		case ref.kind == kindRead && r.state == RecoveryReading:
			r.onRead(ref, m)
		case ref.kind == kindLength && r.state == RecoveryReading:
			r.onLength(ref, m)
		}
	case AddResult:
		ref, ok := r.reqs.Delete(m.Token)
		if !ok {
			return
		}
		if ref.kind == kindAdd && r.state == RecoveryReading {
			r.onAdd(ref, m)
		}
	default:
		_ = assertionFailedf("recovery: unexpected message %s", reflect.TypeOf(msg))
	}
}

func (r *Recovery) onMeta(m MetaResult) {
	if m.Seq != r.seq || r.state.final() {
		return
	}
	conflict := m.Err != nil && m.Current != nil && errorsIsConflict(m.Err)
	if m.Err != nil && !conflict {
		r.fail(fmt.Errorf("ledger %d: recovery: %w", r.meta.LedgerID, m.Err))
		return
	}
	switch r.state {
	case RecoveryMarking:
		if !conflict {
			m2 := r.meta.Clone()
			m2.State = StateInRecovery
			r.setMeta(m2, m.Version)
			r.startFencing()
			return
		}
		r.setMeta(m.Current, m.CurrentVersion)
		switch m.Current.State {
		case StateClosed:
			r.done(m.Current, m.CurrentVersion)
		case StateInRecovery:
			r.startFencing() // another recovery marked it; recover alongside
		default:
			r.mark() // the writer changed its ensemble: retry on the new record
		}
	case RecoveryClosing:
		if !conflict {
			r.done(r.closedMeta(), m.Version)
			return
		}
		switch cur := m.Current; {
		case cur.State == StateClosed:
			r.done(cur, m.CurrentVersion) // a concurrent recovery won: converge on its result
		case cur.State == StateInRecovery && ensemblesEqual(cur, r.meta):
			r.setMeta(cur, m.CurrentVersion)
			r.writeMeta(r.closedMeta(), r.version)
		default:
			r.fail(assertionFailedf("recovery: ledger %d changed under recovery: %v", r.meta.LedgerID, cur.State))
		}
	}
}

func ensemblesEqual(a, b *Metadata) bool {
	x, y := a.Clone(), b.Clone()
	x.State, y.State = StateOpen, StateOpen
	return x.Equal(y)
}

func (r *Recovery) startFencing() {
	r.become(RecoveryFencing)
	last := r.meta.LastEnsemble()
	r.fence = quorum.NewCoverageSet(r.meta.EnsembleSize, r.meta.WriteQuorum, r.meta.AckQuorum)
	for i, b := range last.Bookies {
		r.ready.Reads = append(r.ready.Reads, ReadRequest{
			Token: r.token(recRef{kind: kindFence, slot: i}), Bookie: b, EntryID: bk.LastEntry, Fence: true,
		})
	}
}

func (r *Recovery) onFence(ref recRef, m ReadResult) {
	r.answered++
	switch {
	case m.Err == nil && m.Status == bk.StatusOK:
		r.fence.Set(ref.slot, quorum.Definite)
		r.maxLAC = max(r.maxLAC, m.Entry.LAC)
		r.lengthAt[m.Entry.EntryID] = m.Entry.Length
	case m.Err == nil && isMissing(m.Status):
		r.fence.Set(ref.slot, quorum.Definite)
	case m.Err == nil && m.Status == bk.StatusUnauthorized:
		r.fail(fmt.Errorf("%w: %w", ErrUnauthorized, &BookieError{Bookie: m.Bookie, Status: m.Status}))
		return
	}
	if r.fence.Covered() || (r.cfg.ignoreCoverage && r.answered > 0) {
		// Earlier ensembles are immutable: the writer's LAC reached lastKey-1 before it
		// switched (BookKeeper#2615).
		r.lac = max(r.maxLAC, r.meta.LastEnsemble().FirstEntry-1)
		r.startReading()
		return
	}
	if r.answered == r.meta.EnsembleSize {
		r.fail(fmt.Errorf("%w: ledger %d: fencing did not cover the ensemble", ErrRecoveryIncomplete, r.meta.LedgerID))
	}
}

func (r *Recovery) startReading() {
	r.become(RecoveryReading)
	r.scan, r.nextRead = r.lac+1, r.lac+1
	r.fill()
}

// fill keeps ReadWindow forward reads in flight until the end is known.
func (r *Recovery) fill() {
	for r.end == endUnknown && r.nextRead < r.scan+int64(r.cfg.ReadWindow) {
		e := r.nextRead
		r.nextRead++
		aq := r.meta.AckQuorum
		if r.cfg.missingAtOne {
			aq = r.meta.WriteQuorum
		}
		r.reads[e] = &recRead{rr: quorum.NewRecoveryRead(r.meta.WriteQuorum, aq)}
		from := r.meta // entries are where the store's record says, never on a replacement
		if r.cfg.readOverlay {
			from = r.addMeta
		}
		for s, b := range from.WriteSet(e) {
			r.ready.Reads = append(r.ready.Reads, ReadRequest{
				Token: r.token(recRef{kind: kindRead, entry: e, slot: s}), Bookie: b, EntryID: e,
				Fence: !r.cfg.noFenceOnRead,
			})
		}
	}
}

func (r *Recovery) onRead(ref recRef, m ReadResult) {
	rd := r.reads[ref.entry]
	if rd == nil || rd.outcome != quorum.Pending {
		return // decided already: a late answer cannot change it
	}
	switch {
	case m.Err == nil && m.Status == bk.StatusOK && m.Entry.EntryID == ref.entry:
		rd.outcome = rd.rr.Found(ref.slot)
		rd.entry, rd.body = m.Entry, m.Body
	case m.Err == nil && isMissing(m.Status):
		rd.outcome = rd.rr.Missing(ref.slot)
	default:
		rd.outcome = rd.rr.Error(ref.slot)
	}
	// Decide in entry order.
	for r.end == endUnknown {
		rd := r.reads[r.scan]
		if rd == nil || rd.outcome == quorum.Pending {
			break
		}
		delete(r.reads, r.scan)
		switch rd.outcome {
		case quorum.Found:
			r.lengthAt[r.scan] = rd.entry.Length
			r.readd(r.scan, rd)
			r.scan++
		case quorum.Missing:
			r.end = r.scan - 1
			clear(r.reads) // later entries are never used, even if found
		default:
			r.fail(fmt.Errorf("%w: ledger %d: entry %d unreadable", ErrRecoveryIncomplete, r.meta.LedgerID, r.scan))
			return
		}
	}
	r.fill()
	r.maybeClose()
}

// readd writes entry e back to its whole write set with recovery adds, so it ends up on AQ
// bookies before the ledger is closed to include it. Entries are re-added in entry order.
func (r *Recovery) readd(e int64, rd *recRead) {
	ra := &reAdd{entry: rd.entry, body: rd.body, acks: quorum.NewAckSet(r.meta.WriteQuorum, r.meta.AckQuorum),
		tokens: make([]uint64, r.meta.WriteQuorum)}
	if n := len(r.readds); n > 0 && r.readds[n-1].entry.EntryID >= e {
		r.fail(assertionFailedf("recovery: re-add of %d after %d", e, r.readds[n-1].entry.EntryID))
		return
	}
	r.readds = append(r.readds, ra)
	for s := range ra.tokens {
		r.sendReadd(ra, s)
	}
}

// sendReadd (re)sends ra to slot s of its write set in addMeta. Every pending re-add is at or
// beyond addMeta's last ensemble key, so that ensemble is the one in force.
func (r *Recovery) sendReadd(ra *reAdd, s int) {
	e := ra.entry.EntryID
	if old := ra.tokens[s]; old != 0 {
		r.reqs.Delete(old)
	}
	b := r.addMeta.WriteSet(e)[s]
	ra.tokens[s] = r.token(recRef{kind: kindAdd, entry: e, slot: s})
	r.ready.Adds = append(r.ready.Adds, AddRequest{
		Token: ra.tokens[s], Bookie: b, Entry: ra.entry, Body: ra.body, Recovery: true,
	})
}

func (r *Recovery) pendingReadd(e int64) *reAdd {
	if len(r.readds) == 0 {
		return nil
	}
	i := e - r.readds[0].entry.EntryID
	if i < 0 || i >= int64(len(r.readds)) {
		return nil
	}
	return r.readds[i]
}

func (r *Recovery) onAdd(ref recRef, m AddResult) {
	ra := r.pendingReadd(ref.entry)
	if ra == nil {
		return // confirmed already: a late answer from an extra slot changes nothing
	}
	ra.tokens[ref.slot] = 0
	switch {
	case m.Err == nil && m.Status == bk.StatusOK:
		ra.acks.Ack(ref.slot)
	case m.Err == nil && m.Status == bk.StatusUnauthorized:
		r.fail(fmt.Errorf("%w: %w", ErrUnauthorized, &BookieError{Bookie: m.Bookie, Status: m.Status}))
		return
	default:
		ra.acks.Fail(ref.slot)
		if !r.replace(ref, &BookieError{Bookie: m.Bookie, Status: m.Status, Err: m.Err}) {
			return
		}
	}
	for len(r.readds) > 0 && r.readds[0].acks.Complete() {
		r.readds[0] = nil
		r.readds = r.readds[1:]
	}
	r.maybeClose()
}

// replace handles a failed re-add to slot ref.slot of entry ref.entry: the bookie is replaced
// in a new local ensemble starting at the first unconfirmed re-add, and every pending re-add
// whose bookie changed is re-sent (BookKeeper's LedgerRecoveryOp ensemble change, recorded
// at close). It reports false if the recovery failed instead.
func (r *Recovery) replace(ref recRef, cause error) bool {
	if r.cfg.Placement == nil {
		r.fail(fmt.Errorf("%w: ledger %d: re-add of entry %d: %w", ErrRecoveryIncomplete, r.meta.LedgerID, ref.entry, cause))
		return false
	}
	if r.changes >= r.cfg.MaxEnsembleChanges {
		r.fail(fmt.Errorf("%w: ledger %d: %w (%d) during recovery: %w", ErrRecoveryIncomplete, r.meta.LedgerID,
			ErrTooManyEnsembleChanges, r.changes, cause))
		return false
	}
	last := r.addMeta.LastEnsemble()
	idx := quorum.Index(ref.entry, ref.slot, r.meta.EnsembleSize)
	bookies := slices.Clone(last.Bookies)
	nb, err := r.cfg.Placement.Replace(bookies)
	if err != nil {
		r.fail(fmt.Errorf("%w: ledger %d: replace bookie %s: %w", ErrRecoveryIncomplete, r.meta.LedgerID, bookies[idx], err))
		return false
	}
	r.changes++
	bookies[idx] = nb
	first := r.readds[0].entry.EntryID
	if first < last.FirstEntry {
		r.fail(assertionFailedf("recovery: replacement ensemble at %d before %d", first, last.FirstEntry))
		return false
	}
	r.recEns = append(r.recEns, Ensemble{FirstEntry: first, Bookies: bookies})
	old := r.addMeta
	r.addMeta = r.addMeta.withEnsemble(first, bookies)
	for _, ra := range r.readds {
		e := ra.entry.EntryID
		oldWS, newWS := old.WriteSet(e), r.addMeta.WriteSet(e)
		for s := range ra.tokens {
			if oldWS[s] != newWS[s] {
				ra.acks.Reset(s)
				r.sendReadd(ra, s)
			}
		}
	}
	return true
}

func (r *Recovery) onLength(ref recRef, m ReadResult) {
	if r.lengthRead == nil {
		return
	}
	if m.Err == nil && m.Status == bk.StatusOK && m.Entry.EntryID == r.end {
		r.lengthAt[r.end] = m.Entry.Length
		r.lengthRead = nil
		r.maybeClose()
		return
	}
	if r.lengthRead.Error(ref.slot) == quorum.Undecidable {
		r.fail(fmt.Errorf("%w: ledger %d: entry %d unreadable", ErrRecoveryIncomplete, r.meta.LedgerID, r.end))
	}
}

// maybeClose closes the ledger once the end is known, every re-add reached AQ and the length
// of the last entry is known.
func (r *Recovery) maybeClose() {
	if r.state != RecoveryReading || r.end == endUnknown || len(r.readds) > 0 || r.lengthRead != nil {
		return
	}
	if _, ok := r.lengthAt[r.end]; !ok && r.end >= 0 {
		// Nothing was re-added and no fencing answer carried entry end: read it.
		rr := quorum.NewRecoveryRead(r.meta.WriteQuorum, r.meta.AckQuorum)
		r.lengthRead = &rr
		for s, b := range r.meta.WriteSet(r.end) {
			r.ready.Reads = append(r.ready.Reads, ReadRequest{
				Token: r.token(recRef{kind: kindLength, entry: r.end, slot: s}), Bookie: b, EntryID: r.end,
			})
		}
		return
	}
	r.become(RecoveryClosing)
	r.writeMeta(r.closedMeta(), r.version)
}

func (r *Recovery) closedMeta() *Metadata {
	m := r.addMeta.Clone()
	if r.cfg.dropRecoveryEnsembles {
		m = r.meta.Clone()
	}
	m.State, m.LastEntryID, m.Length = StateClosed, r.end, r.lengthAt[r.end]
	if r.end < 0 {
		m.Length = 0
	}
	return m
}

func (r *Recovery) done(m *Metadata, v metadata.Version) {
	r.become(RecoveryDone)
	r.meta, r.addMeta, r.version = m, m, v
	r.result = &RecoveryResult{Meta: m, Version: v}
	r.ready.Recovered = r.result
	r.reqs.Clear()
}

func (r *Recovery) fail(err error) {
	if r.state.final() {
		return
	}
	r.become(RecoveryFailed)
	r.result = &RecoveryResult{Err: err}
	r.ready.Recovered = r.result
	r.reqs.Clear()
}

// Ready returns and clears what the driver must do next.
func (r *Recovery) Ready() Ready {
	rd := r.ready
	r.ready = Ready{}
	return rd
}
