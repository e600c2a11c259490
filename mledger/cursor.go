package mledger

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
)

// cursorLedgerState is where a durable cursor's ledger is in its life.
type cursorLedgerState uint8

const (
	// cursorNoLedger: no ledger to append states to; the next flush creates one. (After
	// recovery the record still names the previous owner's ledger, deleted on the switch.)
	cursorNoLedger cursorLedgerState = iota
	// cursorCreatingLedger: a ledger is being created.
	cursorCreatingLedger
	// cursorSwitchingLedger: the new ledger holds its first state; the record is being
	// switched to it. The old ledger is deleted after the switch.
	cursorSwitchingLedger
	// cursorLedgerReady: states are appended to lw.
	cursorLedgerReady
)

var cursorLedgerStateNames = [...]string{"NoLedger", "CreatingLedger", "SwitchingLedger", "LedgerReady"}

func (s cursorLedgerState) String() string {
	if int(s) < len(cursorLedgerStateNames) {
		return cursorLedgerStateNames[s]
	}
	return fmt.Sprintf("cursorLedgerState(%d)", uint8(s))
}

// cursor is a subscription position on the log, owned by the managed ledger's owner.
//
// Invariants: every position <= md is acknowledged; acks holds only positions > md; batches
// holds only partly acknowledged entries > md that are not in acks; persistedMD <= md.
type cursor struct {
	name    string
	durable bool
	md      Position // mark-delete position
	readPos Position // next read starts at the first unacknowledged entry >= max(readPos, md+1)
	acks    ackSet
	batches map[Position]*batchBits
	seq     uint64 // bumped on every state change
	// props are the cursor's properties (CursorState.Properties): part of every state
	// written, so they persist and recover with the acknowledgements (nil: none).
	props   map[string]int64
	reading *readOp
	closed  bool

	// Durable cursors only.
	rec          *metaWriter[*CursorInfo]
	lstate       cursorLedgerState
	lw           Writer
	lentries     int
	lgen         uint64 // tags cursor-ledger operations
	lfails       int
	appending    bool
	dirty        bool
	persistedMD  Position // the newest state known durable (ledger entry or record)
	persistedSeq uint64
	snapSeq      uint64 // the seq of the state in the record
	flushWaiters []flushWaiter
	// The mark-delete rate (markdelete.go). Invariant: hold != persistFree ⇒ dirty or a
	// write in flight; heldSince is set iff hold == persistHeld.
	hold      persistHold
	heldSince time.Time
	tokens    float64   // persist tokens left
	tokensAt  time.Time // when tokens was last refilled (zero: never, the bucket is full)
}

type flushWaiter struct {
	seq  uint64
	done func(error)
}

func newCursor(name string, durable bool, md Position) *cursor {
	return &cursor{name: name, durable: durable, md: md, readPos: after(md), batches: map[Position]*batchBits{}}
}

func (cur *cursor) acked(p Position) bool {
	if !cur.md.Less(p) || cur.acks.contains(p) {
		return true
	}
	b := cur.batches[p]
	return b != nil && b.full()
}

// snapshot returns the cursor's state, with at most max acknowledged ranges.
func (cur *cursor) snapshot(maxRanges int) *CursorState {
	st := &CursorState{Seq: cur.seq, MarkDelete: cur.md, Properties: maps.Clone(cur.props)}
	r := cur.acks.r
	if len(r) > maxRanges {
		r, st.Truncated = r[:maxRanges], true
	}
	st.Acked = append([]AckRange(nil), r...)
	for p, b := range cur.batches {
		st.Batches = append(st.Batches, BatchAck{Pos: p, Size: b.size, Acked: append([]uint64(nil), b.words...)})
	}
	slices.SortFunc(st.Batches, func(a, b BatchAck) int { return a.Pos.Compare(b.Pos) })
	return st
}

func (cur *cursor) restore(st *CursorState) {
	cur.seq, cur.md = st.Seq, st.MarkDelete
	cur.props = maps.Clone(st.Properties)
	cur.acks = ackSet{r: append([]AckRange(nil), st.Acked...)}
	cur.batches = map[Position]*batchBits{}
	for _, b := range st.Batches {
		bb := newBatchBits(b.Size)
		copy(bb.words, b.Acked)
		cur.batches[b.Pos] = bb
	}
	cur.readPos = after(cur.md)
}

