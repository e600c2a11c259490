package mledger

import (
	"context"
	"fmt"
	"maps"
	"time"
)

// Cursor is a position of a consumer on a managed ledger: durable (its acknowledgements are
// persisted and it holds back trimming) or non-durable (in memory, for readers). It is safe
// for concurrent use, but reads are meant for one consumer loop: a Read while another is in
// progress fails.
type Cursor struct {
	m   *ManagedLedger
	cur *cursor // owned by the managed ledger's owner goroutine
}

// OpenCursor opens the durable cursor name, creating it at start (Earliest, Latest, or the
// position of the first entry to deliver) if it does not exist.
func (m *ManagedLedger) OpenCursor(ctx context.Context, name string, start Position) (*Cursor, error) {
	cur, err := do(ctx, m, func(c *core, reply func(*cursor, error)) { c.openCursor(name, start, reply) })
	if err != nil {
		return nil, err
	}
	return &Cursor{m: m, cur: cur}, nil
}

// NewNonDurableCursor opens an in-memory cursor at start. It does not hold back trimming:
// entries trimmed under it are skipped.
func (m *ManagedLedger) NewNonDurableCursor(ctx context.Context, start Position) (*Cursor, error) {
	cur, err := do(ctx, m, func(c *core, reply func(*cursor, error)) { reply(c.openNonDurable(start)) })
	if err != nil {
		return nil, err
	}
	return &Cursor{m: m, cur: cur}, nil
}

// DeleteCursor deletes the durable cursor name: its record, then its ledgers.
func (m *ManagedLedger) DeleteCursor(ctx context.Context, name string) error {
	return do0(ctx, m, func(c *core, reply func(error)) { c.deleteCursor(name, reply) })
}

// Cursors returns the names of the durable cursors.
func (m *ManagedLedger) Cursors(ctx context.Context) ([]string, error) {
	return do(ctx, m, func(c *core, reply func([]string, error)) {
		var names []string
		for _, cur := range c.sortedCursors() {
			names = append(names, cur.name)
		}
		reply(names, nil)
	})
}

// Name returns the cursor's name ("" for a non-durable cursor).
func (cu *Cursor) Name() string { return cu.cur.name }

// Read returns up to max entries from the read position, skipping acknowledged ones, and
// moves the read position past them. It waits until an entry is available; past the end of
// a terminated log it returns ErrNoMoreEntries. If ctx ends first, nothing is consumed.
func (cu *Cursor) Read(ctx context.Context, max int) ([]Entry, error) {
	if max <= 0 {
		return nil, fmt.Errorf("%w: max %d", ErrInvalidArgument, max)
	}
	return cu.m.read(ctx, &readOp{cur: cu.cur, max: max, wait: true})
}

// TryRead is Read without waiting: it returns no entries if none is available.
func (cu *Cursor) TryRead(ctx context.Context, max int) ([]Entry, error) {
	if max <= 0 {
		return nil, fmt.Errorf("%w: max %d", ErrInvalidArgument, max)
	}
	return cu.m.read(ctx, &readOp{cur: cu.cur, max: max})
}

// ReadPositions re-reads the given positions (redelivery), skipping acknowledged ones. The
// read position does not move.
func (cu *Cursor) ReadPositions(ctx context.Context, ps []Position) ([]Entry, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	return cu.m.read(ctx, &readOp{cur: cu.cur, positions: append([]Position(nil), ps...)})
}

func (cu *Cursor) do(ctx context.Context, fn func(c *core, cur *cursor) error) error {
	return do0(ctx, cu.m, func(c *core, reply func(error)) {
		if err := c.cursorUsable(); err != nil {
			reply(err)
			return
		}
		if cu.cur.closed {
			reply(ErrClosed)
			return
		}
		reply(fn(c, cu.cur))
	})
}

// Ack acknowledges entries individually. The mark-delete position moves over every
// contiguous acknowledged run; the state is persisted asynchronously (Flush waits for it).
func (cu *Cursor) Ack(ctx context.Context, ps ...Position) error {
	return cu.do(ctx, func(c *core, cur *cursor) error {
		c.cursorAck(cur, ps)
		return nil
	})
}

