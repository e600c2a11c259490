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

// WriterState is the lifecycle state of a Writer.
type WriterState uint8

// Writer states. Legal edges:
//
//	Open     → Draining (Close with adds pending) | Closing (Close, nothing pending)
//	Draining → Closing (last pending add completed)
//	Closing  → Closed (close CAS succeeded)
//	Open, Draining, Closing → Fenced (IN_RECOVERY metadata or a fenced bookie) | Failed
//
// Closed, Fenced and Failed are final.
const (
	// WriterOpen accepts appends.
	WriterOpen WriterState = iota + 1
	// WriterDraining rejects appends and waits for pending adds before closing.
	WriterDraining
	// WriterClosing has a close compare-and-swap in flight.
	WriterClosing
	// WriterClosed: the metadata is CLOSED at the writer's LAC.
	WriterClosed
	// WriterFenced: another client is recovering the ledger; every later add fails ErrFenced.
	WriterFenced
	// WriterFailed: an unrecoverable error (no bookies, metadata store failure, ...).
	WriterFailed
)

var writerStateNames = map[WriterState]string{
	WriterOpen: "Open", WriterDraining: "Draining", WriterClosing: "Closing",
	WriterClosed: "Closed", WriterFenced: "Fenced", WriterFailed: "Failed",
}

func (s WriterState) String() string {
	if n, ok := writerStateNames[s]; ok {
		return n
	}
	return fmt.Sprintf("WriterState(%d)", uint8(s))
}

// final reports whether s has no outgoing edges.
func (s WriterState) final() bool { return s == WriterClosed || s == WriterFenced || s == WriterFailed }

// writerEdges are the edges of the diagram above.
var writerEdges = fsm.Edges[WriterState]{
	WriterOpen:     {WriterDraining, WriterClosing, WriterFenced, WriterFailed},
	WriterDraining: {WriterClosing, WriterFenced, WriterFailed},
	WriterClosing:  {WriterClosed, WriterFenced, WriterFailed},
}

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Meta is the OPEN metadata of the ledger and Version its version in the store.
	Meta    *Metadata
	Version metadata.Version
	// Encode packages entries; nil leaves AddRequest.Body empty (the driver encodes).
	Encode Encoder
	// Placement picks replacement bookies on ensemble change. Required.
	Placement Placement
	// MaxEnsembleChanges bounds bookie replacements over the writer's life (0: 64).
	MaxEnsembleChanges int
	// LACFlushTicks is how many idle Ticks pass before an explicit LAC is sent (0: 1).
	LACFlushTicks int

	// ackQuorumDelta is a test-only mutation: complete adds at AQ+ackQuorumDelta acks.
	ackQuorumDelta int
	// noLACFreeze is a test-only mutation: let the LAC advance during an ensemble change.
	noLACFreeze bool
}

// Writer is the sans-I/O core of a ledger writer: pipelined adds striped over the write sets,
// completion at the ack quorum in entry order, the LAC, explicit LAC flushes, ensemble changes
// and close. Writer is thread-unsafe: one goroutine owns it and calls Append, Close, Tick and
// Step, then performs Ready. See core.go for the driver's obligations.
type Writer struct {
	cfg     WriterConfig
	meta    *Metadata // last record this writer wrote or read; State is OPEN while writing
	version metadata.Version
	state   WriterState
	err     error // why the writer is Fenced or Failed

	// lac is the last add confirmed. Invariant: every entry <= lac completed, in order, and
	// entries lac+1 .. next-1 are exactly pending (keyed by entry id).
	lac     int64
	next    int64
	length  int64 // payload bytes of entries 0..next-1
	pending seqwin.Window[*pendingAdd]
	// free holds completed pendingAdds for reuse (nothing else refers to them).
	free []*pendingAdd

	// sends maps the token of every outstanding AddRequest to its target. A token absent from
	// the window is stale: its answer is ignored. Tokens are allocated consecutively.
	sends     seqwin.Window[sendRef]
	nextToken uint64

	// failed holds bookies of the last ensemble that failed and await (or are undergoing)
	// replacement. apply drops those no longer in the last ensemble.
	failed []string
	// change is the in-flight ensemble change, nil if none. Invariant: while change != nil the
	// LAC does not move, so change.first == lac+1 stays true.
	change          *ensembleChange
	ensembleChanges int
	// closeSeq is the Seq of the in-flight close CAS (state Closing).
	closeSeq uint64
	metaSeq  uint64

	lacSent   int64 // highest LAC published (piggybacked or explicit)
	idleTicks int

	ready Ready
}

