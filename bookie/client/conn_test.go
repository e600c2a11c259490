package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/proto/bk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeServer is a tiny bookie: real TCP on 127.0.0.1, proto/bk codec. Per connection, one
// goroutine reads requests and one answers them in batches of `batch`, shuffled with a
// seeded rand so responses come back out of order.
type fakeServer struct {
	t     testing.TB
	ln    net.Listener
	batch int
	// respond returns the response to a request, or false to swallow it.
	respond func(bk.Request) (bk.Response, bool)
	// got, if non-nil, receives every decoded request. Set by setGot, under mu.
	got chan bk.Request

	accepted atomic.Int32
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

func newFakeServer(t testing.TB, batch int, respond func(bk.Request) (bk.Response, bool)) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{t: t, ln: ln, batch: batch, respond: respond, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

func (s *fakeServer) addr() string { return s.ln.Addr().String() }

func (s *fakeServer) acceptLoop() {
	defer s.wg.Done()
	for seed := uint64(1); ; seed++ {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		s.mu.Lock()
		s.conns[nc] = struct{}{}
		s.mu.Unlock()
		reqs := make(chan bk.Request, 1024)
		s.wg.Add(2)
		go s.readLoop(nc, reqs)
		go s.answerLoop(nc, reqs, rand.New(rand.NewPCG(seed, 42)))
	}
}

func (s *fakeServer) readLoop(nc net.Conn, reqs chan<- bk.Request) {
	defer s.wg.Done()
	defer close(reqs)
	s.mu.Lock()
	got := s.got
	s.mu.Unlock()
	fr := bk.NewFrameReader(nc, 0)
	for {
		f, err := fr.Next()
		if err != nil {
			return
		}
		req, err := bk.DecodeRequest(f)
		if err != nil {
			s.t.Errorf("fake server: %v", err)
			return
		}
		req.Body = bytes.Clone(req.Body)
		if got != nil {
			got <- req
		}
		reqs <- req
	}
}

func (s *fakeServer) answerLoop(nc net.Conn, reqs <-chan bk.Request, rng *rand.Rand) {
	defer s.wg.Done()
	var batch []bk.Response
	var out []byte
	for req := range reqs {
		if resp, ok := s.respond(req); ok {
			batch = append(batch, resp)
		}
		if len(batch) < s.batch {
			continue
		}
		rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		out = out[:0]
		for i := range batch {
			out = bk.AppendResponse(out, &batch[i])
		}
		batch = batch[:0]
		if _, err := nc.Write(out); err != nil {
			return
		}
	}
}

// setGot makes the server send every request it decodes on a new channel of capacity n,
// s.got. Call it before dialling: connections accepted earlier do not report.
func (s *fakeServer) setGot(n int) {
	s.mu.Lock()
	s.got = make(chan bk.Request, n)
	s.mu.Unlock()
}

// dropAll closes every server-side connection.
func (s *fakeServer) dropAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for nc := range s.conns {
		nc.Close()
		delete(s.conns, nc)
	}
}

func (s *fakeServer) close() {
	s.ln.Close()
	s.dropAll()
	s.wg.Wait()
}

// payloadFor is the entry a fake bookie returns for ledger l, entry e: large every 1000th.
func payloadFor(l, e int64) []byte {
	n := 16
	if e%1000 == 999 {
		n = 100 << 10 // larger than the FrameReader's zero-copy buffer
	}
	return bk.AppendEntry(nil, l, e, e-1, e*16, bk.DigestCRC32C, bytes.Repeat([]byte{byte(e)}, n))
}

// echo answers every request OK, with op-specific contents derived from the request.
func echo(req bk.Request) (bk.Response, bool) {
	resp := bk.Response{Op: req.Op, RequestID: req.RequestID, LedgerID: req.LedgerID, EntryID: req.EntryID}
	switch req.Op {
	case bk.OpReadEntry:
		resp.MaxLAC = req.EntryID - 1
		resp.Body = payloadFor(req.LedgerID, req.EntryID)
	case bk.OpReadLAC:
		resp.LACBody = bk.AppendLACBody(nil, req.LedgerID, 5, bk.DigestCRC32C)
		resp.Body = payloadFor(req.LedgerID, 6)
	case bk.OpListEntries:
		resp.Ranges = []bk.Range{{First: 0, Last: req.LedgerID}}
	}
	return resp, true
}

func swallow(bk.Request) (bk.Response, bool) { return bk.Response{}, false }

func dial(t testing.TB, s *fakeServer, opts Options) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), s.addr(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPipeline sends 10k requests from several goroutines; the server answers in shuffled
// batches. Every callback runs exactly once with the response to its own request, and the
// bodies handed to callbacks stay intact after later frames are read.
func TestPipeline(t *testing.T) {
	const senders, perSender = 4, 2500
	const n = senders * perSender
	s := newFakeServer(t, 100, echo)
	defer s.close()
	c := dial(t, s, Options{})
	defer c.Close()

	var (
		calls  [n]atomic.Int32
		bodies [n][]byte
		wg     sync.WaitGroup
		mu     sync.Mutex
		order  []int // callback order by request index
	)
	wg.Add(n)
	ops := []bk.Op{bk.OpAddEntry, bk.OpReadEntry, bk.OpReadLAC, bk.OpListEntries, bk.OpForce}
	for g := range senders {
		go func() {
			for k := range perSender {
				i := g*perSender + k
				op := ops[i%len(ops)]
				req := bk.Request{Op: op, LedgerID: int64(i), EntryID: int64(i)}
				if op == bk.OpAddEntry {
					req.Digest = bk.DigestCRC32C
					req.Body = payloadFor(int64(i), int64(i))
				}
				c.Send(&req, func(resp bk.Response, err error) {
					defer wg.Done()
					if calls[i].Add(1) != 1 {
						t.Errorf("request %d: callback called twice", i)
					}
					if err != nil {
						t.Errorf("request %d: %v", i, err)
						return
					}
					wantEntry := int64(i) // only adds and reads carry an entry id
					if op != bk.OpAddEntry && op != bk.OpReadEntry {
						wantEntry = 0
					}
					if resp.Op != op || resp.LedgerID != int64(i) || resp.EntryID != wantEntry || resp.Status != bk.StatusOK {
						t.Errorf("request %d (%v): wrong response %+v", i, op, resp)
					}
					switch op {
					case bk.OpReadEntry:
						bodies[i] = resp.Body
					case bk.OpReadLAC:
						if _, lac, err := bk.DecodeLACBody(resp.LACBody, bk.DigestCRC32C); err != nil || lac != 5 {
							t.Errorf("request %d: LAC body %v %v", i, lac, err)
						}
						bodies[i] = resp.Body
					case bk.OpListEntries:
						if !slices.Equal(resp.Ranges, []bk.Range{{First: 0, Last: int64(i)}}) {
							t.Errorf("request %d: ranges %v", i, resp.Ranges)
						}
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
				})
			}
		}()
	}
	wg.Wait()
	for i := range n {
		if got := calls[i].Load(); got != 1 {
			t.Fatalf("request %d: %d callbacks", i, got)
		}
		var want []byte
		switch ops[i%len(ops)] {
		case bk.OpReadEntry:
			want = payloadFor(int64(i), int64(i))
		case bk.OpReadLAC:
			want = payloadFor(int64(i), 6)
		}
		if want != nil && !bytes.Equal(bodies[i], want) {
			t.Fatalf("request %d: body overwritten or wrong", i)
		}
	}
	if slices.IsSorted(order) {
		t.Fatal("responses arrived in request order: the test did not exercise reordering")
	}
	if err := c.Err(); err != nil {
		t.Fatalf("connection failed: %v", err)
	}
}

func entryIDOf(entry []byte) int64 {
	e, err := bk.DecodeEntry(entry, bk.DigestCRC32C)
	if err != nil {
		panic(err)
	}
	return e.EntryID
}

// sendN sends n ReadEntry requests and returns their errors through the returned channel,
// after waiting until the server has received all of them.
func sendN(t *testing.T, s *fakeServer, c *Conn, n int) (errs chan error, calls []atomic.Int32) {
	t.Helper()
	errs = make(chan error, n)
	calls = make([]atomic.Int32, n)
	for i := range n {
		c.Send(&bk.Request{Op: bk.OpReadEntry, LedgerID: 1, EntryID: int64(i)}, func(_ bk.Response, err error) {
			calls[i].Add(1)
			errs <- err
		})
	}
	for range n {
		<-s.got
	}
	return errs, calls
}

func TestConnDropFailsPending(t *testing.T) {
	const n = 200
	s := newFakeServer(t, 1, swallow)
	s.setGot(n)
	defer s.close()
	c := dial(t, s, Options{})
	defer c.Close()

	errs, calls := sendN(t, s, c, n)
	s.dropAll()
	for range n {
		err := <-errs
		var ce *ConnError
		if !errors.Is(err, ErrConnClosed) || !errors.As(err, &ce) || !errors.Is(err, io.EOF) {
			t.Fatalf("err = %v, want ConnError caused by io.EOF", err)
		}
		if ce.Addr != s.addr() || !bk.IsRetriable(err) {
			t.Fatalf("ConnError %+v: wrong addr or not retriable", ce)
		}
	}
	<-c.Done()
	if !errors.Is(c.Err(), ErrConnClosed) {
		t.Fatalf("Err() = %v", c.Err())
	}
	// Requests after the failure fail inline.
	var inline error
	c.Send(&bk.Request{Op: bk.OpForce}, func(_ bk.Response, err error) { inline = err })
	if !errors.Is(inline, ErrConnClosed) {
		t.Fatalf("send after failure: %v", inline)
	}
	if _, err := c.Do(context.Background(), &bk.Request{Op: bk.OpForce}); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Do after failure: %v", err)
	}
	c.Close()
	for i := range calls {
		if calls[i].Load() != 1 {
			t.Fatalf("request %d: %d callbacks", i, calls[i].Load())
		}
	}
}

// TestCloseWaits: Close fails every pending request before returning, stops both goroutines,
// and is idempotent.
func TestCloseWaits(t *testing.T) {
	const n = 100
	s := newFakeServer(t, 1, swallow)
	s.setGot(n)
	c := dial(t, s, Options{})

	errs, calls := sendN(t, s, c, n)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if len(errs) != n {
		t.Fatalf("%d of %d callbacks ran before Close returned", len(errs), n)
	}
	for range n {
		if err := <-errs; !errors.Is(err, ErrConnClosed) || !errors.Is(err, errClosedByCaller) {
			t.Fatalf("err = %v", err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		if calls[i].Load() != 1 {
			t.Fatalf("request %d: %d callbacks", i, calls[i].Load())
		}
	}
	s.close()
	goleak.VerifyNone(t)
}

func TestDo(t *testing.T) {
	statuses := map[int64]bk.Status{1: bk.StatusOK, 2: bk.StatusFenced, 3: bk.StatusServerError}
	s := newFakeServer(t, 1, func(req bk.Request) (bk.Response, bool) {
		st, ok := statuses[req.LedgerID]
		if !ok {
			return bk.Response{}, false // ledger 4: never answered
		}
		resp, _ := echo(req)
		resp.Status = st
		return resp, true
	})
	s.setGot(16)
	defer s.close()
	c := dial(t, s, Options{})
	defer c.Close()
	ctx := context.Background()

	resp, err := c.Do(ctx, &bk.Request{Op: bk.OpReadEntry, LedgerID: 1, EntryID: 4})
	if err != nil || entryIDOf(resp.Body) != 4 {
		t.Fatalf("Do ok: %+v, %v", resp, err)
	}
	resp, err = c.Do(ctx, &bk.Request{Op: bk.OpAddEntry, LedgerID: 2, Body: []byte("x")})
	if !errors.Is(err, bk.ErrFenced) || resp.Status != bk.StatusFenced || bk.IsRetriable(err) {
		t.Fatalf("Do fenced: %+v, %v", resp, err)
	}
	if _, err = c.Do(ctx, &bk.Request{Op: bk.OpForce, LedgerID: 3}); !errors.Is(err, bk.ErrServer) || !bk.IsRetriable(err) {
		t.Fatalf("Do server error: %v", err)
	}

	// A Do whose ctx ends while the request is in flight returns ctx.Err().
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		for req := range s.got {
			if req.LedgerID == 4 {
				cancel()
				return
			}
		}
	}()
	if _, err := c.Do(cctx, &bk.Request{Op: bk.OpForce, LedgerID: 4}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do cancelled: %v", err)
	}
	if _, err := c.Do(cctx, &bk.Request{Op: bk.OpForce, LedgerID: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do with done ctx: %v", err)
	}
}

func TestSendRejectsLocally(t *testing.T) {
	s := newFakeServer(t, 1, echo)
	defer s.close()
	c := dial(t, s, Options{MaxFrameLen: 1000})
	defer c.Close()

	var err error
	c.Send(&bk.Request{Op: bk.OpAddEntry, Body: make([]byte, 1000)}, func(_ bk.Response, e error) { err = e })
	if !errors.Is(err, bk.ErrFrameTooLarge) {
		t.Fatalf("oversize send: %v", err)
	}
	err = nil
	c.Send(&bk.Request{Op: 99}, func(_ bk.Response, e error) { err = e })
	if err == nil {
		t.Fatal("undefined op accepted")
	}
	// The connection is unaffected.
	if _, err := c.Do(context.Background(), &bk.Request{Op: bk.OpForce, LedgerID: 1}); err != nil {
		t.Fatal(err)
	}
}

// TestUnansweredRequestStaysPending: a request the bookie never answers stays pending (and is
// failed on Close) while many later ones complete, without the pending window growing with
// them.
func TestUnansweredRequestStaysPending(t *testing.T) {
	const n, window = 20000, 64
	s := newFakeServer(t, 1, func(req bk.Request) (bk.Response, bool) {
		if req.EntryID == -1 {
			return bk.Response{}, false // a long poll that never fires
		}
		return echo(req)
	})
	defer s.close()
	c := dial(t, s, Options{})
	straggler := make(chan error, 1)
	c.Send(&bk.Request{Op: bk.OpReadEntry, LedgerID: 1, EntryID: -1}, func(_ bk.Response, err error) { straggler <- err })
	sem := make(chan struct{}, window)
	for i := range n {
		sem <- struct{}{}
		c.Send(&bk.Request{Op: bk.OpForce, LedgerID: int64(i)}, func(_ bk.Response, err error) {
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			<-sem
		})
	}
	for range window {
		sem <- struct{}{}
	}
	c.mu.Lock()
	pending, ring := c.mu.pending.Len(), c.mu.pending.Cap()
	c.mu.Unlock()
	if pending != 1 || ring > 16*window {
		t.Fatalf("%d pending in a window of %d slots", pending, ring)
	}
	c.Close()
	if err := <-straggler; !errors.Is(err, ErrConnClosed) {
		t.Fatalf("straggler: %v", err)
	}
}

// recorder is a Handler collecting outcomes by tag.
type recorder struct {
	mu   sync.Mutex
	got  map[uint64]bk.Response
	errs map[uint64]error
	wg   sync.WaitGroup
}

func (r *recorder) HandleResponse(tag uint64, resp bk.Response, err error) {
	r.mu.Lock()
	if _, dup := r.got[tag]; dup {
		panic(fmt.Sprintf("tag %d answered twice", tag))
	}
	r.got[tag], r.errs[tag] = resp, err
	r.mu.Unlock()
	r.wg.Done()
}

// TestSendEntry: SendEntry puts on the wire exactly the frame AppendRequest makes from the
// packaged entry, and SendTo/SendEntry outcomes reach the handler with their tags.
func TestSendEntry(t *testing.T) {
	const n = 300
	s := newFakeServer(t, 5, echo) // n is a multiple of the batch
	s.setGot(n)
	defer s.close()
	c := dial(t, s, Options{})
	defer c.Close()

	rec := &recorder{got: map[uint64]bk.Response{}, errs: map[uint64]error{}}
	rec.wg.Add(n)
	want := map[int64]bk.Request{}
	for i := range int64(n) {
		e := bk.Entry{LedgerID: 7, EntryID: i, LAC: i - 1, Length: i * 10, Payload: bytes.Repeat([]byte{byte(i)}, int(i)*7)}
		req := bk.Request{Op: bk.OpAddEntry, LedgerID: 7, EntryID: i, MasterKey: bk.MasterKey([]byte("pw")),
			Digest: []bk.DigestType{bk.DigestCRC32C, bk.DigestNone}[i%2], Body: []byte("ignored")}
		if i%3 == 0 {
			req.Flags = bk.FlagRecovery
		}
		tag := uint64(1000 + i)
		if i%5 == 4 {
			// A plain SendTo with the body packaged by the caller.
			req.Body = bk.AppendEntry(nil, e.LedgerID, e.EntryID, e.LAC, e.Length, req.Digest, e.Payload)
			c.SendTo(&req, rec, tag)
		} else {
			c.SendEntry(&req, &e, rec, tag)
		}
		req.Body = bk.AppendEntry(nil, e.LedgerID, e.EntryID, e.LAC, e.Length, req.Digest, e.Payload)
		want[i] = req
	}
	for range n {
		got := <-s.got
		w := want[got.EntryID]
		if !reflect.DeepEqual(got, w) {
			t.Fatalf("entry %d: server got %+v, want %+v", got.EntryID, got, w)
		}
	}
	rec.wg.Wait()
	for i := range int64(n) {
		tag := uint64(1000 + i)
		if err := rec.errs[tag]; err != nil || rec.got[tag].EntryID != i {
			t.Fatalf("tag %d: %+v %v", tag, rec.got[tag], err)
		}
	}

	// Local rejections reach the handler before SendEntry returns.
	rec.wg.Add(2)
	c.SendEntry(&bk.Request{Op: bk.OpReadEntry}, &bk.Entry{}, rec, 1)
	c.SendEntry(&bk.Request{Op: bk.OpAddEntry, Digest: 77}, &bk.Entry{}, rec, 2)
	if rec.errs[1] == nil || rec.errs[2] == nil {
		t.Fatalf("bad SendEntry accepted: %v, %v", rec.errs[1], rec.errs[2])
	}
}

func TestProtocolViolation(t *testing.T) {
	for name, mutate := range map[string]func(*bk.Response){
		"unknown id": func(r *bk.Response) { r.RequestID += 1000 },
		"wrong op":   func(r *bk.Response) { r.Op = bk.OpReadLAC },
	} {
		t.Run(name, func(t *testing.T) {
			s := newFakeServer(t, 1, func(req bk.Request) (bk.Response, bool) {
				resp, _ := echo(req)
				mutate(&resp)
				return resp, true
			})
			defer s.close()
			c := dial(t, s, Options{})
			defer c.Close()
			_, err := c.Do(context.Background(), &bk.Request{Op: bk.OpForce, LedgerID: 1})
			if !errors.Is(err, ErrConnClosed) || !errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v", err)
			}
			<-c.Done()
		})
	}
}

func TestOversizeResponseClosesConn(t *testing.T) {
	s := newFakeServer(t, 1, echo)
	defer s.close()
	c := dial(t, s, Options{MaxFrameLen: 1000})
	defer c.Close()
	// ReadEntry 999 returns a 100 KiB entry.
	_, err := c.Do(context.Background(), &bk.Request{Op: bk.OpReadEntry, LedgerID: 1, EntryID: 999})
	if !errors.Is(err, ErrConnClosed) || !errors.Is(err, bk.ErrFrameTooLarge) {
		t.Fatalf("err = %v", err)
	}
}

func TestPool(t *testing.T) {
	s := newFakeServer(t, 1, echo)
	defer s.close()
	p := NewPool(Options{})
	ctx := context.Background()

	// Concurrent Gets share one dial.
	conns := make([]*Conn, 8)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			c, err := p.Get(ctx, s.addr())
			if err != nil {
				t.Error(err)
			}
			conns[i] = c
		})
	}
	wg.Wait()
	for _, c := range conns {
		if c != conns[0] {
			t.Fatal("concurrent Gets returned different connections")
		}
	}
	c1 := conns[0]
	if _, err := c1.Do(ctx, &bk.Request{Op: bk.OpForce, LedgerID: 1}); err != nil {
		t.Fatal(err)
	}

	// A dead connection is replaced.
	s.dropAll()
	<-c1.Done()
	c2, err := p.Get(ctx, s.addr())
	if err != nil || c2 == c1 {
		t.Fatalf("Get after drop: %p %v", c2, err)
	}
	if _, err := c2.Do(ctx, &bk.Request{Op: bk.OpForce, LedgerID: 1}); err != nil {
		t.Fatal(err)
	}
	if got := s.accepted.Load(); got != 2 {
		t.Fatalf("server accepted %d connections, want 2", got)
	}

	// A failed dial is reported and not cached.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	if _, err := p.Get(ctx, dead); err == nil {
		t.Fatal("Get of a closed port succeeded")
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	<-c2.Done()
	if _, err := p.Get(ctx, s.addr()); !errors.Is(err, ErrPoolClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	p.Close()
}

