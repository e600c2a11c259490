package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/internal/inbox"
	"github.com/magnetar-io/magnetar/internal/seqwin"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// event is one item of an inbox: a bookie's answer to an add (the hot path, kept unboxed so it
// costs no allocation) or any other result (other != nil): ReadResult, MetaResult, dialDone.
type event struct {
	add   AddResult
	other any
}

// events carries results from connection callbacks and helper goroutines to a core's owner
// goroutine without ever blocking the sender (the transport's inbox).
type events = inbox.Queue[event]

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
	in       *events

	conns   map[string]*bookieConn
	dialing map[string][]queuedReq // requests waiting for a connection
	// deadlines holds every outstanding bookie request by token (tokens are allocated
	// consecutively by the core); expire answers those past their deadline with a timeout
	// (the core then ignores the real answer, if any).
	deadlines seqwin.Window[deadline]
	wg        sync.WaitGroup // helper goroutines (dials, metadata calls)
}

// bookieConn is a connection the transport sends on. It is the client.Handler of the adds
// sent on it: an answer becomes an AddResult in the inbox, with no closure per request. It
// runs on the connection's reader goroutine and touches only immutable fields and the inbox.
type bookieConn struct {
	conn *client.Conn
	addr string
	in   *events
}

// HandleResponse implements client.Handler for the add with token tag.
func (b *bookieConn) HandleResponse(tag uint64, resp bk.Response, err error) {
	b.in.Push(event{add: AddResult{Token: tag, Bookie: b.addr, Status: resp.Status, Err: err}})
}

// queuedReq is a request to send. An add whose Body is nil is packaged by the connection from
// entry (client.Conn.SendEntry).
type queuedReq struct {
	req   bk.Request
	entry Entry
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

func newTransport(ctx context.Context, c *Client, m *Metadata, in *events) *transport {
	return &transport{
		c: c, ctx: ctx, ledgerID: m.LedgerID, key: bk.MasterKey(m.Password), digest: m.Digest.Wire(), in: in,
		conns: map[string]*bookieConn{}, dialing: map[string][]queuedReq{},
	}
}

// perform sends every request of rd. Completions and close/recovery results are left to the
// caller.
func (t *transport) perform(rd *Ready) {
	if len(rd.Adds)+len(rd.Reads) == 0 && len(rd.LACWrites)+len(rd.MetaWrites) == 0 {
		return
	}
	now := time.Now()
	for i := range rd.Adds {
		a := &rd.Adds[i]
		q := queuedReq{req: bk.Request{Op: bk.OpAddEntry, LedgerID: t.ledgerID, EntryID: a.Entry.EntryID,
			MasterKey: t.key, Digest: t.digest, Body: a.Body}, token: a.Token}
		if a.Recovery {
			q.req.Flags |= bk.FlagRecovery
		}
		if a.Body == nil {
			q.entry = a.Entry
		}
		t.send(a.Bookie, &q, now.Add(t.c.opts.AddTimeout))
	}
	for i := range rd.Reads {
		r := rd.Reads[i]
		q := queuedReq{req: bk.Request{Op: bk.OpReadEntry, LedgerID: t.ledgerID, EntryID: r.EntryID, MasterKey: t.key},
			token: r.Token, read: &r}
		if r.Fence {
			q.req.Flags |= bk.FlagFence
		}
		t.send(r.Bookie, &q, now.Add(t.c.opts.ReadTimeout))
	}
	for _, l := range rd.LACWrites {
		q := queuedReq{req: bk.Request{Op: bk.OpWriteLAC, LedgerID: t.ledgerID, LAC: l.LAC, MasterKey: t.key,
			Body: bk.AppendLACBody(nil, t.ledgerID, l.LAC, t.digest)}}
		t.send(l.Bookie, &q, time.Time{})
	}
	for _, m := range rd.MetaWrites {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.in.Push(event{other: t.c.casMeta(t.ctx, m)})
		}()
	}
}

