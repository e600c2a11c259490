package perf

import (
	"context"
	"sync"
	"testing"
	"time"
)

// manualClock is a Clock whose Sleep advances the time at once, counting the sleeps.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps int
}

func newManualClock() *manualClock { return &manualClock{now: time.Unix(1_000_000, 0)} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.advance(d)
	c.mu.Lock()
	c.sleeps++
	c.mu.Unlock()
	return nil
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestPacerSchedule: the i-th operation is due at start + i/rate, and Wait never returns
// before it is due.
func TestPacerSchedule(t *testing.T) {
	c := newManualClock()
	p := NewPacer(c, 1000, 0)
	start := c.Now()
	for i := range int64(50) {
		due, err := p.Wait(context.Background(), i)
		if err != nil {
			t.Fatal(err)
		}
		if want := start.Add(time.Duration(i) * time.Millisecond); !due.Equal(want) {
			t.Fatalf("op %d due at %v, want %v", i, due.Sub(start), want.Sub(start))
		}
		if c.Now().Before(due) {
			t.Fatalf("op %d: Wait returned %v before it was due", i, due.Sub(c.Now()))
		}
	}
	// Without a minimum sleep each op after the first sleeps exactly to its due time.
	if c.sleeps != 49 {
		t.Fatalf("%d sleeps, want 49", c.sleeps)
	}
	if got := c.Now().Sub(start); got != 49*time.Millisecond {
		t.Fatalf("run took %v, want 49ms", got)
	}
}

// TestPacerMinSleep: with a minimum sleep longer than the interval, one sleep releases every
// operation that fell due meanwhile, and none is more than the minimum sleep late.
func TestPacerMinSleep(t *testing.T) {
	c := newManualClock()
	p := NewPacer(c, 10_000, PacingStep) // due every 100µs, sleeps at least 500µs
	const n = 1000
	var maxLate time.Duration
	for i := range int64(n) {
		due, err := p.Wait(context.Background(), i)
		if err != nil {
			t.Fatal(err)
		}
		if c.Now().Before(due) {
			t.Fatalf("op %d released before it was due", i)
		}
		maxLate = max(maxLate, c.Now().Sub(due))
	}
	if c.sleeps > n/4 || c.sleeps < n/6 {
		t.Fatalf("%d sleeps for %d ops, want one per about 5 ops", c.sleeps, n)
	}
	if maxLate >= PacingStep {
		t.Fatalf("an op was %v late, want < %v", maxLate, PacingStep)
	}
}

// TestPacerUnpaced: without a rate every operation is due now and Wait never sleeps.
func TestPacerUnpaced(t *testing.T) {
	c := newManualClock()
	p := NewPacer(c, 0, PacingStep)
	c.advance(time.Second)
	due, err := p.Wait(context.Background(), 1000)
	if err != nil || !due.Equal(c.Now()) || c.sleeps != 0 || p.Paced() {
		t.Fatalf("due %v (now %v), err %v, %d sleeps, paced %v", due, c.Now(), err, c.sleeps, p.Paced())
	}
}

// TestPacerCancel: Wait returns the context's error when it ends.
func TestPacerCancel(t *testing.T) {
	p := NewPacer(RealClock, 0.001, 0) // op 1 due in 1000 s
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Wait(ctx, 1); err != context.Canceled {
		t.Fatalf("Wait on an ended context: %v", err)
	}
}
