package backoff

import (
	"math"
	"time"
)

// Policy is an exponential backoff: the delay before retry n is Base·2ⁿ, at most Max.
type Policy struct {
	// Base is the first delay (retry 0).
	Base time.Duration
	// Max caps the delay; zero means no cap.
	Max time.Duration
	// Jitter, in [0, 1], is the part of each delay drawn at random: a delay d becomes
	// d·(1 − Jitter·u) for u = Rand(). Zero (or a nil Rand) means no jitter.
	Jitter float64
	// Rand returns a uniform value in [0, 1): a seeded *rand.Rand's Float64 in simulations.
	Rand func() float64
}

// Delay returns the delay before retry n (0-based; a negative n counts as 0).
func (p Policy) Delay(n int) time.Duration {
	d := p.Base
	for i := 0; i < n && d > 0 && d <= math.MaxInt64/2 && (p.Max <= 0 || d < p.Max); i++ {
		d *= 2
	}
	if p.Max > 0 {
		d = min(d, p.Max)
	}
	if p.Jitter > 0 && p.Rand != nil {
		d -= time.Duration(min(p.Jitter, 1) * p.Rand() * float64(d))
	}
	return d
}

// Retry is a Policy with its retry count: Next returns the delay before the next retry and
// counts it; Reset starts over. A Retry is not safe for concurrent use.
type Retry struct {
	Policy Policy
	n      int
}

// Next returns the delay before the next retry: Base the first time after a Reset (or for a
// new Retry), then twice the previous one, up to Max.
func (r *Retry) Next() time.Duration {
	d := r.Policy.Delay(r.n)
	if r.n < math.MaxInt32 {
		r.n++
	}
	return d
}

// Reset makes the next delay Base again (after a success, or progress).
func (r *Retry) Reset() { r.n = 0 }
