package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/pulsarclient"
	"github.com/magnetar-io/magnetar/scalable/layout"
	"github.com/magnetar-io/magnetar/scalable/scalabletest"
)

// TestScalableSeekReblocksDescendants: a topic of one segment is split and the children's
// messages consumed; then the subscription is rewound on the (sealed) parent to the
// earliest through the admin API. The parent's backlog is replayed while the children leave
// the stream consumer's assignment: messages produced to the children after the seek do
// not arrive (the children have no consumer and keep them as backlog) until the replayed
// parent is acknowledged; then they do, and every key's messages received after the seek
// are in the order produced.
func TestScalableSeekReblocksDescendants(t *testing.T) { testScalableSeek(t, false) }

// TestScalableSeekSurvivesLeaderFailover: as TestScalableSeekReblocksDescendants, and while
// the parent's replay is unacknowledged the broker leading the controller closes. The new
// leader starts with no drained marks and finds the parent's backlog (Check): the children
// stay withheld until the replay is acknowledged, and the order after the seek holds (the
// drained marks are recomputed from the cursors, not persisted).
func TestScalableSeekSurvivesLeaderFailover(t *testing.T) { testScalableSeek(t, true) }

// leaderOf returns the index of the broker leading the controller of the topic at p, asking
// for a consumer's assignment without following redirects: the leader answers 404 (not
// registered), the others 307 to it.
func (c *scalableCluster) leaderOf(t *testing.T, p string) int {
	t.Helper()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	deadline := time.Now().Add(30 * time.Second)
	for {
		for i, u := range c.urls {
			resp, err := hc.Get(u + p + "/subscription/s/consumers/probe/assignment?wait=200")
			if err != nil {
				continue
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusNotFound {
				return i
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no broker leads the controller")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
	}
}

func testScalableSeek(t *testing.T, failover bool) {
	n := 2
	if failover {
		n = 3
	}
	c := startScalableCluster(t, n, broker.ScalableConfig{TickInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, p = "topic://public/default/seek", "/admin/v2/scalable/public/default/seek"
	c.call(t, 0, "PUT", p)
	c.call(t, 1, "PUT", p+"/subscription/s")
	leader, via := -1, 1 // via: the broker the client talks to (never the one closed)
	if failover {
		leader = c.leaderOf(t, p)
		via = (leader + 1) % n
	}
	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + c.brokers[via].Addr().String(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	opts := pulsarclient.ScalableOptions{AdminURL: c.urls[via]}
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
		if err := json.Unmarshal(c.call(t, via, "GET", path), &ts); err != nil {
			t.Fatal(err)
		}
		return ts.Subscriptions["s"]
	}

	produce(0) // seq 0–9 of each key, on segment 0
	receive(keys*per, true)
	c.call(t, via, "POST", p+"/split/0")
	produce(1) // seq 10–19, on the children 1 and 2
	receive(keys*per, true)
	l := scalabletest.Layout(t, c.urls[via], p)
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

	c.call(t, via, "POST", p+"/subscription/s/seek?segment=0&earliest")
	produce(2) // seq 20–29, on the children, after the seek
	replay := receive(keys*per, false)
	parentName := layout.Topic{Tenant: "public", Namespace: "default", Name: "seek"}.SegmentName(parent)
	for _, g := range replay {
		if g.received.Topic != parentName {
			t.Fatalf("after the seek, %s:%d arrived from %s before the parent's replay was acknowledged", g.key, g.seq, g.received.Topic)
		}
	}
	if failover {
		if err := c.brokers[leader].Close(); err != nil {
			t.Fatal(err)
		}
		c.urls = slices.Delete(slices.Clone(c.urls), leader, leader+1) // leaderOf asks the others
		if via > leader {
			via--
		}
		c.brokers = slices.Delete(slices.Clone(c.brokers), leader, leader+1)
		next := c.leaderOf(t, p)
		t.Logf("broker leading the controller closed; the new leader is the %d-th remaining", next)
		// The consumer re-registers with the new leader, which assigns only the parent.
		deadline := time.Now().Add(30 * time.Second)
		for segs := sc.Segments(); len(segs) != 1 || segs[0] != parent.ID || !registered(c, via, p); segs = sc.Segments() {
			if time.Now().After(deadline) {
				t.Fatalf("after the failover the consumer holds %v", segs)
			}
			time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
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
	after := replay
	seen := map[string]bool{}
	for len(seen) < keys*per { // every round-2 message, and whatever the parent redelivers
		for _, g := range receive(1, true) {
			after = append(after, g)
			if g.seq >= 2*per {
				seen[string(g.received.Payload)] = true
			}
		}
	}
	// Per key, the messages received after the seek for the first time (a failover may
	// redeliver the unacknowledged replay: at least once) are in the order produced: the
	// parent's replay 0–9, then the children's 20–29 (10–19 were acknowledged before).
	first := map[string]bool{}
	order := map[string][]int{}
	for _, g := range after {
		if first[string(g.received.Payload)] {
			continue
		}
		first[string(g.received.Payload)] = true
		if o := order[g.key]; len(o) > 0 && g.seq < o[len(o)-1] {
			t.Fatalf("key %s: seq %d after %v", g.key, g.seq, o)
		}
		order[g.key] = append(order[g.key], g.seq)
	}
	for k := range keys {
		key := "k" + strconv.Itoa(k)
		if o := order[key]; len(o) < 2*per || o[0] != 0 || o[per-1] != per-1 || o[len(o)-1] != 3*per-1 {
			t.Errorf("key %s after the seek: %v, want 0–%d then up to %d", key, o, per-1, 3*per-1)
		}
	}
	// A seek of a segment that is not in the layout, or malformed, is refused.
	for _, q := range []string{"segment=99&earliest", "segment=x&earliest", "segment=0", "segment=0&earliest&ledger=1&entry=0"} {
		if code := c.status(t, via, "POST", p+"/subscription/s/seek?"+q); code/100 != 4 {
			t.Errorf("seek ?%s: %d, want 4xx", q, code)
		}
	}
	t.Logf("layout:\n%s", scalabletest.Layout(t, c.urls[via], p).Tree())
}

// registered reports whether the controller's leader knows consumer c0 (its assignment
// answers, following redirects from broker i).
func registered(c *scalableCluster, i int, p string) bool {
	resp, err := http.Get(c.urls[i] + p + "/subscription/s/consumers/c0/assignment?wait=200")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
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
