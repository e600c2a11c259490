package compaction

import (
	"context"
	"sort"
	"sync"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/mledger"
)

// View is one compacted generation held in memory: its entries in position order and the
// horizon they cover. It never changes once made.
type View struct {
	state   State
	entries []topic.Entry
}

func newView(st State, entries []topic.Entry) *View { return &View{state: st, entries: entries} }

// State is the compaction State the view was made from.
func (v *View) State() State { return v.state }

// Entries returns the view's entries (not to be modified).
func (v *View) Entries() []topic.Entry { return v.entries }

// from returns up to n entries at or after p.
func (v *View) from(p Position, n int) []topic.Entry {
	i := sort.Search(len(v.entries), func(i int) bool { return !v.entries[i].Position.Less(p) })
	return v.entries[i:min(i+n, len(v.entries))]
}

// at returns the entry at p, if the view holds one.
func (v *View) at(p Position) (topic.Entry, bool) {
	if es := v.from(p, 1); len(es) == 1 && es[0].Position == p {
		return es[0], true
	}
	return topic.Entry{}, false
}

// compactedCursor is a ReadCompacted subscription's cursor: up to the horizon it delivers
// the compacted view's entries (the latest message of every key), then it moves the
// underlying cursor past the horizon and delivers the topic itself. Acknowledgements and
// everything else go to the underlying cursor. Reads run on one goroutine at a time (the
// subscription's), which owns next and passed.
type compactedCursor struct {
	topic.Cursor
	m  *Manager
	mu struct {
		sync.Mutex           // guards the fields below; not held across the underlying Read
		next       *Position // the next position to deliver (nil: ask the underlying cursor)
		viewed     bool      // next started at or before the horizon: the view is being delivered
		passed     bool      // reading the topic after the horizon
	}
}

// WrapCursor returns cur as a ReadCompacted cursor of the manager's topic.
func (m *Manager) WrapCursor(cur topic.Cursor) topic.Cursor {
	return &compactedCursor{Cursor: cur, m: m}
}

// Read delivers the compacted entries from the cursor's position up to the horizon, then
// the topic's entries after it.
func (c *compactedCursor) Read(ctx context.Context, n int) ([]topic.Entry, error) {
	if es, err := c.readCompacted(ctx, n); err != nil || len(es) > 0 {
		return es, err
	}
	return c.Cursor.Read(ctx, n)
}

// readCompacted returns the view's next entries, or none once the cursor passed the
// horizon (moving the underlying cursor past it the first time).
func (c *compactedCursor) readCompacted(ctx context.Context, n int) ([]topic.Entry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.passed {
		return nil, nil
	}
	v, err := c.m.View(ctx)
	if err != nil {
		return nil, err
	}
	h := v.state.Horizon()
	if c.mu.next == nil {
		ci, err := c.Cursor.Info(ctx)
		if err != nil {
			return nil, err
		}
		// A cursor at the first entry the topic still holds starts at the earliest: what was
		// trimmed below it is in the view.
		p := ci.ReadPosition
		if first, ok, err := c.m.firstEntry(ctx); err != nil {
			return nil, err
		} else if ok && !first.Less(p) {
			p = mledger.Earliest
		}
		c.mu.next = &p
	}
	if v.state.Generation > 0 && !h.Less(*c.mu.next) {
		c.mu.viewed = true
		if es := v.from(*c.mu.next, n); len(es) > 0 {
			p := after(es[len(es)-1].Position)
			c.mu.next = &p
			return append([]topic.Entry(nil), es...), nil
		}
	}
	if c.mu.viewed {
		if err := c.Cursor.Reset(ctx, after(h)); err != nil {
			return nil, err
		}
	}
	c.mu.passed = true
	return nil, nil
}

// ReadPositions re-reads positions: from the view up to the horizon, the topic after it.
func (c *compactedCursor) ReadPositions(ctx context.Context, ps []topic.Position) ([]topic.Entry, error) {
	v, err := c.m.View(ctx)
	if err != nil {
		return nil, err
	}
	h := v.state.Horizon()
	var out, rest []topic.Entry
	var live []topic.Position
	for _, p := range ps {
		if v.state.Generation > 0 && !h.Less(p) {
			if e, ok := v.at(p); ok {
				out = append(out, e)
			}
			continue
		}
		live = append(live, p)
	}
	if len(live) > 0 {
		if rest, err = c.Cursor.ReadPositions(ctx, live); err != nil {
			return nil, err
		}
	}
	return append(out, rest...), nil
}

// Reset moves the underlying cursor; the next read starts from the view again if p is at
// or before the horizon.
func (c *compactedCursor) Reset(ctx context.Context, p topic.Position) error {
	if err := c.Cursor.Reset(ctx, p); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.next, c.mu.passed, c.mu.viewed = nil, false, false
	if p == mledger.Earliest {
		e := mledger.Earliest
		c.mu.next = &e
	}
	return nil
}
