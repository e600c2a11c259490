package mledger

import (
	"errors"
	"fmt"
	"time"
)

// opStatus is where an add is in its life.
type opStatus uint8

const (
	// opQueued: accepted, waiting for a writable ledger.
	opQueued opStatus = iota
	// opInFlight: appended to ledger op.ledger as entry op.entry; outcome unknown.
	opInFlight
	// opAcked: confirmed; completes successfully when it reaches the head of the queue.
	opAcked
	// opFailed: failed with op.err; completes when it reaches the head.
	opFailed
)

// addOp is one accepted add. Invariant: it completes (cb runs) exactly once.
type addOp struct {
	payload []byte
	cb      func(Position, error)
	status  opStatus
	ledger  int64
	entry   int64
	err     error
	gotErr  bool // the ledger reported a failure; its close decides the outcome
}

// addQueue is a FIFO of accepted adds: a prefix in flight (or resolved), then the queued
// ones.
type addQueue struct {
	ops  []*addOp
	head int
}

func (q *addQueue) len() int { return len(q.ops) - q.head }

func (q *addQueue) at(i int) *addOp { return q.ops[q.head+i] }

func (q *addQueue) push(op *addOp) { q.ops = append(q.ops, op) }

func (q *addQueue) pop() *addOp {
	op := q.ops[q.head]
	q.ops[q.head] = nil
	q.head++
	if q.head == len(q.ops) {
		q.ops, q.head = q.ops[:0], 0
	} else if q.head > 1024 && q.head*2 > len(q.ops) {
		n := copy(q.ops, q.ops[q.head:])
		clear(q.ops[n:])
		q.ops, q.head = q.ops[:n], 0
	}
	return op
}

// add accepts, queues or rejects an add.
func (c *core) add(payload []byte, cb func(Position, error)) {
	switch c.state {
	case StateLedgerOpened:
		op := &addOp{payload: payload, cb: cb}
		c.adds.push(op)
		c.issue(op)
		c.checkFull()
	case StateClosingLedger, StateCreatingLedger:
		c.adds.push(&addOp{payload: payload, cb: cb})
	case StateWriteFailed:
		c.adds.push(&addOp{payload: payload, cb: cb})
		c.startCreate()
	case StateTerminating, StateTerminated:
		cb(Position{}, ErrTerminated)
	case StateFenced:
		cb(Position{}, c.stateErr)
	case StateOpening, StateClosing, StateClosed:
		cb(Position{}, ErrClosed)
	}
}

func (c *core) issue(op *addOp) {
	w := c.w
	op.status, op.ledger, op.entry = opInFlight, w.ID(), c.wIssued
	c.wIssued++
	c.wBytes += int64(len(op.payload))
	lid := op.ledger
	w.Append(op.payload, func(e int64, err error) {
		c.env.post("add.done", func() { c.onAddDone(op, lid, e, err) })
	})
}

// onAddDone is the ledger's completion of op on ledger lid.
func (c *core) onAddDone(op *addOp, lid, e int64, err error) {
	if op.status != opInFlight || op.ledger != lid {
		c.tracef("stale add completion %d:%d (%v)", lid, e, err)
		return
	}
	if err == nil {
		if e != op.entry {
			_ = assertionFailedf("ledger %d confirmed entry %d for the add issued as %d", lid, e, op.entry)
		}
		c.resolveInFlight(lid, op.entry, nil) // LAC >= e: every earlier entry is confirmed too
		c.completeHead()
		if c.state == StateClosingLedger && c.closing != nil && !c.closing.issued && !c.inFlightOn(lid) {
			c.issueClose()
		}
		return
	}
	c.tracef("add %d:%d failed: %v", lid, op.entry, err)
	op.gotErr = true
	if errors.Is(err, ErrLedgerFenced) {
		c.becomeFenced(err)
		return
	}
	switch c.state {
	case StateLedgerOpened:
		c.startRollover(true)
	case StateClosingLedger:
		if !c.closing.issued {
			c.issueClose()
		}
	}
	// Terminating, Closing: the close in flight decides this add.
}

// resolveInFlight decides in-flight adds on ledger lid (-1: any): entries <= last are
// confirmed; later ones fail with errOutside, or go back to the queue when errOutside is
// nil and the ledger was closed (last >= 0 or an explicit close).
func (c *core) resolveInFlight(lid, last int64, errOutside error) {
	for i := 0; i < c.adds.len(); i++ {
		op := c.adds.at(i)
		if op.status != opInFlight || (lid >= 0 && op.ledger != lid) {
			continue
		}
		switch {
		case op.entry <= last || c.mut.completeDrainedAdds && errOutside != nil:
			op.status = opAcked
		case errOutside != nil:
			op.status, op.err = opFailed, errOutside
		}
	}
}