// cursorUsable reports why cursors cannot be used in the current state (nil: they can).
func (c *core) cursorUsable() error {
	switch c.state {
	case StateFenced:
		return c.stateErr
	case StateOpening, StateClosing, StateClosed:
		return ErrClosed
	}
	return nil
}

// openCursor opens (creating if needed) the durable cursor name. A new cursor starts at
// start: Earliest, Latest, or a position (the first entry it delivers).
func (c *core) openCursor(name string, start Position, reply func(*cursor, error)) {
	if err := c.cursorUsable(); err != nil {
		reply(nil, err)
		return
	}
	if name == "" || strings.Contains(name, "/") {
		reply(nil, fmt.Errorf("%w: cursor name %q", ErrInvalidArgument, name))
		return
	}
	if cur, ok := c.cursors[name]; ok {
		cur.closed = false
		reply(cur, nil)
		return
	}
	if c.trimming {
		// A trim decided without this cursor is in flight: create the cursor after it, so
		// that its start is in the log it will read.
		c.afterTrim = append(c.afterTrim, func() { c.openCursor(name, start, reply) })
		return
	}
	cur := newCursor(name, true, c.initialMD(start))
	cur.seq = 1
	c.cursors[name] = cur
	ci := &CursorInfo{Format: infoFormat, Owner: c.token, Epoch: c.epoch, Ledger: -1,
		State: *cur.snapshot(c.cfg.MaxUnackedRangesToPersist)}
	cur.rec = newMetaWriter(c, metadata.ManagedCursorKey(c.name, name), decodeCursorInfo, ci, metadata.NotExists)
	cur.rec.onFenced = c.becomeFenced
	cur.rec.enqueue(&metaOp[*CursorInfo]{name: "cursor-create", claim: true, apply: func(ci *CursorInfo) error {
		if ci.Epoch > c.epoch {
			return fmt.Errorf("%w: cursor %s claimed at epoch %d", ErrFenced, name, ci.Epoch)
		}
		ci.Owner, ci.Epoch = c.token, c.epoch
		return nil
	}, done: func(err error) {
		if err != nil {
			delete(c.cursors, name)
			reply(nil, err)
			return
		}
		cur.restore(&cur.rec.cur.State) // ours, or the record's if it existed already
		cur.persistedMD, cur.persistedSeq, cur.snapSeq = cur.md, cur.seq, cur.seq
		c.tracef("cursor %s created at %v", name, cur.md)
		reply(cur, nil)
	}})
}

// openNonDurable opens an in-memory cursor (for readers); it does not hold trimming.
func (c *core) openNonDurable(start Position) (*cursor, error) {
	if err := c.cursorUsable(); err != nil {
		return nil, err
	}
	cur := newCursor("", false, c.initialMD(start))
	c.nonDurable[cur] = struct{}{}
	return cur, nil
}

func (c *core) initialMD(start Position) Position {
	switch start {
	case Latest:
		return c.lastConfirmed
	case Earliest:
		return Earliest
	}
	return c.before(start)
}

// before returns the last readable position before p, or (p's ledger, p's entry - 1) if
// there is none.
func (c *core) before(p Position) Position {
	if p == Earliest {
		return Earliest
	}
	if p.EntryID > 0 {
		return Position{LedgerID: p.LedgerID, EntryID: p.EntryID - 1}
	}
	ls := c.info().Ledgers
	for i := len(ls) - 1; i >= 0; i-- {
		if id := ls[i].ID; id < p.LedgerID {
			if last := c.lastEntryOf(id); last >= 0 {
				return Position{LedgerID: id, EntryID: last}
			}
		}
	}
	return Position{LedgerID: p.LedgerID, EntryID: p.EntryID - 1}
}

