package broker_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

// geoPairSnapshots is geoPair with replicated subscriptions' snapshots every 50 ms.
func geoPairSnapshots(t *testing.T) (east, west *broker.Service) {
	t.Helper()
	east, west, _ = geoPairStores(t, func(c *broker.Config) {
		c.ReplicatedSubscriptionsSnapshotFrequency = 50 * time.Millisecond
	})
	return east, west
}

// TestReplicatedSubscription: a replicated subscription's consumer in east receives and
// acknowledges the first half of the messages; a snapshot taken after them carries the
// subscription's position to west (the subscription is created there by the update),
// never past a message east's consumer has not acknowledged. The second half is published
// and the consumer moves to west: it resumes exactly at the first unacknowledged message
// (no snapshot can pass it: east never acknowledges it) and receives the second half in
// order, and no marker, in either cluster.
func TestReplicatedSubscription(t *testing.T) {
	east, west := geoPairSnapshots(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, n = "persistent://geo/ns/replsub", 20

	cons, err := client(t, east).Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "rs",
		InitialPosition: pulsarclient.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	if err := east.SetReplicatedSubscriptionStatus(ctx, topic, "rs", true); err != nil {
		t.Fatal(err)
	}
	prod, err := client(t, east).CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: topic, Name: "p", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	send := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := prod.Send(ctx, &pulsarclient.ProducerMessage{Payload: []byte(strconv.Itoa(i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(0, n/2)
	for i := range n / 2 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload) != strconv.Itoa(i) {
			t.Fatalf("east: message %d is %q (a marker or a reorder)", i, m.Payload)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	// West's position of the last acknowledged message, from a probe subscription there.
	probe, err := client(t, west).Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "probe",
		InitialPosition: pulsarclient.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	var lastAcked pulsarclient.MessageID
	for i := range n / 2 {
		m, err := probe.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload) != strconv.Itoa(i) {
			t.Fatalf("west: message %d is %q", i, m.Payload)
		}
		lastAcked = m.ID
	}
	_ = probe.Close(ctx)
	want := fmt.Sprintf("%d:%d", lastAcked.LedgerID, lastAcked.EntryID)
	// The update reaches west (a snapshot every 50 ms; the state has no event to wait on).
	waitFor(ctx, t, "west's replicated subscription at the last acknowledged message", func() error {
		is, err := west.InternalStats(ctx, topic)
		if err != nil {
			return err
		}
		c, ok := is.Cursors["rs"]
		if !ok {
			return fmt.Errorf("no subscription rs in west yet")
		}
		if !atOrAfter(c.MarkDeletePosition, want) {
			return fmt.Errorf("west's rs at %s, want %s", c.MarkDeletePosition, want)
		}
		return nil
	})
	st, err := east.TopicStats(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Subscriptions["rs"].IsReplicated {
		t.Fatalf("east's stats: rs isReplicated false")
	}
	rec := httptest.NewRecorder()
	east.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if m := `pulsar_replicated_subscriptions_pending_snapshots{cluster="east"}`; !strings.Contains(rec.Body.String(), m) {
		t.Fatalf("east's metrics lack %s", m)
	}

	send(n/2, n)
	_ = cons.Close(ctx)
	moved, err := client(t, west).Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "rs"})
	if err != nil {
		t.Fatal(err)
	}
	for i := n / 2; i < n; i++ {
		m, err := moved.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload) != strconv.Itoa(i) {
			t.Fatalf("west after the move: got %q, want %d (resumed before the acknowledged ones, or skipped one)", m.Payload, i)
		}
		if err := moved.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
}

// atOrAfter compares "ledger:entry" positions.
func atOrAfter(got, want string) bool {
	var gl, ge, wl, we int64
	if _, err := fmt.Sscanf(got, "%d:%d", &gl, &ge); err != nil {
		return false
	}
	if _, err := fmt.Sscanf(want, "%d:%d", &wl, &we); err != nil {
		return false
	}
	return gl > wl || gl == wl && ge >= we
}
