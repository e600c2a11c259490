package mledger

import (
	"errors"
	"time"
)

// closeML closes the managed ledger: adds in flight are decided by the close of the current
// ledger, queued ones fail, cursors write their state into their records. A Close during
// Terminating waits for the terminate to finish.
func (c *core) closeML(reply func(error)) {
	switch c.state {
	case StateClosed:
		reply(nil)
		return
	case StateClosing:
		c.closeWaiters = append(c.closeWaiters, reply)
		return
	case StateTerminating, StateOpening:
		c.closeWaiters = append(c.closeWaiters, reply)
		c.closeRequested = true
		return
	}
	c.closeWaiters = append(c.closeWaiters, reply)
	c.startClose()
}

// deleteML closes the managed ledger and deletes it: cursor records, then the managed
// ledger's record, then every ledger (metadata first: a crash leaks ledgers, never leaves a
// record naming a deleted ledger).
func (c *core) deleteML(reply func(error)) {
	if c.state == StateFenced {
		reply(c.stateErr)
		return
	}
	if c.state == StateClosed {
		reply(ErrClosed)
		return
	}
	c.deleteRequested = true
	c.closeML(reply)
}

func (c *core) startClose() {
	prev := c.state
	if c.becomeClosingState() != nil {
		return
	}
	c.stopRolloverTimer()
	c.stopPeriodic()
	c.offloadStop()
	c.attempt++
	c.failQueued(ErrClosed)
	switch prev {
	case StateLedgerOpened:
		c.closing = &closeOp{ledger: c.w.ID()}
		c.issueClose()
	case StateClosingLedger:
		if !c.closing.issued {
			c.issueClose()
		}
	}
	c.completeHead()
	for _, wt := range c.terminateWaiters {
		wt(Position{}, ErrClosed)
	}
	c.terminateWaiters = nil
	for _, cur := range c.sortedCursors() {
		c.cursorClose(cur)
	}
	for cur := range c.nonDurable {
		c.cursorClose(cur) // no I/O: order does not matter
	}
	c.wakeReaders()
	c.maybeFinishClose()
}

// busy reports whether port operations that Close waits for are in flight.
func (c *core) busy() bool {
	if c.closing != nil || c.pending > 0 || (c.ml != nil && !c.ml.idle()) {
		return true
	}
	for _, cur := range c.cursors {
		if cur.rec != nil && !cur.rec.idle() {
			return true
		}
	}
	return false
}

func (c *core) maybeFinishClose() {
	if c.state != StateClosing || c.busy() {
		return
	}
	if c.deleteRequested {
		c.deleteRequested = false
		if c.ml.fenced == nil {
			c.startDelete()
			return
		}
	}
	if c.becomeClosedState() != nil {
		return
	}
	c.log.Debug("managed ledger closed")
	c.finishClosed()
}

// finishClosed answers everything still waiting (the owner stops after this step).
func (c *core) finishClosed() {
	err := c.deleteErr
	if c.opening != nil || c.ml == nil {
		err = c.stateErr // opening failed
	}
	ws := c.closeWaiters
	c.closeWaiters = nil
	for _, w := range ws {
		w(err)
	}
	for _, wt := range c.terminateWaiters {
		wt(Position{}, ErrClosed)
	}
	c.terminateWaiters = nil
	for _, op := range c.waiters {
		op.parked = false
		op.reply(nil, ErrClosed)
	}
	c.waiters = nil
	for _, cur := range c.sortedCursors() {
		for _, fw := range cur.flushWaiters {
			fw.done(ErrClosed)
		}
		cur.flushWaiters = nil
	}
}