// recoverCursor loads a durable cursor at open: the newer of the record's snapshot and the
// last state in its ledger (which recovery fences, so a previous owner can add no more), and
// claims the record.
func (c *core) recoverCursor(kv metadata.KV, done func(error)) {
	name := strings.TrimPrefix(kv.Key, metadata.ManagedCursorPrefix(c.name))
	ci, err := decodeCursorInfo(kv.Value)
	if err != nil {
		done(fmt.Errorf("cursor %s: %w", name, err))
		return
	}
	cur := newCursor(name, true, ci.State.MarkDelete)
	c.cursors[name] = cur
	cur.rec = newMetaWriter(c, kv.Key, decodeCursorInfo, ci, kv.Version)
	cur.rec.onFenced = c.becomeFenced
	c.recoverCursorState(cur, ci, done)
}

// errRecoverAgain: the cursor record names another ledger than the one recovered (a previous
// owner switched meanwhile); recover that one too before claiming.
var errRecoverAgain = errors.New("mledger: cursor ledger switched during recovery")

func (c *core) recoverCursorState(cur *cursor, ci *CursorInfo, done func(error)) {
	name := cur.name
	best := ci.State.clone()
	recovered := ci.Ledger // fenced by the recovery below: its writer can add no more
	finish := func() {
		cur.rec.enqueue(&metaOp[*CursorInfo]{name: "cursor-claim", claim: true, apply: func(ci *CursorInfo) error {
			if ci.Epoch > c.epoch {
				return fmt.Errorf("%w: cursor %s claimed at epoch %d", ErrFenced, name, ci.Epoch)
			}
			if ci.Ledger != recovered {
				return errRecoverAgain
			}
			ci.Owner, ci.Epoch = c.token, c.epoch
			if ci.State.Seq < best.Seq {
				ci.State = *best.clone()
			}
			return nil
		}, done: func(err error) {
			if errors.Is(err, errRecoverAgain) && c.state == StateOpening {
				c.tracef("cursor %s switched to ledger %d during recovery: recovering it", name, cur.rec.cur.Ledger)
				c.recoverCursorState(cur, cur.rec.cur.clone(), done)
				return
			}
			if err != nil {
				done(fmt.Errorf("cursor %s: %w", name, err))
				return
			}
			cur.restore(&cur.rec.cur.State)
			cur.persistedMD, cur.persistedSeq, cur.snapSeq = cur.md, cur.seq, cur.seq
			c.tracef("cursor %s recovered at %v (seq %d)", name, cur.md, cur.seq)
			done(nil)
		}})
	}
	if ci.Ledger < 0 {
		finish()
		return
	}
	attempts := 0
	var recoverLedger func()
	retry := func(err error) {
		attempts++
		if attempts >= c.cfg.OpenAttempts {
			done(fmt.Errorf("cursor %s: recover ledger %d: %w", name, ci.Ledger, err))
			return
		}
		c.env.after(c.backoff(attempts), "cursor.recover.retry", recoverLedger)
	}
	recoverLedger = func() {
		c.bk.OpenRecover(ci.Ledger, c.cfg.Password, func(end LedgerEnd, err error) {
			c.env.post("cursor.recovered", func() {
				if c.state != StateOpening {
					return
				}
				switch {
				case errors.Is(err, ErrNoSuchLedger):
					finish() // deleted after a switch that the snapshot already reflects
					return
				case err != nil:
					retry(err)
					return
				case end.LastEntry < 0:
					finish()
					return
				}
				c.bk.Read(ci.Ledger, c.cfg.Password, end.LastEntry, end.LastEntry, func(d [][]byte, err error) {
					c.env.post("cursor.read-last", func() {
						if c.state != StateOpening {
							return
						}
						if err != nil || len(d) != 1 {
							retry(fmt.Errorf("read last state: %v (%d entries)", err, len(d)))
							return
						}
						st, derr := decodeCursorState(d[0])
						if derr != nil {
							done(fmt.Errorf("cursor %s: %w", name, derr))
							return
						}
						if st.Seq > best.Seq {
							best = st
						}
						finish()
					})
				})
			})
		})
	}
	recoverLedger()
}

// Acknowledgements.