// requeueAfter puts in-flight adds on lid past last back in the queue for the next ledger.
func (c *core) requeueAfter(lid, last int64) {
	for i := 0; i < c.adds.len(); i++ {
		op := c.adds.at(i)
		if op.status == opInFlight && op.ledger == lid && op.entry > last {
			op.status, op.ledger, op.entry, op.gotErr = opQueued, 0, 0, false
		}
	}
}

func (c *core) failQueued(err error) {
	for i := 0; i < c.adds.len(); i++ {
		if op := c.adds.at(i); op.status == opQueued {
			op.status, op.err = opFailed, err
		}
	}
}

func (c *core) inFlightOn(lid int64) bool {
	for i := 0; i < c.adds.len(); i++ {
		if op := c.adds.at(i); op.status == opInFlight && op.ledger == lid {
			return true
		}
	}
	return false
}

// completeHead completes resolved adds from the head of the queue, in order.
func (c *core) completeHead() {
	advanced := false
	for c.adds.len() > 0 {
		op := c.adds.at(0)
		switch op.status {
		case opAcked:
			c.adds.pop()
			pos := Position{LedgerID: op.ledger, EntryID: op.entry}
			if op.ledger == c.tail.id && !c.tail.closed && op.entry >= c.tail.entries {
				c.tail.entries = op.entry + 1
				c.tail.size += int64(len(op.payload))
			}
			if c.lastConfirmed.Less(pos) {
				c.lastConfirmed = pos
				c.cache.add(pos, op.payload)
				advanced = true
			}
			op.cb(pos, nil)
		case opFailed:
			c.adds.pop()
			op.cb(Position{}, op.err)
		default:
			if advanced {
				c.wakeReaders()
			}
			return
		}
	}
	if advanced {
		c.wakeReaders()
	}
}

// checkFull starts a rollover when the current ledger is full (entries or size, once it is
// at least MinLedgerRolloverTime old) or old (MaxLedgerRolloverTime, if not empty).
func (c *core) checkFull() {
	if c.state != StateLedgerOpened {
		return
	}
	age := c.env.now().Sub(c.tail.ctime)
	full := c.wIssued >= c.cfg.MaxEntriesPerLedger || c.wBytes >= c.cfg.MaxSizePerLedger
	if full && age < c.cfg.MinLedgerRolloverTime {
		c.armRolloverTimer(c.cfg.MinLedgerRolloverTime - age)
		return
	}
	if full || (c.cfg.MaxLedgerRolloverTime > 0 && age >= c.cfg.MaxLedgerRolloverTime && c.wIssued > 0) {
		c.startRollover(false)
	}
}

func (c *core) armRolloverTimer(d time.Duration) {
	c.stopRolloverTimer()
	lid := c.tail.id
	cancelled := false
	cancel := c.env.after(d, "rollover.timer", func() {
		if cancelled || c.state != StateLedgerOpened || c.tail.id != lid {
			return
		}
		c.rolloverTimer = nil
		if c.wIssued == 0 && c.cfg.MaxLedgerRolloverTime > 0 {
			c.armRolloverTimer(c.cfg.MaxLedgerRolloverTime)
			return
		}
		c.checkFull()
	})
	c.rolloverTimer = func() { cancelled = true; cancel() }
}

// startRollover closes the current ledger; new adds queue. Unless immediate, the close waits
// for the adds in flight (BookKeeper would drain them otherwise).
func (c *core) startRollover(immediate bool) {
	if err := c.becomeClosingLedger(); err != nil {
		return
	}
	c.stopRolloverTimer()
	c.closing = &closeOp{ledger: c.w.ID()}
	if immediate || !c.inFlightOn(c.w.ID()) {
		c.issueClose()
	}
}

func (c *core) issueClose() {
	cl := c.closing
	cl.issued = true
	lid := cl.ledger
	c.tracef("close ledger %d", lid)
	c.w.Close(func(end LedgerEnd, err error) {
		c.env.post("close.done", func() { c.onCloseDone(cl, lid, end, err) })
	})
}

