package offload

import (
	"context"
	"sync"
	"time"
)

// throttleSpan is how many seconds' worth of bytes an idle throttle lets through at once.
const throttleSpan = 0.1

// Throttle bounds the rate, in bytes per second, at which offloads read ledgers from the
// bookies (and so build and upload blocks): Pulsar's managedLedgerOffloadFlowPermitsPerSecond.
// One Throttle serves all the managed ledgers' offloads of a broker (an Offloader holds one).
// It is a token bucket (the arithmetic of broker/topic/dispatch.Bucket): the tokens refill at
// the rate up to throttleSpan seconds' worth, a read takes its bytes even when that leaves the
// bucket in debt, and the next read waits until the debt is paid. So a read larger than the
// burst still goes through, and concurrent offloads share the rate in the order they ask.
// A nil *Throttle, or one with a rate <= 0, never waits. It is safe for concurrent use.
type Throttle struct {
	rate float64 // bytes per second; 0: off. Immutable.

	// mu guards the bucket. Leaf lock.
	mu struct {
		sync.Mutex
		tokens float64 // bytes that may be read now; negative: a debt. Invariant: <= burst.
		last   int64   // Unix ns of the last refill
	}
}

// NewThrottle returns a Throttle of bytesPerSecond (<= 0: no limit), full at now.
func NewThrottle(bytesPerSecond int64, now time.Time) *Throttle {
	t := &Throttle{rate: float64(max(bytesPerSecond, 0))}
	t.mu.tokens, t.mu.last = t.burst(), now.UnixNano()
	return t
}

// Rate returns the bound in bytes per second (0: none).
func (t *Throttle) Rate() int64 {
	if t == nil {
		return 0
	}
	return int64(t.rate)
}

// burst is how many tokens the bucket keeps at most.
func (t *Throttle) burst() float64 { return max(t.rate*throttleSpan, 1) }

// Reserve takes n bytes at time now and returns how long the caller must wait before it
// reads them: 0 while the bucket holds tokens, else until the debt left by earlier
// reservations is paid. It does not wait itself (Wait does).
func (t *Throttle) Reserve(n int64, now time.Time) time.Duration {
	if t == nil || t.rate <= 0 || n <= 0 {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if ns := now.UnixNano(); ns > t.mu.last { // a clock going back adds nothing
		t.mu.tokens = min(t.mu.tokens+t.rate*float64(ns-t.mu.last)/1e9, t.burst())
		t.mu.last = ns
	}
	var wait time.Duration
	if t.mu.tokens <= 0 {
		wait = time.Duration((-t.mu.tokens + 1e-3) / t.rate * 1e9)
	}
	t.mu.tokens -= float64(n)
	return wait
}

// Wait reserves n bytes and waits until they may be read, or until ctx ends (then it
// returns ctx.Err(); the bytes stay reserved).
func (t *Throttle) Wait(ctx context.Context, n int64) error {
	d := t.Reserve(n, time.Now())
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
