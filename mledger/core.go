package mledger

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/internal/fsm"
	"github.com/magnetar-io/magnetar/metadata"
)

// core is the managed ledger state machine: the ledger chain, adds, rollover, terminate,
// trimming and the cursors. It is thread-unsafe and owned by one goroutine (or by the
// simulator): every method runs on the owner, and every asynchronous completion of the ports
// comes back through env.post as a closure that first checks its tags (ledger id, attempt,
// sequence number) against the current state and drops itself if stale.
type core struct {
	name  string
	key   string
	cfg   Config
	env   env
	bk    Ledgers
	ms    MetaStore
	token string // owner token written into our records
	epoch int64  // our ownership epoch (set when the record is claimed)
	log   *slog.Logger
	trace func(format string, args ...any) // nil: off
	mut   mutation
	hooks hooks
	// published, when set, is told every new state before the step that made it goes on, so
	// a caller whose reply this step sends already sees the state that decided it.
	published func(State)

	state State
	// stateErr is why the log is Fenced (or why opening failed).
	stateErr error

	// ml writes the managed ledger record; ml.cur is the last record written or read.
	ml *metaWriter[*Info]
	// tail is the live view of the last ledger of ml.cur (its record has no statistics
	// until it is closed).
	tail tailLedger
	// w writes the current ledger in LedgerOpened, ClosingLedger (and Terminating/Closing
	// until its close reports). Invariant: w != nil ⇒ w.ID() == tail.id.
	w       Writer
	wIssued int64 // appends issued on w; the next one is entry wIssued
	wBytes  int64
	// closing is the close of the current ledger, when one is wanted.
	closing *closeOp
	// attempt tags ledger creations: a creation completes usefully only if its attempt is
	// still current and the state still wants it.
	attempt       uint64
	rolloverTimer func()

	// adds holds accepted adds in submission order: in flight on w (entries in order), then
	// queued for the next ledger. Adds complete from the head, in order.
	adds          addQueue
	lastConfirmed Position

	terminateWaiters []func(Position, error)
	terminatePos     Position
	closeWaiters     []func(error)
	closeRequested   bool // Close arrived while Terminating
	deleteRequested  bool
	deleteErr        error

	cursors    map[string]*cursor
	nonDurable map[*cursor]struct{}
	waiters    []*readOp // parked tailing reads
	// maxRead bounds cursor reads: only entries before it are read (nil: unbounded). The
	// topic's transaction buffer sets it (SetMaxRead).
	maxRead    *Position
	cache      entryCache
	trimming   bool
	afterTrim  []func() // cursor creations waiting for the trim in flight
	trimTimer  func()
	snapTimer  func()
	flushTimer func()
	opening    *openState
	// off is the offload state machine (offload.go); uuidGen makes attempt UUIDs.
	off     offloader
	uuidGen func() string
	pending int // port operations whose completion Close waits for (deletes, reads, cursor I/O)
}

// tailLedger is the live view of the last ledger in the record.
type tailLedger struct {
	id      int64
	entries int64 // confirmed entries (final once closed)
	size    int64
	ctime   time.Time
	closed  bool
}

type closeOp struct {
	ledger int64
	issued bool
	fails  int
}

// hooks let tests observe the core (nil members are skipped).
type hooks struct {
	transition   func(from, to State)
	createLedger func(purpose string, state State)
}

// mutation deliberately breaks the core, to prove the simulation's checker catches it. Only
// tests set it.
type mutation struct {
	lateSwitchReopens   bool // apache/pulsar#25795: a late rollover completion sets LedgerOpened after terminate
	unserializedMeta    bool // metadata updates race each other and a conflict fences (Pulsar's metadataMutex bug)
	completeDrainedAdds bool // adds past a closed ledger's end complete successfully
	keepLostRaceLedger  bool // terminate leaves a lost-race rollover ledger in metadata
	// silentReopen: a late rollover switch sets LedgerOpened after terminate without going
	// through transition (Pulsar's state field), and terminate's record puts Terminated back.
	silentReopen                 bool
	terminateKeepsQueued         bool // terminate leaves queued adds waiting
	terminateRequeuesDrained     bool // terminate's close requeues drained adds, as a rollover does
	terminateNamesRolloverLedger bool // the terminated position names a racing rollover's ledger
	leakLostRaceLedger           bool // a ledger created by a rollover that lost the race is not deleted
	fenceOnConflict              bool // a version conflict fences at once, without re-reading (M4)
	ignoreMarkDeleteRate         bool // every cursor change is persisted at once (MD2)
	flushTimerIdle               bool // the flush timer persists no held cursor (MD2)
	persistedClaimsHeld          bool // the persisted position is taken from memory, not from the state written (MD1)
	closeDropsHeld               bool // closing a held cursor does not write its state (MD2)
	ledgerStatesDropProps        bool // the states appended to a cursor's ledger carry no properties
	// deleteLostRolloverAtOnce: a rollover whose switch failed deletes its new ledger at once,
	// though its timed-out switch write may still land after that.
	deleteLostRolloverAtOnce bool
	// deleteCursorSwitchAtOnce: the same for a cursor's switch to a new cursor ledger.
	deleteCursorSwitchAtOnce bool
	// Offload (TS1–TS3): the bookie copy of a ledger is deleted as soon as an attempt is
	// recorded and its upload starts, before it is complete (TS1).
	deleteBookieBeforeComplete bool
	// offloadCompleteEarly: an attempt is recorded complete as soon as its upload starts,
	// before its last block and index are written (TS2).
	offloadCompleteEarly bool
	// reuseAttemptUUID: every attempt of a ledger gets the same UUID (object prefix), so a
	// late delete of a failed attempt deletes a later complete copy (TS2).
	reuseAttemptUUID bool
	// trimDeletesBlobsFirst: a trim deletes the offloaded objects before the record drops the
	// ledger (TS1).
	trimDeletesBlobsFirst bool
	// skipOrphanCleanup: an orphan attempt is cleared from the record without deleting its
	// objects (TS3).
	skipOrphanCleanup bool
}

