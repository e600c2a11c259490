package mledger

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/internal/fsm"
)

// Tiered storage: the core's offload state machine (see doc.go, "Offload").

// OffloadReadPriority says where a read of an entry whose ledger has both a bookie copy and a
// complete offloaded copy goes (Pulsar's managedLedgerDataReadPriority). A ledger whose bookie
// copy is deleted is always read from the object store.
type OffloadReadPriority uint8

// Read priorities.
const (
	// ReadBookkeeperFirst reads from the bookies while the bookie copy exists (the zero value).
	ReadBookkeeperFirst OffloadReadPriority = iota
	// ReadTieredStorageFirst reads from the object store as soon as the offload is complete
	// (Pulsar's broker default).
	ReadTieredStorageFirst
)

// String returns Pulsar's name of the priority: "bookkeeper-first" or "tiered-storage-first".
func (p OffloadReadPriority) String() string {
	if p == ReadTieredStorageFirst {
		return "tiered-storage-first"
	}
	return "bookkeeper-first"
}

// ParseOffloadReadPriority parses Pulsar's names of a read priority, in either form
// ("tiered-storage-first" or TIERED_STORAGE_FIRST), case-insensitively.
func ParseOffloadReadPriority(s string) (OffloadReadPriority, error) {
	switch strings.ReplaceAll(strings.ToLower(s), "_", "-") {
	case "bookkeeper-first":
		return ReadBookkeeperFirst, nil
	case "tiered-storage-first":
		return ReadTieredStorageFirst, nil
	}
	return 0, fmt.Errorf("%w: offload read priority %q", ErrInvalidArgument, s)
}

// OffloadPolicy is when closed ledgers are offloaded and when their bookie copy is deleted
// (Pulsar's OffloadPolicies, as resolved for one topic).
type OffloadPolicy struct {
	// ThresholdBytes (Pulsar's managedLedgerOffloadThresholdInBytes): walking the closed
	// ledgers from the newest to the oldest and summing their sizes, every ledger at which
	// the sum exceeds ThresholdBytes is offloaded (<0: off; 0: every closed ledger). Pulsar
	// also counts the current ledger's bytes; here only closed ledgers count.
	ThresholdBytes int64
	// ThresholdAge (managedLedgerOffloadThresholdInSeconds): a closed ledger older than this
	// (since it closed) is offloaded (<0: off; 0: at once).
	ThresholdAge time.Duration
	// DeletionLag (managedLedgerOffloadDeletionLagMs): the bookie copy of an offloaded ledger
	// is deleted this long after its offload completed (<0: never; 0: at once).
	DeletionLag time.Duration
	// ReadPriority says where reads go while both copies exist.
	ReadPriority OffloadReadPriority
}

// DefaultOffloadPolicy is the policy of a managed ledger configured without one: Pulsar's
// broker defaults — no automatic offload (only on request), bookie copies deleted 4 hours
// after their offload — but reads from the bookies first (Pulsar's broker.conf default is
// tiered-storage-first; the broker passes its configured value).
func DefaultOffloadPolicy() OffloadPolicy {
	return OffloadPolicy{ThresholdBytes: -1, ThresholdAge: -1, DeletionLag: 4 * time.Hour,
		ReadPriority: ReadBookkeeperFirst}
}

func (p OffloadPolicy) validate() error {
	if p.ReadPriority > ReadTieredStorageFirst {
		return fmt.Errorf("%w: offload read priority %d", ErrInvalidArgument, p.ReadPriority)
	}
	return nil
}

// OffloadState is the state of a requested offload (Pulsar's OffloadProcessStatus.status).
type OffloadState uint8

// Offload request states.
const (
	// OffloadNotRun: no offload was requested since the managed ledger opened.
	OffloadNotRun OffloadState = iota
	// OffloadRunning: a requested offload is in progress.
	OffloadRunning
	// OffloadSuccess: every ledger the last request named is offloaded.
	OffloadSuccess
	// OffloadError: the last request failed (OffloadStatus.LastError says why).
	OffloadError
)

// String returns Pulsar's name: NOT_RUN, RUNNING, SUCCESS or ERROR.
func (s OffloadState) String() string {
	switch s {
	case OffloadRunning:
		return "RUNNING"
	case OffloadSuccess:
		return "SUCCESS"
	case OffloadError:
		return "ERROR"
	}
	return "NOT_RUN"
}

