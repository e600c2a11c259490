package nonpersistent

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar"
)

type (
	// Position and Entry are the managed ledger's.
	Position = mledger.Position
	Entry    = mledger.Entry
)

// Config bounds what a Log holds for its readers. Zero values take the defaults.
type Config struct {
	// MaxEntries is how many entries a Log keeps for readers that have not read them yet;
	// beyond it the oldest are dropped. Default 1000.
	MaxEntries int
	// MaxBytes is how many bytes of entries it keeps. Default 16 MiB.
	MaxBytes int64
	// Now is the clock of the drop rates. Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.MaxEntries <= 0 {
		c.MaxEntries = 1000
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 16 << 20
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Log is a non-persistent topic's log (a topic.Log): a bounded in-memory window of the
// entries its cursors have not read yet. Adding never waits and never fails but when the
// Log is terminated or closed; an entry no cursor still has to read is forgotten at once,
// and one that the window cannot hold any more is dropped for the cursors that did not read
// it (counted per cursor). Cursors start at the end, acknowledgements are not kept and
// nothing is redelivered. Safe for concurrent use.
type Log struct {
	cfg Config
	// ledger is the ledger id of the Log's positions: the Unix ms of its creation, so that
	// the ids of a topic loaded again are larger than before (clients drop message ids they
	// have seen).
	ledger int64
	mu     struct {
		sync.Mutex // guards the fields below and every cursor's state
		// window holds entries first..next-1. Invariant: len(window) == next-first.
		window      []Entry
		first, next int64
		bytes       int64
		cursors     map[*Cursor]struct{}
		durable     map[string]*Cursor
		props       map[string]string
		terminated  bool
		closed      bool
		// maxRead bounds what cursors read to the indexes below it (-1: unbounded).
		maxRead int64
		changed chan struct{} // closed and replaced on every add, termination or close
	}
}

var _ topic.Log = (*Log)(nil)

// New returns an empty Log.
func New(cfg Config) *Log {
	cfg = cfg.withDefaults()
	l := &Log{cfg: cfg, ledger: cfg.Now().UnixMilli()}
	l.mu.cursors = map[*Cursor]struct{}{}
	l.mu.durable = map[string]*Cursor{}
	l.mu.props = map[string]string{}
	l.mu.changed = make(chan struct{})
	l.mu.maxRead = -1
	return l
}

func (l *Log) pos(i int64) Position { return Position{LedgerID: l.ledger, EntryID: i} }

// index is the index of the first entry at or after p.
func (l *Log) index(p Position) int64 {
	switch {
	case p.LedgerID < l.ledger:
		return 0
	case p.LedgerID > l.ledger:
		return 1 << 62
	}
	return max(p.EntryID, 0)
}

func (l *Log) notifyLocked() {
	close(l.mu.changed)
	l.mu.changed = make(chan struct{})
}

// AddAsync appends data at once and calls cb inline.
func (l *Log) AddAsync(data []byte, cb func(Position, error)) {
	l.mu.Lock()
	switch {
	case l.mu.closed:
		l.mu.Unlock()
		cb(Position{}, mledger.ErrClosed)
		return
	case l.mu.terminated:
		l.mu.Unlock()
		cb(Position{}, mledger.ErrTerminated)
		return
	}
	p := l.pos(l.mu.next)
	l.mu.window = append(l.mu.window, Entry{Position: p, Data: data})
	l.mu.next++
	l.mu.bytes += int64(len(data))
	l.trimLocked()
	l.notifyLocked()
	l.mu.Unlock()
	cb(p, nil)
}

// trimLocked forgets the entries every cursor has read, then drops the oldest while the
// window is over its bounds, counting them for the cursors that had not read them.
func (l *Log) trimLocked() {
	low := l.mu.next
	for c := range l.mu.cursors {
		low = min(low, c.read)
	}
	for l.mu.first < low {
		l.popLocked()
	}
	for len(l.mu.window) > l.cfg.MaxEntries || (l.mu.bytes > l.cfg.MaxBytes && len(l.mu.window) > 1) {
		e := l.mu.window[0]
		n := int64(0)
		for c := range l.mu.cursors {
			if c.read <= l.mu.first {
				if n == 0 {
					n = messages(e.Data)
				}
				c.drop(n, l.cfg.Now())
				c.read = l.mu.first + 1
			}
		}
		l.popLocked()
	}
}

func (l *Log) popLocked() {
	l.mu.bytes -= int64(len(l.mu.window[0].Data))
	l.mu.window[0] = Entry{}
	l.mu.window = l.mu.window[1:]
	l.mu.first++
}

// messages is the number of messages an entry holds (1 if its metadata does not parse).
func messages(data []byte) int64 {
	meta, _, err := pulsar.ParseHeadersAndPayload(data)
	if err != nil || meta.NumMessagesInBatch == nil {
		return 1
	}
	return max(int64(meta.GetNumMessagesInBatch()), 1)
}

// SetMaxRead bounds what cursors read to the entries before p (nil: unbounded).
func (l *Log) SetMaxRead(p *Position) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.maxRead = -1
	if p != nil {
		l.mu.maxRead = l.index(*p)
	}
	l.notifyLocked()
}