// onCloseDone is the end of the current ledger's close. Its last entry decides every add in
// flight on it: inside, it is confirmed; outside, it goes to the next ledger (rollover) or
// fails (terminate: ErrTerminated, close: ErrClosed).
func (c *core) onCloseDone(cl *closeOp, lid int64, end LedgerEnd, err error) {
	if c.closing != cl || !cl.issued {
		c.tracef("stale close completion of ledger %d", lid)
		return
	}
	if err != nil {
		if errors.Is(err, ErrLedgerFenced) || errors.Is(err, ErrNoSuchLedger) {
			// Another owner recovered (or recovered and dropped) the ledger.
			if c.state == StateClosing {
				c.closing, c.w = nil, nil
				c.resolveInFlight(lid, -1, fmt.Errorf("%w: %w", ErrFenced, err))
				c.completeHead()
				c.maybeFinishClose()
				return
			}
			c.becomeFenced(err)
			return
		}
		cl.issued = false
		cl.fails++
		c.tracef("close ledger %d failed (%v): retrying", lid, err)
		c.env.after(c.backoff(cl.fails), "close.retry", func() {
			if c.closing == cl && !cl.issued {
				c.issueClose()
			}
		})
		return
	}
	c.closing, c.w = nil, nil
	last := end.LastEntry
	c.tail.closed, c.tail.entries, c.tail.size = true, last+1, end.Size
	c.tracef("ledger %d closed at %d", lid, last)
	switch c.state {
	case StateClosingLedger:
		c.resolveInFlight(lid, last, nil)
		c.requeueAfter(lid, last)
	case StateTerminating:
		if c.mut.terminateRequeuesDrained {
			c.resolveInFlight(lid, last, nil)
			c.requeueAfter(lid, last)
			break
		}
		c.resolveInFlight(lid, last, ErrTerminated)
	case StateClosing:
		c.resolveInFlight(lid, last, ErrClosed)
	default:
		_ = assertionFailedf("ledger close reported in state %v", c.state)
	}
	c.completeHead()
	if p := (Position{LedgerID: lid, EntryID: last}); c.lastConfirmed.Less(p) {
		c.lastConfirmed = p
	}
	switch c.state {
	case StateClosingLedger:
		c.startCreate()
	case StateTerminating:
		c.recordTerminated(Position{LedgerID: lid, EntryID: last})
	case StateClosing:
		c.maybeFinishClose()
	}
}

// startCreate asks for the next ledger (CreatingLedger).
func (c *core) startCreate() {
	if err := c.becomeCreatingLedger(); err != nil {
		return
	}
	c.attempt++
	a := c.attempt
	if c.hooks.createLedger != nil {
		c.hooks.createLedger("data", c.state)
	}
	c.tracef("create ledger (attempt %d)", a)
	c.bk.Create(c.ledgerConfig("data"), func(w Writer, err error) {
		c.env.post("create.done", func() { c.onCreateDone(a, w, err) })
	})
}

func (c *core) ledgerConfig(purpose string) LedgerConfig {
	return LedgerConfig{Ensemble: c.cfg.Ensemble, WriteQuorum: c.cfg.WriteQuorum, AckQuorum: c.cfg.AckQuorum,
		Password: c.cfg.Password, Purpose: purpose}
}

// onCreateDone is the end of a rollover's ledger creation. If the rollover lost a race
// (terminate, close, fence) the new ledger was never recorded: it is closed and deleted (M3).
func (c *core) onCreateDone(a uint64, w Writer, err error) {
	if a != c.attempt || c.state != StateCreatingLedger {
		if err == nil && !c.mut.leakLostRaceLedger {
			c.tracef("ledger %d created by a rollover that lost the race: deleting", w.ID())
			c.discardWriter(w, true)
		}
		return
	}
	if err != nil {
		c.tracef("create ledger failed: %v", err)
		if c.becomeWriteFailed() == nil {
			c.failQueued(fmt.Errorf("%w: %w", ErrLedgerCreate, err))
			c.completeHead()
		}
		return
	}
	prev := c.tail
	closedAt := c.env.now().UnixMilli()
	now := c.env.now().UnixMilli()
	c.ml.enqueue(&metaOp[*Info]{name: "rollover", apply: func(in *Info) error {
		if a != c.attempt || c.state != StateCreatingLedger {
			return errStale
		}
		if in.Terminated != nil {
			return assertionFailedf("rollover of a terminated log")
		}
		if in.has(w.ID()) {
			return nil // our earlier (ambiguous) write already recorded it
		}
		last := in.last()
		if last == nil || last.ID != prev.id {
			return assertionFailedf("rollover from ledger %d, record ends at %+v", prev.id, last)
		}
		last.Entries, last.Size, last.Closed = prev.entries, prev.size, closedAt
		in.Ledgers = append(in.Ledgers, LedgerInfo{ID: w.ID(), CTime: now})
		return nil
	}, done: func(err error) { c.onRolloverRecorded(a, w, err) }})
}

