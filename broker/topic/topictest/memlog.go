// Package topictest provides an in-memory topic.Log for tests of the broker that do not
// need bookies: logs live in a Store and survive a topic unload (not a process restart).
package topictest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/mledger"
)

type (
	// Position and Entry are the managed ledger's.
	Position = mledger.Position
	Entry    = mledger.Entry
)

// ledgerID is the single ledger every in-memory log uses.
const ledgerID = 1

// Store holds in-memory logs by name. Safe for concurrent use.
type Store struct {
	mu   sync.Mutex
	logs map[string]*logState
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{logs: map[string]*logState{}} }

// Open opens (creating) log name.
func (s *Store) Open(name string) topic.Log {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.logs[name]
	if st == nil {
		st = &logState{props: map[string]string{}, cursors: map[string]*cursorState{}, changed: make(chan struct{})}
		s.logs[name] = st
	}
	return &Log{s: s, name: name, st: st}
}

// logState is one log's data, guarded by Store.mu.
type logState struct {
	entries    []Entry
	props      map[string]string
	cursors    map[string]*cursorState
	terminated bool
	changed    chan struct{} // closed and replaced on every change readers wait for
	maxRead    *Position     // cursor reads stop before it (nil: unbounded)
}

type cursorState struct {
	md      Position
	readPos Position
	acked   map[Position]bool
	batches map[Position]map[int]bool
	props   map[string]int64
}

// Log is an in-memory topic.Log.
type Log struct {
	s    *Store
	name string
	st   *logState
}

var _ topic.Log = (*Log)(nil)

func (l *Log) notifyLocked() {
	close(l.st.changed)
	l.st.changed = make(chan struct{})
}

func (l *Log) lastLocked() Position {
	return Position{LedgerID: ledgerID, EntryID: int64(len(l.st.entries)) - 1}
}

// AddAsync appends at once and calls cb inline.
func (l *Log) AddAsync(data []byte, cb func(Position, error)) {
	l.s.mu.Lock()
	if l.st.terminated {
		l.s.mu.Unlock()
		cb(Position{}, mledger.ErrTerminated)
		return
	}
	p := Position{LedgerID: ledgerID, EntryID: int64(len(l.st.entries))}
	l.st.entries = append(l.st.entries, Entry{Position: p, Data: data})
	l.notifyLocked()
	l.s.mu.Unlock()
	cb(p, nil)
}

// SetMaxRead bounds cursor reads to the entries before p (nil: unbounded).
func (l *Log) SetMaxRead(p *Position) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if p != nil {
		q := *p
		p = &q
	}
	l.st.maxRead = p
	l.notifyLocked()
}

// LastConfirmed returns the last entry's position.
func (l *Log) LastConfirmed() Position {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.lastLocked()
}

// index returns the index of the first entry at or after p.
func index(p Position) int64 {
	switch {
	case p.LedgerID < ledgerID:
		return 0
	case p.LedgerID > ledgerID:
		return 1 << 62
	}
	return max(p.EntryID, 0)
}

