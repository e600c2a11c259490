package broker_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/replhost"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

// geoPair starts two clusters, east and west, each one broker on its own embedded etcd and
// its own storage; each holds both cluster records, a tenant allowed on both and namespace
// geo/ns replicated between them.
func geoPair(t *testing.T) (east, west *broker.Service) {
	t.Helper()
	east, west, _ = geoPairStores(t)
	return east, west
}

// geoPairStores is geoPair, with east's storage; opts change both brokers' configuration.
func geoPairStores(t *testing.T, opts ...func(*broker.Config)) (east, west *broker.Service, eastLogs *topictest.Store) {
	t.Helper()
	g := newGeoClusters(t, opts...)
	return g.east, g.west, g.eastLogs
}

// geoClusters is the two clusters of geoPair, with their admin APIs (the cluster
// records' serviceUrl) and what restarting east's broker needs.
type geoClusters struct {
	east, west         *broker.Service
	eastHTTP, westHTTP *httptest.Server // the admin API of each cluster
	eastLogs           *topictest.Store // east's storage
	eastMeta           metadata.Store   // east's metadata store
	opts               []func(*broker.Config)
	eastP, westP       atomic.Pointer[broker.Service]
}

func newGeoClusters(t *testing.T, opts ...func(*broker.Config)) *geoClusters {
	t.Helper()
	g := &geoClusters{eastLogs: topictest.NewStore(), opts: opts}
	var auths atomic.Int64
	g.eastHTTP, g.westHTTP = adminServer(t, &g.eastP, &auths), adminServer(t, &g.westP, &auths)
	eps := metadatatest.Embedded(t)
	g.eastMeta = metadatatest.OpenStore(t, eps, metadatatest.RandomNamespace())
	g.east = g.start(t, "east", g.eastMeta, g.eastLogs)
	g.west = g.start(t, "west", metadatatest.OpenStore(t, metadatatest.Embedded(t), metadatatest.RandomNamespace()), topictest.NewStore())
	g.eastP.Store(g.east)
	g.westP.Store(g.west)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adminURLs := map[string]string{"east": g.eastHTTP.URL, "west": g.westHTTP.URL}
	for _, s := range []*broker.Service{g.east, g.west} {
		for name, b := range map[string]*broker.Service{"east": g.east, "west": g.west} {
			if err := s.CreateCluster(ctx, name, broker.ClusterData{ServiceURL: adminURLs[name], BrokerServiceURL: "pulsar://" + b.Addr().String()}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.CreateTenant(ctx, "geo", broker.TenantInfo{AllowedClusters: []string{"east", "west"}}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateNamespace(ctx, "geo/ns", broker.NamespacePolicies{ReplicationClusters: []string{"east", "west"}}); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func (g *geoClusters) start(t *testing.T, cluster string, meta metadata.Store, logs *topictest.Store) *broker.Service {
	t.Helper()
	return startServiceWith(t, meta, logs, cluster+"-1", func(c *broker.Config) {
		c.Cluster = cluster
		for _, o := range g.opts {
			o(c)
		}
	})
}

// restartEast closes east's broker and starts another on the same metadata and storage
// (and the same admin URL).
func (g *geoClusters) restartEast(t *testing.T) {
	t.Helper()
	if err := g.east.Close(); err != nil {
		t.Fatal(err)
	}
	g.east = g.start(t, "east", g.eastMeta, g.eastLogs)
	g.eastP.Store(g.east)
	// The new broker listens elsewhere: both clusters' records of east say so.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range []*broker.Service{g.east, g.west} {
		if err := s.UpdateCluster(ctx, "east", broker.ClusterData{ServiceURL: g.eastHTTP.URL,
			BrokerServiceURL: "pulsar://" + g.east.Addr().String()}); err != nil {
			t.Fatal(err)
		}
	}
}

func client(t *testing.T, s *broker.Service) *pulsarclient.Client {
	t.Helper()
	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + s.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// TestGeoReplication: messages produced in east arrive in west exactly once and in order,
// also when east's topic is unloaded in the middle of the stream (its replicator stops
// and, when the topic loads again, restarts from its cursor; west's deduplication on the
// original producer's name and sequence ids drops what it already has), and nothing
// replicated into west goes back to east. East's topic stats show the replicator.
func TestGeoReplication(t *testing.T) {
	east, west := geoPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, n = "persistent://geo/ns/orders", 400

	cons, err := client(t, west).Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "s",
		InitialPosition: pulsarclient.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := client(t, east).CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: topic, Name: "orders-producer", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if i == n/2 {
			if err := prod.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := east.Unload(ctx, topic); err != nil {
				t.Fatalf("unload: %v", err)
			}
		}
		if err := prod.SendAsync(ctx, &pulsarclient.ProducerMessage{Payload: []byte(strconv.Itoa(i))}, func(_ pulsarclient.MessageID, err error) {
			if err != nil {
				t.Errorf("send %d: %v", i, err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if got := string(m.Payload); got != strconv.Itoa(i) {
			t.Fatalf("message %d in west is %q: replication lost, duplicated or reordered", i, got)
		}
		if m.ProducerName != "orders-producer" {
			t.Fatalf("message %d in west has producer %q, want the original's", i, m.ProducerName)
		}
		_ = cons.Ack(m)
	}
	// East's replicator has nothing left, and west stored nothing more.
	waitFor(ctx, t, "east's replication backlog to drain", func() error {
		st, err := east.TopicStats(ctx, topic)
		if err != nil {
			return err
		}
		rs, ok := st.Replication["west"].(replhost.ReplicatorStats)
		if !ok {
			return fmt.Errorf("no replication stats for west: %v", st.Replication)
		}
		if rs.ReplicationBacklog != 0 || !rs.Connected {
			return fmt.Errorf("replication to west: backlog %d connected %v", rs.ReplicationBacklog, rs.Connected)
		}
		return nil
	})
	// Every message received is acknowledged: once the acknowledgements are in, west's
	// subscription has no backlog, so west stored nothing beyond the n received.
	waitFor(ctx, t, "west's subscription to have no backlog", func() error {
		st, err := west.TopicStats(ctx, topic)
		if err != nil {
			return err
		}
		if _, ok := st.Subscriptions["pulsar.repl.east"]; ok {
			t.Fatalf("a replication cursor is listed as a subscription: %v", st.Subscriptions)
		}
		if b := st.Subscriptions["s"].MsgBacklog; b != 0 {
			return fmt.Errorf("west's subscription has %d entries more than the %d received", b, n)
		}
		return nil
	})
	// Nothing came back to east: its topic holds the n messages only.
	ec, err := client(t, east).Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "check",
		InitialPosition: pulsarclient.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "east's check subscription", func() error {
		st, err := east.TopicStats(ctx, topic)
		if err != nil {
			return err
		}
		if b := st.Subscriptions["check"].MsgBacklog; b != n {
			return fmt.Errorf("east's topic holds %d messages, want %d", b, n)
		}
		return nil
	})
	_ = ec

	// West removed from the namespace's clusters: east's replicator stops and its cursor
	// is deleted. Added again: a new cursor at the earliest entry re-sends all n, and west's
	// deduplication (on the original producer's name and sequence ids) stores none again.
	if err := east.SetNamespaceReplicationClusters(ctx, "geo/ns", []string{"east"}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the replication cursor to be deleted", func() error {
		is, err := east.InternalStats(ctx, topic)
		if err != nil {
			return err
		}
		if _, ok := is.Cursors["pulsar.repl.west"]; ok {
			return fmt.Errorf("east still has cursor pulsar.repl.west: %v", is.Cursors)
		}
		return nil
	})
	if err := east.SetNamespaceReplicationClusters(ctx, "geo/ns", []string{"east", "west"}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "east to replicate everything again", func() error {
		st, err := east.TopicStats(ctx, topic)
		if err != nil {
			return err
		}
		rs, ok := st.Replication["west"].(replhost.ReplicatorStats)
		if !ok || rs.ReplicationBacklog != 0 || !rs.Connected {
			return fmt.Errorf("replication to west: %+v", st.Replication["west"])
		}
		return nil
	})
	// Nothing stored again: west's consumer, still subscribed, would hold any duplicate
	// unacknowledged. (Snapshot markers replicated meanwhile count in the backlog until the
	// dispatcher skips them, so the backlog is waited for, not read once.)
	waitFor(ctx, t, "west's subscription to have nothing new", func() error {
		st, err := west.TopicStats(ctx, topic)
		if err != nil {
			return err
		}
		if b := st.Subscriptions["s"].MsgBacklog; b != 0 {
			return fmt.Errorf("west stored %d entries again after east's replicator re-sent everything", b)
		}
		return nil
	})
	st, err := west.TopicStats(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	// West's stats show east's replicator producing into it (the inbound side) and its
	// own replicator to east; east's metrics have Pulsar's replication names (package
	// broker/pulsarmetrics, from the stats' replication section).
	rs, _ := st.Replication["east"].(replhost.ReplicatorStats)
	if rs.InboundConnection == "" || !rs.Connected {
		t.Fatalf("west's replication section for east: %+v", st.Replication["east"])
	}
	waitFor(ctx, t, "east's replication metrics", func() error {
		rec := httptest.NewRecorder()
		east.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, m := range []string{`pulsar_replication_backlog{cluster="east",namespace="geo/ns",remote_cluster="west",topic="` + topic + `"} 0`,
			`pulsar_replication_connected_count{cluster="east",namespace="geo/ns",remote_cluster="west",topic="` + topic + `"} 1`,
			"pulsar_replication_rate_out{", "pulsar_replication_delay_in_seconds{"} {
			if !strings.Contains(rec.Body.String(), m) {
				return fmt.Errorf("east's metrics lack %s", m)
			}
		}
		return nil
	})
}

// waitFor polls cond until it holds or ctx ends (the state it waits for has no event).
func waitFor(ctx context.Context, t *testing.T, what string, cond func() error) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var err error
	for {
		if err = cond(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, err)
		case <-tick.C:
		}
	}
}

// TestReplicatorProducerContract drives the receiving side's contract (package
// replication's doc.go) over the wire, with the session producer the replicator uses: a
// second producer of the replicator's name is refused (ProducerBusy); a refused SEND ends
// the session, so the SEND pipelined behind it is not stored; the next session re-sends
// from the refused one, and what the topic already has (by the original producer's name
// and sequence id) is answered as a duplicate and not stored again.
func TestReplicatorProducerContract(t *testing.T) {
	mem := topictest.NewStore()
	svc := startServiceWith(t, metadatatest.NewStore(t, metadatatest.Embedded(t)), mem, "w1",
		func(c *broker.Config) { c.Cluster = "west" })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const topic, name = "persistent://public/default/replicated-in", "pulsar.repl.east-->west"
	cl := client(t, svc)
	ended := make(chan error, 4)
	session := func() *pulsarclient.SessionProducer {
		t.Helper()
		p, err := cl.CreateSessionProducer(ctx, pulsarclient.SessionProducerOptions{Topic: topic, Name: name,
			OnEnd: func(err error) { ended <- err }})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	type result struct {
		id  pulsarclient.MessageID
		err error
	}
	send := func(p *pulsarclient.SessionProducer, seq uint64, size int) chan result {
		meta := &pb.MessageMetadata{ProducerName: proto.String("orig"), SequenceId: proto.Uint64(seq),
			PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())), ReplicatedFrom: proto.String("east")}
		payload := []byte(strings.Repeat(strconv.FormatUint(seq, 10), size))
		ch := make(chan result, 1)
		p.Send(meta, payload, false, func(id pulsarclient.MessageID, err error) { ch <- result{id, err} })
		return ch
	}
	wait := func(ch chan result) result {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-ctx.Done():
			t.Fatal("no answer to a send")
		}
		return result{}
	}

	p1 := session()
	if err := svc.SetTopicPolicy(ctx, topic, "maxMessageSize", "", []byte("1000")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateSessionProducer(ctx, pulsarclient.SessionProducerOptions{Topic: topic, Name: name}); !pulsarclient.IsServerError(err, pb.ServerError_ProducerBusy) {
		t.Fatalf("a second producer of the replicator's name: %v, want ProducerBusy", err)
	}
	if r := wait(send(p1, 0, 1)); r.err != nil || r.id.EntryID < 0 {
		t.Fatalf("first send: %+v", r)
	}
	big, behind := send(p1, 1, 2000), send(p1, 2, 1) // the second is pipelined behind the refused one
	if r := wait(big); !pulsarclient.IsServerError(r.err, pb.ServerError_NotAllowedError) {
		t.Fatalf("a send over the max message size: %+v, want NotAllowedError", r)
	}
	if r := wait(behind); r.err == nil {
		t.Fatalf("the send behind a refused one succeeded: %+v", r)
	}
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the session did not end at the refusal")
	}
	p1.Close()

	if err := svc.SetTopicPolicy(ctx, topic, "maxMessageSize", "", []byte("100000")); err != nil {
		t.Fatal(err)
	}
	var p2 *pulsarclient.SessionProducer
	waitFor(ctx, t, "a new session", func() error { // the broker may still be closing the old one
		var err error
		p2, err = cl.CreateSessionProducer(ctx, pulsarclient.SessionProducerOptions{Topic: topic, Name: name})
		return err
	})
	defer p2.Close()
	dup, r1, r2 := send(p2, 0, 1), send(p2, 1, 2000), send(p2, 2, 1)
	if r := wait(dup); r.err != nil || r.id.EntryID >= 0 {
		t.Fatalf("a re-send of a stored message: %+v, want a duplicate's receipt", r)
	}
	for i, ch := range []chan result{r1, r2} {
		if r := wait(ch); r.err != nil || r.id.EntryID < 0 {
			t.Fatalf("re-send %d: %+v", i+1, r)
		}
	}
	cons, err := cl.Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "check", InitialPosition: pulsarclient.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	for seq := range 3 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.SequenceID != int64(seq) || m.ProducerName != "orig" {
			t.Fatalf("entry %d of the topic is %s/%d, want orig/%d", seq, m.ProducerName, m.SequenceID, seq)
		}
	}
	st, err := svc.TopicStats(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if b := st.Subscriptions["check"].MsgBacklog; b != 3 {
		t.Fatalf("the topic holds %d entries, want 3", b)
	}
}

// TestGeoReplicationUnreachable: while east's record of west names an address where
// nothing listens, east's replicator is not connected and its backlog grows with what is
// produced; once the record is corrected, replication resumes by itself and west gets
// every message once, in order.
func TestGeoReplicationUnreachable(t *testing.T) {
	east, west := geoPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, n = "persistent://geo/ns/cut", 50
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	if err := east.UpdateCluster(ctx, "west", broker.ClusterData{BrokerServiceURL: "pulsar://" + dead}); err != nil {
		t.Fatal(err)
	}
	cons, err := client(t, west).Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "s",
		InitialPosition: pulsarclient.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := client(t, east).CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := prod.Send(ctx, &pulsarclient.ProducerMessage{Payload: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(ctx, t, "the backlog of the unreachable cluster", func() error {
		st, err := east.TopicStats(ctx, topic)
		if err != nil {
			return err
		}
		rs, _ := st.Replication["west"].(replhost.ReplicatorStats)
		if rs.Connected || rs.ReplicationBacklog != n {
			return fmt.Errorf("replication to west: %+v", st.Replication["west"])
		}
		return nil
	})
	if err := east.UpdateCluster(ctx, "west", broker.ClusterData{BrokerServiceURL: "pulsar://" + west.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if got := string(m.Payload); got != strconv.Itoa(i) {
			t.Fatalf("message %d in west is %q", i, got)
		}
		_ = cons.Ack(m)
	}
	waitFor(ctx, t, "east's backlog to drain", func() error {
		st, err := east.TopicStats(ctx, topic)
		if err != nil {
			return err
		}
		rs, _ := st.Replication["west"].(replhost.ReplicatorStats)
		if !rs.Connected || rs.ReplicationBacklog != 0 {
			return fmt.Errorf("replication to west: %+v", st.Replication["west"])
		}
		return nil
	})
}

// TestGeoReplicationBothWays: a partitioned topic (created in both clusters, as with
// separate configuration stores) with a producer in each cluster; the consumers of both
// clusters receive every message of both producers exactly once and in per-producer
// order, partition by partition.
func TestGeoReplicationBothWays(t *testing.T) {
	east, west := geoPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, n, parts = "persistent://geo/ns/both", 200, 2
	for _, s := range []*broker.Service{east, west} {
		if err := s.CreatePartitionedTopic(ctx, topic, parts); err != nil {
			t.Fatal(err)
		}
	}
	clients := map[string]*pulsarclient.Client{"east": client(t, east), "west": client(t, west)}
	cons := map[string]*pulsarclient.Consumer{}
	for c, cl := range clients {
		co, err := cl.Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: pulsarclient.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		cons[c] = co
	}
	for c, cl := range clients {
		p, err := cl.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: topic, Name: "from-" + c})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			// Keyed: a key's messages stay on one partition, so per-key order is per-producer order there.
			msg := &pulsarclient.ProducerMessage{Key: strconv.Itoa(i % 7), Payload: []byte(fmt.Sprintf("%s/%d/%d", c, i%7, i))}
			if err := p.SendAsync(ctx, msg, func(_ pulsarclient.MessageID, err error) {
				if err != nil {
					t.Errorf("send: %v", err)
				}
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for c, co := range cons {
		seen := map[string]bool{}
		last := map[string]int{} // producer/key -> last index
		for range 2 * n {
			m, err := co.Receive(ctx)
			if err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			p := string(m.Payload)
			if seen[p] {
				t.Fatalf("%s received %s twice", c, p)
			}
			seen[p] = true
			parts := strings.Split(p, "/")
			i, _ := strconv.Atoi(parts[2])
			k := parts[0] + "/" + parts[1]
			if l, ok := last[k]; ok && i <= l {
				t.Fatalf("%s received %s after index %d of %s", c, p, l, k)
			}
			last[k] = i
			_ = co.Ack(m)
		}
		if len(seen) != 2*n {
			t.Fatalf("%s received %d distinct messages, want %d", c, len(seen), 2*n)
		}
	}
}

// TestGeoReplicationDispatchRate: east's namespace limits its replicators to 20 messages a
// second; 30 messages take more than a second to reach west (the bucket holds a tenth of
// a second's worth), and all arrive, in order.
func TestGeoReplicationDispatchRate(t *testing.T) {
	east, west := geoPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, n = "persistent://geo/ns/rated", 30
	if err := east.SetNamespacePolicy(ctx, "geo/ns", "replicatorDispatchRate", "",
		[]byte(`{"dispatchThrottlingRateInMsg":20,"dispatchThrottlingRateInByte":0,"ratePeriodInSecond":1}`)); err != nil {
		t.Fatal(err)
	}
	cons, err := client(t, west).Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "s",
		InitialPosition: pulsarclient.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := client(t, east).CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range n {
		if _, err := prod.Send(ctx, &pulsarclient.ProducerMessage{Payload: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(m.Payload); got != strconv.Itoa(i) {
			t.Fatalf("message %d in west is %q", i, got)
		}
	}
	if el := time.Since(start); el < time.Second {
		t.Fatalf("%d messages replicated in %v at 20 messages a second", n, el)
	}
}

// TestGeoReplicationClusterRemovedWhileUnloaded: a cluster removed from the namespace while
// the topic is not loaded loses its replication cursor when the topic loads again (it
// would hold the topic's backlog for ever).
func TestGeoReplicationClusterRemovedWhileUnloaded(t *testing.T) {
	east, _, logs := geoPairStores(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const topic = "persistent://geo/ns/orphan"
	logCursors := func() []string {
		cs, err := logs.Open(topicname.MustParse(topic).ManagedLedgerName()).Cursors(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	if err := east.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	cursors := func() map[string]bool {
		is, err := east.InternalStats(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for c := range is.Cursors {
			out[c] = true
		}
		return out
	}
	waitFor(ctx, t, "the replication cursor", func() error {
		if !cursors()["pulsar.repl.west"] {
			return fmt.Errorf("no cursor pulsar.repl.west")
		}
		return nil
	})
	if err := east.Unload(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if err := east.SetNamespaceReplicationClusters(ctx, "geo/ns", []string{"east"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(logCursors(), "pulsar.repl.west") {
		t.Fatalf("the unloaded topic's log lost its replication cursor: %v", logCursors())
	}
	waitFor(ctx, t, "the orphan cursor to be deleted when the topic loads", func() error {
		if c := cursors(); c["pulsar.repl.west"] {
			return fmt.Errorf("cursors %v", c)
		}
		if cs := logCursors(); slices.Contains(cs, "pulsar.repl.west") {
			return fmt.Errorf("the log still has cursors %v", cs)
		}
		return nil
	})
}