// AckCumulative acknowledges every entry up to and including p.
func (cu *Cursor) AckCumulative(ctx context.Context, p Position) error {
	return cu.do(ctx, func(c *core, cur *cursor) error {
		c.cursorAckCumulative(cur, p)
		return nil
	})
}

// AckBatchIndex acknowledges message idx of the batch entry at p, which holds size messages.
// The entry counts as acknowledged once all its messages are.
func (cu *Cursor) AckBatchIndex(ctx context.Context, p Position, idx, size int) error {
	return cu.do(ctx, func(c *core, cur *cursor) error { return c.cursorAckBatch(cur, p, idx, size) })
}

// BatchAcked returns which messages of the batch entry at p are acknowledged (nil: none
// recorded, or the whole entry is acknowledged — see Acked).
func (cu *Cursor) BatchAcked(ctx context.Context, p Position) ([]bool, error) {
	return do(ctx, cu.m, func(c *core, reply func([]bool, error)) {
		b := cu.cur.batches[p]
		if b == nil {
			reply(nil, nil)
			return
		}
		out := make([]bool, b.size)
		for i := range out {
			out[i] = b.isSet(i)
		}
		reply(out, nil)
	})
}

// Acked reports whether the entry at p is acknowledged.
func (cu *Cursor) Acked(ctx context.Context, p Position) (bool, error) {
	return do(ctx, cu.m, func(c *core, reply func(bool, error)) { reply(cu.cur.acked(p), nil) })
}

// Seek moves the read position to p (the next read starts at the first unacknowledged entry
// at or after it). Acknowledgements do not change.
func (cu *Cursor) Seek(ctx context.Context, p Position) error {
	return cu.do(ctx, func(c *core, cur *cursor) error {
		cur.readPos = p
		c.wakeReaders()
		return nil
	})
}

// Rewind moves the read position back to the first unacknowledged entry (redelivery of
// everything not acknowledged).
func (cu *Cursor) Rewind(ctx context.Context) error {
	return cu.do(ctx, func(c *core, cur *cursor) error {
		cur.readPos = after(cur.md)
		c.wakeReaders()
		return nil
	})
}

// Reset moves the cursor so that p is the next entry delivered and drops every
// acknowledgement at or after it (Earliest and Latest work too).
func (cu *Cursor) Reset(ctx context.Context, p Position) error {
	return cu.do(ctx, func(c *core, cur *cursor) error {
		c.cursorReset(cur, p)
		return nil
	})
}

// ResetToPublishTime resets the cursor to the first entry whose publish time (as extracted by
// publishTime from its data) is at or after t, and returns that position (Latest if none).
// It binary-searches the log, so publish times must not decrease along it.
func (cu *Cursor) ResetToPublishTime(ctx context.Context, t time.Time, publishTime func([]byte) (time.Time, error)) (Position, error) {
	p, err := cu.m.FindFirst(ctx, func(e Entry) (bool, error) {
		pt, err := publishTime(e.Data)
		if err != nil {
			return false, err
		}
		return !pt.Before(t), nil
	})
	if err != nil {
		return Position{}, err
	}
	return p, cu.Reset(ctx, p)
}