// Read waits for entries at or after from.
func (l *Log) Read(ctx context.Context, from Position, n int) ([]Entry, error) {
	for {
		l.s.mu.Lock()
		i := index(from)
		if i < int64(len(l.st.entries)) {
			out := slices.Clone(l.st.entries[i:min(int(i)+n, len(l.st.entries))])
			l.s.mu.Unlock()
			return out, nil
		}
		if l.st.terminated {
			l.s.mu.Unlock()
			return nil, mledger.ErrNoMoreEntries
		}
		ch := l.st.changed
		l.s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Terminate seals the log.
func (l *Log) Terminate(context.Context) (Position, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	l.st.terminated = true
	l.notifyLocked()
	return l.lastLocked(), nil
}

// Stats describes the log as one ledger.
func (l *Log) Stats(context.Context) (mledger.Stats, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	var size int64
	for _, e := range l.st.entries {
		size += int64(len(e.Data))
	}
	st := mledger.Stats{State: mledger.StateLedgerOpened, LastConfirmed: l.lastLocked(),
		Ledgers:    []mledger.LedgerInfo{{ID: ledgerID, Entries: int64(len(l.st.entries)), Size: size}},
		Properties: map[string]string{}, Entries: int64(len(l.st.entries)), Size: size}
	for k, v := range l.st.props {
		st.Properties[k] = v
	}
	if l.st.terminated {
		p := l.lastLocked()
		st.Terminated, st.State = &p, mledger.StateTerminated
	}
	return st, nil
}

// SetProperty records a property.
func (l *Log) SetProperty(_ context.Context, k, v string) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if v == "" {
		delete(l.st.props, k)
	} else {
		l.st.props[k] = v
	}
	return nil
}

// Cursors lists the durable cursors.
func (l *Log) Cursors(context.Context) ([]string, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	var out []string
	for n := range l.st.cursors {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

func (l *Log) newCursorLocked(start Position) *cursorState {
	md := Position{LedgerID: ledgerID, EntryID: -1}
	switch {
	case start == mledger.Latest:
		md = l.lastLocked()
	case start == mledger.Earliest:
	default:
		md = Position{LedgerID: ledgerID, EntryID: index(start) - 1}
	}
	return &cursorState{md: md, readPos: Position{LedgerID: ledgerID, EntryID: md.EntryID + 1},
		acked: map[Position]bool{}, batches: map[Position]map[int]bool{}}
}

// OpenCursor opens or creates a durable cursor.
func (l *Log) OpenCursor(_ context.Context, name string, start Position) (topic.Cursor, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	cs := l.st.cursors[name]
	if cs == nil {
		cs = l.newCursorLocked(start)
		l.st.cursors[name] = cs
	}
	cs.readPos = Position{LedgerID: ledgerID, EntryID: cs.md.EntryID + 1}
	return &Cursor{l: l, cs: cs}, nil
}

// OpenNonDurableCursor opens an in-memory cursor.
func (l *Log) OpenNonDurableCursor(_ context.Context, start Position) (topic.Cursor, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return &Cursor{l: l, cs: l.newCursorLocked(start)}, nil
}

// DeleteCursor removes a durable cursor.
func (l *Log) DeleteCursor(_ context.Context, name string) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.st.cursors[name] == nil {
		return fmt.Errorf("%w: %s", mledger.ErrCursorNotFound, name)
	}
	delete(l.st.cursors, name)
	return nil
}

// Close does nothing: the data stays in the Store.
func (l *Log) Close(context.Context) error { return nil }

// Delete forgets the log.
func (l *Log) Delete(context.Context) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	delete(l.s.logs, l.name)
	return nil
}

// Cursor is an in-memory cursor.
type Cursor struct {
	l  *Log
	cs *cursorState
}

var _ topic.PropertyCursor = (*Cursor)(nil)

func (c *Cursor) ackedLocked(p Position) bool {
	return !c.cs.md.Less(p) || c.cs.acked[p]
}

// Read returns unacknowledged entries from the read position, waiting for one.
func (c *Cursor) Read(ctx context.Context, n int) ([]Entry, error) {
	l := c.l
	for {
		l.s.mu.Lock()
		var out []Entry
		i := index(c.cs.readPos)
		end := int64(len(l.st.entries))
		if l.st.maxRead != nil {
			end = min(end, l.st.maxRead.EntryID)
		}
		for ; i < end && len(out) < n; i++ {
			e := l.st.entries[i]
			if !c.ackedLocked(e.Position) {
				out = append(out, e)
			}
		}
		if len(out) > 0 {
			c.cs.readPos = Position{LedgerID: ledgerID, EntryID: i}
			l.s.mu.Unlock()
			return out, nil
		}
		c.cs.readPos = Position{LedgerID: ledgerID, EntryID: i}
		if l.st.terminated {
			l.s.mu.Unlock()
			return nil, mledger.ErrNoMoreEntries
		}
		ch := l.st.changed
		l.s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// ReadPositions re-reads positions, skipping acknowledged ones.
// Acked reports whether the entry at p is acknowledged.
func (c *Cursor) Acked(_ context.Context, p Position) (bool, error) {
	c.l.s.mu.Lock()
	defer c.l.s.mu.Unlock()
	return c.ackedLocked(p), nil
}

// Flush returns at once: the in-memory state is all there is.
func (c *Cursor) Flush(context.Context) error { return nil }

func (c *Cursor) ReadPositions(_ context.Context, ps []Position) ([]Entry, error) {
	l := c.l
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	var out []Entry
	for _, p := range ps {
		if p.LedgerID != ledgerID || p.EntryID < 0 || p.EntryID >= int64(len(l.st.entries)) || c.ackedLocked(p) {
			continue
		}
		out = append(out, l.st.entries[p.EntryID])
	}
	return out, nil
}

func (c *Cursor) advanceLocked() {
	for c.cs.acked[Position{LedgerID: ledgerID, EntryID: c.cs.md.EntryID + 1}] {
		c.cs.md.EntryID++
		delete(c.cs.acked, c.cs.md)
	}
}

// Ack acknowledges positions.
func (c *Cursor) Ack(ps []Position, done func(error)) {
	c.l.s.mu.Lock()
	for _, p := range ps {
		if c.cs.md.Less(p) {
			c.cs.acked[p] = true
		}
	}
	c.advanceLocked()
	c.l.s.mu.Unlock()
	if done != nil {
		done(nil)
	}
}

// AckCumulative acknowledges everything up to p.
func (c *Cursor) AckCumulative(p Position, done func(error)) {
	c.l.s.mu.Lock()
	if c.cs.md.Less(p) {
		c.cs.md = Position{LedgerID: ledgerID, EntryID: min(p.EntryID, int64(len(c.l.st.entries))-1)}
		for q := range c.cs.acked {
			if !c.cs.md.Less(q) {
				delete(c.cs.acked, q)
			}
		}
		c.advanceLocked()
	}
	c.l.s.mu.Unlock()
	if done != nil {
		done(nil)
	}
}

// AckBatch acknowledges one message of a batch entry.
func (c *Cursor) AckBatch(p Position, idx, size int, done func(error)) {
	c.l.s.mu.Lock()
	b := c.cs.batches[p]
	if b == nil {
		b = map[int]bool{}
		c.cs.batches[p] = b
	}
	b[idx] = true
	full := len(b) >= size
	c.l.s.mu.Unlock()
	if full {
		c.Ack([]Position{p}, done)
		return
	}
	if done != nil {
		done(nil)
	}
}

// BatchAcked returns the acknowledged messages of a partly acknowledged batch entry.
func (c *Cursor) BatchAcked(_ context.Context, p Position) ([]bool, error) {
	c.l.s.mu.Lock()
	defer c.l.s.mu.Unlock()
	b := c.cs.batches[p]
	if b == nil || c.ackedLocked(p) {
		return nil, nil
	}
	n := 0
	for i := range b {
		n = max(n, i+1)
	}
	out := make([]bool, n)
	for i := range b {
		out[i] = true
	}
	return out, nil
}

// Reset moves the cursor so that p is delivered next.
func (c *Cursor) Reset(_ context.Context, p Position) error {
	c.l.s.mu.Lock()
	defer c.l.s.mu.Unlock()
	ns := c.l.newCursorLocked(p)
	ns.props = c.cs.props // a reset keeps the properties, as mledger's does
	*c.cs = *ns
	c.l.notifyLocked()
	return nil
}

// MarkDelete returns the mark-delete position.
func (c *Cursor) MarkDelete(context.Context) (Position, error) {
	c.l.s.mu.Lock()
	defer c.l.s.mu.Unlock()
	return c.cs.md, nil
}

// Info returns the cursor's statistics.
func (c *Cursor) Info(context.Context) (topic.CursorInfo, error) {
	c.l.s.mu.Lock()
	defer c.l.s.mu.Unlock()
	var backlog int64
	for i := c.cs.md.EntryID + 1; i < int64(len(c.l.st.entries)); i++ {
		if !c.cs.acked[Position{LedgerID: ledgerID, EntryID: i}] {
			backlog++
		}
	}
	return topic.CursorInfo{MarkDelete: c.cs.md, ReadPosition: c.cs.readPos, Backlog: backlog,
		AckedRanges: len(c.cs.acked), PartialBatches: len(c.cs.batches), Ledger: -1, State: "Open",
		Properties: maps.Clone(c.cs.props)}, nil
}

// SetProperty sets a cursor property (kept in the store with the cursor).
func (c *Cursor) SetProperty(_ context.Context, key string, value int64) error {
	c.l.s.mu.Lock()
	defer c.l.s.mu.Unlock()
	if c.cs.props == nil {
		c.cs.props = map[string]int64{}
	}
	c.cs.props[key] = value
	return nil
}

// RemoveProperty removes a cursor property.
func (c *Cursor) RemoveProperty(_ context.Context, key string) error {
	c.l.s.mu.Lock()
	defer c.l.s.mu.Unlock()
	delete(c.cs.props, key)
	return nil
}

// Close does nothing.
func (c *Cursor) Close(context.Context) error { return nil }
