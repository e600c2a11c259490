package interop

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestBenchGeo measures geo-replication's throughput between two standalone processes on
// this machine, east and west (each its own etcd, bookie and broker), with pulsar-client-go
// and one producer in east publishing 1 KiB messages asynchronously (batching on):
//
//   - lag: the producer paced at MAGNETAR_BENCH_GEO_RATE messages a second (default
//     10,000) for D seconds; a consumer in west records each message's receive time minus
//     its publish time (p50, p99, max) and the replicated rate (messages reaching west a
//     second) against the published one;
//   - saturation: the producer unpaced for D seconds; the published rate (receipts a
//     second) and the replicated rate (west's msgInCounter over the same window), their
//     ratio, and how long the backlog left at the end takes to drain;
//   - A/B: the publish rate of an unpaced producer for D seconds to a topic of geo/ns
//     (replicated to west) and to one of geo/local (east only), MAGNETAR_BENCH_GEO_REPS
//     (default 3) alternating repetitions each, medians, with the CPU time of both
//     processes. Both clusters run on the same two cores, so the replicated side pays for
//     west's work too.
//
// Run it without the race detector:
//
//	cd interop && MAGNETAR_BENCH_GEO=1 go test -count=1 -run TestBenchGeo -v .
//
// MAGNETAR_BENCH_GEO_SECS sets D (default 15).
func TestBenchGeo(t *testing.T) {
	if os.Getenv("MAGNETAR_BENCH_GEO") == "" {
		t.Skip("set MAGNETAR_BENCH_GEO=1 to run")
	}
	d := time.Duration(envInt("MAGNETAR_BENCH_GEO_SECS", 15)) * time.Second
	rate := envInt("MAGNETAR_BENCH_GEO_RATE", 10000)
	reps := envInt("MAGNETAR_BENCH_GEO_REPS", 3)
	const size = 1024
	east, west := geoStandalone(t, "east"), geoStandalone(t, "west")
	geoConnect(t, east, west)
	ea := east.admin()
	if err := ea.Namespaces().CreateNamespace("geo/local"); err != nil { // east only
		t.Fatal(err)
	}
	if err := ea.Namespaces().SetDeduplicationStatus("geo/local", true); err != nil {
		t.Fatal(err)
	}
	ecl, wcl := east.client(), west.client()
	load0 := loadAvg()
	run := 0
	newRun := func(ns string) (string, *geoPublisher) {
		run++
		topic := fmt.Sprintf("persistent://%s/bench-%d", ns, run)
		p, err := ecl.CreateProducer(pulsar.ProducerOptions{Topic: topic, MaxPendingMessages: 10000})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return topic, newGeoPublisher(p, fmt.Sprintf("run%d", run), size)
	}
	// publish runs g for d at rate (0: unpaced), calls atEnd (if not nil) as the window
	// ends, waits for the last receipts and returns the receipts in the window and its
	// length.
	publish := func(g *geoPublisher, rate int, atEnd func()) (int64, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		t0 := time.Now()
		g.run(ctx, rate, 0)
		acked, el := g.acked.Load(), time.Since(t0)
		if atEnd != nil {
			atEnd()
		}
		if err := g.drain(t, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		return acked, el
	}
	msgIn := func(s *geoSite, topic string) int64 {
		tn := mustTopic(t, topic)
		st, err := s.admin().Topics().GetStats(tn)
		if err != nil {
			return 0 // not created there yet
		}
		return st.MsgCounterIn
	}

	// Lag at a paced rate.
	topic, g := newRun(geoNS)
	var mu sync.Mutex
	var lags []time.Duration
	sink := geoConsume(t, west, wcl, topic, "lag", func(l time.Duration) { mu.Lock(); lags = append(lags, l); mu.Unlock() })
	t0 := time.Now()
	acked, el := publish(g, rate, nil)
	sink.wait(t, g.sent, 3*time.Minute)
	if err := sink.check(map[string]int{g.name: g.sent}); err != nil {
		t.Fatalf("west: %v", err)
	}
	lastIn := time.Duration(sink.lastAt.Load() - t0.UnixNano())
	mu.Lock()
	lagLine := fmt.Sprintf("lag at %d msg/s (1 KiB, %v): published %.0f msg/s; in west %.0f msg/s, the last %v after the window; receive−publish p50 %v p99 %v max %v",
		rate, d, float64(acked)/el.Seconds(), float64(g.sent)/lastIn.Seconds(), (lastIn - el).Round(time.Millisecond),
		percentile(lags, 0.5).Round(100*time.Microsecond), percentile(lags, 0.99).Round(100*time.Microsecond),
		percentile(lags, 1).Round(100*time.Microsecond))
	mu.Unlock()
	geoWaitDrained(t, 2*time.Minute, topic, east, west)

	// Saturation.
	topic, g = newRun(geoNS)
	var inWest int64
	acked, el = publish(g, 0, func() { inWest = msgIn(west, topic) })
	drainStart := time.Now()
	geoWaitDrained(t, 5*time.Minute, topic, east, west)
	drained := time.Since(drainStart)
	// West's msgInCounter has been seen to exceed what was sent by ~0.015% while both logs
	// below read back exactly once: the counter is reported, the logs are checked.
	t.Logf("west's msgInCounter %d, %d messages sent", msgIn(west, topic), g.sent)
	// Exactly once, in order, in both logs.
	for _, s := range []*geoSite{east, west} {
		if err := geoReadLog(t, s, map[*geoSite]pulsar.Client{east: ecl, west: wcl}[s], topic, map[string]int{g.name: g.sent}); err != nil {
			t.Error(err)
		}
	}
	pubRate, replRate := float64(acked)/el.Seconds(), float64(inWest)/el.Seconds()
	satLine := fmt.Sprintf("saturation (1 KiB, unpaced, %v): published %.0f msg/s, replicated %.0f msg/s (ratio %.2f); the rest drained in %v",
		d, pubRate, replRate, replRate/pubRate, drained.Round(time.Millisecond))

	// A/B: with and without a remote cluster.
	rates := map[string][]float64{}
	cpu := map[string][]float64{} // CPU seconds of both processes per 100k messages
	for i := range reps {
		order := []string{geoNS, "geo/local"}
		if i%2 == 1 {
			order = []string{"geo/local", geoNS}
		}
		for _, ns := range order {
			topic, g := newRun(ns)
			c0 := east.proc.CPUTime() + west.proc.CPUTime()
			acked, el := publish(g, 0, nil)
			if ns == geoNS {
				geoWaitDrained(t, 5*time.Minute, topic, east, west) // the replication's work is the run's
			}
			c := (east.proc.CPUTime() + west.proc.CPUTime() - c0).Seconds()
			rates[ns] = append(rates[ns], float64(acked)/el.Seconds())
			cpu[ns] = append(cpu[ns], c/float64(g.sent)*1e5)
			t.Logf("A/B %d %s: %.0f msg/s, CPU %.1f s per 100k messages", i, ns, float64(acked)/el.Seconds(), c/float64(g.sent)*1e5)
		}
	}
	with, without := median(rates[geoNS]), median(rates["geo/local"])
	abLine := fmt.Sprintf("A/B (1 KiB, unpaced, %v, %d alternating repetitions, medians): replicated %.0f msg/s, not replicated %.0f msg/s (ratio %.2f; all %v vs %v); CPU of both processes per 100k messages %.1f s vs %.1f s",
		d, reps, with, without, with/without, roundAll(rates[geoNS]), roundAll(rates["geo/local"]), median(cpu[geoNS]), median(cpu["geo/local"]))
	for _, l := range []string{lagLine, satLine, abLine, fmt.Sprintf("load average %s at the start, %s at the end", load0, loadAvg())} {
		t.Log(l)
		fmt.Println("BENCH geo " + l)
	}
}

func roundAll(v []float64) []int {
	r := make([]int, len(v))
	for i, x := range v {
		r[i] = int(x + 0.5)
	}
	return r
}