// OffloadStatus is the status of the last requested offload (Pulsar's OffloadProcessStatus).
type OffloadStatus struct {
	State     OffloadState
	LastError string
	// FirstUnoffloaded is the first entry of the log not in a complete offloaded copy.
	FirstUnoffloaded Position
}

// OffloadCounters count a managed ledger's offload work since it opened.
type OffloadCounters struct {
	// Offloaded counts ledgers whose offload completed, OffloadedBytes their payload bytes.
	Offloaded, OffloadedBytes int64
	// Errors counts failed offload steps (uploads, blob deletes, bookie deletes).
	Errors int64
	// Reads counts reads served from the object store, ReadErrors those that failed.
	Reads, ReadErrors int64
	// BookieDeleted counts bookie copies deleted after their offload.
	BookieDeleted int64
}

// offloadPhase is what the offload state machine is doing: at most one step at a time, on
// one ledger.
//
//	Idle ──▶ Cleaning ────────────────────────────────────────▶ Idle  (an orphan attempt's objects deleted, then its context cleared)
//	Idle ──▶ Recording ──▶ Uploading ──▶ Completing ──────────▶ Idle  (attempt recorded before the upload; complete after it)
//	Idle ──▶ DeletingBookie ──▶ RecordingBookieDeleted ───────▶ Idle  (after the deletion lag)
//	any ──▶ Idle (a failure, a stale step, close, fencing)
type offloadPhase uint8

const (
	offloadIdle offloadPhase = iota
	offloadCleaning
	offloadRecording
	offloadUploading
	offloadCompleting
	offloadDeletingBookie
	offloadRecordingBookieDeleted
)

var offloadPhaseNames = [...]string{"Idle", "Cleaning", "Recording", "Uploading", "Completing", "DeletingBookie",
	"RecordingBookieDeleted"}

// String returns the phase's name.
func (p offloadPhase) String() string {
	if int(p) < len(offloadPhaseNames) {
		return offloadPhaseNames[p]
	}
	return fmt.Sprintf("offloadPhase(%d)", uint8(p))
}

var offloadEdges = fsm.Edges[offloadPhase]{
	offloadIdle:                   {offloadCleaning, offloadRecording, offloadDeletingBookie},
	offloadCleaning:               {offloadIdle},
	offloadRecording:              {offloadUploading, offloadIdle},
	offloadUploading:              {offloadCompleting, offloadIdle},
	offloadCompleting:             {offloadIdle},
	offloadDeletingBookie:         {offloadRecordingBookieDeleted, offloadIdle},
	offloadRecordingBookieDeleted: {offloadIdle},
}

// offloadOp is the step in progress: phase on attempt uuid of ledger. Completions are tagged
// with it and are stale once c.off.op is another one.
type offloadOp struct {
	ledger int64
	uuid   string
	cancel func() // the upload's, while Uploading
}

// offloader is the core's offload state. Invariant: op != nil ⇔ phase != Idle.
type offloader struct {
	port    offloadPort // nil: offload off
	policy  OffloadPolicy
	phase   offloadPhase
	op      *offloadOp
	fails   int       // consecutive failed steps
	retryAt time.Time // no step starts before (after a failure)
	timer   func()    // the retry timer
	// request is a requested offload: every closed ledger before it (nil: none running).
	request *Position
	status  OffloadStatus
	count   OffloadCounters
}

func (c *core) becomeOffload(to offloadPhase) {
	c.off.phase = offloadEdges.Must(ErrIllegalTransition, "offload of "+c.name, c.off.phase, to)
	c.tracef("offload %v", to)
}

// offloadIdleNow ends the step in progress.
func (c *core) offloadIdleNow() {
	if c.off.phase != offloadIdle {
		c.becomeOffload(offloadIdle)
	}
	c.off.op = nil
}

// newAttemptUUID returns a fresh random UUID (version 4) for an offload attempt.
func newAttemptUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// newAttempt returns the UUID of a new offload attempt of ledger id.
func (c *core) newAttempt(id int64) string {
	if c.mut.reuseAttemptUUID {
		return fmt.Sprintf("ledger-%d", id) // on purpose: every attempt of a ledger has the same prefix
	}
	return c.uuidGen()
}

