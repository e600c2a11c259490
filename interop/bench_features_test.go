package interop

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/broker"
)

// TestBenchFeatures measures, in one run on one standalone cluster (etcd, one bookie with
// its journal fsync, the broker) driven by pulsar-client-go: publish throughput to a
// persistent and to a non-persistent topic (one live consumer each), and compaction speed
// against reading the same topic from the start. Run with MAGNETAR_BENCH_FEATURES=N (N
// messages, e.g. 200000); it is skipped otherwise.
func TestBenchFeatures(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("MAGNETAR_BENCH_FEATURES"))
	if n <= 0 {
		t.Skip("set MAGNETAR_BENCH_FEATURES=<messages> to run")
	}
	const keys, size = 1000, 100
	c := newCluster(t, clusterOpts{admin: true, tweak: func(cfg *broker.Config) { cfg.CompactionCheckInterval = -1 }})
	cl := c.client()
	payload := make([]byte, size)
	publish := func(topic string) (float64, time.Duration) {
		cons := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "live"})
		go func() {
			for m := range cons.Chan() {
				cons.Ack(m)
			}
		}()
		p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, MaxPendingMessages: 2000})
		ctx := ctxT(t, 10*time.Minute)
		errs := make(chan error, 2000)
		start := time.Now()
		for i := range n {
			if i >= 2000 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			p.SendAsync(ctx, &pulsar.ProducerMessage{Key: fmt.Sprintf("k%d", i%keys), Payload: payload},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
		}
		for range min(n, 2000) {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		took := time.Since(start)
		return float64(n) / took.Seconds(), took
	}
	persistent := topicName(t)
	pRate, pTook := publish(persistent)
	npRate, npTook := publish(npTopicName(t))

	// Reading the persistent topic from the start, then compacting it.
	r := compactedReader(t, cl, persistent, false)
	ctx := ctxT(t, 10*time.Minute)
	start := time.Now()
	for i := range n {
		if _, err := r.Next(ctx); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	readTook := time.Since(start)
	start = time.Now()
	if st := compactNow(t, c, mustTopic(t, persistent)); st.Status != utils.SUCCESS {
		t.Fatalf("compaction: %+v", st)
	}
	compactTook := time.Since(start)
	readRate, compactRate := float64(n)/readTook.Seconds(), float64(n)/compactTook.Seconds()
	t.Logf("RESULT messages=%d size=%d keys=%d", n, size, keys)
	t.Logf("RESULT publish persistent %.0f msg/s (%v), non-persistent %.0f msg/s (%v), ratio %.2f",
		pRate, pTook.Round(time.Millisecond), npRate, npTook.Round(time.Millisecond), npRate/pRate)
	t.Logf("RESULT read %.0f msg/s (%v), compaction %.0f msg/s (%v), compaction/read %.2f",
		readRate, readTook.Round(time.Millisecond), compactRate, compactTook.Round(time.Millisecond), compactRate/readRate)
}
