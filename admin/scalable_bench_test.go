package admin

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/pulsarclient"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// TestScalableSplitPause measures how long splits pause publishing (the target: at most
// 500 ms under 5k msg/s): producers on many keys publish at MAGNETAR_SCALABLE_RATE msg/s
// (default 5000) on 3 brokers while the admin API splits the widest active segment
// MAGNETAR_SCALABLE_SPLITS times (default 10); the pause of a split is the longest time any
// producer waited for a send that overlapped it. It needs a quiet machine: it runs only with
// MAGNETAR_SCALABLE_BENCH=1 (docs/BENCHMARKS-RESULTS.md).
func TestScalableSplitPause(t *testing.T) {
	env := benchEnv(t)
	rate, splits := env("MAGNETAR_SCALABLE_RATE", 5000), env("MAGNETAR_SCALABLE_SPLITS", 10)
	c := startScalableCluster(t, 3, broker.ScalableConfig{TickInterval: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const topic, p = "topic://public/default/pause", "/admin/v2/scalable/public/default/pause"
	c.call(t, 0, "PUT", p+"?segments=2")
	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + c.brokers[0].Addr().String(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	type send struct{ start, end time.Time }
	const producers = 32
	var mu sync.Mutex
	var sends []send
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range producers {
		pr, err := cl.CreateScalableProducer(ctx, pulsarclient.ScalableProducerOptions{Topic: topic,
			ScalableOptions: pulsarclient.ScalableOptions{AdminURL: c.urls[g%3]}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer pr.Close(context.Background())
			every := time.Second * producers / time.Duration(rate)
			next := time.Now()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Until(next)):
				}
				next = next.Add(every)
				start := time.Now()
				key := fmt.Sprintf("k%d-%d", g, i%16)
				if _, _, err := pr.Send(ctx, &pulsarclient.ProducerMessage{Key: key, Payload: []byte(key)}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				sends = append(sends, send{start, time.Now()})
				mu.Unlock()
			}
		})
	}
	time.Sleep(2 * time.Second) // warm-up: the measurement's own pacing, not synchronisation
	var pauses []time.Duration
	for range splits {
		l := c.layout(t, p)
		act := l.Active()
		widest := slices.MaxFunc(act, func(a, b layout.Segment) int { return a.Range.Size() - b.Range.Size() })
		begin := time.Now()
		c.call(t, 0, "POST", p+"/split/"+strconv.FormatUint(uint64(widest.ID), 10))
		end := time.Now()
		time.Sleep(time.Second) // let the sends that overlapped the split finish
		var worst time.Duration
		mu.Lock()
		for _, s := range sends {
			if s.end.After(begin) && s.start.Before(end) {
				worst = max(worst, s.end.Sub(s.start))
			}
		}
		mu.Unlock()
		pauses = append(pauses, worst)
	}
	close(stop)
	wg.Wait()
	slices.Sort(pauses)
	p99 := pauses[(len(pauses)*99+99)/100-1]
	mu.Lock()
	n := len(sends)
	mu.Unlock()
	t.Logf("%d splits at %d msg/s (%d sends): publish pause p99 %v, max %v (all: %v)", splits, rate, n, p99, pauses[len(pauses)-1], pauses)
	if pauses[len(pauses)-1] > 500*time.Millisecond {
		t.Errorf("a split paused publishing for %v (> 500 ms)", pauses[len(pauses)-1])
	}
}

// TestScalableThroughputRatio measures a scalable topic of 4 segments against a topic of 4
// partitions on the same 3 brokers (the target: at least 0.9×): one pipelined producer per
// topic (MaxPendingMessages 1000, batching on, 1 KiB unkeyed messages: round-robin over the
// segments or partitions, as magnetar perf produce sends them) publishes as fast as it can
// for MAGNETAR_SCALABLE_SECONDS (default 10) per run; the runs alternate scalable and
// partitioned MAGNETAR_SCALABLE_ROUNDS times (default 3) to spread the machine's noise.
// A 2 s warm-up of each comes first. Only with MAGNETAR_SCALABLE_BENCH=1.
func TestScalableThroughputRatio(t *testing.T) {
	env := benchEnv(t)
	secs, rounds := env("MAGNETAR_SCALABLE_SECONDS", 10), env("MAGNETAR_SCALABLE_ROUNDS", 3)
	c := startScalableCluster(t, 3, broker.ScalableConfig{TickInterval: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()
	const scal, part = "topic://public/default/k4", "persistent://public/default/p4"
	c.call(t, 0, "PUT", "/admin/v2/scalable/public/default/k4?segments=4")
	if err := c.brokers[0].CreatePartitionedTopic(ctx, part, 4); err != nil {
		t.Fatal(err)
	}
	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + c.brokers[0].Addr().String(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	payload := make([]byte, 1024)
	const window = 1000
	// run publishes for secs seconds through sendAsync and returns the acknowledged msg/s.
	run := func(sendAsync func(msg *pulsarclient.ProducerMessage, cb func(error)) error, flush func() error) float64 {
		var acked sync.WaitGroup
		var n int64
		var mu sync.Mutex
		var firstErr error
		start := time.Now()
		end := start.Add(time.Duration(secs) * time.Second)
		for time.Now().Before(end) {
			acked.Add(1)
			if err := sendAsync(&pulsarclient.ProducerMessage{Payload: payload}, func(err error) {
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil && time.Now().Before(end) {
					n++
				}
				mu.Unlock()
				acked.Done()
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := flush(); err != nil {
			t.Fatal(err)
		}
		acked.Wait()
		if firstErr != nil {
			t.Fatal(firstErr)
		}
		return float64(n) / float64(secs)
	}
	sp, err := cl.CreateScalableProducer(ctx, pulsarclient.ScalableProducerOptions{Topic: scal, MaxPendingMessages: window,
		ScalableOptions: pulsarclient.ScalableOptions{AdminURL: c.urls[0]}})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close(context.Background())
	pp, err := cl.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: part, MaxPendingMessages: window})
	if err != nil {
		t.Fatal(err)
	}
	defer pp.Close(context.Background())
	scalRun := func() float64 {
		return run(func(m *pulsarclient.ProducerMessage, cb func(error)) error {
			return sp.SendAsync(ctx, m, func(_ string, _ pulsarclient.MessageID, err error) { cb(err) })
		}, func() error { return sp.Flush(ctx) })
	}
	partRun := func() float64 {
		return run(func(m *pulsarclient.ProducerMessage, cb func(error)) error {
			return pp.SendAsync(ctx, m, func(_ pulsarclient.MessageID, err error) { cb(err) })
		}, func() error { return pp.Flush(ctx) })
	}
	warm := secs
	secs = 2
	scalRun() // warm-up (each segment's and partition's producer, ledger and cursor), not counted
	partRun()
	secs = warm
	var sumS, sumP float64
	for i := range rounds {
		var s, p float64
		if i%2 == 0 { // alternate which goes first
			s = scalRun()
			p = partRun()
		} else {
			p = partRun()
			s = scalRun()
		}
		sumS, sumP = sumS+s, sumP+p
		t.Logf("round %d: scalable %.0f msg/s, partitioned %.0f msg/s (%.2f×)", i+1, s, p, s/p)
	}
	ratio := sumS / sumP
	t.Logf("K=4, %d rounds of %d s: scalable %.0f msg/s, partitioned %.0f msg/s: %.2f×", rounds, secs, sumS/float64(rounds), sumP/float64(rounds), ratio)
	if ratio < 0.9 {
		t.Errorf("a 4-segment scalable topic reached %.2f× a 4-partition topic's throughput (< 0.9×)", ratio)
	}
}

// benchEnv skips t unless MAGNETAR_SCALABLE_BENCH is set (a measurement) and returns the
// reader of its positive integer settings (def when unset or invalid).
func benchEnv(t *testing.T) func(k string, def int) int {
	t.Helper()
	if os.Getenv("MAGNETAR_SCALABLE_BENCH") == "" {
		t.Skip("a measurement: set MAGNETAR_SCALABLE_BENCH=1")
	}
	return func(k string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
			return v
		}
		return def
	}
}
