package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type cluster struct {
	t       testing.TB
	store   metadata.Store
	bookies []*bookie.Bookie
}

func newCluster(t testing.TB, n int) *cluster {
	t.Helper()
	eps := metadatatest.Embedded(t)
	c := &cluster{t: t, store: metadatatest.NewStore(t, eps)}
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		b, err := bookie.Start(ctx, bookie.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Store: c.store,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SessionTTL: 2 * time.Second, GCInterval: -1})
		cancel()
		if err != nil {
			t.Fatalf("start bookie: %v", err)
		}
		t.Cleanup(func() { b.Close() })
		c.bookies = append(c.bookies, b)
	}
	return c
}

func (c *cluster) client(opts ledger.Options) *ledger.Client {
	pool := client.NewPool(client.Options{})
	lc := ledger.NewClient(c.store, pool, opts)
	c.t.Cleanup(func() {
		lc.Close()
		pool.Close()
	})
	return lc
}

func (c *cluster) bookie(id string) *bookie.Bookie {
	for _, b := range c.bookies {
		if b.ID() == id {
			return b
		}
	}
	return nil
}

func payload(i int) []byte {
	return []byte(fmt.Sprintf("entry-%04d-%s", i, bytes.Repeat([]byte{'x'}, i%50)))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func checkEntries(t *testing.T, es []ledger.Entry, from, to int) {
	t.Helper()
	if len(es) != to-from+1 {
		t.Fatalf("read %d entries, want %d", len(es), to-from+1)
	}
	for i, e := range es {
		if e.EntryID != int64(from+i) || !bytes.Equal(e.Payload, payload(from+i)) {
			t.Fatalf("entry %d: id %d payload %q", from+i, e.EntryID, e.Payload)
		}
	}
}

// appendN appends n entries asynchronously and returns the acknowledged ids in order.
func appendN(t *testing.T, ctx context.Context, h *ledger.Handle, from, n int) []int64 {
	var mu sync.Mutex
	var acked []int64
	var wg sync.WaitGroup
	for i := from; i < from+n; i++ {
		wg.Add(1)
		h.AppendAsync(ctx, payload(i), func(id int64, err error) {
			defer wg.Done()
			if err == nil {
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return acked
}

func TestClientWriteReadClose(t *testing.T) {
	c := newCluster(t, 3)
	lc := c.client(ledger.Options{})
	ctx := ctxT(t)
	h, err := lc.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, Password: []byte("pw")})
	if err != nil {
		t.Fatal(err)
	}
	acked := appendN(t, ctx, h, 0, 200)
	if len(acked) != 200 || !slices.IsSorted(acked) || acked[199] != 199 {
		t.Fatalf("acked %d entries (%v...)", len(acked), acked[:min(5, len(acked))])
	}
	if h.LAC() != 199 {
		t.Fatalf("LAC %d", h.LAC())
	}
	es, err := h.Read(ctx, 0, 199)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, es, 0, 199)
	if _, err := h.Read(ctx, 0, 200); !errors.Is(err, ledger.ErrReadBeyondLAC) {
		t.Fatalf("read beyond LAC: %v", err)
	}

	// A tailing reader sees the LAC (explicit LAC flush after the writer goes idle).
	r, err := lc.Open(ctx, h.ID(), ledger.OpenOptions{Password: []byte("pw")})
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	res, err := r.LongPollRead(pctx, 198)
	cancel()
	if err != nil || res.LAC != 199 {
		t.Fatalf("long poll: %+v %v", res, err)
	}
	if _, err := lc.Open(ctx, h.ID(), ledger.OpenOptions{Password: []byte("bad")}); !errors.Is(err, ledger.ErrUnauthorized) {
		t.Fatalf("bad password: %v", err)
	}

	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Append(ctx, []byte("late")); !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	m := h.Metadata()
	if m.State != ledger.StateClosed || m.LastEntryID != 199 || m.Length != es[199].Length {
		t.Fatalf("closed metadata: %+v", m)
	}
	r2, err := lc.Open(ctx, h.ID(), ledger.OpenOptions{Password: []byte("pw"), Recovery: true})
	if err != nil {
		t.Fatal(err)
	}
	es, err = r2.Read(ctx, 150, 199)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, es, 150, 199)
	if err := lc.Delete(ctx, h.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Open(ctx, h.ID(), ledger.OpenOptions{}); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Fatalf("open deleted: %v", err)
	}
}

// TestClientBookieFailureAndRecovery: a bookie dies mid-stream (ensemble change, writes go
// on), the writer is abandoned, a second client recovers: every acknowledged entry is read
// back and the old writer is fenced.
func TestClientBookieFailureAndRecovery(t *testing.T) {
	c := newCluster(t, 4)
	ctx := ctxT(t)
	lc := c.client(ledger.Options{AddTimeout: 2 * time.Second})
	h, err := lc.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, Password: []byte("pw")})
	if err != nil {
		t.Fatal(err)
	}
	acked := appendN(t, ctx, h, 0, 50)
	victim := h.Metadata().Ensembles[0].Bookies[1]
	c.bookie(victim).Close()
	acked = append(acked, appendN(t, ctx, h, 50, 50)...)
	if len(acked) != 100 {
		t.Fatalf("acked %d of 100 across the bookie failure", len(acked))
	}
	m := h.Metadata()
	if len(m.Ensembles) < 2 || slices.Contains(m.LastEnsemble().Bookies, victim) {
		t.Fatalf("no ensemble change away from %s: %+v", victim, m.Ensembles)
	}

	lc2 := c.client(ledger.Options{})
	r, err := lc2.Open(ctx, h.ID(), ledger.OpenOptions{Recovery: true, Password: []byte("pw")})
	if err != nil {
		t.Fatal(err)
	}
	rm := r.Metadata()
	if rm.State != ledger.StateClosed || rm.LastEntryID < 99 {
		t.Fatalf("recovered metadata: %+v", rm)
	}
	es, err := r.Read(ctx, 0, 99)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, es, 0, 99)
	if _, err := h.Append(ctx, []byte("after recovery")); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("old writer append: %v", err)
	}
	if err := h.Close(ctx); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("old writer close: %v", err)
	}
}

