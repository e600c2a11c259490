package mledger

import (
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/metadata"
)

// openState tracks the opening sequence: read the record, claim it (our owner token, next
// epoch), recover the last ledger (fencing any previous owner's writer), recover the cursors,
// then create a writable ledger and record it — or, if the log is terminated, stop there.
type openState struct {
	reply       func(error)
	seq         uint64 // tags the opening's completions
	attempts    int
	cursorsLeft int
}

func (c *core) open(reply func(error)) {
	c.opening = &openState{reply: reply}
	c.openGet()
}

func (c *core) openTag() (uint64, func() bool) {
	o := c.opening
	o.seq++
	seq := o.seq
	return seq, func() bool { return c.opening == o && o.seq == seq && c.state == StateOpening }
}

// openRetry retries step after a backoff, or fails the open after OpenAttempts.
func (c *core) openRetry(what string, err error, step func()) {
	o := c.opening
	o.attempts++
	if o.attempts >= c.cfg.OpenAttempts {
		c.failOpen(fmt.Errorf("open %s: %s: %w", c.name, what, err))
		return
	}
	c.tracef("open: %s failed (%v): retrying", what, err)
	_, live := c.openTag()
	c.env.after(c.backoff(o.attempts), "open.retry", func() {
		if live() {
			step()
		}
	})
}

func (c *core) openGet() {
	_, live := c.openTag()
	c.ms.Get(c.key, func(kv metadata.KV, err error) {
		c.env.post("open.get-done", func() {
			if live() {
				c.onOpenGet(kv, err)
			}
		})
	})
}

func (c *core) onOpenGet(kv metadata.KV, err error) {
	var claim *Info
	expected := kv.Version
	switch {
	case errors.Is(err, metadata.ErrNotFound):
		if c.cfg.MustExist {
			c.failOpen(fmt.Errorf("%w: %s", ErrNotFound, c.name))
			return
		}
		claim = &Info{Format: infoFormat, Properties: c.cfg.Properties}
		expected = metadata.NotExists
	case err != nil:
		c.openRetry("read record", err, c.openGet)
		return
	default:
		in, derr := decodeInfo(kv.Value)
		if derr != nil {
			c.failOpen(derr)
			return
		}
		claim = in
	}
	claim.Owner = c.token
	claim.Epoch++
	_, live := c.openTag()
	c.ms.Put(c.key, claim.marshal(), expected, func(v metadata.Version, err error) {
		c.env.post("open.claim-done", func() {
			if !live() {
				return
			}
			if err != nil {
				// Another opener, or an ambiguous failure: read again and decide again.
				c.openRetry("claim record", err, c.openGet)
				return
			}
			c.onOpenClaimed(claim, v)
		})
	})
}

func (c *core) onOpenClaimed(in *Info, v metadata.Version) {
	c.tracef("claimed record at epoch %d (v%d)", in.Epoch, v)
	c.epoch = in.Epoch
	c.ml = newMetaWriter(c, c.key, decodeInfo, in, v)
	c.ml.onFenced = c.becomeFenced
	c.opening.attempts = 0
	last := in.last()
	switch {
	case in.Terminated != nil:
		c.tail = tailLedger{id: last.ID, entries: last.Entries, size: last.Size, closed: true}
		c.lastConfirmed = *in.Terminated
		c.openCursors()
	case last == nil:
		c.lastConfirmed = Earliest
		c.openCursors()
	case last.Closed != 0 && last.Offload != nil && last.Offload.BookkeeperDeleted:
		// Sealed, offloaded and gone from the bookies (a ledger left last when a lost-race
		// rollover ledger after it was dropped): nothing to recover.
		c.tail = tailLedger{id: last.ID, entries: last.Entries, size: last.Size, closed: true}
		c.lastConfirmed = Position{LedgerID: last.ID, EntryID: last.Entries - 1}
		c.openCursors()
	default:
		c.openRecoverLast(last.ID)
	}
}