// onRolloverRecorded is the end of the metadata update that switches to the new ledger. A
// switch that completes after terminate (or close, or fencing) took over never reopens the
// log (M1): the new ledger is dropped instead (M3).
func (c *core) onRolloverRecorded(a uint64, w Writer, err error) {
	if err == nil && a == c.attempt && c.state == StateCreatingLedger {
		c.openLedger(w)
		return
	}
	if err == nil && c.mut.lateSwitchReopens && (c.state == StateTerminating || c.state == StateTerminated) {
		// apache/pulsar#25795, on purpose: the late switch makes the log writable again.
		c.state = StateLedgerOpened
		if c.hooks.transition != nil {
			c.hooks.transition(StateTerminated, StateLedgerOpened)
		}
		c.w, c.wIssued, c.wBytes = w, 0, 0
		c.tail = tailLedger{id: w.ID(), ctime: c.env.now()}
		return
	}
	if err == nil && c.mut.silentReopen && c.state == StateTerminating {
		c.state = StateLedgerOpened // on purpose: no transition, no hook
		c.w, c.wIssued, c.wBytes = w, 0, 0
		return
	}
	if c.info().has(w.ID()) {
		// Recorded (by this write or an ambiguous earlier one). Terminate removes it from the
		// record and deletes it; on close it is dropped here; a fenced owner leaves it to the
		// new owner, who recovers it as an empty last ledger and drops it.
		c.tracef("rollover to %d recorded after losing the race (%v)", w.ID(), c.state)
		c.discardWriter(w, false)
		if c.state == StateClosing {
			c.dropEmptyLast(w.ID())
		}
		return
	}
	c.tracef("rollover to %d lost the race (%v): deleting it once the record settles", w.ID(), err)
	c.discardWriter(w, false)
	switch {
	case c.mut.leakLostRaceLedger:
	case c.mut.deleteLostRolloverAtOnce:
		c.deleteLedger(w.ID()) // on purpose: the timed-out switch may still land
	default:
		c.dropLostRollover(w.ID())
	}
}

// dropLostRollover deletes ledger id, whose switch failed, once the record has settled: the
// switch may have timed out and still be applied later (etcd may apply a timed-out write after
// our re-read), so the ledger is deleted only after a later write of ours succeeded (or another
// owner's was seen), when no earlier one can land. A switch that landed meanwhile is undone in
// that write. The simulation's late applies (simports_test.go) exercise it.
func (c *core) dropLostRollover(id int64) {
	c.ml.enqueue(&metaOp[*Info]{name: "drop-lost-rollover", apply: func(in *Info) error {
		if last := in.last(); last != nil && last.ID == id && len(in.Ledgers) > 1 && in.Terminated == nil {
			in.Ledgers = in.Ledgers[:len(in.Ledgers)-1]
		}
		return nil
	}, done: func(error) {
		if in := c.info(); in == nil || !in.has(id) {
			c.deleteLedger(id)
		}
		c.maybeFinishClose()
	}})
}

// dropEmptyLast removes ledger id from the record if it is still the last one and empty, then
// deletes it.
func (c *core) dropEmptyLast(id int64) {
	c.ml.enqueue(&metaOp[*Info]{name: "drop-empty", apply: func(in *Info) error {
		if !in.has(id) {
			return nil // our earlier ambiguous write already dropped it
		}
		last := in.last()
		if in.Terminated != nil || last == nil || last.ID != id || len(in.Ledgers) < 2 {
			return errStale
		}
		in.Ledgers = in.Ledgers[:len(in.Ledgers)-1]
		return nil
	}, done: func(err error) {
		if err == nil {
			c.deleteLedger(id)
		}
		c.maybeFinishClose()
	}})
}

