package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/magnetar-io/magnetar/ledger/quorum"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// Reads run on the caller's goroutine: they take a snapshot of the handle's metadata and LAC,
// send requests through the client's pool, and collect the callbacks' results on a channel.
// They never touch a core.

// readWindow bounds the entries one Read fetches at once.
const readWindow = 64

// bookieAnswer is one response (or failure) collected by a read loop.
type bookieAnswer struct {
	tag  int // caller-defined: the entry index, or the ensemble index
	addr string
	resp bk.Response
	err  error
}

// send sends req to addr and delivers the answer on out (sized by the caller so it never
// blocks), bounded by the client's ReadTimeout.
func (c *Client) send(ctx context.Context, addr string, req *bk.Request, tag int, timeout time.Duration, out chan<- bookieAnswer) {
	conn, err := c.pool.Get(ctx, addr)
	if err != nil {
		out <- bookieAnswer{tag: tag, addr: addr, err: err}
		return
	}
	once := make(chan struct{}, 1) // holds the right to deliver
	once <- struct{}{}
	deliver := func(a bookieAnswer) {
		select {
		case <-once:
			out <- a
		default: // the other of timer and callback delivered first
		}
	}
	timer := time.AfterFunc(timeout, func() {
		deliver(bookieAnswer{tag: tag, addr: addr, err: fmt.Errorf("%w: %s", errRequestTimeout, addr)})
	})
	conn.Send(req, func(resp bk.Response, err error) {
		timer.Stop()
		deliver(bookieAnswer{tag: tag, addr: addr, resp: resp, err: err})
	})
}

// snapshot returns the handle's metadata and LAC.
func (h *Handle) snapshot() (*Metadata, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.meta, h.mu.lac
}

func (h *Handle) learnLAC(lac int64) {
	h.mu.Lock()
	h.mu.lac = max(h.mu.lac, lac)
	h.mu.Unlock()
}

func (h *Handle) learnMeta(ctx context.Context) (*Metadata, error) {
	m, v, err := h.c.readMeta(ctx, h.id)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if v > h.mu.version {
		h.mu.meta, h.mu.version = m, v
		if m.State == StateClosed {
			h.mu.lac = max(h.mu.lac, m.LastEntryID)
		}
	}
	return h.mu.meta, nil
}

// Read returns entries from..to (inclusive) with verified digests. For an OPEN ledger, to must
// not exceed the LAC (the handle asks the bookies, and re-reads the metadata, before giving up
// with ErrReadBeyondLAC); for a CLOSED ledger, the last entry.
func (h *Handle) Read(ctx context.Context, from, to int64) ([]Entry, error) {
	if from < 0 || to < from {
		return nil, fmt.Errorf("%w: read %d..%d", ErrInvalidArgument, from, to)
	}
	m, lac := h.snapshot()
	if to > lac && m.State != StateClosed {
		if _, err := h.ReadLAC(ctx); err != nil {
			return nil, err
		}
		if _, err := h.learnMeta(ctx); err != nil {
			return nil, err
		}
		m, lac = h.snapshot()
	}
	if to > lac {
		return nil, fmt.Errorf("%w: ledger %d: read to %d, last confirmed %d", ErrReadBeyondLAC, h.id, to, lac)
	}
	out, err := h.readRange(ctx, m, from, to)
	if errors.Is(err, ErrNoSuchEntry) {
		// The ensemble may have changed since our snapshot: retry once on fresh metadata.
		if m, err = h.learnMeta(ctx); err != nil {
			return nil, err
		}
		out, err = h.readRange(ctx, m, from, to)
	}
	return out, err
}