type pendingAdd struct {
	entry Entry
	body  []byte
	acks  quorum.AckSet
	// tokens[w] is the outstanding request to slot w, 0 if none. sent is false for adds queued
	// during an ensemble change.
	tokens []uint64
	sent   bool
}

type sendRef struct {
	entry  int64
	slot   int
	bookie string
}

type ensembleChange struct {
	seq   uint64
	first int64
	meta  *Metadata // proposed record
}

// NewWriter returns a writer for an OPEN ledger with no entries (a freshly created ledger).
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if cfg.Meta == nil || cfg.Placement == nil {
		return nil, fmt.Errorf("%w: writer needs metadata and placement", ErrInvalidConfig)
	}
	if err := cfg.Meta.Validate(); err != nil {
		return nil, err
	}
	if cfg.Meta.State != StateOpen {
		return nil, fmt.Errorf("%w: ledger %d is %v", ErrClosed, cfg.Meta.LedgerID, cfg.Meta.State)
	}
	if cfg.MaxEnsembleChanges == 0 {
		cfg.MaxEnsembleChanges = 64
	}
	if cfg.LACFlushTicks == 0 {
		cfg.LACFlushTicks = 1
	}
	return &Writer{
		cfg: cfg, meta: cfg.Meta, version: cfg.Version, state: WriterOpen,
		lac: -1, lacSent: -1,
	}, nil
}

// State returns the writer's state.
func (w *Writer) State() WriterState { return w.state }

// Err returns why the writer is Fenced or Failed.
func (w *Writer) Err() error { return w.err }

// LAC returns the last add confirmed.
func (w *Writer) LAC() int64 { return w.lac }

// Length returns the payload bytes of every entry appended so far.
func (w *Writer) Length() int64 { return w.length }

// Metadata returns the writer's current view of the ledger metadata and its version.
func (w *Writer) Metadata() (*Metadata, metadata.Version) { return w.meta, w.version }

// HasReady reports whether Ready would return work.
func (w *Writer) HasReady() bool { return !w.ready.Empty() }

// Ready returns and clears what the driver must do next.
func (w *Writer) Ready() Ready {
	r := w.ready
	w.ready = Ready{}
	return r
}

// Advance tells the writer that the driver has finished with rd (performed it and delivered its
// completions), so the writer may reuse its slices for the next Ready. The driver must not
// touch rd afterwards. Calling Advance is optional: without it every Ready has fresh slices.
func (w *Writer) Advance(rd *Ready) {
	if w.ready.Adds == nil && cap(rd.Adds) > 0 {
		clear(rd.Adds) // drop the payload references
		w.ready.Adds = rd.Adds[:0]
	}
	if w.ready.Completions == nil && cap(rd.Completions) > 0 {
		clear(rd.Completions)
		w.ready.Completions = rd.Completions[:0]
	}
	*rd = Ready{}
}

// Append assigns the next entry id to payload and sends it (unless an ensemble change is in
// flight, in which case it is sent once the change lands). The outcome arrives later as an
// AddCompletion. It fails at once, without an id, if the writer does not accept appends.
func (w *Writer) Append(payload []byte) (int64, error) {
	switch w.state {
	case WriterOpen:
	case WriterFenced, WriterFailed:
		return -1, w.err
	default:
		return -1, ErrClosed
	}
	w.length += int64(len(payload))
	e := Entry{EntryID: w.next, LAC: w.lac, Length: w.length, Payload: payload}
	w.next++
	pa := w.newPending(e)
	if w.cfg.Encode != nil {
		pa.body = w.cfg.Encode(e)
	}
	w.pending.Put(uint64(e.EntryID), pa)
	w.lacSent = max(w.lacSent, e.LAC)
	w.idleTicks = 0
	if w.change == nil {
		w.sendAll(pa)
	}
	return e.EntryID, nil
}

// newPending returns a pendingAdd for e with nothing sent, reusing a completed one if any.
func (w *Writer) newPending(e Entry) *pendingAdd {
	var pa *pendingAdd
	if n := len(w.free); n > 0 {
		pa, w.free = w.free[n-1], w.free[:n-1]
	} else {
		pa = &pendingAdd{}
	}
	tokens := pa.tokens[:0]
	if cap(tokens) < w.meta.WriteQuorum {
		tokens = make([]uint64, 0, w.meta.WriteQuorum)
	}
	*pa = pendingAdd{entry: e, acks: quorum.NewAckSet(w.meta.WriteQuorum, w.meta.AckQuorum),
		tokens: tokens[:w.meta.WriteQuorum]}
	clear(pa.tokens)
	return pa
}

