package client

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/internal/seqwin"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// DefaultDialTimeout bounds connection establishment when Options.DialTimeout is zero.
const DefaultDialTimeout = 10 * time.Second

// chunkSize is the size of the write-queue chunks frames are encoded into. Chunks come from
// and go back to chunkPool, so a busy connection allocates none and an idle one pins none; a
// frame larger than a chunk gets a chunk of its own, which is not pooled.
const chunkSize = 64 << 10

// chunkPool holds free *[chunkSize]byte chunks shared by every connection.
var chunkPool = sync.Pool{New: func() any { return new([chunkSize]byte) }}

// maxFrameOverhead bounds the bytes of a request frame besides its body (or packaged entry):
// the length prefix, the header and the largest fixed fields (AddEntry's, with the body
// length).
const maxFrameOverhead = bk.LengthPrefixLen + bk.RequestHeaderLen + addEntryFieldsLen + 4

var (
	// ErrConnClosed is matched (errors.Is) by every error reported for requests that a failed
	// or closed connection did not complete. The concrete error is a *ConnError carrying the
	// cause.
	ErrConnClosed = errors.New("client: connection closed")
	// ErrProtocol is the cause of a connection failure when the bookie violates the protocol:
	// a response to no pending request, or of the wrong op.
	ErrProtocol = errors.New("client: protocol violation")
	// errClosedByCaller is the cause recorded when Close is called.
	errClosedByCaller = errors.New("closed by caller")
)

// ConnError reports that a connection to Addr failed or was closed, and why. It matches
// ErrConnClosed and unwraps to the cause. It is retriable (bk.IsRetriable): the request may
// or may not have reached the bookie, and bookie requests may be resent.
type ConnError struct {
	Addr string
	Err  error // the cause: errClosedByCaller, a read/write error, or a protocol error
}

func (e *ConnError) Error() string {
	return fmt.Sprintf("client: connection to %s closed: %v", e.Addr, e.Err)
}

// Unwrap returns the cause.
func (e *ConnError) Unwrap() error { return e.Err }

// Is matches ErrConnClosed.
func (e *ConnError) Is(target error) bool { return target == ErrConnClosed }

// Retriable reports true: see ConnError.
func (e *ConnError) Retriable() bool { return true }

