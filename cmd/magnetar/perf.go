package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

func init() { register(newPerfCmd) }

func newPerfCmd() *cobra.Command {
	c := &cobra.Command{Use: "perf", Short: "Measure performance (and the physical references to compare with)"}
	c.AddCommand(newPerfDiskCmd())
	return c
}

func newPerfDiskCmd() *cobra.Command {
	var (
		dir      string
		size     int
		group    int
		duration time.Duration
		prealloc int64
	)
	c := &cobra.Command{
		Use:   "disk",
		Short: "The physical reference: append + fdatasync on a preallocated file, N entries per sync",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usageError{fmt.Errorf("--dir is required")}
			}
			if size <= 0 || group <= 0 || duration <= 0 {
				return usageError{fmt.Errorf("--size, --group and --duration must be positive")}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := perfDisk(ctx, dir, size, group, duration, prealloc, func(s string) { fmt.Println(s) })
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
	f.Int64Var(&prealloc, "prealloc", 1<<30, "bytes to preallocate (the file wraps around when full)")
	return c
}

// perfDisk appends group entries of size bytes, fdatasyncs, and repeats for d.
func perfDisk(ctx context.Context, dir string, size, group int, d time.Duration, prealloc int64, progress func(string)) (string, error) {
	f, err := os.CreateTemp(dir, "magnetar-perf-disk-*.dat")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, prealloc); err != nil {
		return "", fmt.Errorf("fallocate %s: %w", filepath.Base(f.Name()), err)
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return "", err
	}
	buf := make([]byte, size*group)
	for i := range buf {
		buf[i] = byte(i)
	}
	var (
		off        int64
		entries    int64
		lat        []time.Duration
		start      = time.Now()
		lastReport = start
		lastCount  int64
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
		lat = append(lat, time.Since(t0))
		off += int64(len(buf))
		entries += int64(group)
		if now := time.Now(); now.Sub(lastReport) >= time.Second {
			rate := float64(entries-lastCount) / now.Sub(lastReport).Seconds()
			progress(fmt.Sprintf("%6.0fs  %10.0f entries/s  %8.2f MB/s", now.Sub(start).Seconds(), rate, rate*float64(size)/1e6))
			lastReport, lastCount = now, entries
		}
	}
	el := time.Since(start).Seconds()
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(float64(len(lat))*p))]
	}
	return fmt.Sprintf("disk: %d entries of %d B in groups of %d: %.0f entries/s, %.2f MB/s, fdatasync p50 %v p99 %v max %v",
		entries, size, group, float64(entries)/el, float64(entries)*float64(size)/el/1e6, pct(0.5), pct(0.99), pct(1)), nil
}
