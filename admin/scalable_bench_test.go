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

// TestScalableSplitPause measures how long splits pause publishing (issue #17: at most
// 500 ms under 5k msg/s): producers on many keys publish at MAGNETAR_SCALABLE_RATE msg/s
// (default 5000) on 3 brokers while the admin API splits the widest active segment
// MAGNETAR_SCALABLE_SPLITS times (default 10); the pause of a split is the longest time any
// producer waited for a send that overlapped it. It needs a quiet machine: it runs only with
// MAGNETAR_SCALABLE_BENCH=1 (docs/BENCHMARKS-RESULTS.md).
func TestScalableSplitPause(t *testing.T) {
	if os.Getenv("MAGNETAR_SCALABLE_BENCH") == "" {
		t.Skip("a measurement: set MAGNETAR_SCALABLE_BENCH=1")
	}
	env := func(k string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
			return v
		}
		return def
	}
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