// Options configure a Conn (and every Conn of a Pool).
type Options struct {
	// DialTimeout bounds connection establishment; zero means DefaultDialTimeout.
	DialTimeout time.Duration
	// MaxFrameLen is the largest frame (after the length prefix) sent or accepted; zero means
	// bk.MaxFrameLen. A larger response closes the connection; a larger request fails alone.
	MaxFrameLen int
	// Logger receives connection lifecycle events; nil discards them.
	Logger *slog.Logger
	// Dial opens the connection to a bookie's address; nil dials TCP. A process that runs
	// its own bookie (standalone) returns an in-process connection for that bookie's
	// address (bookie.Bookie.DialLocal) and dials the others.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

func (o Options) withDefaults() Options {
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.MaxFrameLen <= 0 {
		o.MaxFrameLen = bk.MaxFrameLen
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Dial == nil {
		o.Dial = DialTCP
	}
	return o
}

// DialTCP is the default Options.Dial: a TCP connection to addr.
func DialTCP(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// DialTLS returns an Options.Dial for bookies that serve TLS: the server name checked is
// the dialled host unless cfg names one.
func DialTLS(cfg *tls.Config) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c := cfg.Clone()
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		d := tls.Dialer{Config: c}
		return d.DialContext(ctx, "tcp", addr)
	}
}

// Callback receives the outcome of one request. See Conn.Send.
type Callback func(bk.Response, error)

// Handler receives the outcomes of requests sent with Conn.SendTo, each with the tag it was
// sent with. It lets a caller with many requests in flight use one long-lived object instead of
// a closure per request. The rules of Callback apply: it must not block.
type Handler interface {
	HandleResponse(tag uint64, resp bk.Response, err error)
}

// callbackHandler adapts a Callback to a Handler. A func is pointer-shaped, so the conversion
// allocates nothing.
type callbackHandler Callback

func (f callbackHandler) HandleResponse(_ uint64, resp bk.Response, err error) { f(resp, err) }

// pending is a request awaiting its response.
type pending struct {
	h   Handler
	tag uint64
	op  bk.Op
}

// Conn is a pipelined connection to one bookie. It is safe for concurrent use. See doc.go for
// its goroutines.
type Conn struct {
	addr string
	nc   net.Conn
	opts Options
	log  *slog.Logger

	wake chan struct{} // cap 1: Send tells the writer the queue is non-empty
	done chan struct{} // closed by fail: the connection is dead
	wg   sync.WaitGroup

	mu struct {
		sync.Mutex // guards all fields below; leaf lock, held for no I/O
		// nextID is the id of the next request; ids start at 1.
		nextID uint64
		// pending holds every request sent and not yet answered, by id (ids are dense, so
		// a window rather than a map).
		pending seqwin.Window[pending]
		// drained is set once the reader has failed pending on its way out; Send then fails
		// requests itself.
		drained bool
		// queue holds encoded frames the writer has not taken yet, in chunks (see chunkSize).
		// Frames never straddle chunks; only the last chunk is appended to.
		queue [][]byte
		// err is nil while the connection is alive, then the *ConnError that killed it.
		// Invariant: err != nil iff done is closed.
		err error
	}
}

// Dial connects to the bookie at addr and starts the connection's reader and writer
// goroutines. ctx bounds only the dial.
func Dial(ctx context.Context, addr string, opts Options) (*Conn, error) {
	opts = opts.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	nc, err := opts.Dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", addr, err)
	}
	c := &Conn{
		addr: addr,
		nc:   nc,
		opts: opts,
		log:  opts.Logger.With("bookie", addr),
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	c.mu.nextID = 1
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	c.log.Debug("bookie connection open", "local", nc.LocalAddr().String())
	return c, nil
}

// Addr returns the address the connection was dialled to.
func (c *Conn) Addr() string { return c.addr }

// Send queues req and returns without waiting. It assigns req.RequestID (the only field it
// writes); req and its Body are not retained and may be reused once Send returns.
//
// cb is called exactly once:
//   - from the reader goroutine with the response (whatever its Status) and a nil error;
//     Body, LACBody and Ranges are owned copies, safe to keep after cb returns;
//   - from the reader goroutine with a *ConnError (errors.Is ErrConnClosed) if the
//     connection fails or is closed before the response arrives;
//   - before Send returns, on the caller's goroutine, with a *ConnError if the connection is
//     already dead, or with an error if req cannot be sent (undefined op, or a frame larger
//     than Options.MaxFrameLen: bk.ErrFrameTooLarge).
//
// Callbacks from the reader goroutine run one at a time in response order, and failed
// requests are reported in request-id order. cb must not block: it stalls every response on
// the connection. Send never blocks and does not bound the queue; the caller bounds its
// outstanding requests.
func (c *Conn) Send(req *bk.Request, cb Callback) {
	c.send(req, nil, callbackHandler(cb), 0)
}

// SendTo is Send with the outcome delivered to h.HandleResponse(tag, ...) instead of a
// callback, under the same rules.
func (c *Conn) SendTo(req *bk.Request, h Handler, tag uint64) {
	c.send(req, nil, h, tag)
}

// SendEntry is SendTo for an OpAddEntry request whose body is the entry e packaged with
// req.Digest (bk.AppendEntry): the entry is packaged straight into the connection's write
// buffer, so the caller needs no buffer of its own. req.Body is ignored; e.Payload is not
// retained.
func (c *Conn) SendEntry(req *bk.Request, e *bk.Entry, h Handler, tag uint64) {
	if req.Op != bk.OpAddEntry {
		h.HandleResponse(tag, bk.Response{}, fmt.Errorf("client: send entry with op %v", req.Op))
		return
	}
	c.send(req, e, h, tag)
}

// send queues req (with its body packaged from e if e is non-nil) and registers h.
func (c *Conn) send(req *bk.Request, e *bk.Entry, h Handler, tag uint64) {
	if !req.Op.Valid() {
		h.HandleResponse(tag, bk.Response{}, fmt.Errorf("client: send %v: undefined op", req.Op))
		return
	}
	if e != nil {
		if _, err := bk.DigestLen(req.Digest); err != nil {
			h.HandleResponse(tag, bk.Response{}, fmt.Errorf("client: send %v ledger %d: %w", req.Op, req.LedgerID, err))
			return
		}
	}
	c.mu.Lock()
	if c.mu.drained || c.mu.err != nil {
		err := c.mu.err
		c.mu.Unlock()
		h.HandleResponse(tag, bk.Response{}, err)
		return
	}
	id := c.mu.nextID
	c.mu.nextID++
	req.RequestID = id
	size := maxFrameOverhead + len(req.Body)
	if e != nil {
		dl, _ := bk.DigestLen(req.Digest)
		size = maxFrameOverhead + bk.EntryHeaderLen + dl + len(e.Payload)
	}
	buf := c.chunkLocked(size)
	start := len(buf)
	if e == nil {
		buf = bk.AppendRequest(buf, req)
	} else {
		buf = appendEntryRequest(buf, req, e)
	}
	if n := len(buf) - start - bk.LengthPrefixLen; n > c.opts.MaxFrameLen {
		c.mu.queue[len(c.mu.queue)-1] = buf[:start]
		c.mu.Unlock()
		h.HandleResponse(tag, bk.Response{}, fmt.Errorf("client: send %v ledger %d: %w: %d bytes, limit %d",
			req.Op, req.LedgerID, bk.ErrFrameTooLarge, n, c.opts.MaxFrameLen))
		return
	}
	c.mu.queue[len(c.mu.queue)-1] = buf
	c.mu.pending.Put(id, pending{h: h, tag: tag, op: req.Op})
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default: // the writer is already due to look at the queue
	}
}

