package bookie_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/proto/bk"
)

var testKey = bk.MasterKey([]byte("secret"))

type env struct {
	t     *testing.T
	store metadata.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	eps := metadatatest.Embedded(t)
	return &env{t: t, store: metadatatest.NewStore(t, eps)}
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func (e *env) start(dir string, mod func(*bookie.Config)) *bookie.Bookie {
	e.t.Helper()
	b, err := e.tryStart(dir, mod)
	if err != nil {
		e.t.Fatalf("start bookie: %v", err)
	}
	e.t.Cleanup(func() { b.Close() })
	return b
}

func (e *env) tryStart(dir string, mod func(*bookie.Config)) (*bookie.Bookie, error) {
	cfg := bookie.Config{Listen: "127.0.0.1:0", DataDir: dir, Store: e.store, Logger: quietLogger(),
		SessionTTL: 2 * time.Second, GCInterval: -1}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return bookie.Start(ctx, cfg)
}

func dial(t *testing.T, addr string) *client.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{})
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// do sends req and returns the response, failing the test on transport errors only.
func do(t *testing.T, c *client.Conn, req bk.Request) bk.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := make(chan struct {
		r   bk.Response
		err error
	}, 1)
	c.Send(&req, func(r bk.Response, err error) {
		ch <- struct {
			r   bk.Response
			err error
		}{r, err}
	})
	select {
	case x := <-ch:
		if x.err != nil {
			t.Fatalf("%v request: %v", req.Op, x.err)
		}
		return x.r
	case <-ctx.Done():
		t.Fatalf("%v request: no response", req.Op)
	}
	return bk.Response{}
}

func entry(ledger, id, lac int64, payload string) []byte {
	return bk.AppendEntry(nil, ledger, id, lac, int64(len(payload))*(id+1), bk.DigestCRC32C, []byte(payload))
}

func addReq(ledger, id, lac int64, payload string) bk.Request {
	return bk.Request{Op: bk.OpAddEntry, LedgerID: ledger, EntryID: id, MasterKey: testKey,
		Digest: bk.DigestCRC32C, Body: entry(ledger, id, lac, payload)}
}

func readReq(ledger, id int64) bk.Request {
	return bk.Request{Op: bk.OpReadEntry, LedgerID: ledger, EntryID: id}
}

func wantStatus(t *testing.T, r bk.Response, s bk.Status) {
	t.Helper()
	if r.Status != s {
		t.Fatalf("status = %v, want %v", r.Status, s)
	}
}

func TestAddReadListRoundTrip(t *testing.T) {
	e := newEnv(t)
	b := e.start(t.TempDir(), nil)
	c := dial(t, b.Addr())
	for i := int64(0); i < 10; i++ {
		wantStatus(t, do(t, c, addReq(1, i, i-1, strings.Repeat("x", int(i)+1))), bk.StatusOK)
	}
	for i := int64(0); i < 10; i++ {
		r := do(t, c, readReq(1, i))
		wantStatus(t, r, bk.StatusOK)
		if !bytes.Equal(r.Body, entry(1, i, i-1, strings.Repeat("x", int(i)+1))) {
			t.Fatalf("entry %d differs", i)
		}
	}
	last := do(t, c, readReq(1, bk.LastEntry))
	wantStatus(t, last, bk.StatusOK)
	if last.EntryID != 9 || last.MaxLAC != 8 {
		t.Fatalf("last entry: id %d maxLAC %d, want 9 and 8", last.EntryID, last.MaxLAC)
	}
	wantStatus(t, do(t, c, readReq(1, 10)), bk.StatusNoSuchEntry)
	wantStatus(t, do(t, c, readReq(2, 0)), bk.StatusNoSuchLedger)
	wantStatus(t, do(t, c, addReq(1, 20, 9, "gap")), bk.StatusOK)
	l := do(t, c, bk.Request{Op: bk.OpListEntries, LedgerID: 1})
	wantStatus(t, l, bk.StatusOK)
	want := []bk.Range{{First: 0, Last: 9}, {First: 20, Last: 20}}
	if len(l.Ranges) != 2 || l.Ranges[0] != want[0] || l.Ranges[1] != want[1] {
		t.Fatalf("ranges = %v, want %v", l.Ranges, want)
	}
	wantStatus(t, do(t, c, bk.Request{Op: bk.OpForce, LedgerID: 1}), bk.StatusOK)
}