// TestClientRecoveryReplacesDeadBookie: the writer stops without closing and a bookie in the
// write set of its last entry dies with it; recovery re-adds that entry to a replacement and
// records the replacement ensemble when it closes the ledger.
func TestClientRecoveryReplacesDeadBookie(t *testing.T) {
	c := newCluster(t, 4)
	ctx := ctxT(t)
	// No explicit LAC: the bookies only know the piggybacked LAC (the penultimate entry), so
	// recovery must re-add the last one.
	lc := c.client(ledger.Options{LACFlushInterval: time.Hour})
	h, err := lc.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, Password: []byte("pw")})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := 0; i < n; i++ { // one at a time: entry i piggybacks LAC i-1
		if _, err := h.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
	}
	ens := h.Metadata().Ensembles[0].Bookies
	victim := ens[(n-1)%3] // stores entry n-1
	lc.Close()             // the writer is gone; the ledger stays OPEN
	c.bookie(victim).Close()

	r, err := c.client(ledger.Options{AddTimeout: 2 * time.Second}).Open(ctx, h.ID(), ledger.OpenOptions{Recovery: true, Password: []byte("pw")})
	if err != nil {
		t.Fatalf("open with recovery: %v", err)
	}
	rm := r.Metadata()
	if rm.State != ledger.StateClosed || rm.LastEntryID != n-1 {
		t.Fatalf("recovered metadata: %+v", rm)
	}
	if len(rm.Ensembles) != 2 || rm.Ensembles[1].FirstEntry != n-1 || slices.Contains(rm.Ensembles[1].Bookies, victim) {
		t.Fatalf("recovery did not record a replacement for %s: %+v", victim, rm.Ensembles)
	}
	es, err := r.Read(ctx, 0, n-1)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, es, 0, n-1)
}