// maxFree bounds the pendingAdds kept for reuse.
const maxFree = 4096

// Close stops accepting appends, waits for the pending ones, and closes the ledger at its LAC
// by compare-and-swap. The outcome arrives as Ready.Closed.
func (w *Writer) Close() {
	switch w.state {
	case WriterOpen:
		if w.pending.Len() > 0 || w.change != nil {
			w.become(WriterDraining)
			return
		}
		w.startClose()
	case WriterDraining, WriterClosing:
		// Already on its way; the driver joins the waiters.
	case WriterClosed:
		w.ready.Closed = &CloseResult{Meta: w.meta, Version: w.version}
	default:
		w.ready.Closed = &CloseResult{Err: w.err}
	}
}

// Tick advances the writer's logical clock. After LACFlushTicks idle ticks with a LAC nobody
// has been told, it sends an explicit LAC so tailing readers see the last entry.
func (w *Writer) Tick() {
	if w.state != WriterOpen || w.pending.Len() > 0 || w.change != nil {
		w.idleTicks = 0
		return
	}
	w.idleTicks++
	if w.idleTicks < w.cfg.LACFlushTicks || w.lac <= w.lacSent {
		return
	}
	// Readers ask the last ensemble with the coverage rule, so the LAC goes to the write set
	// of entry lac computed on the last ensemble.
	last := w.meta.LastEnsemble().Bookies
	for _, idx := range quorum.WriteSet(nil, w.lac, w.meta.EnsembleSize, w.meta.WriteQuorum) {
		w.ready.LACWrites = append(w.ready.LACWrites, LACWrite{Bookie: last[idx], LAC: w.lac})
	}
	w.lacSent = w.lac
}

// Compact drops what the writer keeps for reuse while it has nothing pending: the rings of
// its empty windows, the completed pendingAdds and the Ready's slices. A driver calls it
// when the writer goes idle, so an idle ledger holds little; the next Append allocates
// again. It changes no state.
func (w *Writer) Compact() {
	if w.pending.Len() > 0 || !w.ready.Empty() {
		return
	}
	w.pending.Release()
	w.sends.Release()
	w.free = nil
	w.ready = Ready{}
}

// WantsTick reports whether a Tick could do something now or after more idle Ticks: the
// writer is open with a LAC it has not published. A driver may leave an idle writer that
// does not want ticks unticked until the next Append or Step.
func (w *Writer) WantsTick() bool { return w.state == WriterOpen && w.lac > w.lacSent }

// Step feeds the writer a result: AddResult or MetaResult.
func (w *Writer) Step(msg any) {
	switch m := msg.(type) {
	case AddResult:
		w.onAdd(m)
	case MetaResult:
		w.onMeta(m)
	default:
		// The type name, not msg itself: a msg that does not escape costs no allocation.
		_ = assertionFailedf("writer: unexpected message %s", reflect.TypeOf(msg))
	}
}

// become moves to state to, rejecting edges the state diagram does not have.
func (w *Writer) become(to WriterState) {
	w.state = writerEdges.Must(ErrIllegalTransition, "writer", w.state, to)
}

func (w *Writer) sendAll(pa *pendingAdd) {
	pa.sent = true
	for s := range pa.tokens {
		w.send(pa, s)
	}
}

// send (re)sends pa to slot s of its write set in the last ensemble. Every pending entry is
// > lac >= (last ensemble's first entry) - 1, so the last ensemble is the one in force.
func (w *Writer) send(pa *pendingAdd, s int) {
	if old := pa.tokens[s]; old != 0 {
		w.sends.Delete(old)
	}
	bookie := w.meta.LastEnsemble().Bookies[quorum.Index(pa.entry.EntryID, s, w.meta.EnsembleSize)]
	w.nextToken++
	pa.tokens[s] = w.nextToken
	w.sends.Put(w.nextToken, sendRef{entry: pa.entry.EntryID, slot: s, bookie: bookie})
	w.ready.Adds = append(w.ready.Adds, AddRequest{
		Token: w.nextToken, Bookie: bookie, Entry: pa.entry, Body: pa.body,
	})
}

// pendingFor returns the pending add for entry, or nil if it completed (or failed).
func (w *Writer) pendingFor(entry int64) *pendingAdd {
	if entry < 0 {
		return nil
	}
	pa, _ := w.pending.Get(uint64(entry))
	return pa
}

