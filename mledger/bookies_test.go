package mledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// Integration tests and benchmarks on real bookies, the real ledger client and an embedded
// etcd.

type bkCluster struct {
	tb    testing.TB
	store metadata.Store
}

func newBKCluster(tb testing.TB, bookies int) *bkCluster {
	tb.Helper()
	eps := metadatatest.Embedded(tb)
	c := &bkCluster{tb: tb, store: metadatatest.NewStore(tb, eps)}
	for i := 0; i < bookies; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		b, err := bookie.Start(ctx, bookie.Config{Listen: "127.0.0.1:0", DataDir: tb.TempDir(), Store: c.store,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SessionTTL: 2 * time.Second, GCInterval: -1})
		cancel()
		if err != nil {
			tb.Fatalf("start bookie: %v", err)
		}
		tb.Cleanup(func() { b.Close() })
	}
	return c
}

// client returns a ledger client (and its pool), closed at cleanup.
func (c *bkCluster) client() *ledger.Client {
	pool := client.NewPool(client.Options{})
	lc := ledger.NewClient(c.store, pool, ledger.Options{})
	c.tb.Cleanup(func() {
		lc.Close()
		pool.Close()
	})
	return lc
}

// factory returns a managed-ledger factory as one process would have it: its own ledger
// client and adapters, all closed at cleanup (in reverse order).
func (c *bkCluster) factory() *Factory {
	bl := NewBookieLedgers(c.client(), 0)
	as := NewAsyncStore(c.store, 0)
	f := NewFactory(bl, as, FactoryOptions{})
	c.tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = f.Close(ctx)
		bl.Close()
		as.Close()
	})
	return f
}

func bkConfig() Config {
	return Config{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, Password: []byte("pw"), MaxEntriesPerLedger: 50,
		RetentionTime: -1, RetentionSize: -1}
}