func TestClientCreateErrors(t *testing.T) {
	c := newCluster(t, 2)
	lc := c.client(ledger.Options{})
	ctx := ctxT(t)
	if _, err := lc.Create(ctx, ledger.CreateOptions{Ensemble: 2, WriteQuorum: 3, AckQuorum: 2}); !errors.Is(err, ledger.ErrInvalidConfig) {
		t.Fatalf("bad quorum: %v", err)
	}
	if _, err := lc.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2}); !errors.Is(err, ledger.ErrNotEnoughBookies) {
		t.Fatalf("too few bookies: %v", err)
	}
}

// TestClientAppendQueue: MaxPendingAdds bounds the appends queued or in flight (a waiting
// AppendAsync gives up with its ctx), callbacks come once each in entry order, an append made
// before Close is taken before the close, and appends after it fail with ErrClosed.
func TestClientAppendQueue(t *testing.T) {
	c := newCluster(t, 1)
	lc := c.client(ledger.Options{MaxPendingAdds: 2})
	ctx := ctxT(t)
	h, err := lc.Create(ctx, ledger.CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		id  int64
		err error
	}
	results := make(chan result, 100)
	record := func(id int64, err error) { results <- result{id, err} }

	// Entry 0's callback blocks the owner goroutine, so entries 0 and 1 fill MaxPendingAdds.
	entered, unblock := make(chan struct{}), make(chan struct{})
	h.AppendAsync(ctx, payload(0), func(id int64, err error) {
		close(entered)
		<-unblock
		record(id, err)
	})
	<-entered
	h.AppendAsync(ctx, payload(1), record)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	h.AppendAsync(cctx, payload(2), record) // no room: waits, and its ctx is done
	if r := <-results; r.id != -1 || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("append without room, ctx done: %+v", r)
	}
	close(unblock)

	// Many appenders racing; then one more and a Close from the same goroutine.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.AppendAsync(ctx, payload(10+i), record)
		}()
	}
	wg.Wait()
	h.AppendAsync(ctx, payload(99), record)
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	for range 23 {
		r := <-results
		if r.err != nil || r.id != want {
			t.Fatalf("callback %d: %+v", want, r)
		}
		want++
	}
	if m := h.Metadata(); m.State != ledger.StateClosed || m.LastEntryID != 22 {
		t.Fatalf("closed metadata: %+v", m)
	}
	h.AppendAsync(ctx, payload(100), record)
	if r := <-results; r.id != -1 || !errors.Is(r.err, ledger.ErrClosed) {
		t.Fatalf("append after close: %+v", r)
	}
}

// BenchmarkAppend measures pipelined 1 KiB appends on local bookies (which share one disk).
func BenchmarkAppend(b *testing.B) {
	for _, q := range []struct{ e, wq, aq int }{{1, 1, 1}, {3, 2, 2}} {
		b.Run(fmt.Sprintf("E=%d,WQ=%d,AQ=%d", q.e, q.wq, q.aq), func(b *testing.B) {
			c := newCluster(b, q.e)
			ctx := context.Background()
			h, err := c.client(ledger.Options{}).Create(ctx, ledger.CreateOptions{Ensemble: q.e, WriteQuorum: q.wq, AckQuorum: q.aq})
			if err != nil {
				b.Fatal(err)
			}
			p := bytes.Repeat([]byte{'x'}, 1024)
			var wg sync.WaitGroup
			b.SetBytes(int64(len(p)))
			b.ResetTimer()
			cpu0 := processCPU(b)
			for b.Loop() {
				wg.Add(1)
				h.AppendAsync(ctx, p, func(_ int64, err error) {
					if err != nil {
						b.Error(err)
					}
					wg.Done()
				})
			}
			wg.Wait()
			// CPU of the whole process (writer and bookies) per entry: the add path is
			// CPU-bound, and on a shared machine CPU time is steadier than wall time.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			// Stop the timer before teardown: closing the ledger is not part of the add path.
			b.StopTimer()
			h.Close(ctx)
		})
	}
}

// processCPU returns the user and system CPU time the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