func (w *Writer) onAdd(r AddResult) {
	ref, ok := w.sends.Delete(r.Token)
	if !ok {
		return // stale: the slot was re-sent or the writer moved on
	}
	if w.state.final() {
		return
	}
	pa := w.pendingFor(ref.entry)
	if pa != nil {
		if pa.tokens[ref.slot] != r.Token {
			_ = assertionFailedf("writer: token %d not current for entry %d slot %d", r.Token, ref.entry, ref.slot)
			return
		}
		pa.tokens[ref.slot] = 0
	}
	switch {
	case r.Err == nil && r.Status == bk.StatusOK:
		if pa != nil {
			pa.acks.Ack(ref.slot)
		}
	case r.Err == nil && r.Status == bk.StatusFenced:
		w.fail(ErrFenced)
		return
	case r.Err == nil && r.Status == bk.StatusUnauthorized:
		w.fail(fmt.Errorf("%w: %w", ErrUnauthorized, &BookieError{Bookie: ref.bookie, Status: r.Status}))
		return
	default:
		if pa != nil {
			pa.acks.Fail(ref.slot)
		}
		w.bookieFailed(ref.bookie)
	}
	w.advance()
}

// bookieFailed schedules the replacement of bookie if it is still in the last ensemble.
func (w *Writer) bookieFailed(bookie string) {
	if w.state == WriterClosing || !slices.Contains(w.meta.LastEnsemble().Bookies, bookie) ||
		slices.Contains(w.failed, bookie) {
		return
	}
	w.failed = append(w.failed, bookie)
	if w.change == nil {
		w.startChange()
	}
}

// startChange proposes a new last ensemble, starting at lac+1, without the failed bookies.
func (w *Writer) startChange() {
	last := w.meta.LastEnsemble()
	bookies := slices.Clone(last.Bookies)
	replaced := 0
	for i, b := range bookies {
		if !slices.Contains(w.failed, b) {
			continue
		}
		if w.ensembleChanges >= w.cfg.MaxEnsembleChanges {
			w.fail(fmt.Errorf("%w (%d)", ErrTooManyEnsembleChanges, w.ensembleChanges))
			return
		}
		nb, err := w.cfg.Placement.Replace(bookies)
		if err != nil {
			w.fail(fmt.Errorf("ledger %d: replace bookie %s: %w", w.meta.LedgerID, b, err))
			return
		}
		bookies[i] = nb
		w.ensembleChanges++
		replaced++
	}
	if replaced == 0 {
		w.failed = w.failed[:0]
		return
	}
	first := w.lac + 1
	if first < last.FirstEntry {
		_ = assertionFailedf("writer: new ensemble at %d before last ensemble %d", first, last.FirstEntry)
	}
	w.metaSeq++
	w.change = &ensembleChange{seq: w.metaSeq, first: first, meta: w.meta.withEnsemble(first, bookies)}
	w.ready.MetaWrites = append(w.ready.MetaWrites, MetaWrite{Seq: w.metaSeq, Meta: w.change.meta, Expected: w.version})
}

func (w *Writer) onMeta(r MetaResult) {
	switch {
	case w.change != nil && r.Seq == w.change.seq:
		w.onChangeResult(r)
	case w.state == WriterClosing && r.Seq == w.closeSeq:
		w.onCloseResult(r)
	}
	// Anything else is a result of an operation the writer has abandoned.
}

func (w *Writer) onChangeResult(r MetaResult) {
	ch := w.change
	if w.state.final() {
		w.change = nil
		return
	}
	switch {
	case r.Err == nil:
		w.apply(ch.meta, r.Version)
	case r.Current != nil && errorsIsConflict(r.Err):
		cur := r.Current
		switch cur.State {
		case StateInRecovery:
			w.fail(ErrFenced)
			return
		case StateClosed:
			w.fail(ErrClosed)
			return
		}
		// Either our write landed but its answer was lost (cur equals ch.meta), or someone
		// else changed the OPEN record. Both ways cur is the truth: adopt it; apply re-sends
		// to whatever bookies changed and restarts the change for failed bookies still in it.
		w.apply(cur, r.CurrentVersion)
	default:
		w.fail(fmt.Errorf("ledger %d: ensemble change: %w", w.meta.LedgerID, r.Err))
	}
}

