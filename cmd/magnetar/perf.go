package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/magnetar-io/magnetar/ledger"
)

func init() { register(newPerfCmd) }

func newPerfCmd() *cobra.Command {
	var cpuProfile string
	var stopProfile func()
	c := &cobra.Command{
		Use:   "perf",
		Short: "Measure performance (and the physical references to compare with)",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if os.Getenv("GOGC") == "" {
				// The load generator collects less often than Go's default, so that its
				// own collections (a 1 KiB message allocates, and the heap is small) do
				// not show up in the latencies it measures: at 5k msg/s the default made
				// ten collections a second and added about 1 ms to the publish p99
				// (docs/BENCHMARKS-RESULTS.md, session 6).
				debug.SetGCPercent(400)
			}
			if cpuProfile == "" {
				return nil
			}
			f, err := os.Create(cpuProfile)
			if err != nil {
				return err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
				return err
			}
			stopProfile = func() { pprof.StopCPUProfile(); f.Close() }
			return nil
		},
		PersistentPostRun: func(*cobra.Command, []string) {
			if stopProfile != nil {
				stopProfile()
			}
		},
	}
	c.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file")
	c.AddCommand(newPerfDiskCmd(), newPerfLedgerCmd(), newPerfProduceCmd(), newPerfConsumeCmd(), newPerfE2ECmd())
	return c
}

