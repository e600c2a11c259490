package mledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type memEnv struct {
	bk *memLedgers
	ms *memMeta
	f  *Factory
}

func newMemEnv(t *testing.T) *memEnv {
	t.Helper()
	e := &memEnv{bk: newMemLedgers(), ms: newMemMeta()}
	e.f = NewFactory(e.bk, e.ms, FactoryOptions{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.f.Close(ctx); err != nil {
			t.Errorf("close factory: %v", err)
		}
		e.bk.wg.Wait()
		e.ms.wg.Wait()
	})
	return e
}

// second returns another factory on the same stores: another process.
func (e *memEnv) second(t *testing.T) *Factory {
	f := NewFactory(e.bk, e.ms, FactoryOptions{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = f.Close(ctx)
	})
	return f
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func memConfig() Config {
	return Config{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, MaxEntriesPerLedger: 10,
		RetentionTime: -1, RetentionSize: -1, CursorMaxEntriesPerLedger: 5}
}

func mustOpen(t *testing.T, f *Factory, name string, cfg Config) *ManagedLedger {
	t.Helper()
	m, err := f.Open(tctx(t), name, cfg)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	return m
}

func addN(t *testing.T, m *ManagedLedger, from, n int) []Position {
	t.Helper()
	var ps []Position
	for i := from; i < from+n; i++ {
		p, err := m.Add(tctx(t), []byte(fmt.Sprintf("m-%d", i)))
		if err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
		if len(ps) > 0 && !ps[len(ps)-1].Less(p) {
			t.Fatalf("add %d at %v after %v", i, p, ps[len(ps)-1])
		}
		ps = append(ps, p)
	}
	return ps
}

func readAll(t *testing.T, cu *Cursor) []Entry {
	t.Helper()
	var out []Entry
	for {
		es, err := cu.TryRead(tctx(t), 100)
		if errors.Is(err, ErrNoMoreEntries) {
			return out
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if len(es) == 0 {
			return out
		}
		out = append(out, es...)
	}
}

func TestAddReadRollover(t *testing.T) {
	e := newMemEnv(t)
	m := mustOpen(t, e.f, "a", memConfig())
	ps := addN(t, m, 0, 35)
	st, err := m.Stats(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Ledgers) < 4 || st.Entries != 35 || st.LastConfirmed != ps[34] {
		t.Fatalf("stats %+v", st)
	}
	es, err := m.Read(tctx(t), Earliest, 100)
	if err != nil || len(es) != 35 {
		t.Fatalf("read: %d entries, %v", len(es), err)
	}
	for i, en := range es {
		if en.Position != ps[i] || string(en.Data) != fmt.Sprintf("m-%d", i) {
			t.Fatalf("entry %d: %v %q", i, en.Position, en.Data)
		}
	}
	// A tailing read waits for the next add.
	got := make(chan []Entry, 1)
	go func() {
		es, err := m.Read(tctx(t), after(ps[34]), 10)
		if err != nil {
			t.Error(err)
		}
		got <- es
	}()
	p := addN(t, m, 35, 1)[0]
	if es := <-got; len(es) != 1 || es[0].Position != p {
		t.Fatalf("tailing read got %v", es)
	}
	if err := m.Close(tctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Add(tctx(t), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("add after close: %v", err)
	}
	// Reopen: everything is there, the new ledger follows.
	m = mustOpen(t, e.f, "a", memConfig())
	es, err = m.Read(tctx(t), Earliest, 100)
	if err != nil || len(es) != 36 || es[35].Position != p {
		t.Fatalf("after reopen: %d entries, %v", len(es), err)
	}
	if p2 := addN(t, m, 36, 1)[0]; !p.Less(p2) || p2.LedgerID == p.LedgerID {
		t.Fatalf("add after reopen at %v, last before %v", p2, p)
	}
}

func TestTerminate(t *testing.T) {
	e := newMemEnv(t)
	m := mustOpen(t, e.f, "t", memConfig())
	ps := addN(t, m, 0, 12)
	pos, err := m.Terminate(tctx(t))
	if err != nil || pos != ps[11] {
		t.Fatalf("terminate: %v %v, want %v", pos, err, ps[11])
	}
	if again, err := m.Terminate(tctx(t)); err != nil || again != pos {
		t.Fatalf("terminate again: %v %v", again, err)
	}
	if _, err := m.Add(tctx(t), []byte("late")); !errors.Is(err, ErrTerminated) {
		t.Fatalf("add after terminate: %v", err)
	}
	if m.State() != StateTerminated {
		t.Fatalf("state %v", m.State())
	}
	if _, err := m.Read(tctx(t), after(pos), 1); !errors.Is(err, ErrNoMoreEntries) {
		t.Fatalf("read past the end: %v", err)
	}
	cu, err := m.OpenCursor(tctx(t), "c", Earliest)
	if err != nil {
		t.Fatal(err)
	}
	if es := readAll(t, cu); len(es) != 12 {
		t.Fatalf("cursor read %d", len(es))
	}
	if _, err := cu.Read(tctx(t), 1); !errors.Is(err, ErrNoMoreEntries) {
		t.Fatalf("cursor read past the end: %v", err)
	}
	if err := m.Close(tctx(t)); err != nil {
		t.Fatal(err)
	}
	m = mustOpen(t, e.f, "t", memConfig())
	if m.State() != StateTerminated {
		t.Fatalf("reopened in %v", m.State())
	}
	if p, err := m.Terminate(tctx(t)); err != nil || p != pos {
		t.Fatalf("terminate after reopen: %v %v", p, err)
	}
}

func TestCursorAcks(t *testing.T) {
	e := newMemEnv(t)
	m := mustOpen(t, e.f, "c", memConfig())
	ps := addN(t, m, 0, 25)
	cu, err := m.OpenCursor(tctx(t), "sub", Earliest)
	if err != nil {
		t.Fatal(err)
	}
	es, err := cu.Read(tctx(t), 25)
	if err != nil || len(es) != 25 {
		t.Fatalf("read %d %v", len(es), err)
	}
	ctx := tctx(t)
	// Individual acks with holes; the mark-delete position moves over contiguous runs, across
	// ledger boundaries.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cu.Ack(ctx, ps[1], ps[2], ps[5]))
	st, _ := cu.Stats(ctx)
	if st.MarkDelete.Less(Earliest) || st.Backlog != 22 || st.AckedRanges != 2 {
		t.Fatalf("stats %+v", st)
	}
	must(cu.Ack(ctx, ps[0]))
	if st, _ = cu.Stats(ctx); st.MarkDelete != ps[2] || st.Backlog != 21 {
		t.Fatalf("after acking 0: %+v", st)
	}
	must(cu.AckCumulative(ctx, ps[12]))
	if st, _ = cu.Stats(ctx); st.MarkDelete != ps[12] || st.Backlog != 12 || st.AckedRanges != 0 {
		t.Fatalf("after cumulative ack: %+v", st)
	}
	// Batch index acks: the entry is acknowledged when all its messages are.
	must(cu.AckBatchIndex(ctx, ps[13], 0, 3))
	must(cu.AckBatchIndex(ctx, ps[13], 2, 3))
	if bits, _ := cu.BatchAcked(ctx, ps[13]); len(bits) != 3 || !bits[0] || bits[1] || !bits[2] {
		t.Fatalf("batch bits %v", bits)
	}
	if ok, _ := cu.Acked(ctx, ps[13]); ok {
		t.Fatal("partly acknowledged batch counts as acknowledged")
	}
	must(cu.AckBatchIndex(ctx, ps[13], 1, 3))
	if st, _ = cu.Stats(ctx); st.MarkDelete != ps[13] || st.PartialBatches != 0 {
		t.Fatalf("after the whole batch: %+v", st)
	}
	if err := cu.AckBatchIndex(ctx, ps[20], 5, 3); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad batch index: %v", err)
	}
	// Redelivery: rewind reads only what is not acknowledged.
	must(cu.Ack(ctx, ps[15], ps[16]))
	must(cu.Rewind(ctx))
	es = readAll(t, cu)
	if len(es) != 9 || es[0].Position != ps[14] || es[1].Position != ps[17] {
		t.Fatalf("redelivered %d entries starting %v", len(es), es)
	}
	re, err := cu.ReadPositions(ctx, []Position{ps[15], ps[18], ps[3]})
	if err != nil || len(re) != 1 || re[0].Position != ps[18] {
		t.Fatalf("re-read %v %v", re, err)
	}
	// Reset to a position drops the acknowledgements at and after it.
	must(cu.Reset(ctx, ps[10]))
	if st, _ = cu.Stats(ctx); st.MarkDelete != ps[9] || st.Backlog != 15 || st.ReadPosition != ps[10] {
		t.Fatalf("after reset: %+v", st)
	}
	// The state survives a close and reopen.
	must(cu.Ack(ctx, ps[12]))
	must(cu.Flush(ctx))
	must(m.Close(ctx))
	m = mustOpen(t, e.f, "c", memConfig())
	cu, err = m.OpenCursor(ctx, "sub", Latest)
	must(err)
	if st, _ = cu.Stats(ctx); st.MarkDelete != ps[9] || st.Backlog != 14 {
		t.Fatalf("after reopen: %+v", st)
	}
	if names, _ := m.Cursors(ctx); len(names) != 1 || names[0] != "sub" {
		t.Fatalf("cursors %v", names)
	}
	must(m.DeleteCursor(ctx, "sub"))
	if keys := e.ms.keys(metadata.ManagedCursorPrefix("c")); len(keys) != 0 {
		t.Fatalf("cursor records left: %v", keys)
	}
}

// TestCursorSurvivesCrash: a second owner takes the log over without a close (the first is
// fenced); flushed acknowledgements survive, and the first owner's writes fail.
func TestCursorSurvivesCrash(t *testing.T) {
	e := newMemEnv(t)
	ctx := tctx(t)
	m1 := mustOpen(t, e.f, "x", memConfig())
	ps := addN(t, m1, 0, 30)
	cu, err := m1.OpenCursor(ctx, "sub", Earliest)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 17; i++ {
		if err := cu.Ack(ctx, ps[i]); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := cu.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cu.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	m2 := mustOpen(t, e.second(t), "x", memConfig())
	cu2, err := m2.OpenCursor(ctx, "sub", Latest)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := cu2.Stats(ctx); st.MarkDelete != ps[16] {
		t.Fatalf("recovered at %v, want %v", st.MarkDelete, ps[16])
	}
	if _, err := m1.Add(ctx, []byte("zombie")); !errors.Is(err, ErrFenced) {
		t.Fatalf("add on the fenced owner: %v", err)
	}
	if m1.State() != StateFenced {
		t.Fatalf("first owner in %v", m1.State())
	}
	if err := cu.Ack(ctx, ps[20]); !errors.Is(err, ErrFenced) {
		t.Fatalf("ack on the fenced owner: %v", err)
	}
	es, err := m2.Read(ctx, Earliest, 100)
	if err != nil || len(es) != 30 {
		t.Fatalf("read on the new owner: %d, %v", len(es), err)
	}
}

func TestTrimming(t *testing.T) {
	e := newMemEnv(t)
	ctx := tctx(t)
	cfg := memConfig()
	cfg.RetentionTime, cfg.RetentionSize = 0, 0
	m := mustOpen(t, e.f, "trim", cfg)
	cu, err := m.OpenCursor(ctx, "sub", Earliest)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := m.NewNonDurableCursor(ctx, Earliest)
	if err != nil {
		t.Fatal(err)
	}
	ps := addN(t, m, 0, 45)
	if err := m.Trim(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := m.Stats(ctx); st.Ledgers[0].ID != ps[0].LedgerID {
		t.Fatal("trimmed before anything was acknowledged")
	}
	if err := cu.AckCumulative(ctx, ps[25]); err != nil {
		t.Fatal(err)
	}
	if err := cu.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Trim(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := m.Stats(ctx); st.Ledgers[0].ID != ps[20].LedgerID {
		t.Fatalf("ledgers %v not trimmed below %v", st.Ledgers, ps[25])
	}
	// The non-durable reader did not hold trimming: it skips to the first entry left.
	es, err := reader.Read(ctx, 1)
	if err != nil || len(es) != 1 || es[0].Position != ps[20] {
		t.Fatalf("reader got %v %v", es, err)
	}
	if err := m.Close(ctx); err != nil { // waits for the deletions in flight
		t.Fatal(err)
	}
	e.bk.mu.Lock()
	deleted := e.bk.deleted[ps[0].LedgerID] && e.bk.deleted[ps[10].LedgerID]
	e.bk.mu.Unlock()
	if !deleted {
		t.Fatal("trimmed ledgers were not deleted")
	}
}

func TestResetToPublishTime(t *testing.T) {
	e := newMemEnv(t)
	ctx := tctx(t)
	m := mustOpen(t, e.f, "pt", memConfig())
	base := time.Unix(1_700_000_000, 0)
	var ps []Position
	for i := 0; i < 37; i++ {
		b := binary.BigEndian.AppendUint64(nil, uint64(base.Add(time.Duration(i)*time.Second).UnixMilli()))
		p, err := m.Add(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	pt := func(d []byte) (time.Time, error) { return time.UnixMilli(int64(binary.BigEndian.Uint64(d))), nil }
	cu, err := m.OpenCursor(ctx, "sub", Latest)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at   time.Time
		want Position
	}{
		{base.Add(-time.Hour), ps[0]},
		{base.Add(13*time.Second + 500*time.Millisecond), ps[14]},
		{base.Add(20 * time.Second), ps[20]},
		{base.Add(time.Hour), Latest},
	} {
		p, err := cu.ResetToPublishTime(ctx, tc.at, pt)
		if err != nil || p != tc.want {
			t.Fatalf("reset to %v: %v %v, want %v", tc.at, p, err, tc.want)
		}
		if tc.want == Latest {
			continue
		}
		es, err := cu.Read(ctx, 1)
		if err != nil || es[0].Position != tc.want {
			t.Fatalf("read after reset to %v: %v %v", tc.at, es, err)
		}
	}
}

// TestConcurrentAdds: adds from many goroutines complete in position order per caller.
func TestConcurrentAdds(t *testing.T) {
	e := newMemEnv(t)
	ctx := tctx(t)
	m := mustOpen(t, e.f, "cc", memConfig())
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last Position
			for i := 0; i < 50; i++ {
				p, err := m.Add(ctx, []byte(fmt.Sprintf("g%d-%d", g, i)))
				if err != nil {
					t.Error(err)
					return
				}
				if i > 0 && !last.Less(p) {
					t.Errorf("goroutine %d: %v after %v", g, p, last)
				}
				last = p
			}
		}()
	}
	wg.Wait()
	// AddAsync callbacks run in add order.
	var mu sync.Mutex
	var got []Position
	done := make(chan struct{})
	for i := 0; i < 100; i++ {
		m.AddAsync([]byte("async"), func(p Position, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
			}
			got = append(got, p)
			if len(got) == 100 {
				close(done)
			}
		})
	}
	<-done
	for i := 1; i < len(got); i++ {
		if !got[i-1].Less(got[i]) {
			t.Fatalf("async completions out of order: %v then %v", got[i-1], got[i])
		}
	}
	es, err := m.Read(ctx, Earliest, 1000)
	if err != nil || len(es) != 500 {
		t.Fatalf("read %d, %v", len(es), err)
	}
}

// TestCancelledReadLosesNothing: a tailing read cancelled by its context consumes nothing.
func TestCancelledReadLosesNothing(t *testing.T) {
	e := newMemEnv(t)
	m := mustOpen(t, e.f, "cancel", memConfig())
	cu, err := m.OpenCursor(tctx(t), "sub", Latest)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := cu.Read(short, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read: %v", err)
	}
	p := addN(t, m, 0, 1)[0]
	es, err := cu.Read(tctx(t), 10)
	if err != nil || len(es) != 1 || es[0].Position != p {
		t.Fatalf("read after cancel: %v %v", es, err)
	}
}

func TestDeleteManagedLedger(t *testing.T) {
	e := newMemEnv(t)
	ctx := tctx(t)
	m := mustOpen(t, e.f, "del", memConfig())
	addN(t, m, 0, 25)
	cu, err := m.OpenCursor(ctx, "sub", Earliest)
	if err != nil {
		t.Fatal(err)
	}
	if err := cu.Ack(ctx, Position{LedgerID: 1, EntryID: 0}); err != nil {
		t.Fatal(err)
	}
	if err := cu.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := e.ms.keys(metadata.PrefixManagedLedgers); len(keys) != 0 {
		t.Fatalf("records left: %v", keys)
	}
	if n := e.bk.live(); n != 0 {
		t.Fatalf("%d ledgers left", n)
	}
	if _, err := e.f.Open(ctx, "del", Config{MustExist: true}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("open deleted: %v", err)
	}
}

func TestProperties(t *testing.T) {
	e := newMemEnv(t)
	ctx := tctx(t)
	cfg := memConfig()
	cfg.Properties = map[string]string{"a": "1"}
	m := mustOpen(t, e.f, "p", cfg)
	if err := m.SetProperty(ctx, "b", "2"); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m = mustOpen(t, e.f, "p", memConfig())
	st, _ := m.Stats(ctx)
	if st.Properties["a"] != "1" || st.Properties["b"] != "2" {
		t.Fatalf("properties %v", st.Properties)
	}
}

// TestSetMaxRead: cursor reads stop before the bound (also within one ledger's bulk read
// and across ledgers), a parked read wakes when the bound moves, and nil lifts it.
func TestSetMaxRead(t *testing.T) {
	e := newMemEnv(t)
	m := mustOpen(t, e.f, "a", memConfig())
	ps := addN(t, m, 0, 25)
	cu, err := m.OpenCursor(tctx(t), "c", Earliest)
	if err != nil {
		t.Fatal(err)
	}
	m.SetMaxRead(&ps[13])
	es, err := cu.Read(tctx(t), 100)
	if err != nil || len(es) != 13 || es[12].Position != ps[12] {
		t.Fatalf("bounded read: %d entries, %v", len(es), err)
	}
	if es, err := cu.TryRead(tctx(t), 100); err != nil || len(es) != 0 {
		t.Fatalf("read at the bound returned %d entries, %v", len(es), err)
	}
	got := make(chan []Entry, 1)
	go func() {
		es, err := cu.Read(tctx(t), 100)
		if err != nil {
			t.Error(err)
		}
		got <- es
	}()
	m.SetMaxRead(&ps[20])
	if es := <-got; len(es) != 7 || es[0].Position != ps[13] || es[6].Position != ps[19] {
		t.Fatalf("woken read: %v", es)
	}
	m.SetMaxRead(nil)
	if es, err := cu.Read(tctx(t), 100); err != nil || len(es) != 5 || es[4].Position != ps[24] {
		t.Fatalf("unbounded read: %d entries, %v", len(es), err)
	}
	// Managed-ledger reads are not bounded.
	m.SetMaxRead(&ps[0])
	if es, err := m.Read(tctx(t), Earliest, 100); err != nil || len(es) != 25 {
		t.Fatalf("log read: %d entries, %v", len(es), err)
	}
}

// TestNewCursorAfterReopen: a cursor created at Earliest after a clean close and reopen
// reads every entry written before.
func TestNewCursorAfterReopen(t *testing.T) {
	e := newMemEnv(t)
	m := mustOpen(t, e.f, "a", memConfig())
	addN(t, m, 0, 3)
	if err := m.Close(tctx(t)); err != nil {
		t.Fatal(err)
	}
	m = mustOpen(t, e.f, "a", memConfig())
	cu, err := m.OpenCursor(tctx(t), "new", Earliest)
	if err != nil {
		t.Fatal(err)
	}
	if es, err := cu.TryRead(tctx(t), 100); err != nil || len(es) != 3 {
		t.Fatalf("read %d entries, %v", len(es), err)
	}
}