// offloadActive reports whether the state lets offload steps start. Steps act only on a
// record we own: once a write finds another owner's record (the metadata writer is fenced,
// the state follows in the same step), the attempts it names are that owner's business.
func (c *core) offloadActive() bool {
	if c.off.port == nil || c.ml == nil || c.ml.fenced != nil || c.info() == nil || c.info().Owner != c.token {
		return false
	}
	switch c.state {
	case StateLedgerOpened, StateClosingLedger, StateCreatingLedger, StateWriteFailed, StateTerminated:
		return true
	}
	return false
}

// offloadStep starts the next offload step, if none is in progress: in order, delete an
// orphan attempt (recorded, not complete: a crash, a failure or a cancelled upload left it),
// delete a bookie copy whose deletion lag has passed, or offload the oldest closed ledger
// the policy or a request wants. It runs at open, at every rollover, on the periodic tick,
// on a request and after every step.
func (c *core) offloadStep() {
	o := &c.off
	if o.op != nil || !c.offloadActive() {
		return
	}
	now := c.env.now()
	if now.Before(o.retryAt) {
		return // the retry timer runs it again
	}
	in := c.info()
	for _, l := range in.Ledgers {
		if l.Offload != nil && !l.Offload.Complete {
			c.offloadClean(l)
			return
		}
	}
	if lag := o.policy.DeletionLag; lag >= 0 {
		for _, l := range in.Ledgers {
			oc := l.Offload
			if oc != nil && oc.Complete && !oc.BookkeeperDeleted && !now.Before(time.UnixMilli(oc.Timestamp).Add(lag)) {
				c.offloadDeleteBookie(l)
				return
			}
		}
	}
	if l := c.offloadCandidate(in, now); l != nil {
		c.offloadStart(*l)
		return
	}
	c.offloadCheckRequest()
}

// offloadCandidate returns the oldest closed, non-empty ledger without an offload context
// that the policy or the request wants offloaded. The last ledger of the record is never one.
func (c *core) offloadCandidate(in *Info, now time.Time) *LedgerInfo {
	p := c.off.policy
	ls := in.Ledgers
	n := len(ls) - 1
	beyond := -1 // ledgers 0..beyond are beyond the size threshold
	if p.ThresholdBytes >= 0 {
		var sum int64
		for i := n - 1; i >= 0; i-- {
			if sum += ls[i].Size; sum > p.ThresholdBytes {
				beyond = i
				break
			}
		}
	}
	for i := 0; i < n; i++ {
		l := &ls[i]
		if l.Offload != nil || l.Entries == 0 || l.Closed == 0 || (l.ID == c.tail.id && !c.tail.closed) {
			continue
		}
		if i <= beyond || (p.ThresholdAge >= 0 && now.Sub(time.UnixMilli(l.Closed)) >= p.ThresholdAge) ||
			(c.off.request != nil && l.ID < c.off.request.LedgerID) {
			return l
		}
	}
	return nil
}

// offloadStart records a new attempt for ledger l, then uploads it.
func (c *core) offloadStart(l LedgerInfo) {
	op := &offloadOp{ledger: l.ID, uuid: c.newAttempt(l.ID)}
	c.off.op = op
	c.becomeOffload(offloadRecording)
	now := c.env.now().UnixMilli()
	driver := c.off.port.driver()
	c.ml.enqueue(&metaOp[*Info]{name: "offload-attempt", apply: func(in *Info) error {
		i := in.ledger(op.ledger)
		if c.off.op != op || i < 0 {
			return errStale
		}
		li := &in.Ledgers[i]
		if li.Offload != nil {
			if li.Offload.UUID == op.uuid {
				return nil // our earlier ambiguous write went through
			}
			return errStale
		}
		if li.Closed == 0 || li.Entries == 0 {
			return errStale
		}
		li.Offload = &OffloadContext{UUID: op.uuid, Started: now, Driver: driver}
		return nil
	}, done: func(err error) {
		defer c.maybeFinishClose()
		if c.off.op != op {
			return
		}
		if err != nil {
			c.offloadFailed(fmt.Errorf("record offload attempt of ledger %d: %w", op.ledger, err), !errors.Is(err, errStale))
			return
		}
		c.offloadUpload(op)
	}})
}