func newPerfDiskCmd() *cobra.Command {
	var (
		dir      string
		size     int
		group    int
		duration time.Duration
		prealloc int64
		rate     float64
		journals int
		copies   int
	)
	c := &cobra.Command{
		Use:   "disk",
		Short: "The physical reference: append + fdatasync on a preallocated file, N entries per sync",
		Long: `The physical reference for perf ledger, on the same disk.

Without --rate: one file, groups of --group entries appended and fdatasynced as fast as the
disk goes (throughput; match --group to the journal's group size to compare).

With --rate: entries arrive at that many per second and each goes to --copies of --journals
files (round-robin, like a ledger's write sets); every file syncs whatever has arrived as soon
as its previous fdatasync ends. The add latency it reports (arrival to the last copy synced) is
the least that any store syncing before it acknowledges can have on this disk at this load:
compare with perf ledger --rate R and E=journals, WQ=AQ=copies.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usageError{fmt.Errorf("--dir is required")}
			}
			if size <= 0 || group <= 0 || duration <= 0 || prealloc < int64(size) {
				return usageError{fmt.Errorf("--size, --group and --duration must be positive, --prealloc at least --size")}
			}
			if rate < 0 || journals < 1 || copies < 1 || copies > journals {
				return usageError{fmt.Errorf("--rate must not be negative, and 1 <= --copies <= --journals")}
			}
			if rate == 0 && (journals != 1 || copies != 1) {
				return usageError{fmt.Errorf("--journals and --copies need --rate")}
			}
			if rate > 0 && cmd.Flags().Changed("group") {
				return usageError{fmt.Errorf("--group is for the throughput mode (without --rate)")}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			print := func(s string) { fmt.Println(s) }
			var res string
			var err error
			if rate > 0 {
				res, err = diskRateRun{dir: dir, size: size, rate: rate, journals: journals, copies: copies,
					d: duration, prealloc: prealloc}.run(ctx, print)
			} else {
				res, err = perfDisk(ctx, dir, size, group, duration, prealloc, print)
			}
			if err != nil {
				return err
			}
			fmt.Println(res)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&dir, "dir", "", "directory on the disk to measure (a temporary file is made there)")
	f.IntVar(&size, "size", 1024, "entry size in bytes")
	f.IntVar(&group, "group", 1, "entries per fdatasync (match the journal's group size to compare)")
	f.DurationVar(&duration, "duration", 10*time.Second, "how long to run")
	f.Int64Var(&prealloc, "prealloc", 1<<30, "bytes to preallocate per file (a file wraps around when full)")
	f.Float64Var(&rate, "rate", 0, "entries per second arriving (0: as fast as possible, in groups of --group)")
	f.IntVar(&journals, "journals", 1, "files syncing side by side (with --rate), e.g. 3 for three bookies' journals")
	f.IntVar(&copies, "copies", 1, "files each entry goes to (with --rate), e.g. 2 for write quorum 2")
	return c
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

// perfDisk appends group entries of size bytes, fdatasyncs, and repeats for d.
func perfDisk(ctx context.Context, dir string, size, group int, d time.Duration, prealloc int64, progress func(string)) (string, error) {
	f, err := preallocated(dir, prealloc)
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, size*group)
	for i := range buf {
		buf[i] = byte(i)
	}
	var (
		off     int64
		entries int64
		lat     latencies
		pr      = newProgress(size, progress)
		start   = time.Now()
	)
	for time.Since(start) < d && ctx.Err() == nil {
		t0 := time.Now()
		if off+int64(len(buf)) > prealloc {
			off = 0
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			return "", err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return "", err
		}
		lat.add(time.Since(t0))
		off += int64(len(buf))
		entries += int64(group)
		pr.tick(entries)
	}
	return fmt.Sprintf("disk (groups of %d, fdatasync each): %s; fdatasync %s", group, pr.throughput(entries), lat.summary()), nil
}

func newPerfLedgerCmd() *cobra.Command {
	var (
		f        ledgerFlags
		q        quorumFlags
		size     int
		duration time.Duration
		rate     float64
		keep     bool
	)
	c := &cobra.Command{
		Use:   "ledger",
		Short: "Write one ledger as fast as possible (or at --rate) and report throughput and add latency",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := q.options(f.password)
			if err != nil {
				return err
			}
			if size <= 0 || duration <= 0 || rate < 0 {
				return usageError{fmt.Errorf("--size and --duration must be positive, --rate not negative")}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			env, err := f.open(ctx)
			if err != nil {
				return err
			}
			defer env.Close()
			res, err := perfLedger(ctx, env, opts, size, duration, rate, keep, func(s string) { fmt.Println(s) })
			if err != nil {
				return err
			}
			fmt.Println(res)
			return nil
		},
	}
	f.add(c)
	q.add(c)
	c.Flags().IntVar(&size, "size", 1024, "entry size in bytes")
	c.Flags().DurationVar(&duration, "duration", 30*time.Second, "how long to write")
	c.Flags().Float64Var(&rate, "rate", 0, "entries per second (0: as fast as possible)")
	c.Flags().BoolVar(&keep, "keep", false, "keep the ledger afterwards (default: delete it)")
	return c
}

// pacingStep is the shortest sleep of a paced load generator (perf ledger, perf produce).
const pacingStep = 500 * time.Microsecond

// perfLedger appends to one ledger for d, pacing at rate if > 0. Latency is counted from the
// scheduled send time, so a stalled writer shows up in the percentiles.
func perfLedger(ctx context.Context, env *ledgerEnv, opts ledger.CreateOptions, size int, d time.Duration,
	rate float64, keep bool, progress func(string)) (string, error) {
	h, err := env.client.Create(ctx, opts)
	if err != nil {
		return "", err
	}
	payload := make([]byte, size)
	var (
		lat      latencies
		late     latencies // how late each paced append was made (part of lat)
		acked    atomic.Int64
		failed   atomic.Int64
		firstErr atomic.Value
		inflight sync.WaitGroup
	)
	pr := newProgress(size, progress)
	start := time.Now()
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	for i := int64(0); ctx.Err() == nil; i++ {
		sched := time.Now()
		if interval > 0 {
			sched = start.Add(time.Duration(i) * interval)
			if wait := time.Until(sched); wait > 0 {
				// Pacing the load generator, not synchronisation. It sleeps at least
				// pacingStep, then sends every entry that fell due meanwhile (each timed from
				// its own due time): a sleep per entry would cost the generator more CPU than
				// the entries it sends at tens of thousands a second.
				time.Sleep(max(wait, pacingStep))
			}
		}
		if time.Since(start) >= d {
			break
		}
		if interval > 0 {
			late.add(time.Since(sched))
		}
		inflight.Add(1)
		h.AppendAsync(ctx, payload, func(_ int64, err error) {
			defer inflight.Done()
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			lat.add(time.Since(sched))
			acked.Add(1)
		})
		pr.tick(acked.Load())
		if failed.Load() > 0 {
			break
		}
	}
	inflight.Wait()
	n := acked.Load()
	summary := fmt.Sprintf("ledger %d (E=%d WQ=%d AQ=%d): %s; add latency %s",
		h.ID(), opts.Ensemble, opts.WriteQuorum, opts.AckQuorum, pr.throughput(n), lat.summary())
	if interval > 0 {
		// The pacer's own lateness (Go timers fire no sooner than about 1 ms on Linux) is
		// part of the add latency, which counts from the scheduled times.
		summary += "; of which send lateness " + late.summary()
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	closeErr := h.Close(cctx)
	if !keep {
		if err := env.client.Delete(cctx, h.ID()); err != nil {
			closeErr = errors.Join(closeErr, err)
		}
	}
	if e, ok := firstErr.Load().(error); ok {
		return summary, fmt.Errorf("%d adds failed, first: %w", failed.Load(), e)
	}
	return summary, closeErr
}
