package nonpersistent

import (
	"context"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/mledger"
)

// rateWindow is the span over which a cursor's drop rate is measured.
const rateWindow = 10 * time.Second

// Cursor is a reader's position on a Log: the next index it reads. An entry is taken as
// acknowledged once read. Its fields are guarded by its Log's mu.
type Cursor struct {
	l    *Log
	name string // "" for a non-durable cursor
	read int64  // index of the next entry to read
	// dropped counts the messages dropped before this cursor read them; the window fields
	// measure the drop rate: drops since winStart, and in the window before it.
	dropped            int64
	winStart           time.Time
	winDrops, preDrops int64
}

var _ topic.Cursor = (*Cursor)(nil)

func (c *Cursor) drop(n int64, now time.Time) {
	c.dropped += n
	c.roll(now)
	c.winDrops += n
}

// roll starts a new rate window if the current one is over.
func (c *Cursor) roll(now time.Time) {
	switch el := now.Sub(c.winStart); {
	case c.winStart.IsZero() || el >= 2*rateWindow:
		c.winStart, c.winDrops, c.preDrops = now, 0, 0
	case el >= rateWindow:
		c.winStart, c.preDrops, c.winDrops = c.winStart.Add(rateWindow), c.winDrops, 0
	}
}

// rate is the drop rate in messages per second over the last one to two windows.
func (c *Cursor) rate(now time.Time) float64 {
	if c.winStart.IsZero() {
		return 0
	}
	c.roll(now)
	span := rateWindow + now.Sub(c.winStart)
	return float64(c.preDrops+c.winDrops) / span.Seconds()
}

// Read returns up to n entries from the cursor's position, waiting for one; the entries
// dropped before it read them are skipped.
func (c *Cursor) Read(ctx context.Context, n int) ([]Entry, error) {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if _, open := l.mu.cursors[c]; !open {
			return nil, mledger.ErrClosed
		}
		if es := l.sliceLocked(c.read, n); len(es) > 0 {
			c.read = es[len(es)-1].Position.EntryID + 1
			l.trimLocked()
			return es, nil
		}
		if err := l.waitLocked(ctx); err != nil {
			return nil, err
		}
	}
}

// ReadPositions returns nothing: non-persistent messages are not redelivered.
func (c *Cursor) ReadPositions(context.Context, []Position) ([]Entry, error) { return nil, nil }

// Ack, AckCumulative and AckBatch have nothing to do: read is acknowledged.
func (c *Cursor) Ack(_ []Position, done func(error)) { call(done) }

// AckCumulative: see Ack.
func (c *Cursor) AckCumulative(_ Position, done func(error)) { call(done) }

// AckBatch: see Ack.
func (c *Cursor) AckBatch(_ Position, _, _ int, done func(error)) { call(done) }

func call(done func(error)) {
	if done != nil {
		done(nil)
	}
}

// Acked reports whether the entry at p was read (read is acknowledged).
func (c *Cursor) Acked(_ context.Context, p Position) (bool, error) {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.index(p) < c.read, nil
}

// Flush has nothing to wait for: acknowledgements are not kept.
func (c *Cursor) Flush(context.Context) error { return nil }

// BatchAcked: no batch is partly acknowledged.
func (c *Cursor) BatchAcked(context.Context, Position) ([]bool, error) { return nil, nil }

// Reset moves the cursor: Earliest to the oldest entry held, Latest (or past the end) after
// the last one.
func (c *Cursor) Reset(_ context.Context, p Position) error {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	c.read = min(max(l.index(p), l.mu.first), l.mu.next)
	return nil
}

// MarkDelete is the position before the next one to read.
func (c *Cursor) MarkDelete(context.Context) (Position, error) {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pos(c.read - 1), nil
}

// Info returns the cursor's statistics, with its drops.
func (c *Cursor) Info(context.Context) (topic.CursorInfo, error) {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	return topic.CursorInfo{MarkDelete: l.pos(c.read - 1), ReadPosition: l.pos(c.read),
		Backlog: max(l.mu.next-max(c.read, l.mu.first), 0), Ledger: -1, State: "Open",
		Dropped: c.dropped, DropRate: c.rate(l.cfg.Now())}, nil
}

// Close detaches the cursor: the Log no longer holds entries for it.
func (c *Cursor) Close(context.Context) error {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.mu.cursors, c)
	if c.name != "" && l.mu.durable[c.name] == c {
		delete(l.mu.durable, c.name)
	}
	l.trimLocked()
	return nil
}
