package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/perf"
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
				// (measured with magnetar perf produce at 5k msg/s).
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
	c.AddCommand(newPerfDiskCmd(), newPerfLedgerCmd(), newPerfProduceCmd(), newPerfConsumeCmd(), newPerfE2ECmd(), newPerfIoTCmd())
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
			res, err := perf.Disk(ctx, perf.DiskOptions{Dir: dir, Size: size, Duration: duration, Prealloc: prealloc,
				Group: group, Rate: rate, Journals: journals, Copies: copies, Progress: printProgress})
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

// printProgress prints a benchmark's progress report on stdout.
func printProgress(p perf.Progress) { fmt.Println(p) }

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
			res, err := perf.Ledger(ctx, perf.LedgerOptions{Client: perf.LedgerClientOf(env.client), Create: opts,
				Size: size, Duration: duration, Rate: rate, Keep: keep, Progress: printProgress})
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
