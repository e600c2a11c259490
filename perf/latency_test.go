package perf

import (
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPercentiles(t *testing.T) {
	for _, tc := range []struct {
		name                string
		samples             []time.Duration // added in this order
		p50, p99, p999, max time.Duration
	}{
		{name: "empty"},
		{name: "one", samples: []time.Duration{7}, p50: 7, p99: 7, p999: 7, max: 7},
		// 1..100 added in reverse: index floor(n*p) of the sorted samples.
		{name: "hundred", samples: seq(100, true), p50: 51, p99: 100, p999: 100, max: 100},
		{name: "thousand", samples: seq(1000, false), p50: 501, p99: 991, p999: 1000, max: 1000},
		{name: "two", samples: []time.Duration{5, 1}, p50: 5, p99: 5, p999: 5, max: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l Latencies
			for _, s := range tc.samples {
				l.Add(s)
			}
			p := l.Percentiles()
			want := Percentiles{Samples: len(tc.samples), P50: tc.p50, P99: tc.p99, P999: tc.p999, Max: tc.max}
			if p != want {
				t.Fatalf("got %+v, want %+v", p, want)
			}
		})
	}
}

func seq(n int, reverse bool) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = time.Duration(i + 1)
		if reverse {
			s[i] = time.Duration(n - i)
		}
	}
	return s
}

func TestPercentilesFormats(t *testing.T) {
	var l Latencies
	if m := l.Percentiles().Millis(); m != nil {
		t.Fatalf("no samples: %v, want nil", m)
	}
	if got, want := l.Percentiles().String(), "p50 0s p99 0s p99.9 0s max 0s"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	for _, d := range []time.Duration{1500 * time.Microsecond, 2*time.Millisecond + 400, 10 * time.Millisecond} {
		l.Add(d)
	}
	p := l.Percentiles()
	if got, want := p.String(), "p50 2ms p99 10ms p99.9 10ms max 10ms"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	m := p.Millis()
	if m["p50"] != 2.0004 || m["max"] != 10 || m["samples"] != 3 {
		t.Fatalf("millis %v", m)
	}
	if got, want := FormatMillis(m), "p50 2.000  p99 10.000  p99.9 10.000  max 10.000  (3 samples)"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// TestLatenciesConcurrent: samples added from several goroutines are all counted (run with
// -race).
func TestLatenciesConcurrent(t *testing.T) {
	var l Latencies
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				l.Add(time.Duration(g*1000 + i))
			}
		}()
	}
	wg.Wait()
	if p := l.Percentiles(); p.Samples != 8000 || p.Max != 7999 {
		t.Fatalf("%+v", p)
	}
}

// TestMeter: a report per second of the injected clock, with the rate since the previous one.
func TestMeter(t *testing.T) {
	c := newManualClock()
	var got []Progress
	m := newMeter(c, 1000, "entries", func(p Progress) { got = append(got, p) })
	m.tick(500, nil) // no time has passed
	c.advance(999 * time.Millisecond)
	m.tick(900, nil) // still under a second
	c.advance(time.Millisecond)
	m.tick(1000, nil)
	c.advance(2 * time.Second)
	m.tick(5000, func(p *Progress) { p.Counted, p.Total, p.InFlight = "acked", 5000, 3 })
	if len(got) != 2 {
		t.Fatalf("%d reports, want 2: %v", len(got), got)
	}
	if got[0].Rate != 1000 || got[1].Rate != 2000 || got[1].Elapsed != 3*time.Second {
		t.Fatalf("reports %+v", got)
	}
	if s, want := got[0].String(), "     1s        1000 entries/s      1.00 MB/s"; s != want {
		t.Fatalf("%q, want %q", s, want)
	}
	if s := got[1].String(); !strings.HasSuffix(s, "MB/s  acked total 5000, 3 in flight") {
		t.Fatalf("%q", s)
	}
	if tp := m.throughput(6000); tp.Seconds != 3 || tp.String() != "6000 entries of 1000 B in 3.0s: 2000 entries/s, 2.00 MB/s" {
		t.Fatalf("%+v %q", tp, tp)
	}
}
