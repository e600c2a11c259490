package ledger

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/internal/inbox"
	"github.com/magnetar-io/magnetar/metadata"
)

// Handle is an open ledger. A handle from Client.Create is a writer: Append and AppendAsync
// add entries, driven by one owner goroutine. A handle from Client.Open only reads. Every
// handle reads (Read, ReadLAC, LongPollRead). Handle is safe for concurrent use; Close it when
// done.
type Handle struct {
	c  *Client
	id int64

	// Writer handles only. The owner (step, run by owner on a goroutine that exists only
	// while there is work: see run.go) owns w, t and the run state; other goroutines talk
	// to it through appends, t.in and closeq (a close request is either queued for the
	// owner or refused once the owner has ended and closed closeq: none is ever lost).
	w       *Writer
	t       *transport
	appends *appendQueue
	closeq  *inbox.Queue[chan CloseResult]
	owner   *inbox.Owner
	ctx     context.Context // ends when the client closes (or the owner ends)
	stopped chan struct{}   // closed when the owner has ended
	cancel  context.CancelFunc
	// tick fires the writer's Tick and the transport's timeouts; armed only while the
	// writer or the transport has something a tick can act on (tickDue: it fired).
	tick    *time.Timer
	tickDue atomic.Bool
	run     runState // owned by the owner

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

func newAppendQueue(max int, o *inbox.Owner) *appendQueue {
	return &appendQueue{max: max, q: inbox.NewOwned[appendReq](o)}
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
	h := &Handle{c: c, id: id, w: w, ctx: ctx, stopped: make(chan struct{}), cancel: cancel}
	h.owner = inbox.NewOwner(h.step, inbox.DefaultLinger)
	h.appends = newAppendQueue(c.opts.MaxPendingAdds, h.owner)
	h.closeq = inbox.NewOwned[chan CloseResult](h.owner)
	h.t = newTransport(ctx, c, m, inbox.NewOwned[event](h.owner))
	h.mu.meta, h.mu.version, h.mu.lac = m, v, -1
	h.tick = time.AfterFunc(time.Hour, func() {
		h.tickDue.Store(true)
		h.owner.Wake()
	})
	h.tick.Stop() // armed by the owner while ticks are needed
	h.run.lastExpire = time.Now()
	h.run.stopCtx = context.AfterFunc(ctx, h.owner.Wake)
	h.owner.Release()
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
	if !h.closeq.Push(done) {
		return h.stoppedErr()
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