func (c *core) cursorAck(cur *cursor, ps []Position) {
	changed := false
	for _, p := range ps {
		if !cur.md.Less(p) || p.Compare(c.lastConfirmed) > 0 {
			continue
		}
		delete(cur.batches, p)
		if cur.acks.add(p) {
			changed = true
		}
	}
	if changed {
		c.cursorAdvance(cur)
		c.cursorChanged(cur)
	}
}

func (c *core) cursorAckCumulative(cur *cursor, p Position) {
	if !cur.md.Less(p) {
		return
	}
	p = minPos(p, c.lastConfirmed)
	cur.md = p
	c.cursorAdvance(cur)
	c.cursorChanged(cur)
}

// cursorAckBatch acknowledges message idx of the batch entry p of size messages; the entry is
// acknowledged once all its messages are.
func (c *core) cursorAckBatch(cur *cursor, p Position, idx, size int) error {
	if idx < 0 || size <= 0 || idx >= size {
		return fmt.Errorf("%w: batch index %d of %d", ErrInvalidArgument, idx, size)
	}
	if cur.acked(p) || p.Compare(c.lastConfirmed) > 0 {
		return nil
	}
	b := cur.batches[p]
	if b == nil {
		b = newBatchBits(size)
		cur.batches[p] = b
	} else if b.size != size {
		return fmt.Errorf("%w: batch %v has %d messages, not %d", ErrInvalidArgument, p, b.size, size)
	}
	if b.isSet(idx) {
		return nil
	}
	b.set(idx)
	if b.full() {
		c.cursorAck(cur, []Position{p})
		return nil
	}
	c.cursorChanged(cur)
	return nil
}

// cursorAdvance moves the mark-delete position over acknowledged ranges that follow it.
func (c *core) cursorAdvance(cur *cursor) {
	for {
		nx, ok := c.firstValid(after(cur.md))
		if !ok {
			break
		}
		r, in := cur.acks.span(nx)
		if !in {
			break
		}
		cur.md = Position{LedgerID: r.Ledger, EntryID: r.Last}
	}
	cur.acks.removeThrough(cur.md)
	for p := range cur.batches {
		if !cur.md.Less(p) {
			delete(cur.batches, p)
		}
	}
}

// cursorReset moves the cursor so that p is the next entry delivered, dropping every
// acknowledgement at or after it.
func (c *core) cursorReset(cur *cursor, p Position) {
	if p == Latest {
		p = after(c.lastConfirmed)
	}
	cur.md = c.before(p)
	cur.acks = ackSet{}
	cur.batches = map[Position]*batchBits{}
	cur.readPos = after(cur.md)
	c.cursorChanged(cur)
	c.wakeReaders()
}

// cursorSetProperty sets property key of cur to value, or removes it (remove): a state
// change like an acknowledgement, persisted with the state (the mark-delete position and
// the acknowledgements are unchanged). A reset keeps the properties.
func (c *core) cursorSetProperty(cur *cursor, key string, value int64, remove bool) {
	old, had := cur.props[key]
	switch {
	case remove && !had, !remove && had && old == value:
		return
	case remove:
		delete(cur.props, key)
	default:
		if cur.props == nil {
			cur.props = map[string]int64{}
		}
		cur.props[key] = value
	}
	c.cursorChanged(cur)
}

func (c *core) backlog(cur *cursor) int64 {
	n := c.countAfter(cur.md) - cur.acks.count()
	for p, b := range cur.batches {
		if b.full() && cur.md.Less(p) {
			n--
		}
	}
	return max(n, 0)
}

// Persistence.

func (c *core) cursorChanged(cur *cursor) {
	cur.seq++
	if cur.durable {
		cur.dirty = true
		c.cursorPersist(cur)
	}
}

