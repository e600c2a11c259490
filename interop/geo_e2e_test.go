package interop

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/api"
)

// Geo-replication end to end with pulsar-client-go (the harness is geo_test.go): full
// meshes of two and three clusters, a kill -9 of the replicating broker under load, and
// the link between two clusters cut under load.

// TestGeoE2ETwoClusters: two clusters (each its own metadata and bookie), namespace geo/ns
// replicated between them; a producer in each cluster (one batching, one not) and a
// consumer in each; both consumers receive every message of both producers exactly once in
// per-producer order, and both clusters' logs hold each exactly once.
func TestGeoE2ETwoClusters(t *testing.T) {
	testGeoMesh(t, "east", "west")
}

// TestGeoE2EThreeClusters: the same with three clusters in a full mesh (each replicates
// its own producers' messages to both others; a replicated message is never forwarded).
func TestGeoE2EThreeClusters(t *testing.T) {
	testGeoMesh(t, "red", "green", "blue")
}

func testGeoMesh(t *testing.T, names ...string) {
	var sites []*geoSite
	for _, n := range names {
		sites = append(sites, geoInProcess(t, n, nil))
	}
	geoConnect(t, sites...)
	topic := "persistent://" + geoNS + "/" + sanitize(t.Name())
	const n = 500 // messages per producer
	clients := map[*geoSite]pulsar.Client{}
	sinks := map[*geoSite]*geoSink{}
	for _, s := range sites {
		clients[s] = s.client()
		sinks[s] = geoConsume(t, s, clients[s], topic, "sub", nil)
	}
	want := map[string]int{}
	var pubs []*geoPublisher
	for i, s := range sites {
		p, err := clients[s].CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "from-" + s.name,
			DisableBatching: i%2 == 1, BatchingMaxPublishDelay: 2 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pubs = append(pubs, newGeoPublisher(p, "from-"+s.name, 100))
		want["from-"+s.name] = n
	}
	ctx := ctxT(t, 3*time.Minute)
	done := make(chan struct{}, len(pubs))
	for _, g := range pubs {
		go func() { g.run(ctx, 0, n); done <- struct{}{} }()
	}
	for range pubs {
		<-done
	}
	for _, g := range pubs {
		if err := g.drain(t, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range sites {
		sinks[s].wait(t, len(sites)*n, 2*time.Minute, sites...)
	}
	geoWaitDrained(t, time.Minute, topic, sites...)
	for _, s := range sites {
		if err := sinks[s].check(want); err != nil {
			t.Errorf("%s's consumer: %v", s.name, err)
		}
		if err := geoReadLog(t, s, clients[s], topic, want); err != nil {
			t.Error(err)
		}
	}
}

// TestGeoKill9ReplicatingBroker: two standalone processes, east and west, each with its own
// etcd and bookie; a pulsar-client-go producer (deduplication on, no send timeout)
// publishes 1 KiB messages to east at 5,000 a second; once west has received some, east's
// process — its replicating broker — is killed with SIGKILL and restarted on the same data.
// The producer's client reconnects to it and re-sends what it had pending; the restarted
// replicator resumes from its cursor's persisted position and re-sends what west may
// already have. West ends with every message exactly once, in order: no duplicate, no gap
// (and so does east). MAGNETAR_GEO_KILL9_N sets the message count (default 15,000: 3 s of
// publishing).
func TestGeoKill9ReplicatingBroker(t *testing.T) {
	t0 := time.Now()
	east, west := geoStandalone(t, "east"), geoStandalone(t, "west")
	geoConnect(t, east, west)
	t.Logf("two standalones up and connected in %v", time.Since(t0))
	topic := "persistent://" + geoNS + "/kill9"
	n := envInt("MAGNETAR_GEO_KILL9_N", 15000)
	const rate = 5000
	sink := geoConsume(t, west, west.client(), topic, "audit", nil)
	p, err := east.client().CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "kill9",
		SendTimeout: -1, BatchingMaxPublishDelay: 5 * time.Millisecond, MaxPendingMessages: 10000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	g := newGeoPublisher(p, "kill9", 1024)
	ctx := ctxT(t, 5*time.Minute)
	pubDone := make(chan struct{})
	start := time.Now()
	go func() { defer close(pubDone); g.run(ctx, rate, n) }()

	// Kill east once replication is flowing, a third into the stream.
	sink.wait(t, n/3, 2*time.Minute)
	acked := g.acked.Load()
	east.proc.Kill()
	killedAt := time.Since(start)
	east.proc.Restart()
	east.waitUp(2 * time.Minute)
	restarted := time.Since(start)

	<-pubDone
	if err := g.drain(t, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	published := time.Since(start)
	sink.wait(t, n, 3*time.Minute, east, west)
	geoWaitDrained(t, 2*time.Minute, topic, east, west)
	t.Logf("drained at %v", time.Since(start))
	want := map[string]int{"kill9": n}
	if err := sink.check(want); err != nil {
		t.Errorf("west's consumer: %v", err)
	}
	for _, s := range []*geoSite{west, east} {
		if err := geoReadLog(t, s, s.client(), topic, want); err != nil {
			t.Error(err)
		}
		t.Logf("%s's log read at %v", s.name, time.Since(start))
	}
	t.Logf("%d messages at %d/s: east killed at %v (%d receipts, west had %d), up again at %v; all published at %v, all in west at %v",
		n, rate, killedAt.Round(time.Millisecond), acked, n/3, restarted.Round(time.Millisecond),
		published.Round(time.Millisecond), time.Duration(sink.lastAt.Load()-start.UnixNano()).Round(time.Millisecond))
}

// TestGeoLinkCut: east replicates to west through a TCP link the test controls (west's
// cluster record in east names the link and west's advertised listener "geo", whose URL
// is the link's, so the replicator's lookups keep it on the link while west's own clients
// connect directly). A producer publishes to east at 1,000 messages a second; the link is
// cut — new connections refused, open ones dropped — for 5 s (60 s with MAGNETAR_GEO_LONG=1)
// while it goes on. The replication backlog in east's topic stats grows and the replicator
// reports itself disconnected; after the link heals replication catches up by itself, and
// west has every message exactly once, in order. The catch-up rate is logged.
func TestGeoLinkCut(t *testing.T) {
	cutFor := 5 * time.Second
	if os.Getenv("MAGNETAR_GEO_LONG") != "" {
		cutFor = 60 * time.Second
	}
	const rate = 1000
	link := newGeoLink(t)
	west := geoInProcess(t, "west", func(c *broker.Config) {
		c.AdvertisedListeners = []broker.Listener{
			{Name: "internal", URLs: api.ListenerURLs{ServiceURL: "pulsar://" + c.Listen}},
			{Name: "geo", URLs: api.ListenerURLs{ServiceURL: "pulsar://" + link.addr()}},
		}
	})
	link.setBackend(strings.TrimPrefix(west.url, "pulsar://"))
	west.record.BrokerServiceURL, west.record.ListenerName = "pulsar://"+link.addr(), "geo"
	east := geoInProcess(t, "east", nil)
	geoConnect(t, east, west)
	topic := "persistent://" + geoNS + "/cut"

	sink := geoConsume(t, west, west.client(), topic, "audit", nil)
	p, err := east.client().CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "cut",
		BatchingMaxPublishDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	g := newGeoPublisher(p, "cut", 1024)
	pctx, stop := context.WithCancel(ctxT(t, 10*time.Minute))
	defer stop()
	pubDone := make(chan struct{})
	go func() { defer close(pubDone); g.run(pctx, rate, 0) }()

	sink.wait(t, rate, time.Minute) // replication flows
	if link.accepted.Load() == 0 {
		t.Fatal("nothing went through the link: the replicator reaches west another way")
	}
	link.cut()
	cutAt := time.Now()
	// The backlog grows while the link is down, and east says the replicator is not
	// connected.
	var first, last int64 = -1, -1
	var connected bool
	for time.Since(cutAt) < cutFor {
		if rs, err := east.replication(topic); err == nil {
			r := rs["west"]
			if first < 0 && time.Since(cutAt) > time.Second {
				first = r.ReplicationBacklog
			}
			last, connected = r.ReplicationBacklog, r.Connected
		}
		time.Sleep(250 * time.Millisecond) // polled: a statistic
	}
	inWestAtCut := sink.count.Load()
	stop()
	<-pubDone
	if err := g.drain(t, time.Minute); err != nil {
		t.Fatal(err)
	}
	rs, err := east.replication(topic)
	if err != nil {
		t.Fatal(err)
	}
	backlog := rs["west"].ReplicationBacklog
	t.Logf("cut for %v: replication backlog %d a second in, %d at the end (connected %v); %d sent, west has %d",
		cutFor, first, backlog, rs["west"].Connected, g.sent, inWestAtCut)
	if first < 0 || last <= first || backlog < last || connected || rs["west"].Connected {
		t.Fatalf("the backlog did not grow while the link was cut, or the replicator said it was connected: "+
			"%d after a second, %d at the end (connected %v, then %v)", first, last, connected, rs["west"].Connected)
	}
	link.heal()
	healAt := time.Now()
	// The catch-up: from the first message that reaches west after the heal (the
	// replicator's reconnect backoff is before it) to the last.
	select {
	case <-sink.reached(int(inWestAtCut) + 1):
	case <-time.After(3 * time.Minute):
		t.Fatalf("nothing reached west in 3 minutes after the heal")
	}
	reconnect := time.Since(healAt)
	resumed := time.Now()
	sink.wait(t, g.sent, 3*time.Minute, east, west)
	catchUp := time.Duration(sink.lastAt.Load() - resumed.UnixNano())
	geoWaitDrained(t, time.Minute, topic, east, west)
	want := map[string]int{"cut": g.sent}
	if err := sink.check(want); err != nil {
		t.Errorf("west's consumer: %v", err)
	}
	if err := geoReadLog(t, west, west.client(), topic, want); err != nil {
		t.Error(err)
	}
	caught := int64(g.sent) - inWestAtCut
	msg := fmt.Sprintf("link cut %v at %d msg/s (1 KiB): backlog %d at the heal; first message in west %v after the heal, then %d messages in %v (catch-up %.0f msg/s); load %s",
		cutFor, rate, backlog, reconnect.Round(time.Millisecond), caught, catchUp.Round(time.Millisecond),
		float64(caught)/max(catchUp, time.Millisecond).Seconds(), loadAvg())
	t.Log(msg)
	if os.Getenv("MAGNETAR_GEO_LONG") != "" {
		fmt.Println("GEO " + msg)
	}
}
