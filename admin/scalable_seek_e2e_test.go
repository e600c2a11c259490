package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/pulsarclient"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// TestScalableSeekReblocksDescendants: a topic of one segment is split and the children's
// messages consumed; then the subscription is rewound on the (sealed) parent to the
// earliest through the admin API. The parent's backlog is replayed while the children leave
// the stream consumer's assignment: messages produced to the children after the seek do
// not arrive (the children have no consumer and keep them as backlog) until the replayed
// parent is acknowledged; then they do, and every key's messages received after the seek
// are in the order produced.
func TestScalableSeekReblocksDescendants(t *testing.T) {
	c := startScalableCluster(t, 2, broker.ScalableConfig{TickInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, p = "topic://public/default/seek", "/admin/v2/scalable/public/default/seek"
	c.call(t, 0, "PUT", p)
	c.call(t, 1, "PUT", p+"/subscription/s")
	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + c.brokers[0].Addr().String(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	opts := pulsarclient.ScalableOptions{AdminURL: c.urls[1]}
	sc, err := cl.SubscribeStream(ctx, pulsarclient.ScalableConsumerOptions{ScalableOptions: opts, Topic: topic,
		Subscription: "s", Name: "c0", PollWait: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close(context.Background())
	pr, err := cl.CreateScalableProducer(ctx, pulsarclient.ScalableProducerOptions{ScalableOptions: opts, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close(context.Background())

	const keys, per = 8, 10 // each round: per messages of each key
	produce := func(round int) {
		t.Helper()
		for i := range per {
			for k := range keys {
				key := "k" + strconv.Itoa(k)
				if _, _, err := pr.Send(ctx, &pulsarclient.ProducerMessage{Key: key,
					Payload: []byte(key + ":" + strconv.Itoa(round*per+i))}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	type got struct {
		key      string
		seq      int
		received *pulsarclient.Message
	}
	receive := func(n int, ack bool) []got {
		t.Helper()
		var out []got
		for len(out) < n {
			m, err := sc.Receive(ctx)
			if err != nil {
				t.Fatalf("received %d of %d: %v", len(out), n, err)
			}
			key, seq, _ := strings.Cut(string(m.Payload), ":")
			s, _ := strconv.Atoi(seq)
			out = append(out, got{key, s, m})
			if ack {
				if err := sc.Ack(m); err != nil {
					t.Fatal(err)
				}
			}
		}
		return out
	}
	segStats := func(seg layout.Segment) broker.SubscriptionStats {
		t.Helper()
		path := p + "/segments/" + seg.Descriptor() + "/stats"
		var ts broker.TopicStats
		if err := json.Unmarshal(c.call(t, 0, "GET", path), &ts); err != nil {
			t.Fatal(err)
		}
		return ts.Subscriptions["s"]
	}

	produce(0) // seq 0–9 of each key, on segment 0
	receive(keys*per, true)
	c.call(t, 0, "POST", p+"/split/0")
	produce(1) // seq 10–19, on the children 1 and 2
	receive(keys*per, true)
	l := c.layout(t, p)
	parent, _ := l.Segment(0)
	children := l.Active()
	waitDrained := func(seg layout.Segment) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for st := segStats(seg); st.MsgBacklog != 0; st = segStats(seg) {
			if time.Now().After(deadline) {
				t.Fatalf("segment %d keeps a backlog of %d", seg.ID, st.MsgBacklog)
			}
			time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
		}
	}
	for _, ch := range children {
		waitDrained(ch) // the acknowledgements reached the brokers
	}

	c.call(t, 1, "POST", p+"/subscription/s/seek?segment=0&earliest")
	produce(2) // seq 20–29, on the children, after the seek
	replay := receive(keys*per, false)
	parentName := layout.Topic{Tenant: "public", Namespace: "default", Name: "seek"}.SegmentName(parent)
	for _, g := range replay {
		if g.received.Topic != parentName {
			t.Fatalf("after the seek, %s:%d arrived from %s before the parent's replay was acknowledged", g.key, g.seq, g.received.Topic)
		}
	}
	// The children hold the round-2 messages as backlog and have no consumer meanwhile.
	for _, ch := range children {
		if st := segStats(ch); len(st.Consumers) != 0 || st.MsgBacklog == 0 {
			t.Fatalf("child %d while the parent replays: %d consumers, backlog %d; want none and a backlog", ch.ID, len(st.Consumers), st.MsgBacklog)
		}
	}
	if segs := sc.Segments(); len(segs) != 1 || segs[0] != parent.ID {
		t.Fatalf("attached %v while the parent replays, want only segment %d", segs, parent.ID)
	}
	for _, g := range replay {
		if err := sc.Ack(g.received); err != nil {
			t.Fatal(err)
		}
	}
	after := append(replay, receive(keys*per, true)...)
	last := map[string]int{}
	for _, g := range after {
		if prev, ok := last[g.key]; ok && g.seq < prev {
			t.Fatalf("key %s: seq %d after %d", g.key, g.seq, prev)
		}
		last[g.key] = g.seq
	}
	for k := range keys {
		if key := "k" + strconv.Itoa(k); last[key] != 3*per-1 {
			t.Errorf("key %s: last seq %d, want %d", key, last[key], 3*per-1)
		}
	}
	// A seek of a segment that is not in the layout, or malformed, is refused.
	for _, q := range []string{"segment=99&earliest", "segment=x&earliest", "segment=0", "segment=0&earliest&ledger=1&entry=0"} {
		if code := c.status(t, 1, "POST", p+"/subscription/s/seek?"+q); code/100 != 4 {
			t.Errorf("seek ?%s: %d, want 4xx", q, code)
		}
	}
	t.Logf("layout:\n%s", c.layout(t, p).Tree())
}

// status returns the status of an admin call (following redirects).
func (c *scalableCluster) status(t *testing.T, i int, method, path string) int {
	t.Helper()
	req, _ := http.NewRequest(method, c.urls[i]+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