func TestRefusedAddsStoreNothing(t *testing.T) {
	e := newEnv(t)
	b := e.start(t.TempDir(), nil)
	c := dial(t, b.Addr())
	wantStatus(t, do(t, c, addReq(1, 0, -1, "first")), bk.StatusOK)

	wrongKey := addReq(1, 1, 0, "second")
	wrongKey.MasterKey = bk.MasterKey([]byte("not the password"))
	wantStatus(t, do(t, c, wrongKey), bk.StatusUnauthorized)

	corrupt := addReq(1, 1, 0, "second")
	corrupt.Body[len(corrupt.Body)-1] ^= 0xff
	wantStatus(t, do(t, c, corrupt), bk.StatusDigestMismatch)

	mismatch := addReq(1, 1, 0, "second")
	mismatch.EntryID = 2 // header says entry 1
	wantStatus(t, do(t, c, mismatch), bk.StatusDigestMismatch)

	wantStatus(t, do(t, c, readReq(1, 1)), bk.StatusNoSuchEntry)
	wantStatus(t, do(t, c, readReq(1, 2)), bk.StatusNoSuchEntry)
	r := do(t, c, readReq(1, bk.LastEntry))
	if r.EntryID != 0 {
		t.Fatalf("last entry after refused adds = %d, want 0", r.EntryID)
	}
}

func TestFencingIsDurable(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	fixedID := func(c *bookie.Config) { c.ID = "bookie-1" }
	b := e.start(dir, fixedID)
	c := dial(t, b.Addr())
	for i := int64(0); i < 3; i++ {
		wantStatus(t, do(t, c, addReq(7, i, i-1, "v")), bk.StatusOK)
	}
	fence := bk.Request{Op: bk.OpReadEntry, Flags: bk.FlagFence, LedgerID: 7, EntryID: bk.LastEntry, MasterKey: testKey}
	wrongFence := fence
	wrongFence.MasterKey = bk.MasterKey([]byte("x"))
	wantStatus(t, do(t, c, wrongFence), bk.StatusUnauthorized)
	wantStatus(t, do(t, c, addReq(7, 3, 2, "v")), bk.StatusOK) // not fenced yet
	r := do(t, c, fence)
	wantStatus(t, r, bk.StatusOK)
	if r.EntryID != 3 {
		t.Fatalf("fence read returned entry %d, want last entry 3", r.EntryID)
	}
	wantStatus(t, do(t, c, addReq(7, 4, 3, "v")), bk.StatusFenced)
	rec := addReq(7, 4, 3, "v")
	rec.Flags = bk.FlagRecovery
	wantStatus(t, do(t, c, rec), bk.StatusOK)

	// A fence on a ledger the bookie never saw still fences it.
	unknown := fence
	unknown.LedgerID = 8
	if s := do(t, c, unknown).Status; s != bk.StatusNoSuchEntry && s != bk.StatusNoSuchLedger {
		t.Fatalf("fence of unknown ledger: %v", s)
	}
	wantStatus(t, do(t, c, addReq(8, 0, -1, "late writer")), bk.StatusFenced)

	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	b2 := e.start(dir, fixedID)
	c2 := dial(t, b2.Addr())
	wantStatus(t, do(t, c2, addReq(7, 5, 4, "v")), bk.StatusFenced)
	wantStatus(t, do(t, c2, addReq(8, 0, -1, "late writer")), bk.StatusFenced)
	wantStatus(t, do(t, c2, readReq(7, 4)), bk.StatusOK)
}