// cursorFlush appends the cursor's state to its ledger (at most one append in flight; changes
// meanwhile coalesce into the next one), creating or switching the ledger when needed.
func (c *core) cursorFlush(cur *cursor) {
	if !cur.durable || cur.closed || !cur.dirty || cur.appending || c.state == StateFenced {
		return
	}
	switch cur.lstate {
	case cursorNoLedger:
		c.cursorCreateLedger(cur)
	case cursorLedgerReady:
		if cur.lentries >= c.cfg.CursorMaxEntriesPerLedger {
			c.cursorCreateLedger(cur)
			return
		}
		st := cur.snapshot(c.cfg.MaxUnackedRangesToPersist)
		if c.mut.ledgerStatesDropProps {
			st.Properties = nil
		}
		cur.dirty, cur.appending = false, true
		gen := cur.lgen
		c.pending++
		cur.lw.Append(encodeCursorState(st), func(_ int64, err error) {
			c.env.post("cursor.append-done", func() {
				c.pending--
				c.onCursorAppended(cur, gen, st, err)
				c.maybeFinishClose()
			})
		})
	}
}

func (c *core) cursorCreateLedger(cur *cursor) {
	cur.lstate = cursorCreatingLedger
	cur.lgen++
	gen := cur.lgen
	if c.hooks.createLedger != nil {
		c.hooks.createLedger("cursor", c.state)
	}
	c.pending++
	c.bk.Create(c.ledgerConfig("cursor:"+cur.name), func(w Writer, err error) {
		c.env.post("cursor.create-done", func() {
			c.pending--
			c.onCursorLedgerCreated(cur, gen, w, err)
			c.maybeFinishClose()
		})
	})
}

func (c *core) onCursorLedgerCreated(cur *cursor, gen uint64, w Writer, err error) {
	if gen != cur.lgen || cur.lstate != cursorCreatingLedger || c.state == StateFenced {
		if err == nil {
			c.discardWriter(w, true)
		}
		return
	}
	if err != nil {
		c.cursorLedgerFailed(cur, err)
		return
	}
	st := cur.snapshot(c.cfg.MaxUnackedRangesToPersist)
	cur.dirty, cur.appending, cur.lstate = false, true, cursorSwitchingLedger
	c.pending++
	w.Append(encodeCursorState(st), func(_ int64, err error) {
		c.env.post("cursor.first-append-done", func() {
			c.pending--
			c.onCursorFirstAppended(cur, gen, w, st, err)
			c.maybeFinishClose()
		})
	})
}

func (c *core) onCursorFirstAppended(cur *cursor, gen uint64, w Writer, st *CursorState, err error) {
	if gen != cur.lgen || cur.lstate != cursorSwitchingLedger {
		c.discardWriter(w, true)
		return
	}
	cur.appending = false
	if err != nil {
		c.discardWriter(w, true)
		if errors.Is(err, ErrLedgerFenced) {
			c.becomeFenced(err)
			return
		}
		cur.dirty = true
		c.cursorLedgerFailed(cur, err)
		return
	}
	var prev int64 = -1
	cur.rec.enqueue(&metaOp[*CursorInfo]{name: "cursor-switch", apply: func(ci *CursorInfo) error {
		if ci.Ledger == w.ID() {
			return nil // our earlier ambiguous write already switched (prev is from it)
		}
		if gen != cur.lgen {
			return errStale
		}
		prev = ci.Ledger
		ci.Ledger = w.ID()
		if ci.State.Seq < st.Seq {
			ci.State = *st.clone()
		}
		return nil
	}, done: func(err error) {
		if err != nil {
			if !errors.Is(err, ErrFenced) && (cur.rec.cur == nil || cur.rec.cur.Ledger != w.ID()) {
				c.discardWriter(w, false)
				if c.mut.deleteCursorSwitchAtOnce {
					c.deleteLedger(w.ID()) // on purpose: the timed-out switch may still land
					return
				}
				c.settleCursorSwitch(cur, w.ID(), prev)
				return
			}
			c.discardWriter(w, cur.rec.cur == nil || cur.rec.cur.Ledger != w.ID())
			if errors.Is(err, ErrFenced) {
				// An earlier attempt may have switched before we were fenced: a ledger the
				// record no longer names is ours to delete (ledgers never come back).
				if prev >= 0 && cur.rec.cur != nil && cur.rec.cur.Ledger != prev {
					c.deleteLedger(prev)
				}
				c.becomeFenced(err)
			}
			return
		}
		// The record names w now: the previous ledger goes (closing our writer of it).
		old := cur.lw
		if old != nil && old.ID() == prev {
			c.discardWriter(old, true)
		} else if prev >= 0 {
			c.deleteLedger(prev)
		}
		if gen != cur.lgen || cur.closed { // closed or fenced meanwhile (old was discarded then)
			c.discardWriter(w, false)
			return
		}
		if old != nil && old.ID() != prev {
			c.discardWriter(old, false)
		}
		cur.lw, cur.lentries, cur.lstate, cur.lfails = w, 1, cursorLedgerReady, 0
		c.cursorPersisted(cur, st)
		cur.snapSeq = max(cur.snapSeq, st.Seq)
		c.cursorPersist(cur)
	}})
}