func TestDialError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Dial(ctx, "127.0.0.1:1", Options{}); err == nil {
		t.Fatal("Dial with a cancelled ctx succeeded")
	}
}

// BenchmarkPipelinedAdd measures round trips of 1 KiB adds through a real loopback socket
// with a fake bookie that answers immediately: with a callback per request (Send), a Handler
// and a caller-packaged body (SendTo), and the entry packaged into the write buffer
// (SendEntry).
func BenchmarkPipelinedAdd(b *testing.B) {
	payload := make([]byte, 1024)
	entry := bk.AppendEntry(nil, 1, 0, -1, 1024, bk.DigestCRC32C, payload)
	for _, api := range []string{"Send", "SendTo", "SendEntry"} {
		b.Run("api="+api, func(b *testing.B) {
			s := newFakeServer(b, 1, echo)
			c := dial(b, s, Options{})
			const window = 256
			sem := make(chan struct{}, window)
			h := semHandler(sem)
			b.SetBytes(int64(len(entry)))
			for b.Loop() {
				sem <- struct{}{}
				req := bk.Request{Op: bk.OpAddEntry, LedgerID: 1, Digest: bk.DigestCRC32C, Body: entry}
				switch api {
				case "Send":
					c.Send(&req, func(_ bk.Response, err error) {
						if err != nil {
							panic(fmt.Sprint(err))
						}
						<-sem
					})
				case "SendTo":
					c.SendTo(&req, h, 0)
				case "SendEntry":
					c.SendEntry(&req, &bk.Entry{LedgerID: 1, LAC: -1, Length: 1024, Payload: payload}, h, 0)
				}
			}
			for range window {
				sem <- struct{}{}
			}
			b.StopTimer() // teardown (closing sockets, joining goroutines) is not part of the cost
			c.Close()
			s.close()
		})
	}
}

// semHandler releases a semaphore slot per response.
type semHandler chan struct{}

func (h semHandler) HandleResponse(_ uint64, _ bk.Response, err error) {
	if err != nil {
		panic(fmt.Sprint(err))
	}
	<-h
}