// apply makes meta the writer's record: slots whose bookie changed in the last ensemble lose
// their acknowledgement and are re-sent to the new bookie; adds queued during the change are
// sent. Then the next change starts if more bookies failed meanwhile.
func (w *Writer) apply(meta *Metadata, v metadata.Version) {
	oldLast := w.meta.LastEnsemble().Bookies
	w.meta, w.version, w.change = meta, v, nil
	newLast := meta.LastEnsemble().Bookies
	for _, pa := range w.pending.All() {
		if !pa.sent {
			w.sendAll(pa)
			continue
		}
		for s := range pa.tokens {
			idx := quorum.Index(pa.entry.EntryID, s, meta.EnsembleSize)
			if oldLast[idx] != newLast[idx] {
				pa.acks.Reset(s)
				w.send(pa, s)
			}
		}
	}
	w.failed = slices.DeleteFunc(w.failed, func(b string) bool { return !slices.Contains(newLast, b) })
	if len(w.failed) > 0 {
		w.startChange()
	}
	w.advance()
}

// advance completes pending adds that reached the ack quorum, in entry order, and starts the
// close when a draining writer has nothing left.
func (w *Writer) advance() {
	if w.state.final() || (w.change != nil && !w.cfg.noLACFreeze) {
		return
	}
	aq := w.meta.AckQuorum + w.cfg.ackQuorumDelta
	for id, pa := range w.pending.All() {
		if pa.acks.Acked() < aq || !pa.sent {
			break
		}
		w.lac = pa.entry.EntryID
		w.ready.Completions = append(w.ready.Completions, AddCompletion{EntryID: pa.entry.EntryID})
		// Outstanding requests of completed entries stay in sends: a failure among them still
		// triggers the bookie's replacement.
		w.pending.Delete(id)
		if len(w.free) < maxFree {
			*pa = pendingAdd{tokens: pa.tokens}
			w.free = append(w.free, pa)
		}
	}
	if w.state == WriterDraining && w.pending.Len() == 0 && w.change == nil {
		w.startClose()
	}
}

// startClose proposes the CLOSED record at the LAC. Only called with nothing pending.
func (w *Writer) startClose() {
	w.become(WriterClosing)
	w.metaSeq++
	w.closeSeq = w.metaSeq
	w.ready.MetaWrites = append(w.ready.MetaWrites, MetaWrite{Seq: w.closeSeq, Meta: w.closedMeta(w.meta), Expected: w.version})
}

func (w *Writer) closedMeta(from *Metadata) *Metadata {
	c := from.Clone()
	c.State, c.LastEntryID, c.Length = StateClosed, w.lac, w.length
	return c
}

func (w *Writer) onCloseResult(r MetaResult) {
	switch {
	case r.Err == nil:
		w.become(WriterClosed)
		w.meta, w.version = w.closedMeta(w.meta), r.Version
		w.ready.Closed = &CloseResult{Meta: w.meta, Version: w.version}
	case r.Current != nil && errorsIsConflict(r.Err):
		cur := r.Current
		switch {
		case cur.Equal(w.closedMeta(w.meta)):
			w.become(WriterClosed) // our write landed but its answer was lost
			w.meta, w.version = cur, r.CurrentVersion
			w.ready.Closed = &CloseResult{Meta: cur, Version: r.CurrentVersion}
		case cur.State == StateInRecovery:
			w.fail(ErrFenced)
		case cur.State == StateClosed:
			w.fail(ErrClosed)
		default:
			// Still OPEN under another version: retry on top of it.
			w.meta, w.version = cur, r.CurrentVersion
			w.metaSeq++
			w.closeSeq = w.metaSeq
			w.ready.MetaWrites = append(w.ready.MetaWrites, MetaWrite{Seq: w.closeSeq, Meta: w.closedMeta(cur), Expected: r.CurrentVersion})
		}
	default:
		w.fail(fmt.Errorf("ledger %d: close: %w", w.meta.LedgerID, r.Err))
	}
}

// fail moves the writer to Fenced (err is ErrFenced) or Failed and fails every pending add, in
// order, with err. Late results are ignored from now on.
func (w *Writer) fail(err error) {
	if w.state.final() {
		return
	}
	closing := w.state == WriterDraining || w.state == WriterClosing
	if errorsIs(err, ErrFenced) {
		w.become(WriterFenced)
	} else {
		w.become(WriterFailed)
	}
	w.err = err
	for _, pa := range w.pending.All() {
		w.ready.Completions = append(w.ready.Completions, AddCompletion{EntryID: pa.entry.EntryID, Err: err})
	}
	w.pending.Clear()
	w.change, w.failed = nil, nil
	w.sends.Clear()
	if closing {
		w.ready.Closed = &CloseResult{Err: err}
	}
}
