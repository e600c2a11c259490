package perf

import (
	"fmt"
	"sync"
	"time"
)

// Progress is a once-a-second report of a running benchmark.
type Progress struct {
	Elapsed time.Duration // since the meter started
	Rate    float64       // units per second since the previous report
	Unit    string        // what is counted: "entries" or "msg"
	Size    int           // bytes per unit, for the MB/s figure
	// Counted names the Pulsar tools' running total ("acked", "received"); empty for the disk
	// and ledger benchmarks, whose reports have no total.
	Counted  string
	Total    int64
	InFlight int64
}

// String formats the report as the CLI prints it:
// "     3s        5000 msg/s      5.12 MB/s  acked total 15000, 12 in flight".
func (p Progress) String() string {
	s := fmt.Sprintf("%6.0fs  %10.0f %s/s  %8.2f MB/s", p.Elapsed.Seconds(), p.Rate, p.Unit, p.Rate*float64(p.Size)/1e6)
	if p.Counted != "" {
		s += fmt.Sprintf("  %s total %d, %d in flight", p.Counted, p.Total, p.InFlight)
	}
	return s
}

// meter turns a growing count into a Progress report per second. Safe for concurrent use.
type meter struct {
	clock Clock
	start time.Time
	size  int
	unit  string
	emit  func(Progress) // nil: no reports
	mu    struct {
		sync.Mutex
		last      time.Time // guarded by mu
		lastCount int64     // guarded by mu
	}
}

func newMeter(c Clock, size int, unit string, emit func(Progress)) *meter {
	m := &meter{clock: c, start: c.Now(), size: size, unit: unit, emit: emit}
	m.mu.last = m.start
	return m
}

// tick reports if a second has passed since the last report; fill adds the caller's fields.
func (m *meter) tick(count int64, fill func(*Progress)) {
	now := m.clock.Now()
	m.mu.Lock()
	el := now.Sub(m.mu.last)
	if el < time.Second {
		m.mu.Unlock()
		return
	}
	rate := float64(count-m.mu.lastCount) / el.Seconds()
	m.mu.last, m.mu.lastCount = now, count
	m.mu.Unlock()
	if m.emit == nil {
		return
	}
	p := Progress{Elapsed: now.Sub(m.start), Rate: rate, Unit: m.unit, Size: m.size}
	if fill != nil {
		fill(&p)
	}
	m.emit(p)
}

// throughput is count units over the run so far.
func (m *meter) throughput(count int64) Throughput {
	return Throughput{Count: count, Size: m.size, Seconds: m.clock.Now().Sub(m.start).Seconds()}
}

// Throughput is how many entries of Size bytes were done in Seconds.
type Throughput struct {
	Count   int64
	Size    int
	Seconds float64
}

// String formats it: "1000 entries of 1024 B in 1.0s: 1000 entries/s, 1.02 MB/s".
func (t Throughput) String() string {
	return fmt.Sprintf("%d entries of %d B in %.1fs: %.0f entries/s, %.2f MB/s", t.Count, t.Size, t.Seconds,
		float64(t.Count)/t.Seconds, float64(t.Count)*float64(t.Size)/t.Seconds/1e6)
}