// offloadUpload uploads the recorded attempt op.
func (c *core) offloadUpload(op *offloadOp) {
	in := c.info()
	i := in.ledger(op.ledger)
	if i < 0 {
		c.offloadIdleNow()
		c.offloadStep()
		return
	}
	l := in.Ledgers[i]
	c.becomeOffload(offloadUploading)
	req := OffloadRequest{ManagedLedger: c.name, LedgerID: l.ID, UUID: op.uuid, Entries: l.Entries, Size: l.Size}
	bk, pw, id := c.bk, c.cfg.Password, l.ID
	read := func(first, last int64, cb func([][]byte, error)) { bk.Read(id, pw, first, last, cb) }
	c.tracef("offload ledger %d as %s", l.ID, op.uuid)
	c.pending++
	op.cancel = c.off.port.offload(req, read, func(meta map[string]string, err error) {
		c.env.post("offload.uploaded", func() {
			c.pending--
			c.onUploaded(op, l, meta, err)
			c.maybeFinishClose()
		})
	})
	if c.mut.deleteBookieBeforeComplete {
		c.deleteLedger(l.ID) // on purpose: the attempt is recorded, not complete
	}
	if c.mut.offloadCompleteEarly {
		c.offloadRecordComplete(op, l, nil) // on purpose: before the upload reported
	}
}

// onUploaded is the end of an upload. The attempt may have become stale (the ledger was
// trimmed, the managed ledger closed or lost ownership): its objects are deleted only if
// the record no longer names the attempt — otherwise whoever owns the record cleans it up
// as an orphan.
func (c *core) onUploaded(op *offloadOp, l LedgerInfo, meta map[string]string, err error) {
	if c.off.op != op || c.off.phase != offloadUploading {
		c.tracef("stale upload of ledger %d as %s (%v)", op.ledger, op.uuid, err)
		c.offloadDropUnnamed(op, meta)
		return
	}
	op.cancel = nil
	if !c.offloadNamed(op.ledger, op.uuid) {
		c.offloadDropUnnamed(op, meta)
		c.offloadIdleNow()
		c.offloadStep()
		return
	}
	if err != nil {
		c.offloadFailed(fmt.Errorf("offload ledger %d: %w", op.ledger, err), true)
		return
	}
	c.offloadRecordComplete(op, l, meta)
}

// offloadRecordComplete records attempt op complete.
func (c *core) offloadRecordComplete(op *offloadOp, l LedgerInfo, meta map[string]string) {
	c.becomeOffload(offloadCompleting)
	now := c.env.now().UnixMilli()
	c.ml.enqueue(&metaOp[*Info]{name: "offload-complete", apply: func(in *Info) error {
		i := in.ledger(op.ledger)
		if i < 0 {
			return errStale // trimmed meanwhile
		}
		oc := in.Ledgers[i].Offload
		switch {
		case oc == nil || oc.UUID != op.uuid:
			return errStale
		case oc.Complete:
			return nil // our earlier ambiguous write went through
		}
		oc = oc.clone()
		oc.Complete, oc.Timestamp, oc.DriverMetadata = true, now, meta
		in.Ledgers[i].Offload = oc
		return nil
	}, done: func(err error) {
		defer c.maybeFinishClose()
		if err != nil {
			c.offloadDropUnnamed(op, meta)
		}
		if c.off.op != op {
			return
		}
		if err != nil {
			c.offloadIdleNow()
			c.offloadStep()
			return
		}
		c.log.Info("ledger offloaded", "ledger", op.ledger, "uuid", op.uuid)
		c.off.fails = 0
		c.off.count.Offloaded++
		c.off.count.OffloadedBytes += l.Size
		c.offloadIdleNow()
		c.offloadStep()
	}})
}

// offloadNamed reports whether the record (as we last wrote or read it) names attempt uuid
// of ledger id.
func (c *core) offloadNamed(id int64, uuid string) bool {
	in := c.info()
	if in == nil {
		return true // deleted with the managed ledger: startDelete deletes what it named
	}
	i := in.ledger(id)
	return i >= 0 && in.Ledgers[i].Offload != nil && in.Ledgers[i].Offload.UUID == uuid
}

// offloadDropUnnamed deletes the objects of an attempt the record does not name (any more):
// nothing can reach them, and no write of ours that names them can still land (the attempt
// was recorded before its upload began; it leaves the record only by a later write).
func (c *core) offloadDropUnnamed(op *offloadOp, meta map[string]string) {
	if c.offloadNamed(op.ledger, op.uuid) {
		return
	}
	c.deleteOffloaded(OffloadedLedger{ManagedLedger: c.name, LedgerID: op.ledger, UUID: op.uuid, DriverMetadata: meta}, nil)
}