// chunkLocked returns the last chunk of the queue after making sure it has room for size more
// bytes (adding a chunk if needed). The caller stores the extended slice back in place.
func (c *Conn) chunkLocked(size int) []byte {
	if n := len(c.mu.queue); n > 0 {
		if last := c.mu.queue[n-1]; cap(last)-len(last) >= size {
			return last
		}
	}
	var buf []byte
	if size <= chunkSize {
		buf = chunkPool.Get().(*[chunkSize]byte)[:0]
	} else {
		buf = make([]byte, 0, size)
	}
	c.mu.queue = append(c.mu.queue, buf)
	return buf
}

// recycle returns the pooled chunks of bufs to chunkPool and clears bufs.
func recycle(bufs [][]byte) {
	for i, b := range bufs {
		if cap(b) == chunkSize {
			chunkPool.Put((*[chunkSize]byte)(b[:chunkSize]))
		}
		bufs[i] = nil
	}
}

// appendEntryRequest appends the AddEntry frame of req with body e packaged by bk.AppendEntry.
// The body is the last field of an AddEntry frame, as a u32 length and the bytes (see
// proto/bk doc.go): the request is encoded with an empty body, the entry appended after it,
// and the body length and frame length patched.
func appendEntryRequest(dst []byte, req *bk.Request, e *bk.Entry) []byte {
	r := *req
	r.Body = nil
	start := len(dst)
	dl, _ := bk.DigestLen(r.Digest) // checked by the caller
	dst = slices.Grow(dst, bk.LengthPrefixLen+bk.RequestHeaderLen+addEntryFieldsLen+4+bk.EntryHeaderLen+dl+len(e.Payload))
	dst = bk.AppendRequest(dst, &r)
	bodyAt := len(dst)
	dst = bk.AppendEntry(dst, e.LedgerID, e.EntryID, e.LAC, e.Length, r.Digest, e.Payload)
	binary.BigEndian.PutUint32(dst[bodyAt-4:], uint32(len(dst)-bodyAt))
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-bk.LengthPrefixLen))
	return dst
}

// addEntryFieldsLen is the size of an AddEntry request's fields before its body: ledger id,
// entry id, master key and digest type.
const addEntryFieldsLen = 8 + 8 + bk.MasterKeyLen + 1

// Do sends req and waits for its response. A response with a non-OK status is returned along
// with its status error (bk.Status.Err), so callers can test errors.Is(err, bk.ErrFenced).
// If ctx ends first, Do returns ctx.Err(); the request stays in flight and its response is
// discarded.
func (c *Conn) Do(ctx context.Context, req *bk.Request) (bk.Response, error) {
	if err := ctx.Err(); err != nil {
		return bk.Response{}, err
	}
	type result struct {
		resp bk.Response
		err  error
	}
	ch := make(chan result, 1) // buffered: cb never blocks, even after Do gave up
	c.Send(req, func(resp bk.Response, err error) { ch <- result{resp, err} })
	select {
	case res := <-ch:
		if res.err != nil {
			return bk.Response{}, res.err
		}
		return res.resp, res.resp.Status.Err()
	case <-ctx.Done():
		return bk.Response{}, ctx.Err()
	}
}

