package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// inbox carries results from connection callbacks and helper goroutines to a core's owner
// goroutine without ever blocking the sender. It is a small leaf structure: push appends under
// mu and signals; the owner drains.
type inbox struct {
	signal chan struct{} // cap 1: non-empty
	mu     struct {
		sync.Mutex // guards q
		q          []any
	}
}

func newInbox() *inbox { return &inbox{signal: make(chan struct{}, 1)} }

func (in *inbox) push(ev any) {
	in.mu.Lock()
	in.mu.q = append(in.mu.q, ev)
	in.mu.Unlock()
	select {
	case in.signal <- struct{}{}:
	default:
	}
}

func (in *inbox) drain() []any {
	in.mu.Lock()
	q := in.mu.q
	in.mu.q = nil
	in.mu.Unlock()
	return q
}

// dialDone reports a connection attempt started by a transport.
type dialDone struct {
	addr string
	conn *client.Conn
	err  error
}

// transport performs a core's bookie and metadata requests for its owner goroutine. It is
// owned by that goroutine (not safe for concurrent use); results arrive through in.
type transport struct {
	c        *Client
	ctx      context.Context // ends when the owner stops; bounds dials and metadata calls
	ledgerID int64
	key      [bk.MasterKeyLen]byte
	digest   bk.DigestType
	in       *inbox

	conns   map[string]*client.Conn
	dialing map[string][]queuedReq // requests waiting for a connection
	// deadlines holds every outstanding bookie request; expire answers those past their
	// deadline with a timeout (the core then ignores the real answer, if any).
	deadlines map[uint64]deadline
	wg        sync.WaitGroup // helper goroutines (dials, metadata calls)
}

type queuedReq struct {
	req   *bk.Request
	token uint64
	read  *ReadRequest // nil for adds
}

type deadline struct {
	at     time.Time
	bookie string
	read   bool
}

// errRequestTimeout is the transport error of a request that got no answer in time.
var errRequestTimeout = errors.New("ledger: bookie request timed out")

func newTransport(ctx context.Context, c *Client, m *Metadata, in *inbox) *transport {
	return &transport{
		c: c, ctx: ctx, ledgerID: m.LedgerID, key: bk.MasterKey(m.Password), digest: m.Digest.Wire(), in: in,
		conns: map[string]*client.Conn{}, dialing: map[string][]queuedReq{}, deadlines: map[uint64]deadline{},
	}
}

// perform sends every request of rd. Completions and close/recovery results are left to the
// caller.
func (t *transport) perform(rd *Ready) {
	for _, a := range rd.Adds {
		req := &bk.Request{Op: bk.OpAddEntry, LedgerID: t.ledgerID, EntryID: a.Entry.EntryID, MasterKey: t.key,
			Digest: t.digest, Body: a.Body}
		if a.Recovery {
			req.Flags |= bk.FlagRecovery
		}
		if req.Body == nil {
			req.Body = bk.AppendEntry(nil, t.ledgerID, a.Entry.EntryID, a.Entry.LAC, a.Entry.Length, t.digest, a.Entry.Payload)
		}
		t.send(a.Bookie, queuedReq{req: req, token: a.Token}, t.c.opts.AddTimeout)
	}
	for i := range rd.Reads {
		q := rd.Reads[i]
		req := &bk.Request{Op: bk.OpReadEntry, LedgerID: t.ledgerID, EntryID: q.EntryID, MasterKey: t.key}
		if q.Fence {
			req.Flags |= bk.FlagFence
		}
		t.send(q.Bookie, queuedReq{req: req, token: q.Token, read: &q}, t.c.opts.ReadTimeout)
	}
	for _, l := range rd.LACWrites {
		req := &bk.Request{Op: bk.OpWriteLAC, LedgerID: t.ledgerID, LAC: l.LAC, MasterKey: t.key,
			Body: bk.AppendLACBody(nil, t.ledgerID, l.LAC, t.digest)}
		t.send(l.Bookie, queuedReq{req: req}, 0)
	}
	for _, m := range rd.MetaWrites {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.in.push(t.c.casMeta(t.ctx, m))
		}()
	}
}

// send sends one request on the bookie's connection, dialling first if needed.
func (t *transport) send(addr string, q queuedReq, timeout time.Duration) {
	if q.token != 0 {
		t.deadlines[q.token] = deadline{at: time.Now().Add(timeout), bookie: addr, read: q.read != nil}
	}
	if conn := t.conns[addr]; conn != nil {
		if conn.Err() == nil {
			t.sendOn(conn, q)
			return
		}
		delete(t.conns, addr)
	}
	if waiting, ok := t.dialing[addr]; ok {
		t.dialing[addr] = append(waiting, q)
		return
	}
	t.dialing[addr] = []queuedReq{q}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		conn, err := t.c.pool.Get(t.ctx, addr)
		t.in.push(dialDone{addr: addr, conn: conn, err: err})
	}()
}

func (t *transport) sendOn(conn *client.Conn, q queuedReq) {
	addr, token, read := conn.Addr(), q.token, q.read
	if token == 0 {
		conn.Send(q.req, func(bk.Response, error) {}) // fire and forget (explicit LAC)
		return
	}
	conn.Send(q.req, func(resp bk.Response, err error) {
		if read != nil {
			t.in.push(t.readResult(*read, addr, resp, err))
			return
		}
		t.in.push(AddResult{Token: token, Bookie: addr, Status: resp.Status, Err: err})
	})
}