// deleteOffloaded deletes an attempt's objects that the record no longer names (trim,
// delete), retrying failures with backoff up to 10 times (Close waits for it); after that the
// objects leak, with a warning.
func (c *core) deleteOffloaded(ref OffloadedLedger, done func(error)) {
	if c.off.port == nil {
		c.log.Warn("offloaded ledger dropped with no offloader configured: its objects leak", "ledger", ref.LedgerID, "uuid", ref.UUID)
		if done != nil {
			done(nil)
		}
		return
	}
	c.tracef("delete offloaded ledger %d attempt %s", ref.LedgerID, ref.UUID)
	fails := 0
	var try func()
	try = func() {
		c.pending++
		c.off.port.deleteOffloaded(ref, func(err error) {
			c.env.post("offload.deleted", func() {
				c.pending--
				if err != nil {
					c.off.count.Errors++
					fails++
					if fails < 10 {
						c.pending++ // Close waits for the retry
						c.env.after(c.backoff(fails), "offload.delete.retry", func() {
							c.pending--
							try()
						})
						return
					}
					c.log.Warn("delete offloaded ledger failed; its objects leak", "ledger", ref.LedgerID, "uuid", ref.UUID, "err", err)
				}
				if done != nil {
					done(err)
				}
				c.maybeFinishClose()
			})
		})
	}
	try()
}

// offloadClean deletes the objects of the orphan attempt l.Offload, then clears it from the
// record (objects first: a crash between leaves the attempt recorded, to be cleaned again).
func (c *core) offloadClean(l LedgerInfo) {
	op := &offloadOp{ledger: l.ID, uuid: l.Offload.UUID}
	c.off.op = op
	c.becomeOffload(offloadCleaning)
	ref := OffloadedLedger{ManagedLedger: c.name, LedgerID: l.ID, UUID: op.uuid, DriverMetadata: l.Offload.DriverMetadata}
	c.tracef("clean up offload attempt %s of ledger %d", op.uuid, l.ID)
	clear := func() {
		c.ml.enqueue(&metaOp[*Info]{name: "offload-clear", apply: func(in *Info) error {
			i := in.ledger(op.ledger)
			if i < 0 {
				return nil // trimmed meanwhile
			}
			oc := in.Ledgers[i].Offload
			if oc == nil {
				return nil // our earlier ambiguous write went through
			}
			if oc.UUID != op.uuid || oc.Complete {
				return errStale
			}
			in.Ledgers[i].Offload = nil
			return nil
		}, done: func(err error) {
			defer c.maybeFinishClose()
			if c.off.op != op {
				return
			}
			if err != nil {
				c.offloadFailed(fmt.Errorf("clear offload attempt of ledger %d: %w", op.ledger, err), false)
				return
			}
			c.offloadIdleNow()
			c.offloadStep()
		}})
	}
	if c.mut.skipOrphanCleanup {
		clear() // on purpose: the orphan's objects are never deleted
		return
	}
	c.pending++
	c.off.port.deleteOffloaded(ref, func(err error) {
		c.env.post("offload.cleaned", func() {
			c.pending--
			defer c.maybeFinishClose()
			if c.off.op != op {
				return
			}
			if err != nil {
				c.offloadFailed(fmt.Errorf("delete orphan offload attempt of ledger %d: %w", op.ledger, err), true)
				return
			}
			clear()
		})
	})
}

