package perf

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Latencies collects latency samples for percentile reports. It is safe for concurrent use;
// the zero value is ready.
type Latencies struct {
	mu struct {
		sync.Mutex
		s []time.Duration // guarded by mu
	}
}

// Add records one sample.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	l.mu.s = append(l.mu.s, d)
	l.mu.Unlock()
}

// Percentiles returns the percentiles of the samples so far.
func (l *Latencies) Percentiles() Percentiles {
	l.mu.Lock()
	defer l.mu.Unlock()
	slices.Sort(l.mu.s)
	return percentilesOf(l.mu.s)
}

// take returns the percentiles of the samples so far and forgets them (a window's).
func (l *Latencies) take() Percentiles {
	l.mu.Lock()
	s := l.mu.s
	l.mu.s = nil
	l.mu.Unlock()
	slices.Sort(s)
	return percentilesOf(s)
}

// percentilesOf computes the percentiles of sorted samples: the p-th is the sample at index
// floor(n*p), the last for p = 1.
func percentilesOf(s []time.Duration) Percentiles {
	n := len(s)
	if n == 0 {
		return Percentiles{}
	}
	pct := func(p float64) time.Duration { return s[min(n-1, int(float64(n)*p))] }
	return Percentiles{Samples: n, P50: pct(0.5), P99: pct(0.99), P999: pct(0.999), Max: pct(1)}
}

// Percentiles summarises a set of latency samples. The zero value has no samples.
type Percentiles struct {
	Samples             int
	P50, P99, P999, Max time.Duration
}

// String formats the percentiles rounded to microseconds: "p50 1ms p99 2ms p99.9 3ms max 4ms".
func (p Percentiles) String() string {
	r := func(d time.Duration) string { return d.Round(time.Microsecond).String() }
	return fmt.Sprintf("p50 %s p99 %s p99.9 %s max %s", r(p.P50), r(p.P99), r(p.P999), r(p.Max))
}

// Millis returns the percentiles in milliseconds keyed p50, p99, p99.9 and max, with the
// sample count under "samples"; nil without samples. This is the JSON report's form.
func (p Percentiles) Millis() map[string]float64 {
	if p.Samples == 0 {
		return nil
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	return map[string]float64{"p50": ms(p.P50), "p99": ms(p.P99), "p99.9": ms(p.P999), "max": ms(p.Max),
		"samples": float64(p.Samples)}
}

// FormatMillis formats a Millis map: "p50 1.000  p99 2.000  p99.9 3.000  max 4.000  (10 samples)".
func FormatMillis(m map[string]float64) string {
	return fmt.Sprintf("p50 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  (%0.f samples)", m["p50"], m["p99"], m["p99.9"], m["max"], m["samples"])
}
