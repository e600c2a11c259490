// Package perf is Magnetar's benchmark engine: the load generators, rate pacing, latency
// percentiles and reports behind `magnetar perf disk|ledger|produce|consume|e2e`, callable
// from a Go program. The CLI only parses flags into these options and prints the results.
//
// # Usage
//
//	res, err := perf.Run(ctx, perf.Options{
//		Tool: perf.Produce, Topic: "persistent://public/default/t",
//		Duration: 10 * time.Second, Warmup: 2 * time.Second,
//		Producer: perf.ProducerOptions{Producers: 1, Size: 1024, Rate: 5000, MaxPending: 500,
//			BatchMax: 1000, BatchDelay: time.Millisecond, InFlight: 1},
//		NewProducer: func(ctx context.Context, i int, o pulsarclient.ProducerOptions) (perf.Producer, error) {
//			return client.CreateProducer(ctx, o)
//		},
//		Progress: func(p perf.Progress) { log.Println(p) },
//	})
//	if res != nil {
//		res.WriteText(os.Stdout)
//	}
//
//	d, err := perf.Disk(ctx, perf.DiskOptions{Dir: "/data", Size: 1024, Group: 1,
//		Duration: 10 * time.Second, Prealloc: 1 << 30})
//	l, err := perf.Ledger(ctx, perf.LedgerOptions{Client: perf.LedgerClientOf(lc),
//		Create: ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2},
//		Size: 1024, Duration: 30 * time.Second, Rate: 10000})
//
// # Measurement
//
// Latency is counted from each operation's scheduled time (Pacer: start + i/rate), so a
// generator that falls behind its rate reports the delay instead of hiding it (no coordinated
// omission); the generator's own lateness is reported apart as the part of it that is the
// generator's. The Pulsar benchmarks measure a window: after the warm-up, until the duration
// has passed (or the last event, with a message limit). Percentiles are exact: every sample is
// kept (Latencies) and the p-th is the sample at index floor(n*p) of the sorted samples.
//
// Caller's obligations:
//
//  1. The Producer, Consumer and LedgerClient given are used from several goroutines at once
//     (one per producer or consumer, plus the clients' callback goroutines).
//  2. Progress callbacks must not block: Disk and Ledger call them on the calling goroutine
//     between operations, Run from its reporting goroutine.
//  3. Close the Pulsar clients behind NewProducer and Subscribe only after Run returns: Run
//     closes the producers and consumers it created, not the clients.
//
// # Goroutines
//
// Run starts one goroutine per producer and per consumer (the load loops), and one that
// reports progress; Disk with a rate starts one per journal file. Each call waits for all of
// them before it returns. Ledger appends from the calling goroutine; its append callbacks run
// on the ledger client's goroutines.
package perf
