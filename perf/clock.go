package perf

import (
	"context"
	"time"
)

// Clock is the time source of the pacing and the progress reports. Tests inject a manual
// clock; the real one is RealClock. Implementations must be safe for concurrent use.
type Clock interface {
	Now() time.Time
	// Sleep waits for d, or until ctx ends (then it returns ctx.Err()).
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the wall clock.
var RealClock Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PacingStep is the shortest sleep of the ledger benchmark's pacer: it then sends every entry
// that fell due meanwhile, since a sleep per entry would cost the generator more CPU than the
// entries it sends at tens of thousands a second.
const PacingStep = 500 * time.Microsecond

// Pacer schedules the i-th operation of a load at start + i/rate. Latencies are counted from
// these scheduled times, so a generator that falls behind reports the delay instead of hiding
// it (no coordinated omission). A Pacer is not safe for concurrent use: each load loop has its
// own.
type Pacer struct {
	clock    Clock
	start    time.Time
	interval time.Duration // 0: unpaced
	minSleep time.Duration
}

// NewPacer returns a pacer starting now at rate operations per second (0: unpaced, every
// operation is due when asked for). A sleep lasts at least minSleep.
func NewPacer(c Clock, rate float64, minSleep time.Duration) *Pacer {
	p := &Pacer{clock: c, start: c.Now(), minSleep: minSleep}
	if rate > 0 {
		p.interval = time.Duration(float64(time.Second) / rate)
	}
	return p
}

// Paced reports whether the pacer has a rate.
func (p *Pacer) Paced() bool { return p.interval > 0 }

// Start is when operation 0 was due.
func (p *Pacer) Start() time.Time { return p.start }

// Due is when operation i is scheduled (for an unpaced pacer: now).
func (p *Pacer) Due(i int64) time.Time {
	if p.interval == 0 {
		return p.clock.Now()
	}
	return p.start.Add(time.Duration(i) * p.interval)
}

// Wait sleeps until operation i is due (at least minSleep if it sleeps at all) and returns
// its scheduled time. It returns early with ctx.Err() if ctx ends.
func (p *Pacer) Wait(ctx context.Context, i int64) (time.Time, error) {
	due := p.Due(i)
	if p.interval == 0 {
		return due, nil
	}
	if wait := due.Sub(p.clock.Now()); wait > 0 {
		// Pacing the load generator, not synchronisation.
		if err := p.clock.Sleep(ctx, max(wait, p.minSleep)); err != nil {
			return due, err
		}
	}
	return due, nil
}
