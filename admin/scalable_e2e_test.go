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
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// scalableCluster is an embedded etcd, one bookie and n brokers, each with the admin API on
// its own httptest server.
type scalableCluster struct {
	brokers []*broker.Service
	urls    []string
}

func startScalableCluster(t *testing.T, n int, sc broker.ScalableConfig) *scalableCluster {
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
			ID: fmt.Sprintf("b%d", i+1), HTTPURL: srv.URL, Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, Logger: log, Scalable: sc})
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

func (c *scalableCluster) layout(t *testing.T, path string) layout.Layout {
	t.Helper()
	l, err := layout.Unmarshal(c.call(t, 0, "GET", path))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// scalableLoad runs producers on many keys and stream consumers of subscription s on a
// scalable topic, and checks that each key's messages are consumed in the order produced.
type scalableLoad struct {
	t     *testing.T
	c     *scalableCluster
	cl    *pulsarclient.Client
	topic string
	ctx   context.Context

	mu       sync.Mutex
	seen     map[string][]int // key → sequence numbers consumed for the first time, in order
	got      map[string]bool
	orderErr string
	sent     map[string]int // key → messages acknowledged to the producer
	prodErr  error

	stop      chan struct{}
	pwg, cwg  sync.WaitGroup
	consumers []*pulsarclient.ScalableConsumer
}

func newScalableLoad(t *testing.T, ctx context.Context, c *scalableCluster, topic string) *scalableLoad {
	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + c.brokers[0].Addr().String(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return &scalableLoad{t: t, c: c, cl: cl, topic: topic, ctx: ctx, seen: map[string][]int{}, got: map[string]bool{},
		sent: map[string]int{}, stop: make(chan struct{})}
}

// addConsumer starts stream consumer name (its admin calls go to broker i).
func (ld *scalableLoad) addConsumer(name string, i int) *pulsarclient.ScalableConsumer {
	sc, err := ld.cl.SubscribeStream(ld.ctx, pulsarclient.ScalableConsumerOptions{Topic: ld.topic, Subscription: "s", Name: name,
		ScalableOptions: pulsarclient.ScalableOptions{AdminURL: ld.c.urls[i%len(ld.c.urls)]}, PollWait: time.Second})
	if err != nil {
		ld.t.Fatal(err)
	}
	ld.consumers = append(ld.consumers, sc)
	ld.cwg.Go(func() {
		for {
			m, err := sc.Receive(ld.ctx)
			if err != nil {
				return
			}
			key, seqText, _ := strings.Cut(string(m.Payload), ":")
			seq, _ := strconv.Atoi(seqText)
			ld.mu.Lock()
			if !ld.got[string(m.Payload)] {
				ld.got[string(m.Payload)] = true
				if n := len(ld.seen[key]); seq != n && ld.orderErr == "" {
					ld.orderErr = fmt.Sprintf("key %s: got seq %d after %d messages (%v)", key, seq, n, ld.seen[key])
				}
				ld.seen[key] = append(ld.seen[key], seq)
			}
			ld.mu.Unlock()
			_ = sc.Ack(m) // after processing: a segment is drained only once its messages are
		}
	})
	return sc
}

// produce starts n producers, each sending its 8 keys' sequence numbers in turn, one at a
// time.
func (ld *scalableLoad) produce(n int) {
	for g := range n {
		pr, err := ld.cl.CreateScalableProducer(ld.ctx, pulsarclient.ScalableProducerOptions{Topic: ld.topic,
			ScalableOptions: pulsarclient.ScalableOptions{AdminURL: ld.c.urls[g%len(ld.c.urls)]}})
		if err != nil {
			ld.t.Fatal(err)
		}
		ld.pwg.Go(func() {
			defer pr.Close(context.Background())
			for i := 0; ; i++ {
				select {
				case <-ld.stop:
					return
				default:
				}
				key := fmt.Sprintf("k%d-%d", g, i%8)
				seq := i / 8
				_, _, err := pr.Send(ld.ctx, &pulsarclient.ProducerMessage{Key: key, Payload: []byte(key + ":" + strconv.Itoa(seq))})
				ld.mu.Lock()
				if err != nil {
					ld.prodErr = err
				} else {
					ld.sent[key] = seq + 1
				}
				ld.mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
}

func (ld *scalableLoad) total() int {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	n := 0
	for _, v := range ld.sent {
		n += v
	}
	return n
}

// waitSent waits until the producers got n messages acknowledged.
func (ld *scalableLoad) waitSent(n int) {
	ld.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for ld.total() < n {
		ld.mu.Lock()
		err := ld.prodErr
		ld.mu.Unlock()
		if err != nil || time.Now().After(deadline) {
			ld.t.Fatalf("only %d messages sent (%v)", ld.total(), err)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, with a deadline
	}
}

// finish stops the producers, waits until every acknowledged message is consumed and checks
// each key's order; it returns the number of messages.
func (ld *scalableLoad) finish(path string) int {
	t := ld.t
	t.Helper()
	close(ld.stop)
	ld.pwg.Wait()
	if ld.prodErr != nil {
		t.Fatalf("produce: %v", ld.prodErr)
	}
	want := ld.total()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ld.mu.Lock()
		n, bad := len(ld.got), ld.orderErr
		ld.mu.Unlock()
		if bad != "" {
			t.Fatal(bad)
		}
		if n >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumed %d of %d messages; layout:\n%s", n, want, ld.c.layout(t, path).Tree())
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
	for _, sc := range ld.consumers {
		sc.Close(context.Background())
	}
	ld.cwg.Wait()
	ld.mu.Lock()
	defer ld.mu.Unlock()
	for key, n := range ld.sent {
		if len(ld.seen[key]) != n {
			t.Errorf("key %s: %d sent, %d consumed", key, n, len(ld.seen[key]))
		}
	}
	return want
}

// TestScalableTopicEndToEnd: 3 brokers, producers on many keys and stream consumers (one
// leaves midway) on a scalable topic while the admin API splits, splits again and merges
// (each call to a different broker, redirected to the controller's leader): every
// acknowledged message is consumed and each key's messages arrive in the order produced.
func TestScalableTopicEndToEnd(t *testing.T) {
	c := startScalableCluster(t, 3, broker.ScalableConfig{TickInterval: 50 * time.Millisecond, Retention: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const p = "/admin/v2/scalable/public/default/orders"
	c.call(t, 1, "PUT", p+"?segments=2")
	c.call(t, 2, "PUT", p+"/subscription/s")
	ld := newScalableLoad(t, ctx, c, "topic://public/default/orders")
	ld.addConsumer("c0", 0)
	c1 := ld.addConsumer("c1", 1)
	ld.produce(4)

	ld.waitSent(200)
	c.call(t, 2, "POST", p+"/split/0") // [0000-7fff] → 2, 3
	ld.waitSent(400)
	c.call(t, 0, "POST", p+"/split/3?at=6000") // [4000-7fff] → [4000-5fff] 4, [6000-7fff] 5
	ld.waitSent(600)
	c1.Close(ctx) // c1 leaves: its segments go to c0
	c.call(t, 1, "POST", p+"/merge/4/5")
	ld.waitSent(800)
	n := ld.finish(p)

	l := c.layout(t, p)
	if merged, _ := l.Segment(6); len(l.Active()) != 3 || merged.State != layout.StateActive ||
		merged.Range != (layout.HashRange{Start: 0x4000, End: 0x7fff}) {
		t.Fatalf("layout after split, split, merge: %s", l.Tree())
	}
	t.Logf("%d messages; layout:\n%s", n, l.Tree())
}

// TestScalableTopicAutoScale: with the auto-scale policy on, three stream consumers make the
// controller split one segment into three (a subscription with more consumers than
// segments), and as two leave it merges the idle segments back, under load, keeping each
// key's order.
func TestScalableTopicAutoScale(t *testing.T) {
	pol := scalable.Policy{Enabled: true, MinSegments: 1, MaxSegments: 3, MaxDAGDepth: 10, SplitOnConsumers: true,
		SplitMsgRateIn: 1e9, SplitBytesRateIn: 1e12, SplitMsgRateOut: 1e9, SplitBytesRateOut: 1e12,
		MergeMsgRateIn: 1e8, MergeBytesRateIn: 1e11, MergeMsgRateOut: 1e8, MergeBytesRateOut: 1e11}
	c := startScalableCluster(t, 3, broker.ScalableConfig{TickInterval: 50 * time.Millisecond, Retention: 200 * time.Millisecond,
		Policy: pol, SampleInterval: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const p = "/admin/v2/scalable/public/default/auto"
	c.call(t, 0, "PUT", p)
	c.call(t, 1, "PUT", p+"/subscription/s")
	ld := newScalableLoad(t, ctx, c, "topic://public/default/auto")
	ld.produce(3)
	cons := []*pulsarclient.ScalableConsumer{ld.addConsumer("c0", 0), ld.addConsumer("c1", 1), ld.addConsumer("c2", 2)}
	waitActive := func(n int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for len(c.layout(t, p).Active()) != n {
			if time.Now().After(deadline) {
				t.Fatalf("never %d active segments:\n%s", n, c.layout(t, p).Tree())
			}
			time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
		}
	}
	waitActive(3)
	ld.waitSent(ld.total() + 100)
	cons[2].Close(ctx)
	cons[1].Close(ctx)
	waitActive(1)
	ld.waitSent(ld.total() + 100)
	n := ld.finish(p)
	t.Logf("%d messages; layout:\n%s", n, c.layout(t, p).Tree())
}