// readResult verifies a read answer: a StatusOK entry whose digest or ids do not check out is
// reported as bk.StatusDigestMismatch.
func (t *transport) readResult(q ReadRequest, addr string, resp bk.Response, err error) ReadResult {
	r := ReadResult{Token: q.Token, Bookie: addr, Status: resp.Status, Err: err}
	if err != nil || resp.Status != bk.StatusOK {
		return r
	}
	e, derr := bk.DecodeEntry(resp.Body, t.digest)
	if derr != nil || e.LedgerID != t.ledgerID || (q.EntryID != bk.LastEntry && e.EntryID != q.EntryID) {
		r.Status = bk.StatusDigestMismatch
		return r
	}
	r.Entry = Entry{EntryID: e.EntryID, LAC: e.LAC, Length: e.Length, Payload: e.Payload}
	r.Body = resp.Body
	return r
}

// handle processes a transport event from the inbox. It returns the event to give to the core
// (nil if the event was the transport's own).
func (t *transport) handle(ev any) (forCore []any) {
	switch e := ev.(type) {
	case dialDone:
		waiting := t.dialing[e.addr]
		delete(t.dialing, e.addr)
		if e.err != nil {
			for _, q := range waiting {
				forCore = append(forCore, t.failed(q, e.addr, e.err))
			}
			return forCore
		}
		t.conns[e.addr] = e.conn
		for _, q := range waiting {
			t.sendOn(e.conn, q)
		}
		return nil
	case AddResult:
		if _, ok := t.deadlines[e.Token]; !ok {
			return nil // already timed out
		}
		delete(t.deadlines, e.Token)
	case ReadResult:
		if _, ok := t.deadlines[e.Token]; !ok {
			return nil
		}
		delete(t.deadlines, e.Token)
	}
	return []any{ev}
}

func (t *transport) failed(q queuedReq, addr string, err error) any {
	if q.token == 0 {
		return nil
	}
	delete(t.deadlines, q.token)
	if q.read != nil {
		return ReadResult{Token: q.token, Bookie: addr, Err: err}
	}
	return AddResult{Token: q.token, Bookie: addr, Err: err}
}

// expire answers every request past its deadline with errRequestTimeout.
func (t *transport) expire(now time.Time) (forCore []any) {
	for token, d := range t.deadlines {
		if now.Before(d.at) {
			continue
		}
		delete(t.deadlines, token)
		err := fmt.Errorf("%w: %s", errRequestTimeout, d.bookie)
		if d.read {
			forCore = append(forCore, ReadResult{Token: token, Bookie: d.bookie, Err: err})
		} else {
			forCore = append(forCore, AddResult{Token: token, Bookie: d.bookie, Err: err})
		}
	}
	return forCore
}

// casMeta performs a MetaWrite against the store (see the driver obligations in core.go).
func (c *Client) casMeta(ctx context.Context, m MetaWrite) MetaResult {
	value, err := m.Meta.Marshal()
	if err != nil {
		return MetaResult{Seq: m.Seq, Err: err}
	}
	key := metadata.LedgerKey(m.Meta.LedgerID)
	var lastErr error
	for attempt := 0; attempt < c.opts.MetadataRetries; attempt++ {
		if attempt > 0 && !sleepCtx(ctx, backoff(attempt)) {
			break
		}
		v, err := c.store.Put(ctx, key, value, m.Expected)
		if err == nil {
			return MetaResult{Seq: m.Seq, Version: v}
		}
		lastErr = err
		if errors.Is(err, metadata.ErrBadVersion) || !errors.Is(err, metadata.ErrClosed) && ctx.Err() == nil {
			// A conflict, or an outcome we cannot know (the put may have applied): read the
			// record and let the core decide from it.
			cur, cv, gerr := c.readMeta(ctx, m.Meta.LedgerID)
			if gerr == nil {
				return MetaResult{Seq: m.Seq, Err: fmt.Errorf("%w: %v", ErrMetadataConflict, err), Current: cur, CurrentVersion: cv}
			}
			lastErr = gerr
			if errors.Is(gerr, ErrNoSuchLedger) || errors.Is(gerr, ErrBadMetadata) {
				break
			}
			continue
		}
		break
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	return MetaResult{Seq: m.Seq, Err: fmt.Errorf("ledger %d: metadata: %w", m.Meta.LedgerID, lastErr)}
}

// readMeta reads and decodes a ledger's record.
func (c *Client) readMeta(ctx context.Context, id int64) (*Metadata, metadata.Version, error) {
	kv, err := c.store.Get(ctx, metadata.LedgerKey(id))
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, 0, fmt.Errorf("%w: %d", ErrNoSuchLedger, id)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("ledger %d: read metadata: %w", id, err)
	}
	m, err := UnmarshalMetadata(kv.Value)
	if err != nil {
		return nil, 0, err
	}
	return m, kv.Version, nil
}

func backoff(attempt int) time.Duration {
	d := 10 * time.Millisecond << min(attempt, 6)
	return min(d, time.Second)
}

// sleepCtx waits d or until ctx ends; it reports whether the full wait happened.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
