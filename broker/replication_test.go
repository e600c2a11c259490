package broker_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/replhost"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

// geoPair starts two clusters, east and west, each one broker on its own embedded etcd and
// its own storage; each holds both cluster records, a tenant allowed on both and namespace
// geo/ns replicated between them.
func geoPair(t *testing.T) (east, west *broker.Service) {
	t.Helper()
	start := func(cluster string) *broker.Service {
		eps := metadatatest.Embedded(t)
		return startServiceWith(t, metadatatest.OpenStore(t, eps, metadatatest.RandomNamespace()), topictest.NewStore(), cluster+"-1",
			func(c *broker.Config) { c.Cluster = cluster })
	}
	east, west = start("east"), start("west")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range []*broker.Service{east, west} {
		for name, b := range map[string]*broker.Service{"east": east, "west": west} {
			if err := s.CreateCluster(ctx, name, broker.ClusterData{BrokerServiceURL: "pulsar://" + b.Addr().String()}); err != nil {
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
	return east, west
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
	st, err := west.TopicStats(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if b := st.Subscriptions["s"].MsgBacklog; b != 0 {
		t.Fatalf("west stored %d entries again after east's replicator re-sent everything", b)
	}
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
