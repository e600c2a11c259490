package perf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// DiskOptions configure Disk, the physical reference for the ledger benchmark on the same
// disk.
type DiskOptions struct {
	Dir      string        // where the temporary files are made (and removed afterwards)
	Size     int           // entry size in bytes
	Duration time.Duration // how long to run
	Prealloc int64         // bytes preallocated per file; a file wraps around when full

	// Without a Rate: one file, groups of Group entries appended and fdatasynced as fast as
	// the disk goes (throughput).
	Group int
	// With a Rate (entries per second, all journals together): entries arrive at that rate
	// and each goes to Copies of Journals files (round-robin, like a ledger's write sets);
	// every file syncs whatever has arrived as soon as its previous fdatasync ends.
	Rate     float64
	Journals int
	Copies   int

	// Progress, if not nil, receives a report once a second, on the calling goroutine.
	Progress func(Progress)
}

func (o *DiskOptions) validate() error {
	switch {
	case o.Dir == "":
		return errors.New("perf: no directory")
	case o.Size <= 0 || o.Duration <= 0 || o.Prealloc < int64(o.Size):
		return errors.New("perf: size and duration must be positive, prealloc at least size")
	case o.Rate < 0:
		return errors.New("perf: negative rate")
	case o.Rate == 0 && o.Group <= 0:
		return errors.New("perf: group must be positive")
	case o.Rate > 0 && (o.Journals < 1 || o.Copies < 1 || o.Copies > o.Journals):
		return errors.New("perf: want 1 <= copies <= journals")
	}
	return nil
}

// DiskResult is the outcome of Disk.
type DiskResult struct {
	Options    DiskOptions
	Throughput Throughput
	// Latency is the fdatasync latency (throughput mode) or the add latency (with a rate):
	// from an entry's arrival until its last copy is synced.
	Latency Percentiles
}

// String formats the result as `magnetar perf disk` prints it.
func (r DiskResult) String() string {
	o := r.Options
	if o.Rate > 0 {
		return fmt.Sprintf("disk (journals %d, copies per entry %d, each fdatasync as soon as the previous ends, at %.0f entries/s): %s; add latency %s",
			o.Journals, o.Copies, o.Rate, r.Throughput, r.Latency)
	}
	return fmt.Sprintf("disk (groups of %d, fdatasync each): %s; fdatasync %s", o.Group, r.Throughput, r.Latency)
}

// Disk runs the disk reference until its duration has passed or ctx ends.
func Disk(ctx context.Context, o DiskOptions) (DiskResult, error) {
	if err := o.validate(); err != nil {
		return DiskResult{}, err
	}
	if o.Rate > 0 {
		return diskRate(ctx, o)
	}
	return diskThroughput(ctx, o)
}

// preallocated creates a temporary file in dir, fallocated to size bytes and synced: the
// reference's files, which read as zeros and need no block allocation while written. The
// caller removes and closes it.
func preallocated(dir string, size int64) (*os.File, error) {
	f, err := os.CreateTemp(dir, "magnetar-perf-disk-*.dat")
	if err != nil {
		return nil, err
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, size)
	if err != nil {
		err = fmt.Errorf("fallocate %s: %w", filepath.Base(f.Name()), err)
	} else {
		err = unix.Fdatasync(int(f.Fd()))
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

// diskThroughput appends groups of o.Group entries, fdatasyncs, and repeats.
func diskThroughput(ctx context.Context, o DiskOptions) (DiskResult, error) {
	f, err := preallocated(o.Dir, o.Prealloc)
	if err != nil {
		return DiskResult{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, o.Size*o.Group)
	for i := range buf {
		buf[i] = byte(i)
	}
	var (
		off     int64
		entries int64
		lat     Latencies
		pr      = newMeter(RealClock, o.Size, "entries", o.Progress)
		start   = time.Now()
	)
	for time.Since(start) < o.Duration && ctx.Err() == nil {
		t0 := time.Now()
		if off+int64(len(buf)) > o.Prealloc {
			off = 0
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			return DiskResult{}, err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return DiskResult{}, err
		}
		lat.Add(time.Since(t0))
		off += int64(len(buf))
		entries += int64(o.Group)
		pr.tick(entries, nil)
	}
	return DiskResult{Options: o, Throughput: pr.throughput(entries), Latency: lat.Percentiles()}, nil
}

// diskRate is the latency reference: entries arrive at a fixed rate and each goes to copies
// of the journals (round-robin, like a ledger's write sets); every journal is a preallocated
// file on its own goroutine that writes whatever has arrived and fdatasyncs, again as soon as
// its previous fdatasync ends (group commit with no wait and no other work). An entry's
// latency runs from its arrival until its last copy is synced: the least add latency any
// store that syncs before it acknowledges can have on this disk at this load.
func diskRate(ctx context.Context, o DiskOptions) (DiskResult, error) {
	n := int(o.Rate * o.Duration.Seconds())
	if n < 1 {
		return DiskResult{}, fmt.Errorf("--rate %.0f for %v is no entry at all", o.Rate, o.Duration)
	}
	interval := float64(time.Second) / o.Rate
	arrival := func(i int) time.Duration { return time.Duration(float64(i) * interval) }
	// ends[i*copies+k] is when copy k of entry i was synced (since start); 0: not yet.
	ends := make([]atomic.Int64, n*o.Copies)
	var synced atomic.Int64 // copies synced, all journals
	files := make([]*os.File, o.Journals)
	for j := range files {
		f, err := preallocated(o.Dir, o.Prealloc)
		if err != nil {
			return DiskResult{}, err
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
			if err := journalRun(ctx, o, j, f, n, start, arrival, ends, &synced); err != nil {
				errOnce.Do(func() { firstErr = err; cancel() })
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	pr := newMeter(RealClock, o.Size, "entries", o.Progress)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
			pr.tick(synced.Load()/int64(o.Copies), nil)
		}
	}
	if firstErr != nil {
		return DiskResult{}, firstErr
	}
	var lat Latencies
	complete := int64(0)
	for i := range n {
		var last int64
		for k := range o.Copies {
			e := ends[i*o.Copies+k].Load()
			if e == 0 {
				last = 0
				break
			}
			last = max(last, e)
		}
		if last == 0 {
			break // stopped early (interrupted): later entries were not all synced either
		}
		lat.Add(time.Duration(last) - arrival(i))
		complete++
	}
	return DiskResult{Options: o, Throughput: pr.throughput(complete), Latency: lat.Percentiles()}, nil
}

// journalRun syncs journal j's copies: entry i goes to journals i, i+1, ..., i+copies-1 (mod
// journals), as a ledger's write set of entry i.
func journalRun(ctx context.Context, o DiskOptions, j int, f *os.File, n int, start time.Time,
	arrival func(int) time.Duration, ends []atomic.Int64, synced *atomic.Int64) error {
	var mine []int32 // slots in ends, in arrival order
	for i := range n {
		if k := (j - i%o.Journals + o.Journals) % o.Journals; k < o.Copies {
			mine = append(mine, int32(i*o.Copies+k))
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
		for next+k < len(mine) && arrival(int(mine[next+k])/o.Copies) <= now && (k+1)*o.Size <= len(buf) {
			k++
		}
		if k == 0 {
			// Pacing the arrivals of the load, not synchronisation.
			time.Sleep(arrival(int(mine[next])/o.Copies) - now)
			continue
		}
		b := buf[:k*o.Size]
		if off+int64(len(b)) > o.Prealloc {
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