func (c *core) openRecoverLast(id int64) {
	_, live := c.openTag()
	c.bk.OpenRecover(id, c.cfg.Password, func(end LedgerEnd, err error) {
		c.env.post("open.recover-done", func() {
			if !live() {
				return
			}
			switch {
			case errors.Is(err, ErrNoSuchLedger):
				c.failOpen(fmt.Errorf("open %s: last ledger %d: %w", c.name, id, err))
			case err != nil:
				c.openRetry(fmt.Sprintf("recover ledger %d", id), err, func() { c.openRecoverLast(id) })
			default:
				c.tracef("recovered ledger %d: last entry %d", id, end.LastEntry)
				c.tail = tailLedger{id: id, entries: end.LastEntry + 1, size: end.Size, closed: true}
				c.lastConfirmed = Position{LedgerID: id, EntryID: end.LastEntry}
				c.opening.attempts = 0
				c.openCursors()
			}
		})
	})
}

func (c *core) openCursors() {
	_, live := c.openTag()
	c.ms.List(metadata.ManagedCursorPrefix(c.name), func(kvs []metadata.KV, err error) {
		c.env.post("open.cursors-listed", func() {
			if !live() {
				return
			}
			if err != nil {
				c.openRetry("list cursors", err, c.openCursors)
				return
			}
			o := c.opening
			o.cursorsLeft = len(kvs) + 1
			done := func(err error) {
				if c.opening != o || c.state != StateOpening {
					return
				}
				if err != nil {
					c.failOpen(err)
					return
				}
				if o.cursorsLeft--; o.cursorsLeft == 0 {
					c.openFinish()
				}
			}
			for _, kv := range kvs {
				c.recoverCursor(kv, done)
			}
			done(nil)
		})
	})
}

func (c *core) openFinish() {
	if c.info().Terminated != nil {
		if c.becomeTerminated() == nil {
			c.openDone()
		}
		return
	}
	c.attempt++
	a := c.attempt
	if c.hooks.createLedger != nil {
		c.hooks.createLedger("data", c.state)
	}
	_, live := c.openTag()
	c.bk.Create(c.ledgerConfig("data"), func(w Writer, err error) {
		c.env.post("open.create-done", func() {
			if !live() || a != c.attempt {
				if err == nil {
					c.discardWriter(w, true)
				}
				return
			}
			if err != nil {
				c.openRetry("create ledger", err, c.openFinish)
				return
			}
			c.openRecord(w)
		})
	})
}

// openRecord records the recovered last ledger's statistics (dropping it if it is empty) and
// the new ledger.
func (c *core) openRecord(w Writer) {
	tail := c.tail
	now := c.env.now().UnixMilli()
	var dropped int64 = -1
	c.ml.enqueue(&metaOp[*Info]{name: "open", apply: func(in *Info) error {
		if in.has(w.ID()) {
			return nil // our earlier ambiguous write went through (dropped is from it)
		}
		dropped = -1
		if last := in.last(); last != nil {
			if last.ID != tail.id {
				return assertionFailedf("record ends at ledger %d, recovered %d", last.ID, tail.id)
			}
			if tail.entries == 0 {
				dropped = last.ID
				in.Ledgers = in.Ledgers[:len(in.Ledgers)-1]
			} else {
				last.Entries, last.Size, last.Closed = tail.entries, tail.size, now
			}
		}
		in.Ledgers = append(in.Ledgers, LedgerInfo{ID: w.ID(), CTime: now})
		return nil
	}, done: func(err error) {
		if c.state != StateOpening {
			c.discardWriter(w, !c.info().has(w.ID()))
			return
		}
		if err != nil {
			c.discardWriter(w, !c.info().has(w.ID()))
			if dropped >= 0 && !c.info().has(dropped) {
				c.deleteLedger(dropped) // an earlier attempt dropped it before we were fenced
			}
			c.failOpen(err)
			return
		}
		if dropped >= 0 {
			c.deleteLedger(dropped)
		}
		c.openLedger(w)
		if c.state == StateLedgerOpened {
			c.openDone()
		}
	}})
}

func (c *core) openDone() {
	o := c.opening
	c.opening = nil
	c.armPeriodic()
	defer c.offloadStep() // orphan attempts of an earlier owner first
	c.log.Debug("managed ledger opened", "state", c.state, "ledgers", len(c.info().Ledgers))
	o.reply(nil)
	if c.closeRequested {
		c.startClose()
	}
}

func (c *core) failOpen(err error) {
	o := c.opening
	if o == nil {
		return
	}
	c.opening = nil
	c.stateErr = err
	c.tracef("open failed: %v", err)
	for _, cur := range c.cursors {
		cur.closed = true
		cur.lgen++
	}
	if c.becomeOpenFailedState() != nil {
		return
	}
	o.reply(err)
	c.finishClosed()
}
