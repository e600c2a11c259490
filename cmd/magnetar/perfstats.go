package main

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// latencies collects samples for percentile reports. Safe for concurrent use.
type latencies struct {
	mu sync.Mutex
	s  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.s = append(l.s, d)
	l.mu.Unlock()
}

// summary sorts the samples and returns p50/p99/p99.9/max.
func (l *latencies) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	slices.Sort(l.s)
	pct := func(p float64) time.Duration {
		if len(l.s) == 0 {
			return 0
		}
		return l.s[min(len(l.s)-1, int(float64(len(l.s))*p))]
	}
	r := func(d time.Duration) string { return d.Round(time.Microsecond).String() }
	return fmt.Sprintf("p50 %s p99 %s p99.9 %s max %s", r(pct(0.5)), r(pct(0.99)), r(pct(0.999)), r(pct(1)))
}

// progress prints a line per second with the rate since the previous line.
type progress struct {
	start, last time.Time
	lastCount   int64
	size        int
	unit        string // what is counted: "entries" by default
	print       func(string)
}

func newProgress(size int, print func(string)) *progress {
	now := time.Now()
	return &progress{start: now, last: now, size: size, unit: "entries", print: print}
}

// tick reports if a second has passed since the last line.
func (p *progress) tick(count int64) {
	now := time.Now()
	if now.Sub(p.last) < time.Second {
		return
	}
	rate := float64(count-p.lastCount) / now.Sub(p.last).Seconds()
	p.print(fmt.Sprintf("%6.0fs  %10.0f %s/s  %8.2f MB/s", now.Sub(p.start).Seconds(), rate, p.unit, rate*float64(p.size)/1e6))
	p.last, p.lastCount = now, count
}

// throughput formats count entries over the run so far.
func (p *progress) throughput(count int64) string {
	el := time.Since(p.start).Seconds()
	return fmt.Sprintf("%d entries of %d B in %.1fs: %.0f entries/s, %.2f MB/s", count, p.size, el,
		float64(count)/el, float64(count)*float64(p.size)/el/1e6)
}