// Done returns a channel closed when the connection has failed or been closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns nil while the connection is alive, then the *ConnError that ended it.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.err
}

// Close closes the connection, fails every pending request with a *ConnError, and waits for
// the reader and writer goroutines (and so for every callback) to finish. It is idempotent
// and always returns nil. It must not be called from a callback (it would wait for itself).
func (c *Conn) Close() error {
	c.fail(errClosedByCaller)
	c.wg.Wait()
	return nil
}

// fail marks the connection dead with cause (the first cause wins) and closes the socket,
// which stops both goroutines. The reader then fails the pending requests.
func (c *Conn) fail(cause error) {
	c.mu.Lock()
	if c.mu.err != nil {
		c.mu.Unlock()
		return
	}
	c.mu.err = &ConnError{Addr: c.addr, Err: cause}
	recycle(c.mu.queue)
	c.mu.queue = nil
	close(c.done)
	c.mu.Unlock()
	if cause == errClosedByCaller {
		c.log.Debug("bookie connection closed")
	} else {
		c.log.Warn("bookie connection failed", "err", cause)
	}
	_ = c.nc.Close()
}

// writeLoop is the writer goroutine: it takes the whole queue at once and writes it in one
// call (writev), so frames queued while a write is in progress go out together in the next
// one.
func (c *Conn) writeLoop() {
	defer c.wg.Done()
	var bufs [][]byte
	var iov net.Buffers
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		c.mu.Lock()
		bufs, c.mu.queue = c.mu.queue, bufs[:0]
		c.mu.Unlock()
		if len(bufs) == 0 {
			continue
		}
		iov = append(iov[:0], bufs...) // WriteTo consumes iov; bufs keeps the chunks
		_, err := iov.WriteTo(c.nc)
		clear(iov[:cap(iov)])
		recycle(bufs)
		if err != nil {
			c.fail(fmt.Errorf("write: %w", err))
			return
		}
	}
}

// readLoop is the reader goroutine: it matches each response to its pending request and runs
// the callback. On any error it fails the connection and then every pending request.
func (c *Conn) readLoop() {
	defer c.wg.Done()
	defer c.failPending()
	fr := bk.NewFrameReader(c.nc, c.opts.MaxFrameLen)
	for {
		frame, err := fr.Next()
		if err != nil {
			c.fail(fmt.Errorf("read: %w", err))
			return
		}
		resp, err := bk.DecodeResponse(frame)
		if err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		p, ok := c.mu.pending.Delete(resp.RequestID)
		c.mu.Unlock()
		if !ok {
			c.fail(fmt.Errorf("%w: response %v to unknown request %d", ErrProtocol, resp.Op, resp.RequestID))
			return
		}
		if resp.Op != p.op {
			err := fmt.Errorf("%w: %v response to %v request %d", ErrProtocol, resp.Op, p.op, resp.RequestID)
			c.fail(err)
			p.h.HandleResponse(p.tag, bk.Response{}, c.Err())
			return
		}
		p.h.HandleResponse(p.tag, own(resp), nil)
	}
}

// failPending runs on the reader goroutine after fail: it takes the pending requests (so that
// Send fails new requests inline from now on) and fails each in id order.
func (c *Conn) failPending() {
	c.mu.Lock()
	pend := c.mu.pending
	c.mu.pending = seqwin.Window[pending]{}
	c.mu.drained = true
	err := c.mu.err
	c.mu.Unlock()
	for _, p := range pend.All() {
		p.h.HandleResponse(p.tag, bk.Response{}, err)
	}
}

// own returns resp with its byte slices copied out of the frame buffer (one allocation for
// both). Ranges are already freshly allocated by the decoder.
func own(resp bk.Response) bk.Response {
	n := len(resp.Body) + len(resp.LACBody)
	if n == 0 {
		resp.Body, resp.LACBody = nil, nil
		return resp
	}
	b := make([]byte, n)
	copy(b, resp.Body)
	copy(b[len(resp.Body):], resp.LACBody)
	body, lac := b[:len(resp.Body):len(resp.Body)], b[len(resp.Body):]
	resp.Body, resp.LACBody = nil, nil
	if len(body) > 0 {
		resp.Body = body
	}
	if len(lac) > 0 {
		resp.LACBody = lac
	}
	return resp
}