func TestBookiesAddReadTerminateReopen(t *testing.T) {
	if testing.Short() {
		t.Skip("real bookies")
	}
	c := newBKCluster(t, 3)
	ctx := tctx(t)
	f := c.factory()
	m, err := f.Open(ctx, "tenant/ns/t1", bkConfig())
	if err != nil {
		t.Fatal(err)
	}
	cu, err := m.OpenCursor(ctx, "sub", Earliest)
	if err != nil {
		t.Fatal(err)
	}
	const n = 180
	done := make(chan error, n)
	want := map[Position]string{}
	positions := make([]Position, n)
	for i := 0; i < n; i++ {
		i := i
		m.AddAsync([]byte(fmt.Sprintf("e-%d", i)), func(p Position, err error) {
			positions[i] = p
			done <- err
		})
	}
	for i := 0; i < n; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range positions {
		if i > 0 && !positions[i-1].Less(p) {
			t.Fatalf("add %d at %v after %v", i, p, positions[i-1])
		}
		want[p] = fmt.Sprintf("e-%d", i)
	}
	st, _ := m.Stats(ctx)
	if len(st.Ledgers) < 4 {
		t.Fatalf("expected rollovers, ledgers %v", st.Ledgers)
	}
	got := 0
	for got < 100 {
		es, err := cu.Read(ctx, 30)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if want[e.Position] != string(e.Data) {
				t.Fatalf("entry %v: %q", e.Position, e.Data)
			}
			if err := cu.Ack(ctx, e.Position); err != nil {
				t.Fatal(err)
			}
			got++
		}
	}
	if err := cu.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	tp, err := m.Terminate(ctx)
	if err != nil || tp != positions[n-1] {
		t.Fatalf("terminate: %v %v, want %v", tp, err, positions[n-1])
	}
	if _, err := m.Add(ctx, []byte("late")); !errors.Is(err, ErrTerminated) {
		t.Fatalf("add after terminate: %v", err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Another process reopens it.
	m2, err := c.factory().Open(ctx, "tenant/ns/t1", bkConfig())
	if err != nil {
		t.Fatal(err)
	}
	if m2.State() != StateTerminated {
		t.Fatalf("reopened in %v", m2.State())
	}
	cu2, err := m2.OpenCursor(ctx, "sub", Latest)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := cu2.Backlog(ctx); b != int64(n-got) {
		t.Fatalf("backlog after reopen %d, want %d", b, n-got)
	}
	es, err := m2.Read(ctx, Earliest, 1000)
	if err != nil || len(es) != n {
		t.Fatalf("read all: %d, %v", len(es), err)
	}
	for _, e := range es {
		if want[e.Position] != string(e.Data) {
			t.Fatalf("entry %v: %q", e.Position, e.Data)
		}
	}
}

// TestBookiesSecondOwnerFencesFirst: opening the log elsewhere recovers its last ledger, so
// the first owner's adds fail with ErrFenced; everything it had confirmed is readable.
func TestBookiesSecondOwnerFencesFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("real bookies")
	}
	c := newBKCluster(t, 3)
	ctx := tctx(t)
	m1, err := c.factory().Open(ctx, "t2", bkConfig())
	if err != nil {
		t.Fatal(err)
	}
	var confirmed []Position
	for i := 0; i < 20; i++ {
		p, err := m1.Add(ctx, []byte(fmt.Sprintf("a-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		confirmed = append(confirmed, p)
	}
	m2, err := c.factory().Open(ctx, "t2", bkConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Add(ctx, []byte("zombie")); !errors.Is(err, ErrFenced) {
		t.Fatalf("add on the first owner: %v", err)
	}
	es, err := m2.Read(ctx, Earliest, 100)
	if err != nil || len(es) != len(confirmed) {
		t.Fatalf("read: %d %v", len(es), err)
	}
	for i, e := range es {
		if e.Position != confirmed[i] || !bytes.Equal(e.Data, []byte(fmt.Sprintf("a-%d", i))) {
			t.Fatalf("entry %d: %v %q", i, e.Position, e.Data)
		}
	}
	if _, err := m2.Add(ctx, []byte("new owner")); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAddThroughput compares managed-ledger adds with raw ledger adds on the same
// bookies, in one run: 1 KiB entries, E/WQ/AQ 3/2/2, up to 256 adds in flight. The
// managed-ledger sub-benchmark reports ml/raw, its throughput relative to the raw one's.
func BenchmarkAddThroughput(b *testing.B) {
	c := newBKCluster(b, 3)
	payload := bytes.Repeat([]byte{'x'}, 1024)
	const window = 256
	var rawNsPerOp float64
	b.Run("raw-ledger", func(b *testing.B) {
		ctx := context.Background()
		h, err := c.client().Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, Password: []byte("pw")})
		if err != nil {
			b.Fatal(err)
		}
		sem := make(chan struct{}, window)
		b.SetBytes(int64(len(payload)))
		start := time.Now()
		n := 0
		for b.Loop() {
			sem <- struct{}{}
			h.AppendAsync(ctx, payload, func(_ int64, err error) {
				if err != nil {
					b.Error(err)
				}
				<-sem
			})
			n++
		}
		for i := 0; i < window; i++ { // drain (the last window's worth is not timed)
			sem <- struct{}{}
		}
		rawNsPerOp = float64(time.Since(start).Nanoseconds()) / float64(n)
		_ = h.Close(ctx)
	})
	b.Run("managed-ledger", func(b *testing.B) {
		ctx := context.Background()
		cfg := bkConfig()
		cfg.MaxEntriesPerLedger = 50000
		m, err := c.factory().Open(ctx, "bench", cfg)
		if err != nil {
			b.Fatal(err)
		}
		sem := make(chan struct{}, window)
		b.SetBytes(int64(len(payload)))
		start := time.Now()
		n := 0
		for b.Loop() {
			sem <- struct{}{}
			m.AddAsync(payload, func(_ Position, err error) {
				if err != nil {
					b.Error(err)
				}
				<-sem
			})
			n++
		}
		for i := 0; i < window; i++ {
			sem <- struct{}{}
		}
		mlNsPerOp := float64(time.Since(start).Nanoseconds()) / float64(n)
		if rawNsPerOp > 0 {
			b.ReportMetric(rawNsPerOp/mlNsPerOp, "ml/raw")
		}
		_ = m.Close(ctx)
	})
}
