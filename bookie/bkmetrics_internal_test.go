package bookie

import (
	"math"
	"testing"
)

// TestLatencyQuantile: quantiles interpolate within the bucket the rank falls in, as
// PromQL's histogram_quantile does.
func TestLatencyQuantile(t *testing.T) {
	// 10 observations ≤ 1 ms, 10 in (1, 3] ms, none in (3 ms, 1 s].
	h := latencyHist{bounds: []float64{0.001, 0.003, 1}, cum: []uint64{10, 20, 20}, count: 20, sum: 0.03}
	for q, want := range map[float64]float64{0.25: 0.0005, 0.5: 0.001, 0.75: 0.002, 1: 0.003} {
		if got := h.quantile(q); math.Abs(got-want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if got := (latencyHist{}).quantile(0.99); got != 0 {
		t.Errorf("quantile of no observations = %v, want 0", got)
	}
}