func (c *core) startDelete() {
	c.tracef("deleting")
	var ledgers []int64
	var offloaded []OffloadedLedger
	for _, l := range c.info().Ledgers {
		ledgers = append(ledgers, l.ID)
		if oc := l.Offload; oc != nil {
			offloaded = append(offloaded, OffloadedLedger{ManagedLedger: c.name, LedgerID: l.ID, UUID: oc.UUID,
				DriverMetadata: oc.DriverMetadata})
		}
	}
	left := len(c.cursors) + 1
	var firstErr error
	step := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if left--; left > 0 {
			return
		}
		if firstErr != nil {
			c.deleteErr = firstErr
			c.maybeFinishClose()
			return
		}
		c.ml.enqueue(&metaOp[*Info]{name: "delete", del: true, done: func(err error) {
			if err != nil {
				c.deleteErr = err
			} else {
				for _, id := range ledgers {
					c.deleteLedger(id)
				}
				for _, ref := range offloaded {
					c.deleteOffloaded(ref, nil)
				}
			}
			c.maybeFinishClose()
		}})
	}
	for _, cur := range c.sortedCursors() {
		name := cur.name
		var inRecord int64 = -1
		cur.rec.enqueue(&metaOp[*CursorInfo]{name: "cursor-delete", del: true, apply: func(ci *CursorInfo) error {
			inRecord = ci.Ledger
			return nil
		}, done: func(err error) {
			if err == nil {
				delete(c.cursors, name)
				if inRecord >= 0 {
					c.deleteLedger(inRecord)
				}
			}
			step(err)
		}})
	}
	step(nil)
}

// Trimming.

// slowestPersisted returns the lowest durable mark-delete position of the durable cursors,
// or the last confirmed position if there are none.
func (c *core) slowestPersisted() Position {
	p := c.lastConfirmed
	for _, cur := range c.cursors {
		p = minPos(p, cur.persistedMD)
	}
	return p
}

// maybeTrim deletes ledgers every durable cursor has consumed (by its persisted mark-delete
// position) once retention allows — never the last ledger. The record is updated first, the
// ledgers deleted after.
func (c *core) maybeTrim() { c.trim(nil) }

// trim runs a trim (after the one in flight, if any, when done is set) and calls done once
// its metadata update is over.
func (c *core) trim(done func()) {
	if done == nil {
		done = func() {}
	}
	switch c.state {
	case StateLedgerOpened, StateClosingLedger, StateWriteFailed, StateTerminated:
	default:
		done()
		return
	}
	if c.trimming {
		c.afterTrim = append(c.afterTrim, func() { c.trim(done) })
		return
	}
	slowest := c.slowestPersisted()
	in := c.info()
	var total int64
	for _, l := range in.Ledgers {
		if l.ID == c.tail.id {
			total += c.tail.size // live
		} else {
			total += l.Size
		}
	}
	now := c.env.now()
	rt, rs := c.cfg.RetentionTime, c.cfg.RetentionSize
	var ids []int64
	var freed int64
	for i := 0; i < len(in.Ledgers)-1; i++ {
		l := in.Ledgers[i]
		consumed := l.ID < slowest.LedgerID || (l.ID == slowest.LedgerID && slowest.EntryID >= l.Entries-1)
		if !consumed {
			break
		}
		expired := rt == 0 || (rt > 0 && now.Sub(time.UnixMilli(l.Closed)) >= rt)
		over := rs == 0 || (rs > 0 && total-freed > rs)
		if !expired && !over {
			break
		}
		ids = append(ids, l.ID)
		freed += l.Size
	}
	if len(ids) == 0 {
		done()
		return
	}
	c.trimming = true
	if c.mut.trimDeletesBlobsFirst {
		for _, id := range ids { // on purpose: before the record drops the ledgers
			if i := in.ledger(id); i >= 0 && in.Ledgers[i].Offload != nil {
				oc := in.Ledgers[i].Offload
				c.deleteOffloaded(OffloadedLedger{ManagedLedger: c.name, LedgerID: id, UUID: oc.UUID}, nil)
			}
		}
	}
	var removed []int64
	var removedInfo []LedgerInfo // as the record had them: their offload contexts name the objects to delete
	c.ml.enqueue(&metaOp[*Info]{name: "trim", apply: func(in *Info) error {
		var now []int64
		var nowInfo []LedgerInfo
		for len(in.Ledgers) > 1 && len(now) < len(ids) && in.Ledgers[0].ID == ids[len(now)] {
			now = append(now, in.Ledgers[0].ID)
			nowInfo = append(nowInfo, in.Ledgers[0])
			in.Ledgers = in.Ledgers[1:]
		}
		switch {
		case len(now) > 0:
			removed, removedInfo = now, nowInfo
		case removed == nil:
			return errStale
		}
		return nil // else our earlier ambiguous write went through (removed is from it)
	}, done: func(err error) {
		c.trimming = false
		defer done()
		defer func() {
			fns := c.afterTrim
			c.afterTrim = nil
			for _, fn := range fns {
				fn()
			}
		}()
		if err != nil {
			if errors.Is(err, ErrFenced) && removed != nil {
				// An earlier attempt may have removed them before the new owner claimed the
				// record (ledgers never come back to a record): delete what it no longer names.
				var gone []LedgerInfo
				for _, id := range ids {
					if !c.info().has(id) {
						c.deleteLedger(id)
						for _, l := range removedInfo {
							if l.ID == id {
								gone = append(gone, l)
							}
						}
					}
				}
				c.offloadTrimmed(gone)
			}
			c.maybeFinishClose()
			return
		}
		c.tracef("trimmed ledgers %v", removed)
		for _, id := range removed {
			c.deleteLedger(id)
		}
		c.offloadTrimmed(removedInfo)
	}})
}