// offloadDeleteBookie deletes the bookie copy of offloaded ledger l, then records that.
func (c *core) offloadDeleteBookie(l LedgerInfo) {
	op := &offloadOp{ledger: l.ID, uuid: l.Offload.UUID}
	c.off.op = op
	c.becomeOffload(offloadDeletingBookie)
	c.tracef("delete the bookie copy of offloaded ledger %d", l.ID)
	c.pending++
	c.bk.Delete(l.ID, func(err error) {
		c.env.post("offload.bookie-deleted", func() {
			c.pending--
			defer c.maybeFinishClose()
			if c.off.op != op {
				return
			}
			if err != nil && !errors.Is(err, ErrNoSuchLedger) {
				c.offloadFailed(fmt.Errorf("delete bookie copy of ledger %d: %w", op.ledger, err), true)
				return
			}
			c.off.count.BookieDeleted++
			c.becomeOffload(offloadRecordingBookieDeleted)
			c.ml.enqueue(&metaOp[*Info]{name: "offload-bk-deleted", apply: func(in *Info) error {
				i := in.ledger(op.ledger)
				if i < 0 {
					return nil // trimmed meanwhile
				}
				oc := in.Ledgers[i].Offload
				if oc == nil || oc.UUID != op.uuid {
					return errStale
				}
				if oc.BookkeeperDeleted {
					return nil
				}
				oc = oc.clone()
				oc.BookkeeperDeleted = true
				in.Ledgers[i].Offload = oc
				return nil
			}, done: func(err error) {
				defer c.maybeFinishClose()
				if c.off.op != op {
					return
				}
				if err != nil {
					c.offloadFailed(fmt.Errorf("record bookie copy of ledger %d deleted: %w", op.ledger, err), false)
					return
				}
				c.offloadIdleNow()
				c.offloadStep()
			}})
		})
	})
}

// offloadFailed ends the step in progress with err; the next step waits for a backoff
// (RetryBackoff doubling, at most TrimInterval) so that an unreachable object store is not
// hammered. A request in progress fails with err (counted: a port failure).
func (c *core) offloadFailed(err error, counted bool) {
	o := &c.off
	c.offloadIdleNow()
	if counted {
		o.count.Errors++
	}
	o.fails++
	c.log.Warn("offload step failed", "err", err, "failures", o.fails)
	c.tracef("offload failed: %v", err)
	if o.request != nil {
		o.request = nil
		o.status.State, o.status.LastError = OffloadError, err.Error()
	}
	d := backoff.Policy{Base: c.cfg.RetryBackoff, Max: max(c.cfg.RetryBackoff, c.cfg.TrimInterval)}.Delay(o.fails - 1)
	o.retryAt = c.env.now().Add(d)
	c.offloadArmRetry(d)
}

func (c *core) offloadArmRetry(d time.Duration) {
	if c.off.timer != nil {
		c.off.timer()
	}
	cancelled := false
	cancel := c.env.after(d, "offload.retry", func() {
		if cancelled {
			return
		}
		c.off.timer = nil
		c.offloadStep()
	})
	c.off.timer = func() { cancelled = true; cancel() }
}

// offloadStop abandons the step in progress (close, fencing): an upload is cancelled, and any
// completion that still comes is stale.
func (c *core) offloadStop() {
	o := &c.off
	if o.timer != nil {
		o.timer()
		o.timer = nil
	}
	if o.op != nil && o.op.cancel != nil {
		o.op.cancel()
	}
	c.offloadIdleNow()
	if o.request != nil {
		o.request = nil
		o.status.State, o.status.LastError = OffloadError, "managed ledger closed"
	}
}

// offloadTrimmed is told the ledgers a trim removed from the record (with their offload
// contexts as the record had them): their objects are deleted — except the attempt being
// uploaded, whose upload is cancelled and whose own completion deletes them.
func (c *core) offloadTrimmed(removed []LedgerInfo) {
	for _, l := range removed {
		oc := l.Offload
		if oc == nil {
			continue
		}
		if op := c.off.op; op != nil && op.ledger == l.ID && op.uuid == oc.UUID &&
			(c.off.phase == offloadUploading || c.off.phase == offloadCompleting) {
			if op.cancel != nil {
				op.cancel()
			}
			continue
		}
		c.deleteOffloaded(OffloadedLedger{ManagedLedger: c.name, LedgerID: l.ID, UUID: oc.UUID, DriverMetadata: oc.DriverMetadata}, nil)
	}
}

// offloadCheckRequest ends a request once every ledger it named is offloaded.
func (c *core) offloadCheckRequest() {
	o := &c.off
	if o.request == nil || o.op != nil {
		return
	}
	in := c.info()
	for i, l := range in.Ledgers {
		if l.ID >= o.request.LedgerID || i == len(in.Ledgers)-1 {
			break
		}
		if l.Entries > 0 && (l.Offload == nil || !l.Offload.Complete) {
			return
		}
	}
	o.request = nil
	o.status.State, o.status.LastError = OffloadSuccess, ""
}