// openLedger makes w the current ledger (LedgerOpened) and issues the queued adds on it.
func (c *core) openLedger(w Writer) {
	c.w, c.wIssued, c.wBytes = w, 0, 0
	c.tail = tailLedger{id: w.ID(), ctime: c.env.now()}
	if p := (Position{LedgerID: w.ID(), EntryID: -1}); c.lastConfirmed.Less(p) {
		c.lastConfirmed = p
	}
	if err := c.becomeLedgerOpened(); err != nil {
		return
	}
	c.tracef("ledger %d opened", w.ID())
	if c.cfg.MaxLedgerRolloverTime > 0 {
		c.armRolloverTimer(c.cfg.MaxLedgerRolloverTime)
	}
	for i := 0; i < c.adds.len() && c.state == StateLedgerOpened; i++ {
		if op := c.adds.at(i); op.status == opQueued {
			c.issue(op)
			c.checkFull()
		}
	}
	c.maybeTrim()
	c.offloadStep() // the previous ledger is closed now
}

// terminate seals the log (M1–M3): Terminating rejects new adds and rollovers, fails queued
// adds, closes the current ledger (never creates one), and records the terminated position —
// the closed ledger's last entry — before reporting Terminated.
func (c *core) terminate(reply func(Position, error)) {
	switch c.state {
	case StateTerminated:
		reply(*c.info().Terminated, nil)
		return
	case StateTerminating:
		c.terminateWaiters = append(c.terminateWaiters, reply)
		return
	case StateFenced:
		reply(Position{}, c.stateErr)
		return
	case StateOpening, StateClosing, StateClosed:
		reply(Position{}, ErrClosed)
		return
	}
	prev := c.state
	if err := c.becomeTerminating(); err != nil {
		reply(Position{}, err)
		return
	}
	c.terminateWaiters = append(c.terminateWaiters, reply)
	c.stopRolloverTimer()
	if !c.mut.terminateKeepsQueued {
		c.failQueued(ErrTerminated)
	}
	c.completeHead()
	switch prev {
	case StateLedgerOpened:
		c.closing = &closeOp{ledger: c.w.ID()}
		c.issueClose()
	case StateClosingLedger:
		if !c.closing.issued {
			c.issueClose()
		}
	case StateCreatingLedger, StateWriteFailed:
		c.attempt++ // a creation in flight lost the race
		c.recordTerminated(Position{LedgerID: c.tail.id, EntryID: c.tail.entries - 1})
	}
}

// recordTerminated writes the terminated position; ledgers after it (a rollover's ledger that
// lost the race) leave the record in the same update and are deleted after it (M3).
func (c *core) recordTerminated(pos Position) {
	c.terminatePos = pos
	tail := c.tail
	closedAt := c.env.now().UnixMilli()
	var removed []int64
	c.ml.enqueue(&metaOp[*Info]{name: "terminate", apply: func(in *Info) error {
		if t := in.Terminated; t != nil {
			if *t == pos {
				return nil // our earlier ambiguous write went through (removed is from it)
			}
			return assertionFailedf("terminated at %v, record says %v", pos, *t)
		}
		i := in.ledger(pos.LedgerID)
		if i < 0 {
			return assertionFailedf("terminated ledger %d not in the record", pos.LedgerID)
		}
		if c.mut.terminateNamesRolloverLedger && i+1 < len(in.Ledgers) {
			i = len(in.Ledgers) - 1
			pos = Position{LedgerID: in.Ledgers[i].ID, EntryID: -1}
		}
		removed = nil
		if !c.mut.keepLostRaceLedger {
			for _, l := range in.Ledgers[i+1:] {
				removed = append(removed, l.ID)
			}
			in.Ledgers = in.Ledgers[:i+1]
		}
		l := &in.Ledgers[i]
		if l.ID == tail.id {
			l.Entries, l.Size = tail.entries, tail.size
		}
		if l.Closed == 0 {
			l.Closed = closedAt
		}
		in.Terminated = &pos
		return nil
	}, done: func(err error) {
		if c.mut.silentReopen && c.state.Writable() {
			c.state = StateTerminating // on purpose: the silent reopen ends back in Terminated
		}
		if err != nil {
			for _, id := range removed {
				if !c.info().has(id) { // an earlier attempt removed it before we were fenced
					c.deleteLedger(id)
				}
			}
			c.becomeFenced(err)
			return
		}
		if c.becomeTerminated() != nil {
			return
		}
		c.log.Info("managed ledger terminated", "position", pos)
		if c.lastConfirmed.Less(pos) {
			c.lastConfirmed = pos
		}
		ws := c.terminateWaiters
		c.terminateWaiters = nil
		for _, wt := range ws {
			wt(pos, nil)
		}
		for _, id := range removed {
			c.deleteLedger(id)
		}
		c.wakeReaders()
		if c.closeRequested {
			c.startClose()
		}
	}})
}
