package admin

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/pulsarclient"
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
	"github.com/magnetar-io/magnetar/scalable/scalabletest"
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

func (c *scalableCluster) call(t *testing.T, i int, method, path string) []byte {
	t.Helper()
	return scalabletest.Call(t, c.urls[i], method, path)
}

func (c *scalableCluster) layout(t *testing.T, path string) layout.Layout {
	t.Helper()
	return scalabletest.Layout(t, c.urls[0], path)
}

// metrics sums the brokers' magnetar_scalable_* counters (by name without the prefix).
func (c *scalableCluster) metrics(t *testing.T) map[string]float64 {
	out := map[string]float64{}
	for _, b := range c.brokers {
		mfs, err := b.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if name, ok := strings.CutPrefix(mf.GetName(), "magnetar_scalable_"); ok {
				out[name] += mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
	}
	return out
}

func (c *scalableCluster) load(t *testing.T, ctx context.Context, topic string) *scalabletest.Load {
	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + c.brokers[0].Addr().String(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return scalabletest.NewLoad(t, ctx, cl, topic, c.urls)
}

// TestScalableTopicEndToEnd: 3 brokers, producers on many keys and stream consumers (one
// joins and one leaves midway) on a scalable topic while the admin API splits, splits again and merges
// (each call to a different broker, redirected to the controller's leader): every
// acknowledged message is consumed and each key's messages arrive in the order produced.
func TestScalableTopicEndToEnd(t *testing.T) {
	c := startScalableCluster(t, 3, broker.ScalableConfig{TickInterval: 50 * time.Millisecond, Retention: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const p = "/admin/v2/scalable/public/default/orders"
	c.call(t, 1, "PUT", p+"?segments=2")
	c.call(t, 2, "PUT", p+"/subscription/s")
	ld := c.load(t, ctx, "topic://public/default/orders")
	ld.AddConsumer("c0", 0)
	c1 := ld.AddConsumer("c1", 1)
	ld.Produce(4)

	ld.WaitSent(200)
	c.call(t, 2, "POST", p+"/split/0") // [0000-7fff] → 2, 3
	ld.AddConsumer("c2", 2)            // c2 joins: the segments are dealt again
	ld.WaitSent(400)
	c.call(t, 0, "POST", p+"/split/3?at=6000") // [4000-7fff] → [4000-5fff] 4, [6000-7fff] 5
	ld.WaitSent(600)
	c1.Close(ctx) // c1 leaves: its segments go to c0
	c.call(t, 1, "POST", p+"/merge/4/5")
	ld.WaitSent(800)
	n := ld.Finish(func() string { return c.layout(t, p).Tree() + string(c.call(t, 0, "GET", p+"/stats")) })

	l := c.layout(t, p)
	if merged, _ := l.Segment(6); len(l.Active()) != 3 || merged.State != layout.StateActive ||
		merged.Range != (layout.HashRange{Start: 0x4000, End: 0x7fff}) {
		t.Fatalf("layout after split, split, merge: %s", l.Tree())
	}
	if m := c.metrics(t); m["splits_total"] != 2 || m["merges_total"] != 1 || m["assignment_changes_total"] < 3 ||
		m["prunes_total"] != float64(7-len(l.Segments)) {
		t.Errorf("metrics %v: want 2 splits, 1 merge, %d prunes and assignment changes", m, 7-len(l.Segments))
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
	ld := c.load(t, ctx, "topic://public/default/auto")
	ld.Produce(3)
	cons := []*pulsarclient.ScalableConsumer{ld.AddConsumer("c0", 0), ld.AddConsumer("c1", 1), ld.AddConsumer("c2", 2)}
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
	ld.WaitSent(ld.Total() + 100)
	cons[2].Close(ctx)
	cons[1].Close(ctx)
	waitActive(1)
	ld.WaitSent(ld.Total() + 100)
	n := ld.Finish(func() string { return c.layout(t, p).Tree() })
	t.Logf("%d messages; layout:\n%s", n, c.layout(t, p).Tree())
}

// TestScalableQueueConsumer: a queue consumer reads every segment, sealed and active, without
// order; an unkeyed producer spreads its messages over the active segments.
func TestScalableQueueConsumer(t *testing.T) {
	c := startScalableCluster(t, 1, broker.ScalableConfig{TickInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const topic, p = "topic://public/default/q", "/admin/v2/scalable/public/default/q"
	c.call(t, 0, "PUT", p+"?segments=2")
	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + c.brokers[0].Addr().String(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	opts := pulsarclient.ScalableOptions{AdminURL: c.urls[0]}
	var qc *pulsarclient.ScalableConsumer
	deadline := time.Now().Add(30 * time.Second)
	for qc == nil { // the subscription is created through the controller, which leads asynchronously
		if qc, err = cl.SubscribeQueue(ctx, pulsarclient.ScalableConsumerOptions{ScalableOptions: opts, Topic: topic,
			Subscription: "q", PollWait: 500 * time.Millisecond}); err != nil {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
		}
	}
	defer qc.Close(ctx)
	pr, err := cl.CreateScalableProducer(ctx, pulsarclient.ScalableProducerOptions{ScalableOptions: opts, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close(ctx)
	send := func(from, to int) map[string]bool {
		segs := map[string]bool{}
		for i := from; i < to; i++ {
			seg, _, err := pr.Send(ctx, &pulsarclient.ProducerMessage{Payload: []byte(strconv.Itoa(i))})
			if err != nil {
				t.Fatal(err)
			}
			segs[seg] = true
		}
		return segs
	}
	if segs := send(0, 50); len(segs) != 2 {
		t.Fatalf("unkeyed messages went to %v, want both segments", segs)
	}
	c.call(t, 0, "POST", p+"/split/0")
	send(50, 100)
	got := map[string]bool{}
	for len(got) < 100 {
		m, err := qc.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d of 100: %v", len(got), err)
		}
		got[string(m.Payload)] = true
		if err := qc.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	if segs := qc.Segments(); len(segs) != 4 {
		t.Fatalf("queue consumer attached to %v, want the 4 segments", segs)
	}
}

// TestScalableLayoutPushed: a split requested on one broker reaches a client connected to
// another through its DAG watch session within a deadline, with no request of the client's.
func TestScalableLayoutPushed(t *testing.T) {
	c := startScalableCluster(t, 3, broker.ScalableConfig{TickInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const topic, p = "topic://public/default/pushed", "/admin/v2/scalable/public/default/pushed"
	c.call(t, 1, "PUT", p+"?segments=1")
	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + c.brokers[0].Addr().String(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pr, err := cl.CreateScalableProducer(ctx, pulsarclient.ScalableProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close(ctx)
	for round, seg := range []string{"0", "1"} {
		before := pr.Layout()
		start := time.Now()
		c.call(t, 2, "POST", p+"/split/"+seg) // answered once the new layout is committed
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := pr.WaitLayout(wctx, before.Epoch)
		wcancel()
		if err != nil {
			t.Fatalf("split %d not pushed within 5 s: %v", round, err)
		}
		if len(l.Active()) != len(before.Active())+1 {
			t.Fatalf("layout after split %d: %+v", round, l)
		}
		t.Logf("split %d seen by the client %v after the request", round, time.Since(start))
	}
}

// TestScalableStreamSubscribeAnyBroker: three stream consumers, each connected to a
// different broker (so at least two subscribe through a broker that forwards to the
// controller's leader), share a 3-segment topic: each gets one segment, all different.
func TestScalableStreamSubscribeAnyBroker(t *testing.T) {
	c := startScalableCluster(t, 3, broker.ScalableConfig{TickInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const topic, p = "topic://public/default/anybroker", "/admin/v2/scalable/public/default/anybroker"
	c.call(t, 0, "PUT", p+"?segments=3")
	c.call(t, 0, "PUT", p+"/subscription/s")
	var consumers []*pulsarclient.ScalableConsumer
	for i := range 3 {
		cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + c.brokers[i].Addr().String(), Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		sc, err := cl.SubscribeStream(ctx, pulsarclient.ScalableConsumerOptions{ScalableOptions: pulsarclient.ScalableOptions{AdminURL: c.urls[i]},
			Topic: topic, Subscription: "s", Name: fmt.Sprintf("c%d", i)})
		if err != nil {
			t.Fatalf("consumer %d: %v", i, err)
		}
		defer sc.Close(ctx)
		consumers = append(consumers, sc)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		seen := map[layout.SegmentID]int{}
		ok := true
		for _, sc := range consumers {
			segs := sc.Segments()
			ok = ok && len(segs) == 1
			for _, id := range segs {
				seen[id]++
			}
		}
		if ok && len(seen) == 3 {
			return
		}
		if time.Now().After(deadline) {
			for i, sc := range consumers {
				t.Logf("consumer %d: %v", i, sc.Segments())
			}
			t.Fatal("the three consumers did not get one segment each")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
	}
}

// TestScalableTopicRateSplit: with the auto-scale policy splitting on message rate only, a
// load above the threshold on a one-segment topic makes the controller split it (the rates
// sampled from the real segment topics' statistics), then split a child, under load, keeping
// each key's order; consumers far below the segments count rule out a consumer-count split.
func TestScalableTopicRateSplit(t *testing.T) {
	pol := scalable.Policy{Enabled: true, MinSegments: 1, MaxSegments: 3, MaxDAGDepth: 10,
		SplitMsgRateIn: 20, SplitBytesRateIn: 1e12, SplitMsgRateOut: 1e9, SplitBytesRateOut: 1e12}
	c := startScalableCluster(t, 2, broker.ScalableConfig{TickInterval: 50 * time.Millisecond, Retention: 200 * time.Millisecond,
		Policy: pol, SampleInterval: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const p = "/admin/v2/scalable/public/default/rate"
	c.call(t, 0, "PUT", p)
	c.call(t, 1, "PUT", p+"/subscription/s")
	ld := c.load(t, ctx, "topic://public/default/rate")
	ld.AddConsumer("c0", 0)
	if l := c.layout(t, p); len(l.Segments) != 1 {
		t.Fatalf("layout before any load: %s", l.Tree())
	}
	ld.Produce(3)
	deadline := time.Now().Add(time.Minute)
	for len(c.layout(t, p).Active()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("no rate-triggered splits up to 3 segments:\n%s%s", c.layout(t, p).Tree(), c.call(t, 0, "GET", p+"/stats"))
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
	}
	ld.WaitSent(ld.Total() + 200)
	n := ld.Finish(func() string { return c.layout(t, p).Tree() })
	l := c.layout(t, p)
	if m := c.metrics(t); m["splits_total"] != 2 || m["merges_total"] != 0 {
		t.Errorf("metrics %v: want 2 splits and no merge", m)
	}
	t.Logf("%d messages; layout:\n%s", n, l.Tree())
}

// TestScalableTopicPipelinedSplit: producers pipelining up to 64 messages each (SendAsync)
// on many keys while the admin API splits, splits again and merges: the sealed segments'
// in-flight messages fail and are re-sent to their children, and every acknowledged
// message is consumed with each key's messages in the order produced.
func TestScalableTopicPipelinedSplit(t *testing.T) {
	c := startScalableCluster(t, 2, broker.ScalableConfig{TickInterval: 50 * time.Millisecond, Retention: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const p = "/admin/v2/scalable/public/default/piped"
	c.call(t, 0, "PUT", p+"?segments=2")
	c.call(t, 1, "PUT", p+"/subscription/s")
	ld := c.load(t, ctx, "topic://public/default/piped")
	ld.AddConsumer("c0", 0)
	ld.AddConsumer("c1", 1)
	ld.ProducePipelined(3, 64)
	ld.WaitSent(2000)
	c.call(t, 1, "POST", p+"/split/0")
	ld.WaitSent(ld.Total() + 2000)
	c.call(t, 0, "POST", p+"/split/1")
	ld.WaitSent(ld.Total() + 2000)
	c.call(t, 1, "POST", p+"/merge/2/3")
	ld.WaitSent(ld.Total() + 2000)
	n := ld.Finish(func() string { return c.layout(t, p).Tree() })
	if m := c.metrics(t); m["splits_total"] != 2 || m["merges_total"] != 1 {
		t.Errorf("metrics %v: want 2 splits and 1 merge", m)
	}
	t.Logf("%d messages; layout:\n%s", n, c.layout(t, p).Tree())
}