// send sends one request on the bookie's connection, dialling first if needed. A request with
// a token expires at deadline.
func (t *transport) send(addr string, q *queuedReq, deadlineAt time.Time) {
	if q.token != 0 {
		t.deadlines.Put(q.token, deadline{at: deadlineAt, bookie: addr, read: q.read != nil})
	}
	if bc := t.conns[addr]; bc != nil {
		if bc.conn.Err() == nil {
			t.sendOn(bc, q)
			return
		}
		delete(t.conns, addr)
	}
	if q.req.Op == bk.OpAddEntry && q.req.Body == nil {
		// The request outlives this call, maybe the append's callback too (another write-set
		// member may complete it): package the entry now, while the payload is ours.
		e := &q.entry
		q.req.Body = bk.AppendEntry(nil, t.ledgerID, e.EntryID, e.LAC, e.Length, t.digest, e.Payload)
		q.entry = Entry{}
	}
	if waiting, ok := t.dialing[addr]; ok {
		t.dialing[addr] = append(waiting, *q)
		return
	}
	t.dialing[addr] = []queuedReq{*q}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		conn, err := t.c.pool.Get(t.ctx, addr)
		t.in.Push(event{other: dialDone{addr: addr, conn: conn, err: err}})
	}()
}

func (t *transport) sendOn(bc *bookieConn, q *queuedReq) {
	switch {
	case q.token == 0:
		bc.conn.Send(&q.req, func(bk.Response, error) {}) // fire and forget (explicit LAC)
	case q.read != nil:
		addr, read := bc.addr, *q.read
		bc.conn.Send(&q.req, func(resp bk.Response, err error) {
			t.in.Push(event{other: t.readResult(read, addr, resp, err)})
		})
	case q.req.Body == nil:
		e := bk.Entry{LedgerID: t.ledgerID, EntryID: q.entry.EntryID, LAC: q.entry.LAC, Length: q.entry.Length,
			Payload: q.entry.Payload}
		bc.conn.SendEntry(&q.req, &e, bc, q.token)
	default:
		bc.conn.SendTo(&q.req, bc, q.token)
	}
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

// handle processes an event from the inbox and appends what it yields for the core to
// forCore: the event itself if it answers an outstanding request, nothing if the request
// already timed out or the event was the transport's own (a dial).
func (t *transport) handle(ev event, forCore []event) []event {
	switch e := ev.other.(type) {
	case nil: // an AddResult
		if _, ok := t.deadlines.Delete(ev.add.Token); !ok {
			return forCore // already timed out
		}
	case dialDone:
		waiting := t.dialing[e.addr]
		delete(t.dialing, e.addr)
		if e.err != nil {
			for i := range waiting {
				forCore = t.failed(&waiting[i], e.addr, e.err, forCore)
			}
			return forCore
		}
		bc := &bookieConn{conn: e.conn, addr: e.addr, in: t.in}
		t.conns[e.addr] = bc
		for i := range waiting {
			t.sendOn(bc, &waiting[i])
		}
		return forCore
	case ReadResult:
		if _, ok := t.deadlines.Delete(e.Token); !ok {
			return forCore
		}
	}
	return append(forCore, ev)
}

func (t *transport) failed(q *queuedReq, addr string, err error, forCore []event) []event {
	if q.token == 0 {
		return forCore
	}
	t.deadlines.Delete(q.token)
	if q.read != nil {
		return append(forCore, event{other: ReadResult{Token: q.token, Bookie: addr, Err: err}})
	}
	return append(forCore, event{add: AddResult{Token: q.token, Bookie: addr, Err: err}})
}

// expire answers every request past its deadline with errRequestTimeout, appending the
// answers to forCore.
func (t *transport) expire(now time.Time, forCore []event) []event {
	for token, d := range t.deadlines.All() {
		if now.Before(d.at) {
			continue
		}
		t.deadlines.Delete(token)
		err := fmt.Errorf("%w: %s", errRequestTimeout, d.bookie)
		if d.read {
			forCore = append(forCore, event{other: ReadResult{Token: token, Bookie: d.bookie, Err: err}})
		} else {
			forCore = append(forCore, event{add: AddResult{Token: token, Bookie: d.bookie, Err: err}})
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
		if attempt > 0 && !backoff.Sleep(ctx, retryBackoff.Delay(attempt)) {
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

// retryBackoff is the delay before retry attempt n of a dial or a metadata operation:
// 10 ms doubling, at most 640 ms.
var retryBackoff = backoff.Policy{Base: 10 * time.Millisecond, Max: 640 * time.Millisecond}
