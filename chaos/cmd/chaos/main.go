// Command chaos runs Magnetar chaos runs: `chaos -seed N` replays one run, `chaos -runs N`
// runs N randomized runs and prints a table. It needs root (network namespaces, tmpfs
// mounts), ip(8) and Debian's etcd; see docs/TOOLS.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/magnetar-io/magnetar/chaos"
)

func main() {
	chaos.RunClientIfChild()
	var (
		o        chaos.Options
		seed     = flag.Uint64("seed", 0, "replay the run of this seed (with -runs: the first seed)")
		runs     = flag.Int("runs", 1, "number of runs (seeds seed, seed+1, ...; a random first seed if -seed is 0)")
		verbose  = flag.Bool("v", false, "print progress (faults as applied, phases)")
		failFast = flag.Bool("fail-fast", false, "stop at the first run that fails")
		schedule = flag.Bool("schedule", false, "print the fault schedules of the seeds and exit (runs nothing)")
		clean    = flag.Bool("clean", false, "only remove what runs killed with SIGKILL left behind")
	)
	flag.StringVar(&o.Magnetar, "magnetar", "bin/magnetar", "the magnetar binary")
	flag.StringVar(&o.Etcd, "etcd", "etcd", "the etcd binary (Debian's etcd-server)")
	flag.StringVar(&o.Dir, "dir", "", "directory for run directories (default $TMPDIR)")
	flag.DurationVar(&o.Duration, "duration", 25*time.Second, "how long the producers produce in each run")
	flag.DurationVar(&o.SessionTTL, "session-ttl", 5*time.Second, "brokers' and bookies' session TTL")
	flag.IntVar(&o.MinFaults, "min-faults", 2, "fewest faults per run")
	flag.IntVar(&o.MaxFaults, "max-faults", 5, "most faults per run")
	flag.IntVar(&o.Rate, "rate", 40, "messages per second per producer")
	flag.BoolVar(&o.Txn, "txn", true, "transactions on, with a transactional producer")
	flag.IntVar(&o.Clusters, "clusters", 1, "2 or 3: that many geo-replicated clusters (each its own etcd, 2 bookies, 2 brokers) and faults between them; transactions off")
	flag.BoolVar(&o.Keep, "keep", false, "keep every run directory (failed runs are always kept)")
	flag.Parse()
	if o.Clusters > 3 {
		fmt.Fprintln(os.Stderr, "chaos: -clusters is 1, 2 or 3")
		os.Exit(2)
	}
	if *schedule {
		for i := range *runs {
			fmt.Printf("seed %d:\n", *seed+uint64(i))
			for _, f := range chaos.PlannedFaults(*seed+uint64(i), o) {
				fmt.Printf("  fault %s\n", f)
			}
		}
		return
	}
	if err := chaos.NetnsAvailable(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: cannot create network namespaces (needs root and ip(8)):", err)
		os.Exit(2)
	}
	if stale := chaos.CleanStale(); len(stale) > 0 {
		fmt.Fprintf(os.Stderr, "chaos: removed %d namespaces and mounts left by dead runs\n", len(stale))
	}
	if *clean {
		return
	}
	if _, err := os.Stat(o.Magnetar); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: magnetar binary:", err)
		os.Exit(2)
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano() % 1_000_000)
	}
	if *verbose {
		o.Log = os.Stderr
	} else {
		o.Log = io.Discard
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var results []chaos.Result
	failed := false
	for i := range *runs {
		if ctx.Err() != nil {
			break
		}
		r := chaos.Run(ctx, *seed+uint64(i), o)
		chaos.PrintResult(os.Stdout, r)
		results = append(results, r)
		if r.Status() != "PASS" {
			failed = true
			if *failFast {
				break
			}
		}
	}
	if len(results) > 1 {
		fmt.Println()
		chaos.PrintTable(os.Stdout, results)
	}
	if failed || ctx.Err() != nil {
		os.Exit(1)
	}
}
