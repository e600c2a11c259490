package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// diskRateRun is the latency reference of `perf disk --rate`: entries arrive at a fixed rate
// and each goes to copies of the journals (round-robin, like a ledger's write sets); every
// journal is a preallocated file on its own goroutine that writes whatever has arrived and
// fdatasyncs, again as soon as its previous fdatasync ends (group commit with no wait and no
// other work). An entry's latency runs from its arrival until its last copy is synced: the
// least add latency any store that syncs before it acknowledges can have on this disk at this
// load. Compare with `perf ledger --rate` at the same rate and quorums.
type diskRateRun struct {
	dir      string
	size     int
	rate     float64 // entries per second, all journals together
	journals int
	copies   int
	d        time.Duration
	prealloc int64 // bytes per journal file
}

func (r diskRateRun) run(ctx context.Context, progress func(string)) (string, error) {
	n := int(r.rate * r.d.Seconds())
	if n < 1 {
		return "", fmt.Errorf("--rate %.0f for %v is no entry at all", r.rate, r.d)
	}
	interval := float64(time.Second) / r.rate
	arrival := func(i int) time.Duration { return time.Duration(float64(i) * interval) }
	// ends[i*copies+k] is when copy k of entry i was synced (since start); 0: not yet.
	ends := make([]atomic.Int64, n*r.copies)
	var synced atomic.Int64 // copies synced, all journals
	files := make([]*os.File, r.journals)
	for j := range files {
		f, err := preallocated(r.dir, r.prealloc)
		if err != nil {
			return "", err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		files[j] = f
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for j, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.journal(ctx, j, f, n, start, arrival, ends, &synced); err != nil {
				errOnce.Do(func() { firstErr = err; cancel() })
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	pr := newProgress(r.size, progress)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
			pr.tick(synced.Load() / int64(r.copies))
		}
	}
	if firstErr != nil {
		return "", firstErr
	}
	var lat latencies
	complete := int64(0)
	for i := range n {
		var last int64
		for k := range r.copies {
			e := ends[i*r.copies+k].Load()
			if e == 0 {
				last = 0
				break
			}
			last = max(last, e)
		}
		if last == 0 {
			break // stopped early (interrupted): later entries were not all synced either
		}
		lat.add(time.Duration(last) - arrival(i))
		complete++
	}
	return fmt.Sprintf("disk (journals %d, copies per entry %d, each fdatasync as soon as the previous ends, at %.0f entries/s): %s; add latency %s",
		r.journals, r.copies, r.rate, pr.throughput(complete), lat.summary()), nil
}

// journal syncs journal j's copies: entry i goes to journals i, i+1, ..., i+copies-1 (mod
// journals), as a ledger's write set of entry i.
func (r diskRateRun) journal(ctx context.Context, j int, f *os.File, n int, start time.Time,
	arrival func(int) time.Duration, ends []atomic.Int64, synced *atomic.Int64) error {
	var mine []int32 // slots in ends, in arrival order
	for i := range n {
		if k := (j - i%r.journals + r.journals) % r.journals; k < r.copies {
			mine = append(mine, int32(i*r.copies+k))
		}
	}
	buf := make([]byte, 4<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	var off int64
	for next := 0; next < len(mine) && ctx.Err() == nil; {
		now := time.Since(start)
		k := 0
		for next+k < len(mine) && arrival(int(mine[next+k])/r.copies) <= now && (k+1)*r.size <= len(buf) {
			k++
		}
		if k == 0 {
			// Pacing the arrivals of the load, not synchronisation.
			time.Sleep(arrival(int(mine[next])/r.copies) - now)
			continue
		}
		b := buf[:k*r.size]
		if off+int64(len(b)) > r.prealloc {
			off = 0
		}
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return err
		}
		off += int64(len(b))
		end := int64(time.Since(start))
		for _, slot := range mine[next : next+k] {
			ends[slot].Store(end)
		}
		synced.Add(int64(k))
		next += k
	}
	return nil
}