func TestRestartKeepsEntriesWithoutCheckpoint(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	b := e.start(dir, func(c *bookie.Config) { c.ID = "bookie-1"; c.CheckpointInterval = time.Hour })
	c := dial(t, b.Addr())
	for i := int64(0); i < 200; i++ {
		wantStatus(t, do(t, c, addReq(3, i, i-1, "payload")), bk.StatusOK)
	}
	b.Close()
	b2 := e.start(dir, func(c *bookie.Config) { c.ID = "bookie-1" })
	c2 := dial(t, b2.Addr())
	for i := int64(0); i < 200; i++ {
		r := do(t, c2, readReq(3, i))
		wantStatus(t, r, bk.StatusOK)
		if !bytes.Equal(r.Body, entry(3, i, i-1, "payload")) {
			t.Fatalf("entry %d differs after restart", i)
		}
	}
}

func TestCookie(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	b := e.start(dir, func(c *bookie.Config) { c.ID = "bookie-a" })
	b.Close()

	if _, err := e.tryStart(dir, func(c *bookie.Config) { c.ID = "bookie-b" }); !errors.Is(err, bookie.ErrCookie) {
		t.Fatalf("start on another bookie's data dir: err = %v, want ErrCookie", err)
	}
	if _, err := e.tryStart(t.TempDir(), func(c *bookie.Config) { c.ID = "bookie-a" }); !errors.Is(err, bookie.ErrCookie) {
		t.Fatalf("start with a wiped data dir: err = %v, want ErrCookie", err)
	}
	b2 := e.start(dir, func(c *bookie.Config) { c.ID = "bookie-a" })
	b2.Close()

	// A data dir of another cluster instance is refused too.
	other := newEnv(t)
	if _, err := other.tryStart(dir, func(c *bookie.Config) { c.ID = "bookie-a" }); !errors.Is(err, bookie.ErrCookie) {
		t.Fatalf("start on another cluster's data dir: err = %v, want ErrCookie", err)
	}
}