func newCore(name string, cfg Config, e env, bk Ledgers, ms MetaStore, token string, log *slog.Logger) *core {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &core{
		name: name, key: metadata.ManagedLedgerKey(name), cfg: cfg, env: e, bk: bk, ms: ms, token: token,
		log: log.With("ml", name), state: StateOpening,
		cursors: map[string]*cursor{}, nonDurable: map[*cursor]struct{}{},
	}
	c.cache.limit = cfg.CacheSize
	c.uuidGen = newAttemptUUID
	c.off.policy = *cfg.Offload // set by withDefaults
	if cfg.Offloader != nil {
		c.off.port = &asyncOffloader{o: cfg.Offloader}
	}
	return c
}

func (c *core) tracef(format string, args ...any) {
	if c.trace != nil {
		c.trace(c.name+"/"+c.token+": "+format, args...)
	}
}

// backoff is the delay before retry number n (1, 2, …): RetryBackoff doubling, at most
// five times.
func (c *core) backoff(n int) time.Duration {
	return backoff.Policy{Base: c.cfg.RetryBackoff, Max: c.cfg.RetryBackoff << 5}.Delay(n - 1)
}

func (c *core) info() *Info { return c.ml.cur }

// transition moves to state to, or reports a bug if the edge is illegal.
func (c *core) transition(to State) error {
	from := c.state
	if !legalEdges.Legal(from, to) {
		return panicOnAssert.Fail(fsm.Illegal(ErrIllegalTransition, c.name, from, to))
	}
	c.state = to
	c.tracef("state %v -> %v", from, to)
	if c.published != nil {
		c.published(to)
	}
	if c.hooks.transition != nil {
		c.hooks.transition(from, to)
	}
	return nil
}

func (c *core) becomeLedgerOpened() error    { return c.transition(StateLedgerOpened) }
func (c *core) becomeClosingLedger() error   { return c.transition(StateClosingLedger) }
func (c *core) becomeCreatingLedger() error  { return c.transition(StateCreatingLedger) }
func (c *core) becomeWriteFailed() error     { return c.transition(StateWriteFailed) }
func (c *core) becomeTerminating() error     { return c.transition(StateTerminating) }
func (c *core) becomeTerminated() error      { return c.transition(StateTerminated) }
func (c *core) becomeClosingState() error    { return c.transition(StateClosing) }
func (c *core) becomeClosedState() error     { return c.transition(StateClosed) }
func (c *core) becomeFencedState() error     { return c.transition(StateFenced) }
func (c *core) becomeOpenFailedState() error { return c.transition(StateClosed) }

// becomeFenced handles the loss of ownership: every add and waiter fails with ErrFenced.
func (c *core) becomeFenced(cause error) {
	switch c.state {
	case StateFenced, StateClosed, StateClosing:
		return
	case StateOpening:
		c.failOpen(cause)
		return
	}
	if err := c.becomeFencedState(); err != nil {
		return
	}
	c.log.Warn("managed ledger fenced", "cause", cause)
	c.stopRolloverTimer()
	c.stopPeriodic()
	c.offloadStop()
	c.closing = nil
	if c.w != nil {
		c.discardWriter(c.w, false) // the new owner recovers it; we only stop our handle
		c.w = nil
	}
	c.attempt++ // any creation in flight is stale now
	err := cause
	if !errors.Is(cause, ErrFenced) {
		err = fmt.Errorf("%w: %w", ErrFenced, cause)
	}
	c.stateErr = err
	c.resolveInFlight(-1, -1, err) // adds already confirmed still complete; the rest fail
	c.failQueued(err)
	c.completeHead()
	for _, wt := range c.terminateWaiters {
		wt(Position{}, err)
	}
	c.terminateWaiters = nil
	c.wakeReaders()
	for _, cur := range c.sortedCursors() {
		c.cursorFenced(cur)
	}
	if c.closeRequested {
		c.startClose()
	}
}

// discardWriter stops a writer we will not use. With del, the ledger is also deleted (it
// was never recorded in metadata, or was removed from it first).
func (c *core) discardWriter(w Writer, del bool) {
	id := w.ID()
	c.pending++
	w.Close(func(LedgerEnd, error) {
		c.env.post("discard.closed", func() {
			c.pending--
			if del {
				c.deleteLedger(id)
			} else {
				c.maybeFinishClose()
			}
		})
	})
}

// deleteLedger deletes a ledger that is no longer in (or never was in) the record.
func (c *core) deleteLedger(id int64) {
	c.tracef("delete ledger %d", id)
	c.pending++
	c.bk.Delete(id, func(err error) {
		c.env.post("delete.done", func() {
			c.pending--
			if err != nil && !errors.Is(err, ErrNoSuchLedger) {
				c.log.Warn("delete ledger failed; it leaks until garbage collection", "ledger", id, "err", err)
			}
			c.maybeFinishClose()
		})
	})
}

func (c *core) stopRolloverTimer() {
	if c.rolloverTimer != nil {
		c.rolloverTimer()
		c.rolloverTimer = nil
	}
}