// settleCursorSwitch decides the fate of cursor ledger id, whose switch failed: the switch may
// have timed out and still land later (etcd may apply a timed-out write after our re-read), so
// the decision waits for a later write of the record to succeed, when no earlier one can land.
// Then id goes if the record does not name it; if it does (the switch landed late), the ledger
// it replaced (prev) goes instead. The simulation's late applies (simports_test.go) exercise it.
func (c *core) settleCursorSwitch(cur *cursor, id, prev int64) {
	cur.rec.enqueue(&metaOp[*CursorInfo]{name: "cursor-switch-settle", apply: func(*CursorInfo) error { return nil },
		done: func(error) {
			switch ci := cur.rec.cur; {
			case ci == nil || ci.Ledger != id:
				c.deleteLedger(id)
			case prev >= 0 && prev != id:
				c.deleteLedger(prev)
			}
			c.maybeFinishClose()
		}})
}

func (c *core) onCursorAppended(cur *cursor, gen uint64, st *CursorState, err error) {
	if gen != cur.lgen || cur.lstate != cursorLedgerReady {
		return
	}
	cur.appending = false
	if err != nil {
		if errors.Is(err, ErrLedgerFenced) {
			c.becomeFenced(err)
			return
		}
		// The ledger is broken: states go to a new one (the record keeps naming this one
		// until the switch, which deletes it).
		cur.dirty = true
		c.cursorLedgerFailed(cur, err)
		return
	}
	cur.lentries++
	c.cursorPersisted(cur, st)
	if cur.closed {
		c.cursorCloseLedger(cur)
		return
	}
	c.cursorPersist(cur)
}

// cursorLedgerFailed falls back to a snapshot in the record and retries a ledger later.
func (c *core) cursorLedgerFailed(cur *cursor, err error) {
	c.tracef("cursor %s ledger failed: %v", cur.name, err)
	if cur.lw != nil && cur.lstate == cursorLedgerReady {
		c.discardWriter(cur.lw, false)
		cur.lw = nil
	}
	cur.lstate = cursorNoLedger
	cur.lfails++
	c.cursorSnapshot(cur)
	gen := cur.lgen
	c.env.after(c.backoff(cur.lfails), "cursor.ledger.retry", func() {
		if gen == cur.lgen && cur.lstate == cursorNoLedger {
			c.cursorPersist(cur)
		}
	})
}

// cursorSnapshot writes the cursor's state into its record.
func (c *core) cursorSnapshot(cur *cursor) {
	if !cur.durable || cur.seq <= cur.snapSeq || c.state == StateFenced {
		return
	}
	st := cur.snapshot(c.cfg.MaxUnackedRangesToPersist)
	cur.rec.enqueue(&metaOp[*CursorInfo]{name: "cursor-snapshot", apply: func(ci *CursorInfo) error {
		switch {
		case ci.State.Seq > st.Seq:
			return errStale
		case ci.State.Seq == st.Seq:
			return nil // this very state (e.g. our earlier ambiguous write)
		}
		ci.State = *st.clone()
		return nil
	}, done: func(err error) {
		switch {
		case err == nil:
			cur.snapSeq = max(cur.snapSeq, st.Seq)
			c.cursorPersisted(cur, st)
		case errors.Is(err, errStale):
		case errors.Is(err, ErrFenced):
			c.becomeFenced(err)
		}
		c.maybeFinishClose()
	}})
}