// FindFirst binary-searches the log for the first entry for which pred holds (pred must be
// false, then true, along the log) and returns its position, or Latest if there is none.
func (m *ManagedLedger) FindFirst(ctx context.Context, pred func(Entry) (bool, error)) (Position, error) {
	type span struct {
		ledger      int64
		first, last int64 // readable entries
	}
	spans, err := do(ctx, m, func(c *core, reply func([]span, error)) {
		if c.info() == nil { // deleted: its record is gone
			reply(nil, ErrClosed)
			return
		}
		var out []span
		for _, l := range c.info().Ledgers {
			if last := c.lastEntryOf(l.ID); last >= 0 {
				out = append(out, span{ledger: l.ID, first: 0, last: last})
			}
		}
		reply(out, nil)
	})
	if err != nil {
		return Position{}, err
	}
	var n int64
	for _, s := range spans {
		n += s.last - s.first + 1
	}
	at := func(i int64) Position {
		for _, s := range spans {
			if size := s.last - s.first + 1; i < size {
				return Position{LedgerID: s.ledger, EntryID: s.first + i}
			} else {
				i -= size
			}
		}
		return Latest
	}
	lo, hi := int64(0), n
	for lo < hi {
		mid := lo + (hi-lo)/2
		p := at(mid)
		es, err := m.read(ctx, &readOp{from: p, max: 1})
		if err != nil {
			return Position{}, err
		}
		if len(es) == 0 || es[0].Position != p {
			return Position{}, fmt.Errorf("%w: entry %v is no longer readable", ErrInvalidArgument, p)
		}
		ok, err := pred(es[0])
		if err != nil {
			return Position{}, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return at(lo), nil
}

// SetProperty sets the cursor's property key to value and waits until the state that
// carries it is durable (whatever the mark-delete rate, as Flush). Properties (Pulsar's
// cursor properties kept with the mark-delete position, such as
// pulsar.replicated.subscription) persist and recover with the cursor's state; a reset
// keeps them. A non-durable cursor keeps them in memory.
func (cu *Cursor) SetProperty(ctx context.Context, key string, value int64) error {
	return cu.setProperty(ctx, key, value, false)
}

// RemoveProperty removes the cursor's property key and waits until that is durable.
func (cu *Cursor) RemoveProperty(ctx context.Context, key string) error {
	return cu.setProperty(ctx, key, 0, true)
}

func (cu *Cursor) setProperty(ctx context.Context, key string, value int64, remove bool) error {
	if key == "" {
		return fmt.Errorf("%w: empty property name", ErrInvalidArgument)
	}
	return do0(ctx, cu.m, func(c *core, reply func(error)) {
		if err := c.cursorUsable(); err != nil {
			reply(err)
			return
		}
		if cu.cur.closed {
			reply(ErrClosed)
			return
		}
		c.cursorSetProperty(cu.cur, key, value, remove)
		c.cursorFlushWait(cu.cur, reply)
	})
}

// CursorStats describe a cursor.
type CursorStats struct {
	MarkDelete, ReadPosition Position
	// PersistedMarkDelete is the mark-delete position known durable (behind MarkDelete while
	// a write is in flight or the state is held by the mark-delete rate).
	PersistedMarkDelete Position
	// Held: the state changed beyond the mark-delete rate and waits for the next persist.
	Held           bool
	Backlog        int64 // entries not acknowledged
	AckedRanges    int   // individually acknowledged ranges above the mark-delete position
	PartialBatches int
	// Properties are the cursor's properties (a copy; nil: none).
	Properties map[string]int64
}

// Stats returns the cursor's statistics.
func (cu *Cursor) Stats(ctx context.Context) (CursorStats, error) {
	return do(ctx, cu.m, func(c *core, reply func(CursorStats, error)) {
		cur := cu.cur
		rp := maxPos(cur.readPos, after(cur.md))
		if p, ok := c.firstValid(rp); ok {
			rp = p
		}
		reply(CursorStats{MarkDelete: cur.md, ReadPosition: rp, PersistedMarkDelete: cur.persistedMD, Held: cur.hold == persistHeld,
			Backlog: c.backlog(cur), AckedRanges: len(cur.acks.r), PartialBatches: len(cur.batches),
			Properties: maps.Clone(cur.props)}, nil)
	})
}

// Backlog returns the number of entries not acknowledged.
func (cu *Cursor) Backlog(ctx context.Context) (int64, error) {
	st, err := cu.Stats(ctx)
	return st.Backlog, err
}

// Flush waits until the cursor's current state is durable (in its ledger or record).
func (cu *Cursor) Flush(ctx context.Context) error {
	return do0(ctx, cu.m, func(c *core, reply func(error)) {
		if err := c.cursorUsable(); err != nil {
			reply(err)
			return
		}
		c.cursorFlushWait(cu.cur, reply)
	})
}

// Close writes the cursor's state into its record and closes its ledger. Reopen it with
// OpenCursor.
func (cu *Cursor) Close(ctx context.Context) error {
	return do0(ctx, cu.m, func(c *core, reply func(error)) {
		c.cursorClose(cu.cur)
		reply(nil)
	})
}