func TestMalformedFrameClosesOnlyThatConnection(t *testing.T) {
	e := newEnv(t)
	b := e.start(t.TempDir(), nil)
	good := dial(t, b.Addr())
	wantStatus(t, do(t, good, addReq(1, 0, -1, "a")), bk.StatusOK)

	for name, frame := range map[string][]byte{
		"unknown op": {0, 0, 0, 10, 99, 0, 0, 0, 0, 0, 0, 0, 0, 1},
		"oversized":  {0xff, 0xff, 0xff, 0xff, 1},
		"short body": {0, 0, 0, 12, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
	} {
		t.Run(name, func(t *testing.T) {
			nc, err := net.Dial("tcp", b.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.Write(frame); err != nil {
				t.Fatal(err)
			}
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := nc.Read(make([]byte, 1))
			if err == nil || n != 0 {
				t.Fatalf("connection not closed: n=%d err=%v", n, err)
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open after malformed frame")
			}
		})
	}
	wantStatus(t, do(t, good, addReq(1, 1, 0, "b")), bk.StatusOK)
}

func TestReadOnlyOnDiskThreshold(t *testing.T) {
	e := newEnv(t)
	var usage atomic.Uint64
	usage.Store(math.Float64bits(0.5))
	b := e.start(t.TempDir(), func(c *bookie.Config) {
		c.DiskCheckInterval = 20 * time.Millisecond
		c.DiskUsage = func(string) (float64, error) { return math.Float64frombits(usage.Load()), nil }
	})
	c := dial(t, b.Addr())
	wantStatus(t, do(t, c, addReq(1, 0, -1, "a")), bk.StatusOK)
	waitRegistered(t, e.store, b.ID(), "writable")

	usage.Store(math.Float64bits(0.97))
	waitRegistered(t, e.store, b.ID(), "read-only")
	wantStatus(t, do(t, c, addReq(1, 1, 0, "b")), bk.StatusReadOnly)
	wantStatus(t, do(t, c, readReq(1, 0)), bk.StatusOK) // reads still served

	usage.Store(math.Float64bits(0.5))
	waitRegistered(t, e.store, b.ID(), "writable")
	wantStatus(t, do(t, c, addReq(1, 1, 0, "b")), bk.StatusOK)
}

// waitRegistered waits (on a watch, with a deadline) until the bookie's only registration is in
// the given state.
func waitRegistered(t *testing.T, store metadata.Store, id, state string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	w := store.Watch(ctx, "/bookies/", 0)
	for {
		infos, err := bookie.ListBookies(ctx, store, false)
		if err != nil {
			t.Fatal(err)
		}
		n, ok := 0, false
		for _, i := range infos {
			if i.ID == id {
				n++
				ok = i.State == state
			}
		}
		if n == 1 && ok {
			return
		}
		select {
		case <-w.C:
		case <-ctx.Done():
			t.Fatalf("bookie %s not registered as %s: %+v", id, state, infos)
		}
	}
}

func TestRegistrationGoesAwayOnClose(t *testing.T) {
	e := newEnv(t)
	b := e.start(t.TempDir(), nil)
	waitRegistered(t, e.store, b.ID(), "writable")
	b.Close()
	infos, err := bookie.ListBookies(context.Background(), e.store, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 0 {
		t.Fatalf("registrations after close: %+v", infos)
	}
	all, err := bookie.ListBookies(context.Background(), e.store, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].State != "down" || all[0].ID != b.ID() {
		t.Fatalf("--all after close: %+v", all)
	}
}

func TestGarbageCollection(t *testing.T) {
	e := newEnv(t)
	b := e.start(t.TempDir(), nil)
	c := dial(t, b.Addr())
	ctx := context.Background()
	if _, err := e.store.Put(ctx, metadata.LedgerKey(5), []byte("{}"), metadata.NotExists); err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < 50; i++ {
		wantStatus(t, do(t, c, addReq(5, i, i-1, "live")), bk.StatusOK)
		wantStatus(t, do(t, c, addReq(6, i, i-1, "garbage")), bk.StatusOK)
	}
	n, err := b.GC(ctx)
	if err != nil {
		t.Fatalf("gc: %v", err)
	}
	if n != 1 {
		t.Fatalf("gc deleted %d ledgers, want 1", n)
	}
	wantStatus(t, do(t, c, readReq(6, 0)), bk.StatusNoSuchLedger)
	for i := int64(0); i < 50; i++ {
		r := do(t, c, readReq(5, i))
		wantStatus(t, r, bk.StatusOK)
		if !bytes.Equal(r.Body, entry(5, i, i-1, "live")) {
			t.Fatalf("live entry %d differs after gc", i)
		}
	}
}

func TestLongPollAndExplicitLAC(t *testing.T) {
	e := newEnv(t)
	b := e.start(t.TempDir(), nil)
	c := dial(t, b.Addr())
	wantStatus(t, do(t, c, addReq(9, 0, -1, "a")), bk.StatusOK)

	// Times out: nothing advances the LAC past -1.
	r := do(t, c, bk.Request{Op: bk.OpLongPoll, LedgerID: 9, PreviousLAC: -1, TimeoutMs: 50})
	wantStatus(t, r, bk.StatusTimeout)

	// Parked poll released by an add that piggybacks LAC 0.
	ch := make(chan bk.Response, 1)
	c.Send(&bk.Request{Op: bk.OpLongPoll, Flags: bk.FlagPiggyback, LedgerID: 9, PreviousLAC: -1, TimeoutMs: 10000},
		func(r bk.Response, err error) {
			if err != nil {
				t.Error(err)
			}
			ch <- r
		})
	other := dial(t, b.Addr())
	wantStatus(t, do(t, other, addReq(9, 1, 0, "b")), bk.StatusOK)
	select {
	case r := <-ch:
		wantStatus(t, r, bk.StatusOK)
		if r.MaxLAC != 0 || r.EntryID != 0 || !bytes.Equal(r.Body, entry(9, 0, -1, "a")) {
			t.Fatalf("long poll: lac %d entry %d", r.MaxLAC, r.EntryID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long poll not released by the LAC advance")
	}

	// Explicit LAC write is visible to ReadLAC and releases pollers.
	body := bk.AppendLACBody(nil, 9, 1, bk.DigestCRC32C)
	wantStatus(t, do(t, c, bk.Request{Op: bk.OpWriteLAC, LedgerID: 9, LAC: 1, MasterKey: testKey, Body: body}), bk.StatusOK)
	// The request bodies alias the connection's read buffer: push more than that buffer
	// through the connection before reading the LAC body back.
	filler := strings.Repeat("x", 1024)
	for i := int64(0); i < 200; i++ {
		wantStatus(t, do(t, c, addReq(10, i, i-1, filler)), bk.StatusOK)
	}
	lr := do(t, c, bk.Request{Op: bk.OpReadLAC, LedgerID: 9})
	wantStatus(t, lr, bk.StatusOK)
	if !bytes.Equal(lr.LACBody, body) || !bytes.Equal(lr.Body, entry(9, 1, 0, "b")) {
		t.Fatalf("read LAC: body %x last %x", lr.LACBody, lr.Body)
	}
	r = do(t, c, bk.Request{Op: bk.OpLongPoll, LedgerID: 9, PreviousLAC: 0, TimeoutMs: 10000})
	wantStatus(t, r, bk.StatusOK)
	if r.MaxLAC != 1 {
		t.Fatalf("long poll after explicit LAC: %d, want 1", r.MaxLAC)
	}
}

func TestMetricsExposed(t *testing.T) {
	e := newEnv(t)
	b := e.start(t.TempDir(), nil)
	c := dial(t, b.Addr())
	wantStatus(t, do(t, c, addReq(1, 0, -1, "a")), bk.StatusOK)
	srv := httptest.NewServer(b.MetricsHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, m := range []string{"magnetar_bookie_add_latency_seconds_count 1", "magnetar_bookie_journal_fsync_seconds",
		"magnetar_bookie_journal_group_records", "magnetar_bookie_add_bytes_total", "magnetar_bookie_fenced_ledgers",
		"magnetar_bookie_write_cache_bytes ", "magnetar_bookie_write_cache_flushes_total 0", "magnetar_bookie_entry_logs 1"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("metrics lack %q", m)
		}
	}
	if strings.Contains(string(body), "magnetar_bookie_write_cache_bytes 0") {
		t.Error("the added entry is not counted in the write cache")
	}
}

// TestDialLocal: a client on an in-process connection (DialLocal as its Dial) adds and
// reads back as over TCP, large entries included; Close ends the connection, and DialLocal
// then fails.
func TestDialLocal(t *testing.T) {
	e := newEnv(t)
	b := e.start(t.TempDir(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, b.Addr(), client.Options{Dial: func(context.Context, string) (net.Conn, error) { return b.DialLocal() }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := strings.Repeat("x", 1<<20)
	for id, payload := range []string{"a", big, "b"} {
		wantStatus(t, do(t, c, addReq(7, int64(id), int64(id)-1, payload)), bk.StatusOK)
	}
	for id, payload := range []string{"a", big, "b"} {
		r := do(t, c, readReq(7, int64(id)))
		wantStatus(t, r, bk.StatusOK)
		if want := entry(7, int64(id), int64(id)-1, payload); !bytes.Equal(r.Body, want) {
			t.Fatalf("entry %d: read %d bytes, want %d", id, len(r.Body), len(want))
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the in-process connection outlived the bookie")
	}
	if nc, err := b.DialLocal(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("DialLocal after Close: %v, %v; want net.ErrClosed", nc, err)
	}
}
