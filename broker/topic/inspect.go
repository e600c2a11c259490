package topic

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/internal/inbox"
	"github.com/magnetar-io/magnetar/mledger"
)

// Inspection: reading stored entries without consuming them (the admin API's peek, get by
// id, examine and message id by time). None of these moves a cursor or acknowledges
// anything (a peek may create the subscription it names, as Pulsar's does); they read the
// log on the caller's goroutine.

// ErrMessageNotFound: no stored entry at that id, position or time.
var ErrMessageNotFound = api.ErrMessageNotFound

// inspectReadTimeout bounds one log read of an inspection: the log's Read waits for an
// entry, and an inspection must not wait for new ones.
const inspectReadTimeout = 10 * time.Second

// readNoWait reads up to max entries at or after from, or none (ErrMessageNotFound) if the
// log has nothing there.
func readNoWait(ctx context.Context, log Log, from Position, max int) ([]Entry, error) {
	if lc := log.LastConfirmed(); lc.EntryID >= 0 && lc.Less(from) {
		return nil, ErrMessageNotFound
	}
	st, err := log.Stats(ctx)
	if err != nil {
		return nil, err
	}
	if last := lastEntry(st); last.EntryID < 0 || last.Less(from) {
		return nil, ErrMessageNotFound
	}
	rctx, cancel := context.WithTimeout(ctx, inspectReadTimeout)
	defer cancel()
	es, err := log.Read(rctx, from, max)
	if errors.Is(err, mledger.ErrNoMoreEntries) || (errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil) {
		return nil, ErrMessageNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("%w: read at %v: %v", ErrPersistence, from, err)
	}
	return es, nil
}

// ReadEntry returns the stored entry at p.
func (t *Topic) ReadEntry(ctx context.Context, p Position) (Entry, error) {
	es, err := readNoWait(ctx, t.log, p, 1)
	if err != nil {
		return Entry{}, err
	}
	if len(es) == 0 || es[0].Position != p {
		return Entry{}, fmt.Errorf("%w: %v", ErrMessageNotFound, p)
	}
	return es[0], nil
}

// PeekBacklog returns the n-th (from 1) entry of subscription name's backlog: the entries
// after its mark-delete position that are not acknowledged, in order. As Pulsar's peek
// (apache/pulsar#8182), a durable subscription that does not exist is created at the earliest
// entry, unless the topic's policy refuses auto subscription creation (ErrSubscriptionNotFound).
func (t *Topic) PeekBacklog(ctx context.Context, name string, n int) (Entry, error) {
	if n < 1 {
		return Entry{}, fmt.Errorf("%w: message position %d", ErrInvalid, n)
	}
	s, err := inbox.Call(ctx, t.in, t.stopped, ErrClosed, func(reply func(*Subscription, error)) {
		if t.core.state == StateClosing || t.core.state == StateClosed || t.core.state == StateFenced {
			reply(nil, ErrClosed)
			return
		}
		t.withSub(name, true, !t.core.pol.NoAutoSubscriptionCreation, mledger.Earliest, false, reply)
	})
	if err != nil {
		return Entry{}, err
	}
	md, err := s.cur.MarkDelete(ctx)
	if err != nil {
		return Entry{}, err
	}
	from := mledger.Earliest
	if md != mledger.Earliest {
		from = Position{LedgerID: md.LedgerID, EntryID: md.EntryID + 1}
	}
	for {
		es, err := readNoWait(ctx, t.log, from, min(max(n, 16), 1000))
		if err != nil {
			return Entry{}, err
		}
		if len(es) == 0 {
			return Entry{}, ErrMessageNotFound
		}
		ps := make([]Position, len(es))
		for i, e := range es {
			ps[i] = e.Position
		}
		unacked, err := s.cur.ReadPositions(ctx, ps)
		if err != nil {
			return Entry{}, fmt.Errorf("%w: %v", ErrPersistence, err)
		}
		if n <= len(unacked) {
			return unacked[n-1], nil
		}
		n -= len(unacked)
		last := es[len(es)-1].Position
		from = Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
	}
}

// entryIndex numbers the stored entries of a log 0..total-1 across its ledgers.
type entryIndex struct {
	spans []struct{ id, first, n int64 }
	total int64
}

func indexEntries(st mledger.Stats) entryIndex {
	var x entryIndex
	for _, l := range st.Ledgers {
		if l.Entries > 0 {
			x.spans = append(x.spans, struct{ id, first, n int64 }{l.ID, x.total, l.Entries})
			x.total += l.Entries
		}
	}
	return x
}

// at is the position of entry i (0 <= i < total).
func (x entryIndex) at(i int64) Position {
	k := sort.Search(len(x.spans), func(k int) bool { return x.spans[k].first+x.spans[k].n > i })
	return Position{LedgerID: x.spans[k].id, EntryID: i - x.spans[k].first}
}

// ExamineEntry returns the n-th (from 1) stored entry from the start of the log, or from
// its end if latest.
func (t *Topic) ExamineEntry(ctx context.Context, latest bool, n int) (Entry, error) {
	if n < 1 {
		return Entry{}, fmt.Errorf("%w: message position %d", ErrInvalid, n)
	}
	st, err := t.log.Stats(ctx)
	if err != nil {
		return Entry{}, err
	}
	x := indexEntries(st)
	i := int64(n - 1)
	if latest {
		i = x.total - int64(n)
	}
	if i < 0 || i >= x.total {
		return Entry{}, ErrMessageNotFound
	}
	es, err := readNoWait(ctx, t.log, x.at(i), 1)
	if err != nil {
		return Entry{}, err
	}
	if len(es) == 0 {
		return Entry{}, ErrMessageNotFound
	}
	return es[0], nil // a trimmed entry reads as the first one after it
}

// FindByPublishTime returns the position of the first stored entry published at or after
// ms (Unix ms), or ErrMessageNotFound if none was.
func (t *Topic) FindByPublishTime(ctx context.Context, ms int64) (Position, error) {
	p, err := findByPublishTime(ctx, t.log, ms)
	if err == nil && p == mledger.Latest {
		err = ErrMessageNotFound
	}
	return p, err
}

// findByPublishTime binary-searches the log for the first entry published at or after ms
// (mledger.Latest if none); publish times grow along the log.
func findByPublishTime(ctx context.Context, log Log, ms int64) (Position, error) {
	i, x, err := searchPublishTime(ctx, log, ms)
	if err != nil {
		return Position{}, err
	}
	if i >= x.total {
		return mledger.Latest, nil
	}
	return x.at(i), nil
}

// searchPublishTime returns the index (in x) of the first entry published at or after ms
// (x.total if none).
func searchPublishTime(ctx context.Context, log Log, ms int64) (int64, entryIndex, error) {
	st, err := log.Stats(ctx)
	if err != nil {
		return 0, entryIndex{}, err
	}
	x := indexEntries(st)
	var ferr error
	i := sort.Search(int(x.total), func(i int) bool {
		if ferr != nil {
			return true
		}
		p := x.at(int64(i))
		es, err := log.Read(ctx, p, 1)
		if err != nil || len(es) == 0 {
			ferr = fmt.Errorf("read %v: %w", p, err)
			return true
		}
		if es[0].Position != p {
			return false // trimmed
		}
		m, err := parseMeta(es[0].Data)
		return err == nil && int64(m.GetPublishTime()) >= ms
	})
	return int64(i), x, ferr
}
