package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/pulsarclient"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// scalableCluster is an embedded etcd, one bookie and n brokers, each with the admin API on
// its own httptest server.
type scalableCluster struct {
	brokers []*broker.Service
	urls    []string
}

func startScalableCluster(t *testing.T, n int) *scalableCluster {
	t.Helper()
	log := testLogger()
	eps := metadatatest.Embedded(t)
	ns := metadatatest.RandomNamespace()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bookie.Start(ctx, bookie.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Store: metadatatest.OpenStore(t, eps, ns),
		Logger: log, GCInterval: -1})
	if err != nil {
		t.Fatalf("bookie: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	c := &scalableCluster{}
	for i := range n {
		var h http.Handler = http.NotFoundHandler()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
		t.Cleanup(srv.Close)
		svc, err := broker.Start(ctx, broker.Config{Store: metadatatest.OpenStore(t, eps, ns), Listen: "127.0.0.1:0",
			ID: fmt.Sprintf("b%d", i+1), HTTPURL: srv.URL, Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, Logger: log,
			Scalable: broker.ScalableConfig{TickInterval: 50 * time.Millisecond, Retention: 200 * time.Millisecond}})
		if err != nil {
			t.Fatalf("broker %d: %v", i+1, err)
		}
		t.Cleanup(func() { svc.Close() })
		h = Handler(svc, Options{Logger: log})
		c.brokers = append(c.brokers, svc)
		c.urls = append(c.urls, srv.URL)
	}
	return c
}

// call sends an admin request to broker i, retrying while the controller is not ready
// (503), and fails the test unless the answer is 2xx.
func (c *scalableCluster) call(t *testing.T, i int, method, path string) []byte {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(method, c.urls[i]+path, strings.NewReader(""))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 == 2 {
			return b
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
	}
}

// TestScalableTopicEndToEnd: 3 brokers, producers on many keys and stream consumers (one
// leaves midway) on a scalable topic while the admin API splits, splits again and merges
// (each call to a different broker, redirected to the controller's leader): every
// acknowledged message is consumed and each key's messages arrive in the order produced.
func TestScalableTopicEndToEnd(t *testing.T) {
	c := startScalableCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "topic://public/default/orders"
	const p = "/admin/v2/scalable/public/default/orders"
	c.call(t, 1, "PUT", p+"?segments=2")
	c.call(t, 2, "PUT", p+"/subscription/s")

	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + c.brokers[0].Addr().String(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// Consumers: record, per key, each sequence number seen for the first time.
	var mu sync.Mutex
	seen := map[string][]int{}
	got := map[string]bool{}
	orderErr := ""
	consume := func(sc *pulsarclient.ScalableConsumer) {
		for {
			m, err := sc.Receive(ctx)
			if err != nil {
				return
			}
			key, seqText, _ := strings.Cut(string(m.Payload), ":")
			seq, _ := strconv.Atoi(seqText)
			mu.Lock()
			if !got[string(m.Payload)] {
				got[string(m.Payload)] = true
				if n := len(seen[key]); seq != n && orderErr == "" {
					orderErr = fmt.Sprintf("key %s: got seq %d after %d messages (%v)", key, seq, n, seen[key])
				}
				seen[key] = append(seen[key], seq)
			}
			mu.Unlock()
			_ = sc.Ack(m) // after processing: a segment is drained only once its messages are
		}
	}
	var cwg sync.WaitGroup
	consumers := make([]*pulsarclient.ScalableConsumer, 2)
	for i := range consumers {
		sc, err := cl.SubscribeStream(ctx, pulsarclient.ScalableConsumerOptions{Topic: topic, Subscription: "s",
			Name: fmt.Sprintf("c%d", i), ScalableOptions: pulsarclient.ScalableOptions{AdminURL: c.urls[i]}, PollWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		consumers[i] = sc
		cwg.Go(func() { consume(sc) })
	}

	// Producers: 4, each sending its 8 keys' sequence numbers in turn, one at a time.
	var pwg sync.WaitGroup
	stop := make(chan struct{})
	var sentMu sync.Mutex
	sent := map[string]int{} // key → messages acknowledged
	var prodErr error
	for g := range 4 {
		pr, err := cl.CreateScalableProducer(ctx, pulsarclient.ScalableProducerOptions{Topic: topic,
			ScalableOptions: pulsarclient.ScalableOptions{AdminURL: c.urls[g%3]}})
		if err != nil {
			t.Fatal(err)
		}
		defer pr.Close(ctx)
		pwg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k%d-%d", g, n%8)
				seq := n / 8
				if _, _, err := pr.Send(ctx, &pulsarclient.ProducerMessage{Key: key, Payload: []byte(key + ":" + strconv.Itoa(seq))}); err != nil {
					sentMu.Lock()
					prodErr = err
					sentMu.Unlock()
					return
				}
				sentMu.Lock()
				sent[key] = seq + 1
				sentMu.Unlock()
			}
		})
	}
	total := func() int {
		sentMu.Lock()
		defer sentMu.Unlock()
		n := 0
		for _, v := range sent {
			n += v
		}
		return n
	}
	waitSent := func(n int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for total() < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d messages sent (%v)", total(), prodErr)
			}
			time.Sleep(5 * time.Millisecond) // polling a condition, with a deadline
		}
	}
	layoutOf := func() layout.Layout {
		l, err := layout.Unmarshal(c.call(t, 0, "GET", p))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	waitSent(200)
	c.call(t, 2, "POST", p+"/split/0") // [0000-7fff] → 2, 3
	waitSent(400)
	c.call(t, 0, "POST", p+"/split/3?at=6000") // [4000-7fff] → [4000-5fff] 4, [6000-7fff] 5
	waitSent(600)
	consumers[1].Close(ctx) // c1 leaves: its segments go to c0
	c.call(t, 1, "POST", p+"/merge/4/5")
	waitSent(800)
	close(stop)
	pwg.Wait()
	if prodErr != nil {
		t.Fatalf("produce: %v", prodErr)
	}

	l := layoutOf()
	if merged, _ := l.Segment(6); len(l.Active()) != 3 || merged.State != layout.StateActive ||
		merged.Range != (layout.HashRange{Start: 0x4000, End: 0x7fff}) {
		t.Fatalf("layout after split, split, merge: %s", l.Tree())
	}
	want := total()
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n, bad := len(got), orderErr
		mu.Unlock()
		if bad != "" {
			t.Fatal(bad)
		}
		if n >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumed %d of %d messages; layout:\n%s", n, want, layoutOf().Tree())
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
	consumers[0].Close(ctx)
	cancel()
	cwg.Wait()
	mu.Lock()
	defer mu.Unlock()
	sentMu.Lock()
	defer sentMu.Unlock()
	for key, n := range sent {
		if len(seen[key]) < n {
			t.Errorf("key %s: %d sent, %d consumed", key, n, len(seen[key]))
		}
	}
	t.Logf("%d messages on %d keys; layout:\n%s", want, len(sent), l.Tree())
}
