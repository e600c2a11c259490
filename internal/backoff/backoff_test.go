package backoff

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestDelay: doubling from Base, capped at Max (also when Base is above it), without a cap
// when Max is zero, and without overflowing.
func TestDelay(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		p    Policy
		n    int
		want time.Duration
	}{
		{"first", Policy{Base: 10 * ms, Max: time.Second}, 0, 10 * ms},
		{"negative", Policy{Base: 10 * ms, Max: time.Second}, -3, 10 * ms},
		{"doubled", Policy{Base: 10 * ms, Max: time.Second}, 3, 80 * ms},
		{"capped", Policy{Base: 10 * ms, Max: time.Second}, 7, time.Second},
		{"capped far", Policy{Base: 10 * ms, Max: time.Second}, 1 << 30, time.Second},
		{"cap not a power", Policy{Base: 100 * ms, Max: 250 * ms}, 2, 250 * ms},
		{"base above cap", Policy{Base: 2 * time.Second, Max: time.Second}, 0, time.Second},
		{"no cap", Policy{Base: ms}, 20, ms << 20},
		{"no cap, no overflow", Policy{Base: ms}, 1000, ms << 43},
		{"zero base", Policy{Max: time.Second}, 1 << 30, 0},
	} {
		if got := tc.p.Delay(tc.n); got != tc.want {
			t.Errorf("%s: Delay(%d) = %v, want %v", tc.name, tc.n, got, tc.want)
		}
	}
	if d := (Policy{Base: time.Duration(math.MaxInt64 / 3)}).Delay(5); d <= 0 {
		t.Errorf("huge base overflowed to %v", d)
	}
}

// TestRetry: Next walks the delays, Reset starts over, and the zero Retry starts at Base.
func TestRetry(t *testing.T) {
	r := Retry{Policy: Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}}
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for i, w := range want {
		if got := r.Next(); got != w*time.Millisecond {
			t.Fatalf("Next #%d = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	r.Reset()
	if got := r.Next(); got != 100*time.Millisecond {
		t.Fatalf("Next after Reset = %v, want 100ms", got)
	}
}

// TestJitter: jittered delays stay within [d·(1−Jitter), d], vary, and repeat for the same
// seed.
func TestJitter(t *testing.T) {
	draw := func(seed uint64) []time.Duration {
		rng := rand.New(rand.NewPCG(seed, 1))
		p := Policy{Base: time.Second, Max: time.Minute, Jitter: 0.5, Rand: rng.Float64}
		var out []time.Duration
		for range 100 {
			d := p.Delay(2)
			if d < 2*time.Second || d > 4*time.Second {
				t.Fatalf("jittered delay %v outside [2s, 4s]", d)
			}
			out = append(out, d)
		}
		return out
	}
	a, b := draw(7), draw(7)
	distinct := map[time.Duration]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, delay %d: %v and %v", i, a[i], b[i])
		}
		distinct[a[i]] = true
	}
	if len(distinct) < 50 {
		t.Fatalf("only %d distinct delays in 100 jittered draws", len(distinct))
	}
	full := Policy{Base: time.Second, Jitter: 3, Rand: func() float64 { return 0.999 }}
	if d := full.Delay(0); d < 0 || d > time.Second {
		t.Fatalf("jitter above 1 gave %v, want within [0, 1s]", d)
	}
}