// Periodic work: trimming, cursor snapshots and the flush of held cursors.

func (c *core) armPeriodic() {
	var trim, snap func()
	trim = func() {
		if c.state == StateClosing || c.state == StateClosed || c.state == StateFenced {
			return
		}
		c.maybeTrim()
		c.offloadStep()
		c.trimTimer = c.env.after(c.cfg.TrimInterval, "trim.timer", trim)
	}
	snap = func() {
		if c.state == StateClosing || c.state == StateClosed || c.state == StateFenced {
			return
		}
		for _, cur := range c.sortedCursors() {
			if !cur.closed {
				c.cursorSnapshot(cur)
			}
		}
		c.snapTimer = c.env.after(c.cfg.CursorSnapshotInterval, "snapshot.timer", snap)
	}
	var flush func()
	flush = func() {
		if c.state == StateClosing || c.state == StateClosed || c.state == StateFenced {
			return
		}
		c.flushHeld()
		c.flushTimer = c.env.after(c.cfg.CursorFlushInterval, "cursor-flush.timer", flush)
	}
	c.trimTimer = c.env.after(c.cfg.TrimInterval, "trim.timer", trim)
	c.snapTimer = c.env.after(c.cfg.CursorSnapshotInterval, "snapshot.timer", snap)
	c.flushTimer = c.env.after(c.cfg.CursorFlushInterval, "cursor-flush.timer", flush)
}

func (c *core) stopPeriodic() {
	if c.trimTimer != nil {
		c.trimTimer()
		c.trimTimer = nil
	}
	if c.snapTimer != nil {
		c.snapTimer()
		c.snapTimer = nil
	}
	if c.flushTimer != nil {
		c.flushTimer()
		c.flushTimer = nil
	}
}

// setProperty records a property of the managed ledger.
func (c *core) setProperty(k, v string, reply func(error)) {
	if err := c.cursorUsable(); err != nil {
		reply(err)
		return
	}
	c.ml.enqueue(&metaOp[*Info]{name: "property", apply: func(in *Info) error {
		if in.Properties == nil {
			in.Properties = map[string]string{}
		}
		if v == "" {
			delete(in.Properties, k)
		} else {
			in.Properties[k] = v
		}
		return nil
	}, done: reply})
}
