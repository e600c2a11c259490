package ledger

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/internal/inbox"
	"github.com/magnetar-io/magnetar/internal/seqwin"
	"github.com/magnetar-io/magnetar/metadata"
)

// Handle is an open ledger. A handle from Client.Create is a writer: Append and AppendAsync
// add entries, driven by one owner goroutine. A handle from Client.Open only reads. Every
// handle reads (Read, ReadLAC, LongPollRead). Handle is safe for concurrent use; Close it when
// done.
type Handle struct {
	c  *Client
	id int64

	// Writer handles only. The owner goroutine (run) owns w, t and every field it uses;
	// other goroutines talk to it through appends and closec (unbuffered, so a close request
	// is either taken by run or refused once stopped is closed: none is ever lost).
	w       *Writer
	t       *transport
	appends *appendQueue
	closec  chan chan CloseResult
	stopped chan struct{} // closed when run returns
	cancel  context.CancelFunc

	mu struct {
		sync.Mutex // guards the fields below; a leaf lock, never held across I/O
		// meta is the latest record the handle knows, version its version.
		meta    *Metadata
		version metadata.Version
		// lac is the highest LAC known: the writer's own, or learned from bookies.
		lac int64
		// closed is set by Close on a read handle; closeRes once a writer's Close finished.
		closed   bool
		closeRes *CloseResult
	}
}

type appendReq struct {
	payload []byte
	cb      func(int64, error)
}

// appendQueue carries AppendAsync requests to the owner goroutine, which takes them all at
// once (from q): appenders do not wait for the owner (no hand-off per entry), and the owner
// turns a burst of appends into one Ready. It is a leaf structure: mu is held for no I/O or
// callback.
type appendQueue struct {
	max int                     // MaxPendingAdds
	q   *inbox.Queue[appendReq] // pushed to under mu; drained by the owner
	mu  struct {
		sync.Mutex // guards the fields below; taken before q's lock
		// inflight counts the appends queued or taken and not yet called back.
		// Invariant: inflight <= max.
		inflight int
		// room, if non-nil, is closed (and reset) when inflight drops below max or the
		// queue stops: AppendAsync calls waiting for room wait on it.
		room chan struct{}
		// stopped is set once the owner has exited: nothing is taken any more.
		stopped bool
	}
}

func newAppendQueue(max int) *appendQueue {
	return &appendQueue{max: max, q: inbox.New[appendReq]()}
}

// add queues r if there is room. Otherwise it returns a channel closed when there may be room.
// stopped reports that the owner has exited (r was not queued).
func (q *appendQueue) add(r appendReq) (wait <-chan struct{}, stopped bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.stopped {
		return nil, true
	}
	if q.mu.inflight >= q.max {
		if q.mu.room == nil {
			q.mu.room = make(chan struct{})
		}
		return q.mu.room, false
	}
	q.mu.inflight++
	q.q.Push(r) // open until stopped is set
	return nil, false
}

// release records that n appends were called back.
func (q *appendQueue) release(n int) {
	if n == 0 {
		return
	}
	q.mu.Lock()
	q.mu.inflight -= n
	if q.mu.room != nil && q.mu.inflight < q.max {
		close(q.mu.room)
		q.mu.room = nil
	}
	q.mu.Unlock()
}

// stop refuses every later add and returns the requests still queued.
func (q *appendQueue) stop() []appendReq {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.mu.stopped = true
	if q.mu.room != nil {
		close(q.mu.room)
		q.mu.room = nil
	}
	return q.q.Close()
}

// ID returns the ledger id.
func (h *Handle) ID() int64 { return h.id }

// Metadata returns the latest metadata record the handle knows.
func (h *Handle) Metadata() *Metadata {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.meta
}

// LAC returns the highest last add confirmed the handle knows, without I/O.
func (h *Handle) LAC() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.lac
}

func (c *Client) newReadHandle(m *Metadata, v metadata.Version) *Handle {
	h := &Handle{c: c, id: m.LedgerID}
	h.mu.meta, h.mu.version, h.mu.lac = m, v, -1
	if m.State == StateClosed {
		h.mu.lac = m.LastEntryID
	}
	return h
}

