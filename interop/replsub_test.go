package interop

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/broker"
)

// geoClusters starts two one-broker clusters, east and west (in-memory logs, their own
// metadata), each holding both cluster records, tenant geo allowed on both and namespace
// geo/ns replicated between them; replicated subscriptions take a snapshot every 50 ms.
func geoClusters(t *testing.T) (east, west *cluster) {
	t.Helper()
	mk := func(name string) *cluster {
		return newCluster(t, clusterOpts{memLog: true, tweak: func(c *broker.Config) {
			c.Cluster = name
			c.ReplicatedSubscriptionsSnapshotFrequency = 50 * time.Millisecond
		}})
	}
	east, west = mk("east"), mk("west")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []*cluster{east, west} {
		for name, o := range map[string]*cluster{"east": east, "west": west} {
			if err := c.broker.CreateCluster(ctx, name, broker.ClusterData{BrokerServiceURL: o.url}); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.broker.CreateTenant(ctx, "geo", broker.TenantInfo{AllowedClusters: []string{"east", "west"}}); err != nil {
			t.Fatal(err)
		}
		if err := c.broker.CreateNamespace(ctx, "geo/ns", broker.NamespacePolicies{ReplicationClusters: []string{"east", "west"}}); err != nil {
			t.Fatal(err)
		}
	}
	return east, west
}

// TestReplicatedSubscriptionClient: pulsar-client-go's ConsumerOptions.ReplicateSubscriptionState
// in east; the consumer acknowledges the first half; once the subscription's position has
// reached west, the second half is published and a consumer of the same subscription in
// west starts at the first unacknowledged message and gets the second half in order. No
// marker reaches either consumer, and a reader's HasNext ends although markers follow the
// last message.
func TestReplicatedSubscriptionClient(t *testing.T) {
	east, west := geoClusters(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, n = "persistent://geo/ns/replsub-client", 20

	cons, err := east.client().Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "rs",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReplicateSubscriptionState: true})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := east.client().CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	var lastSent pulsar.MessageID
	send := func(from, to int) {
		for i := from; i < to; i++ {
			id, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(i))})
			if err != nil {
				t.Fatal(err)
			}
			lastSent = id
		}
	}
	send(0, n/2)
	for i := range n / 2 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload()) != strconv.Itoa(i) {
			t.Fatalf("east: message %d is %q (a marker or a reorder)", i, m.Payload())
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	// The position of the last acknowledged message in west.
	probe, err := west.client().Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "probe",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	var last pulsar.MessageID
	for i := range n / 2 {
		m, err := probe.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload()) != strconv.Itoa(i) {
			t.Fatalf("west: message %d is %q", i, m.Payload())
		}
		last = m.ID()
	}
	probe.Close()
	// The snapshots' update reaches west (no event to wait on: the deadline bounds it).
	for {
		is, err := west.broker.InternalStats(ctx, topic)
		if err == nil {
			if c, ok := is.Cursors["rs"]; ok {
				var l, e int64
				if _, err := fmt.Sscanf(c.MarkDeletePosition, "%d:%d", &l, &e); err == nil &&
					(l > last.LedgerID() || l == last.LedgerID() && e >= last.EntryID()) {
					break
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("west's subscription never reached %v: %v", last, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	send(n/2, n)
	cons.Close()
	moved, err := west.client().Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "rs",
		ReplicateSubscriptionState: true})
	if err != nil {
		t.Fatal(err)
	}
	defer moved.Close()
	for i := n / 2; i < n; i++ {
		m, err := moved.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload()) != strconv.Itoa(i) {
			t.Fatalf("west after the move: got %q, want %d", m.Payload(), i)
		}
		if err := moved.Ack(m); err != nil {
			t.Fatal(err)
		}
	}

	// Markers follow the last message in east's log (the snapshots after it): a reader from
	// the earliest message gets the n messages, and then HasNext says there is no more (the
	// last message id is the last data message's, not a marker's).
	for {
		is, err := east.broker.InternalStats(ctx, topic)
		var l, e int64
		if err == nil {
			if _, err := fmt.Sscanf(is.LastConfirmedEntry, "%d:%d", &l, &e); err == nil &&
				(l > lastSent.LedgerID() || l == lastSent.LedgerID() && e > lastSent.EntryID()) {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no marker after the last message %v in east", lastSent)
		case <-time.After(20 * time.Millisecond):
		}
	}
	reader, err := east.client().CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	got := 0
	for reader.HasNext() {
		m, err := reader.Next(ctx)
		if err != nil {
			t.Fatalf("after %d messages: %v", got, err)
		}
		if string(m.Payload()) != strconv.Itoa(got) {
			t.Fatalf("reader: message %d is %q", got, m.Payload())
		}
		got++
	}
	if got != n {
		t.Fatalf("the reader got %d messages, want %d", got, n)
	}
}
