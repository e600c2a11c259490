package perf

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
)

// fakeLedgers is an in-memory LedgerClient whose appends complete at once (or fail from the
// failAt-th on, if failAt > 0).
type fakeLedgers struct {
	mu      sync.Mutex
	clock   *manualClock
	latency time.Duration // each append advances the clock by this much before it completes
	failAt  int
	appends int
	closed  bool
	deleted []int64
}

func (f *fakeLedgers) Create(context.Context, ledger.CreateOptions) (LedgerWriter, error) {
	return fakeHandle{f}, nil
}

func (f *fakeLedgers) Delete(_ context.Context, id int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, id)
	return nil
}

type fakeHandle struct{ f *fakeLedgers }

func (h fakeHandle) ID() int64 { return 42 }

func (h fakeHandle) AppendAsync(_ context.Context, _ []byte, cb func(int64, error)) {
	h.f.mu.Lock()
	h.f.appends++
	n := h.f.appends
	h.f.mu.Unlock()
	if h.f.failAt > 0 && n >= h.f.failAt {
		cb(-1, errors.New("bookie gone"))
		return
	}
	h.f.clock.advance(h.f.latency)
	cb(int64(n-1), nil)
}

func (h fakeHandle) Close(context.Context) error {
	h.f.mu.Lock()
	h.f.closed = true
	h.f.mu.Unlock()
	return nil
}

// TestLedgerPaced: at 1000 entries/s for two seconds of the injected clock, exactly 2000
// entries are appended, each with the fake's latency, and the ledger is closed and deleted.
func TestLedgerPaced(t *testing.T) {
	c := newManualClock()
	f := &fakeLedgers{clock: c, latency: 300 * time.Microsecond}
	var reports []Progress
	res, err := Ledger(context.Background(), LedgerOptions{Client: f,
		Create: ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2}, Size: 100, Duration: 2 * time.Second,
		Rate: 1000, Clock: c, Progress: func(p Progress) { reports = append(reports, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if f.appends != 2000 || res.Throughput.Count != 2000 || res.Latency.Samples != 2000 {
		t.Fatalf("%d appends, result %s", f.appends, res)
	}
	// Each append is due every 1ms and the pacer sleeps at least PacingStep: no append waits
	// behind another, so each one's latency is the fake's.
	if res.Latency.P50 != 300*time.Microsecond || res.Latency.Max != 300*time.Microsecond {
		t.Fatalf("add latency %s, want 300µs throughout", res.Latency)
	}
	if res.Lateness == nil || res.Lateness.Max != 0 {
		t.Fatalf("lateness %v, want 0 on the manual clock", res.Lateness)
	}
	if !f.closed || len(f.deleted) != 1 || f.deleted[0] != 42 {
		t.Fatalf("closed %v, deleted %v", f.closed, f.deleted)
	}
	if !strings.HasPrefix(res.String(), "ledger 42 (E=3 WQ=2 AQ=2): 2000 entries of 100 B in 2.0s: 1000 entries/s") ||
		!strings.Contains(res.String(), "; of which send lateness p50 0s") {
		t.Fatalf("result %q", res)
	}
	if len(reports) != 1 || reports[0].Rate < 999 || reports[0].Rate > 1001 {
		t.Fatalf("progress %v, want one report at 1000 entries/s", reports)
	}
}

// TestLedgerFailedAppend: the first failed append ends the run with an error, and the ledger
// is still closed and deleted.
func TestLedgerFailedAppend(t *testing.T) {
	c := newManualClock()
	f := &fakeLedgers{clock: c, latency: time.Millisecond, failAt: 10}
	res, err := Ledger(context.Background(), LedgerOptions{Client: f, Size: 10, Duration: time.Hour, Clock: c})
	if err == nil || !strings.Contains(err.Error(), "1 adds failed, first: bookie gone") {
		t.Fatalf("err %v", err)
	}
	if res.Throughput.Count != 9 || res.Lateness != nil {
		t.Fatalf("result %+v", res)
	}
	if !f.closed || len(f.deleted) != 1 {
		t.Fatalf("closed %v, deleted %v", f.closed, f.deleted)
	}
}