func (c *Client) newWriteHandle(m *Metadata, v metadata.Version) (*Handle, error) {
	id := m.LedgerID
	// No Encode: the transport packages each add straight into the bookie connection's write
	// buffer (client.Conn.SendEntry), so an entry costs no buffer of its own. The payload is
	// the caller's until the append's callback (caller obligation 3), and perform copies it
	// before the callbacks of the same Ready run (transport.send).
	w, err := NewWriter(WriterConfig{
		Meta: m, Version: v, Placement: c.opts.Placement, MaxEnsembleChanges: c.opts.MaxEnsembleChanges,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(c.ctx)
	h := &Handle{c: c, id: id, w: w, appends: newAppendQueue(c.opts.MaxPendingAdds),
		closec: make(chan chan CloseResult), stopped: make(chan struct{}), cancel: cancel}
	h.t = newTransport(ctx, c, m, inbox.New[event]())
	h.mu.meta, h.mu.version, h.mu.lac = m, v, -1
	go h.run(ctx)
	return h, nil
}

// AppendAsync adds payload as the next entry and calls cb exactly once with its entry id (or
// -1) and outcome. Callbacks run in entry order on the handle's owner goroutine and must not
// block. AppendAsync blocks only while MaxPendingAdds adds are in flight; if ctx ends first,
// cb gets ctx.Err(). The handle keeps payload until cb: do not modify it before.
func (h *Handle) AppendAsync(ctx context.Context, payload []byte, cb func(entryID int64, err error)) {
	if h.w == nil {
		cb(-1, fmt.Errorf("%w: ledger %d opened read-only", ErrClosed, h.id))
		return
	}
	for {
		room, stopped := h.appends.add(appendReq{payload: payload, cb: cb})
		switch {
		case stopped:
			cb(-1, h.stoppedErr())
			return
		case room == nil:
			return // queued
		}
		select {
		case <-room:
		case <-ctx.Done():
			cb(-1, ctx.Err())
			return
		}
	}
}

// Append adds payload as the next entry and waits until AQ bookies of its write set have it
// durably and every earlier entry is confirmed. It returns the entry id. If ctx ends first,
// Append returns ctx.Err() but the add goes on: it may still be confirmed.
func (h *Handle) Append(ctx context.Context, payload []byte) (int64, error) {
	type res struct {
		id  int64
		err error
	}
	ch := make(chan res, 1)
	h.AppendAsync(ctx, payload, func(id int64, err error) { ch <- res{id, err} })
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// Close closes the ledger. A writer stops taking appends, waits for the pending ones and
// records the last entry and length in metadata (CLOSED); it returns ErrFenced if a recovery
// got there first. A read handle just stops. Close is idempotent. If ctx ends first, Close
// returns ctx.Err() and the close goes on in the background.
func (h *Handle) Close(ctx context.Context) error {
	if h.w == nil {
		h.mu.Lock()
		h.mu.closed = true
		h.mu.Unlock()
		return nil
	}
	done := make(chan CloseResult, 1)
	select {
	case h.closec <- done:
	case <-h.stopped:
		return h.stoppedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case r := <-done:
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *Handle) stoppedErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.closeRes != nil {
		if h.mu.closeRes.Err != nil {
			return h.mu.closeRes.Err
		}
		return fmt.Errorf("%w: ledger %d", ErrClosed, h.id)
	}
	return ErrStopped
}

// run is the writer's owner goroutine: it owns h.w and h.t, feeds the core appends, close
// requests, bookie and metadata results, ticks and timeouts, and performs its Ready. Each
// wake-up takes everything queued (results, then appends) before asking the core for one
// Ready, so a burst of appends goes out as one batch of requests per bookie. It returns once
// the close finished (or the client closed).
func (h *Handle) run(ctx context.Context) {
	defer close(h.stopped)
	defer func() {
		h.cancel()
		h.t.wg.Wait()
	}()
	w, t := h.w, h.t
	// callbacks holds the callback of every pending append by entry id (ids are consecutive
	// and complete in order).
	var callbacks seqwin.Window[func(int64, error)]
	var closeWaiters []chan CloseResult
	var (
		appends []appendReq // taken from h.appends, reused
		results []event     // drained from t.in, reused
		evs     []event     // for the core, reused
	)
	tick := time.NewTicker(h.c.opts.LACFlushInterval)
	defer tick.Stop()
	lastExpire := time.Now()
	expireEvery := min(h.c.opts.AddTimeout, h.c.opts.ReadTimeout) / 4
	for {
		evs = evs[:0]
		closing := false
		select {
		case <-h.appends.q.Signal():
		case <-t.in.Signal():
		case done := <-h.closec:
			closeWaiters = append(closeWaiters, done)
			closing = len(closeWaiters) == 1
		case now := <-tick.C:
			w.Tick()
			if now.Sub(lastExpire) >= expireEvery {
				lastExpire = now
				evs = t.expire(now, evs)
			}
		case <-ctx.Done():
			for id, cb := range callbacks.All() {
				cb(int64(id), ErrStopped)
			}
			for _, r := range h.appends.stop() {
				r.cb(-1, h.stoppedErr())
			}
			for _, d := range closeWaiters {
				d <- CloseResult{Err: ErrStopped}
			}
			return
		}
		// Results first: the acks they carry may move the LAC the new entries piggyback.
		results = t.in.Drain(results)
		for _, ev := range results {
			evs = t.handle(ev, evs)
		}
		for _, ev := range evs {
			if ev.other != nil {
				w.Step(ev.other)
			} else {
				w.Step(ev.add) // no allocation: Step does not retain its message
			}
		}
		// Then every append queued, including those queued before a Close that came with
		// this wake-up (the caller's append happened before its Close).
		appends = h.appends.q.Drain(appends)
		released := 0
		for _, r := range appends {
			id, err := w.Append(r.payload)
			if err != nil {
				r.cb(-1, err)
				released++
			} else {
				callbacks.Put(uint64(id), r.cb)
			}
		}
		if closing {
			w.Close()
		}
		for w.HasReady() {
			rd := w.Ready()
			t.perform(&rd)
			// The LAC first: a caller whose add completes below must see it in LAC().
			h.mu.Lock()
			h.mu.lac = max(h.mu.lac, w.LAC())
			h.mu.Unlock()
			for _, c := range rd.Completions {
				if cb, ok := callbacks.Delete(uint64(c.EntryID)); ok {
					released++
					if c.Err != nil {
						cb(-1, c.Err)
					} else {
						cb(c.EntryID, nil)
					}
				}
			}
			closed := rd.Closed
			w.Advance(&rd)
			meta, v := w.Metadata()
			h.mu.Lock()
			h.mu.meta, h.mu.version, h.mu.lac = meta, v, max(h.mu.lac, w.LAC())
			if closed != nil {
				h.mu.closeRes = closed
			}
			h.mu.Unlock()
			if closed != nil {
				h.appends.release(released)
				for _, r := range h.appends.stop() {
					r.cb(-1, h.stoppedErr())
				}
				for _, d := range closeWaiters {
					d <- *closed
				}
				return
			}
		}
		h.appends.release(released)
	}
}