// offloadTrigger starts a requested offload of every closed ledger before p (Pulsar's
// offloadPrefix: ledgers entirely before the message; the current ledger never).
func (c *core) offloadTrigger(p Position, reply func(OffloadStatus, error)) {
	if err := c.cursorUsable(); err != nil {
		reply(OffloadStatus{}, err)
		return
	}
	if c.off.port == nil {
		reply(OffloadStatus{}, ErrOffloadDisabled)
		return
	}
	if c.off.request != nil {
		reply(c.offloadStatus(), ErrOffloadInProgress)
		return
	}
	c.off.request = &p
	c.off.status = OffloadStatus{State: OffloadRunning}
	c.off.retryAt = time.Time{} // a request retries at once
	c.off.fails = 0
	c.offloadStep()
	c.offloadCheckRequest()
	reply(c.offloadStatus(), nil)
}

// offloadStatus returns the request status with the first entry not offloaded.
func (c *core) offloadStatus() OffloadStatus {
	st := c.off.status
	st.FirstUnoffloaded = Earliest
	if c.ml == nil || c.info() == nil {
		return st
	}
	st.FirstUnoffloaded = Position{LedgerID: c.tail.id, EntryID: 0}
	for _, l := range c.info().Ledgers {
		if l.Entries > 0 && (l.Offload == nil || !l.Offload.Complete) {
			st.FirstUnoffloaded = Position{LedgerID: l.ID, EntryID: 0}
			break
		}
	}
	return st
}

// offloadedCopy returns ledger id's complete offload context in the record, or nil.
func (c *core) offloadedCopy(id int64) *OffloadContext {
	in := c.info()
	if in == nil {
		return nil
	}
	if i := in.ledger(id); i >= 0 {
		if oc := in.Ledgers[i].Offload; oc != nil && oc.Complete {
			return oc
		}
	}
	return nil
}

// readSegment reads segment i of op: from the object store if the ledger's bookie copy is
// deleted (or the priority says so and the offloaded copy is complete), else from the
// bookies — falling back to the object store if the bookie copy turns out to be gone.
func (c *core) readSegment(op *readOp, i int) {
	s := op.segs[i]
	oc := c.offloadedCopy(s.ledger)
	if oc != nil && (oc.BookkeeperDeleted || c.off.policy.ReadPriority == ReadTieredStorageFirst) {
		c.readOffloaded(op, i, oc)
		return
	}
	c.pending++
	c.bk.Read(s.ledger, c.cfg.Password, s.first, s.last, func(d [][]byte, err error) {
		c.env.post("read.done", func() {
			c.pending--
			if oc != nil && errors.Is(err, ErrNoSuchLedger) && op.inFlight {
				c.readOffloaded(op, i, oc) // deleted after its offload, before the record said so
				return
			}
			c.onReadDone(op, i, d, err)
			c.maybeFinishClose()
		})
	})
}

// readOffloaded reads segment i of op from the complete offloaded copy oc. A failure fails
// the read with ErrOffloadRead (retryable; the caller backs off).
func (c *core) readOffloaded(op *readOp, i int, oc *OffloadContext) {
	s := op.segs[i]
	if c.off.port == nil {
		err := fmt.Errorf("%w: ledger %d is offloaded and no offloader is configured", ErrOffloadRead, s.ledger)
		c.pending++
		c.env.post("read.offloaded", func() { // never inline: startRead finishes the read itself
			c.pending--
			c.onReadDone(op, i, nil, err)
			c.maybeFinishClose()
		})
		return
	}
	ref := OffloadedLedger{ManagedLedger: c.name, LedgerID: s.ledger, UUID: oc.UUID, DriverMetadata: oc.DriverMetadata}
	c.pending++
	c.off.port.readOffloaded(ref, s.first, s.last, func(d [][]byte, err error) {
		c.env.post("read.offloaded", func() {
			c.pending--
			c.off.count.Reads++
			if err != nil {
				c.off.count.ReadErrors++
				err = fmt.Errorf("%w: ledger %d entries %d..%d: %w", ErrOffloadRead, s.ledger, s.first, s.last, err)
			}
			c.onReadDone(op, i, d, err)
			c.maybeFinishClose()
		})
	})
}

// setOffloadPolicy changes the policy live and runs a step under it.
func (c *core) setOffloadPolicy(p OffloadPolicy) {
	c.off.policy = p
	c.offloadStep()
}
