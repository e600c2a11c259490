package ledger

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// Handle is an open ledger. A handle from Client.Create is a writer: Append and AppendAsync
// add entries, driven by one owner goroutine. A handle from Client.Open only reads. Every
// handle reads (Read, ReadLAC, LongPollRead). Handle is safe for concurrent use; Close it when
// done.
type Handle struct {
	c  *Client
	id int64

	// Writer handles only. The owner goroutine (run) owns w, t and every field it uses;
	// other goroutines talk to it through appendc and closec (both unbuffered, so a request
	// is either taken by run or refused once stopped is closed: none is ever lost).
	w       *Writer
	t       *transport
	appendc chan appendReq
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
	digest := m.Digest.Wire()
	id := m.LedgerID
	w, err := NewWriter(WriterConfig{
		Meta: m, Version: v, Placement: c.opts.Placement, MaxEnsembleChanges: c.opts.MaxEnsembleChanges,
		Encode: func(e Entry) []byte { return bk.AppendEntry(nil, id, e.EntryID, e.LAC, e.Length, digest, e.Payload) },
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(c.ctx)
	h := &Handle{c: c, id: id, w: w, appendc: make(chan appendReq), closec: make(chan chan CloseResult),
		stopped: make(chan struct{}), cancel: cancel}
	h.t = newTransport(ctx, c, m, newInbox())
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
	select {
	case h.appendc <- appendReq{payload: payload, cb: cb}:
	case <-h.stopped:
		cb(-1, h.stoppedErr())
	case <-ctx.Done():
		cb(-1, ctx.Err())
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
// requests, bookie and metadata results, ticks and timeouts, and performs its Ready. It
// returns once the close finished (or the client closed).
func (h *Handle) run(ctx context.Context) {
	defer close(h.stopped)
	defer func() {
		h.cancel()
		h.t.wg.Wait()
	}()
	w, t := h.w, h.t
	callbacks := map[int64]func(int64, error){}
	var closeWaiters []chan CloseResult
	tick := time.NewTicker(h.c.opts.LACFlushInterval)
	defer tick.Stop()
	lastExpire := time.Now()
	expireEvery := min(h.c.opts.AddTimeout, h.c.opts.ReadTimeout) / 4
	for {
		appendc := h.appendc
		if len(callbacks) >= h.c.opts.MaxPendingAdds {
			appendc = nil // back-pressure: AppendAsync waits
		}
		var evs []any
		select {
		case r := <-appendc:
			id, err := w.Append(r.payload)
			if err != nil {
				r.cb(-1, err)
			} else {
				callbacks[id] = r.cb
			}
		case done := <-h.closec:
			closeWaiters = append(closeWaiters, done)
			if len(closeWaiters) == 1 {
				w.Close()
			}
		case <-t.in.signal:
			for _, ev := range t.in.drain() {
				evs = append(evs, t.handle(ev)...)
			}
		case now := <-tick.C:
			w.Tick()
			if now.Sub(lastExpire) >= expireEvery {
				lastExpire = now
				evs = t.expire(now)
			}
		case <-ctx.Done():
			for id, cb := range callbacks {
				cb(id, ErrStopped)
			}
			for _, d := range closeWaiters {
				d <- CloseResult{Err: ErrStopped}
			}
			return
		}
		for _, ev := range evs {
			if ev != nil {
				w.Step(ev)
			}
		}
		for w.HasReady() {
			rd := w.Ready()
			t.perform(&rd)
			for _, c := range rd.Completions {
				if cb := callbacks[c.EntryID]; cb != nil {
					delete(callbacks, c.EntryID)
					if c.Err != nil {
						cb(-1, c.Err)
					} else {
						cb(c.EntryID, nil)
					}
				}
			}
			meta, v := w.Metadata()
			h.mu.Lock()
			h.mu.meta, h.mu.version, h.mu.lac = meta, v, max(h.mu.lac, w.LAC())
			h.mu.Unlock()
			if rd.Closed != nil {
				h.mu.Lock()
				h.mu.closeRes = rd.Closed
				h.mu.Unlock()
				for _, d := range closeWaiters {
					d <- *rd.Closed
				}
				return
			}
		}
	}
}