// readRange reads entries with up to readWindow in flight; each entry tries the bookies of its
// write set in turn.
func (h *Handle) readRange(ctx context.Context, m *Metadata, from, to int64) ([]Entry, error) {
	n := int(to - from + 1)
	out := make([]Entry, n)
	type state struct {
		next    int // next write-set slot to try
		missing int
		lastErr error
		done    bool
	}
	st := make([]state, n)
	key, digest := bk.MasterKey(m.Password), m.Digest.Wire()
	answers := make(chan bookieAnswer, readWindow)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	try := func(i int) {
		e := from + int64(i)
		ws := m.WriteSet(e)
		b := ws[st[i].next]
		st[i].next++
		req := &bk.Request{Op: bk.OpReadEntry, LedgerID: h.id, EntryID: e, MasterKey: key}
		h.c.send(ctx, b, req, i, h.c.opts.ReadTimeout, answers)
	}
	issued, inflight, finished := 0, 0, 0
	for finished < n {
		for inflight < readWindow && issued < n {
			try(issued)
			issued++
			inflight++
		}
		var a bookieAnswer
		select {
		case a = <-answers:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		i, e := a.tag, from+int64(a.tag)
		s := &st[i]
		err := a.err
		if err == nil && a.resp.Status != bk.StatusOK {
			err = &BookieError{Bookie: a.addr, Status: a.resp.Status}
			if isMissing(a.resp.Status) {
				s.missing++
			}
		}
		if err == nil {
			ent, derr := bk.DecodeEntry(a.resp.Body, digest)
			if derr == nil && (ent.LedgerID != h.id || ent.EntryID != e) {
				derr = fmt.Errorf("entry header says %d/%d", ent.LedgerID, ent.EntryID)
			}
			if derr != nil {
				err = fmt.Errorf("%w: ledger %d entry %d from %s: %v", ErrDigest, h.id, e, a.addr, derr)
			} else {
				out[i] = Entry{EntryID: e, LAC: ent.LAC, Length: ent.Length, Payload: ent.Payload}
				s.done = true
				finished++
				inflight--
				continue
			}
		}
		s.lastErr = err
		if s.next < m.WriteQuorum {
			try(i) // next replica; inflight unchanged
			continue
		}
		if s.missing == m.WriteQuorum {
			return nil, fmt.Errorf("%w: ledger %d entry %d", ErrNoSuchEntry, h.id, e)
		}
		return nil, fmt.Errorf("ledger %d: read entry %d: %w", h.id, e, s.lastErr)
	}
	return out, nil
}

// ReadLAC asks the last ensemble for the last add confirmed: the highest of the explicit LACs
// and of the LACs piggybacked on the bookies' last entries, once the answers cover every write
// quorum. For a CLOSED ledger it is the last entry. The handle remembers the result.
func (h *Handle) ReadLAC(ctx context.Context) (int64, error) {
	m, _ := h.snapshot()
	if m.State == StateClosed {
		return m.LastEntryID, nil
	}
	last := m.LastEnsemble().Bookies
	key, digest := bk.MasterKey(m.Password), m.Digest.Wire()
	answers := make(chan bookieAnswer, len(last))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, b := range last {
		go h.c.send(ctx, b, &bk.Request{Op: bk.OpReadLAC, LedgerID: h.id, MasterKey: key}, i, h.c.opts.ReadTimeout, answers)
	}
	cov := quorum.NewCoverageSet(m.EnsembleSize, m.WriteQuorum, m.AckQuorum)
	lac := int64(-1)
	for answered := 0; answered < len(last); {
		var a bookieAnswer
		select {
		case a = <-answers:
		case <-ctx.Done():
			return -1, ctx.Err()
		}
		answered++
		switch {
		case a.err != nil:
			continue
		case a.resp.Status == bk.StatusOK:
			if len(a.resp.LACBody) > 0 {
				if id, l, err := bk.DecodeLACBody(a.resp.LACBody, digest); err == nil && id == h.id {
					lac = max(lac, l)
				}
			}
			if len(a.resp.Body) > 0 {
				if e, err := bk.DecodeEntry(a.resp.Body, digest); err == nil && e.LedgerID == h.id {
					lac = max(lac, e.LAC)
				}
			}
			cov.Set(a.tag, quorum.Definite)
		case isMissing(a.resp.Status):
			cov.Set(a.tag, quorum.Definite)
		}
		if cov.Covered() {
			h.learnLAC(lac)
			_, known := h.snapshot()
			return known, nil
		}
	}
	return -1, fmt.Errorf("%w: ledger %d: read LAC: answers do not cover the ensemble", ErrNotEnoughBookies, h.id)
}

// LongPollResult is what LongPollRead learned.
type LongPollResult struct {
	// LAC is a last add confirmed greater than the previous one.
	LAC int64
	// Entry is entry previousLAC+1 when a bookie returned it with the new LAC, else nil.
	Entry *Entry
}

// longPollWait is how long one long-poll round asks bookies to wait.
const longPollWait = 10 * time.Second

// LongPollRead waits until the LAC exceeds previousLAC and returns it, with entry
// previousLAC+1 when a bookie piggybacks it. It asks every bookie of the last ensemble and
// takes the first advance; it keeps asking until ctx ends (ctx.Err()) or the ledger is CLOSED
// at previousLAC (ErrClosed).
func (h *Handle) LongPollRead(ctx context.Context, previousLAC int64) (LongPollResult, error) {
	for {
		m, lac := h.snapshot()
		if lac > previousLAC {
			return h.pollResultFromRead(ctx, lac, previousLAC)
		}
		if m.State == StateClosed {
			return LongPollResult{}, fmt.Errorf("%w: ledger %d ends at %d", ErrClosed, h.id, m.LastEntryID)
		}
		wait := longPollWait
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
		if wait <= 0 {
			return LongPollResult{}, context.DeadlineExceeded
		}
		res, ok, err := h.longPollRound(ctx, m, previousLAC, wait)
		if err != nil || ok {
			return res, err
		}
		if _, err := h.learnMeta(ctx); err != nil {
			return LongPollResult{}, err
		}
	}
}

func (h *Handle) pollResultFromRead(ctx context.Context, lac, previousLAC int64) (LongPollResult, error) {
	es, err := h.Read(ctx, previousLAC+1, previousLAC+1)
	if err != nil {
		return LongPollResult{LAC: lac}, nil
	}
	return LongPollResult{LAC: lac, Entry: &es[0]}, nil
}

func (h *Handle) longPollRound(ctx context.Context, m *Metadata, previousLAC int64, wait time.Duration) (LongPollResult, bool, error) {
	last := m.LastEnsemble().Bookies
	digest := m.Digest.Wire()
	answers := make(chan bookieAnswer, len(last))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, b := range last {
		req := &bk.Request{Op: bk.OpLongPoll, Flags: bk.FlagPiggyback, LedgerID: h.id, PreviousLAC: previousLAC,
			TimeoutMs: uint32(wait / time.Millisecond)}
		go h.c.send(rctx, b, req, i, wait+h.c.opts.ReadTimeout, answers)
	}
	for answered := 0; answered < len(last); answered++ {
		var a bookieAnswer
		select {
		case a = <-answers:
		case <-ctx.Done():
			return LongPollResult{}, false, ctx.Err()
		}
		if a.err != nil || a.resp.Status != bk.StatusOK || a.resp.MaxLAC <= previousLAC {
			continue
		}
		h.learnLAC(a.resp.MaxLAC)
		res := LongPollResult{LAC: a.resp.MaxLAC}
		if len(a.resp.Body) > 0 {
			if e, err := bk.DecodeEntry(a.resp.Body, digest); err == nil && e.LedgerID == h.id && e.EntryID == previousLAC+1 {
				res.Entry = &Entry{EntryID: e.EntryID, LAC: e.LAC, Length: e.Length, Payload: e.Payload}
			}
		}
		return res, true, nil
	}
	return LongPollResult{}, false, nil
}