// LastConfirmed is the position of the last entry added.
func (l *Log) LastConfirmed() Position {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pos(l.mu.next - 1)
}

// sliceLocked returns up to n entries of the window from index i (below maxRead).
func (l *Log) sliceLocked(i int64, n int) []Entry {
	end := l.mu.next
	if l.mu.maxRead >= 0 {
		end = min(end, l.mu.maxRead)
	}
	i = max(i, l.mu.first)
	if i >= end {
		return nil
	}
	lo := i - l.mu.first
	return append([]Entry(nil), l.mu.window[lo:min(lo+int64(n), end-l.mu.first)]...)
}

// waitLocked waits for the next change; it unlocks l.mu while it waits and locks it again.
func (l *Log) waitLocked(ctx context.Context) error {
	switch {
	case l.mu.closed:
		return mledger.ErrClosed
	case l.mu.terminated:
		return mledger.ErrNoMoreEntries
	}
	ch := l.mu.changed
	l.mu.Unlock()
	defer l.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Read returns up to n entries still held at or after from, waiting for one.
func (l *Log) Read(ctx context.Context, from Position, n int) ([]Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if es := l.sliceLocked(l.index(from), n); len(es) > 0 {
			return es, nil
		}
		if err := l.waitLocked(ctx); err != nil {
			return nil, err
		}
	}
}

// Terminate seals the Log: adds fail with mledger.ErrTerminated.
func (l *Log) Terminate(context.Context) (Position, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.terminated = true
	l.notifyLocked()
	return l.pos(l.mu.next - 1), nil
}

// Stats describes the Log as one ledger holding every entry added (the ones no longer held
// read as absent).
func (l *Log) Stats(context.Context) (mledger.Stats, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := mledger.Stats{State: mledger.StateLedgerOpened, LastConfirmed: l.pos(l.mu.next - 1),
		Ledgers:    []mledger.LedgerInfo{{ID: l.ledger, Entries: l.mu.next, Size: l.mu.bytes}},
		Properties: map[string]string{}, Entries: l.mu.next, Size: l.mu.bytes}
	for k, v := range l.mu.props {
		st.Properties[k] = v
	}
	if l.mu.terminated {
		p := l.pos(l.mu.next - 1)
		st.Terminated, st.State = &p, mledger.StateTerminated
	}
	return st, nil
}

// SetProperty records a property in memory.
func (l *Log) SetProperty(_ context.Context, k, v string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if v == "" {
		delete(l.mu.props, k)
	} else {
		l.mu.props[k] = v
	}
	return nil
}

// Cursors lists the named cursors open now.
func (l *Log) Cursors(context.Context) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.mu.durable))
	for n := range l.mu.durable {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

func (l *Log) newCursorLocked(name string) *Cursor {
	c := &Cursor{l: l, name: name, read: l.mu.next}
	l.mu.cursors[c] = struct{}{}
	return c
}

// OpenCursor opens or creates cursor name. Whatever start says, a new cursor starts after
// the last entry: a non-persistent subscription sees only what is published after it.
func (l *Log) OpenCursor(_ context.Context, name string, _ Position) (topic.Cursor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return nil, mledger.ErrClosed
	}
	if c := l.mu.durable[name]; c != nil {
		return c, nil
	}
	c := l.newCursorLocked(name)
	l.mu.durable[name] = c
	return c, nil
}

// OpenNonDurableCursor opens an unnamed cursor after the last entry.
func (l *Log) OpenNonDurableCursor(context.Context, Position) (topic.Cursor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return nil, mledger.ErrClosed
	}
	return l.newCursorLocked(""), nil
}

// DeleteCursor removes cursor name.
func (l *Log) DeleteCursor(_ context.Context, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.mu.durable[name]
	if c == nil {
		return fmt.Errorf("%w: %s", mledger.ErrCursorNotFound, name)
	}
	delete(l.mu.durable, name)
	delete(l.mu.cursors, c)
	l.trimLocked()
	return nil
}

// Close forgets everything; reads and adds fail with mledger.ErrClosed.
func (l *Log) Close(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.closed = true
	l.mu.window, l.mu.first, l.mu.bytes = nil, l.mu.next, 0
	l.mu.cursors = map[*Cursor]struct{}{}
	l.mu.durable = map[string]*Cursor{}
	l.notifyLocked()
	return nil
}

// Delete is Close: there is nothing stored to delete.
func (l *Log) Delete(ctx context.Context) error { return l.Close(ctx) }