func (c *core) cursorPersisted(cur *cursor, st *CursorState) {
	if st.Seq > cur.persistedSeq {
		cur.persistedSeq, cur.persistedMD = st.Seq, st.MarkDelete
		if c.mut.persistedClaimsHeld {
			cur.persistedMD = cur.md
		}
	}
	kept := cur.flushWaiters[:0]
	for _, fw := range cur.flushWaiters {
		if fw.seq <= cur.persistedSeq {
			fw.done(nil)
		} else {
			kept = append(kept, fw)
		}
	}
	cur.flushWaiters = kept
	c.maybeTrim()
}

// cursorFlushWait calls done once the current state is durable.
func (c *core) cursorFlushWait(cur *cursor, done func(error)) {
	if !cur.durable || cur.persistedSeq >= cur.seq {
		done(nil)
		return
	}
	cur.flushWaiters = append(cur.flushWaiters, flushWaiter{seq: cur.seq, done: done})
	if cur.lstate == cursorNoLedger && !cur.appending {
		c.cursorSnapshot(cur)
	}
	c.cursorPersist(cur) // a waiter bypasses the mark-delete rate
}

// cursorClose writes the cursor's state into its record and closes its ledger.
func (c *core) cursorClose(cur *cursor) {
	if cur.closed {
		return
	}
	cur.closed = true
	if r := cur.reading; r != nil {
		r.cancelled = true
	}
	if !cur.durable {
		delete(c.nonDurable, cur)
		return
	}
	if c.mut.closeDropsHeld && cur.hold == persistHeld {
		cur.snapSeq = cur.seq
	}
	cur.becomeFree() // the snapshot below has the newest state
	c.cursorSnapshot(cur)
	if !cur.appending {
		c.cursorCloseLedger(cur)
	}
}

func (c *core) cursorCloseLedger(cur *cursor) {
	if cur.lw != nil {
		c.discardWriter(cur.lw, false)
		cur.lw = nil
	}
	cur.lstate, cur.appending = cursorNoLedger, false
	cur.lgen++
}

func (c *core) cursorFenced(cur *cursor) {
	for _, fw := range cur.flushWaiters {
		fw.done(c.stateErr)
	}
	cur.flushWaiters = nil
	cur.lgen++
	if cur.lw != nil {
		c.discardWriter(cur.lw, false)
		cur.lw = nil
	}
	cur.lstate, cur.appending = cursorNoLedger, false
}

// deleteCursor removes a durable cursor: its record first, then its ledgers.
func (c *core) deleteCursor(name string, reply func(error)) {
	if err := c.cursorUsable(); err != nil {
		reply(err)
		return
	}
	cur, ok := c.cursors[name]
	if !ok {
		reply(fmt.Errorf("%w: %s", ErrCursorNotFound, name))
		return
	}
	delete(c.cursors, name)
	cur.closed, cur.appending = true, false
	cur.lgen++
	var ledgerInRecord int64 = -1
	cur.rec.enqueue(&metaOp[*CursorInfo]{name: "cursor-delete", del: true, apply: func(ci *CursorInfo) error {
		ledgerInRecord = ci.Ledger
		return nil
	}, done: func(err error) {
		if err != nil {
			reply(err)
			return
		}
		if cur.lw != nil {
			c.discardWriter(cur.lw, cur.lw.ID() != ledgerInRecord)
			cur.lw = nil
		}
		if ledgerInRecord >= 0 {
			c.deleteLedger(ledgerInRecord)
		}
		for _, fw := range cur.flushWaiters {
			fw.done(ErrClosed)
		}
		cur.flushWaiters = nil
		c.maybeTrim()
		reply(nil)
	}})
}

// sortedCursors returns the durable cursors by name, so that side effects happen in a
// deterministic order (the simulation replays seeds).
func (c *core) sortedCursors() []*cursor {
	out := make([]*cursor, 0, len(c.cursors))
	for _, cur := range c.cursors {
		out = append(out, cur)
	}
	slices.SortFunc(out, func(a, b *cursor) int { return strings.Compare(a.name, b.name) })
	return out
}
