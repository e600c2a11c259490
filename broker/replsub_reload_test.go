package broker_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/pulsarclient"
	"github.com/magnetar-io/magnetar/replication/replsub"
)

// TestReplicatedSubscriptionSurvivesReload: a subscription made replicated by the admin
// keeps the flag in its cursor's properties (pulsar.replicated.subscription=1, as Pulsar),
// so an unload of east's topic and then a restart of east's broker keep it replicated
// (isReplicated in the stats, the property in the internal stats) without any consumer
// asking again; a consumer that then subscribes without the flag acknowledges messages in
// east, and the snapshots still carry its position to west. Turned off, the property is
// removed and stays removed across an unload.
func TestReplicatedSubscriptionSurvivesReload(t *testing.T) {
	g := newGeoClusters(t, func(c *broker.Config) {
		c.ReplicatedSubscriptionsSnapshotFrequency = 50 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, n = "persistent://geo/ns/replsub-reload", 10

	c0, err := client(t, g.east).Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "rs",
		InitialPosition: pulsarclient.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	_ = c0.Close(ctx)
	if err := g.east.SetReplicatedSubscriptionStatus(ctx, topic, "rs", true); err != nil {
		t.Fatal(err)
	}
	checkReplicated := func(when string, want bool) {
		t.Helper()
		st, err := g.east.TopicStats(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Subscriptions["rs"].IsReplicated; got != want {
			t.Fatalf("%s: rs isReplicated %v, want %v", when, got, want)
		}
		is, err := g.east.InternalStats(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		v, ok := is.Cursors["rs"].Properties[replsub.CursorProperty]
		if ok != want || want && v != 1 {
			t.Fatalf("%s: rs cursor properties %v", when, is.Cursors["rs"].Properties)
		}
	}
	checkReplicated("set by the admin", true)
	if err := g.east.Unload(ctx, topic); err != nil {
		t.Fatal(err)
	}
	checkReplicated("after an unload", true)
	g.restartEast(t)
	checkReplicated("after a restart of east's broker", true)

	// Snapshots keep flowing: a consumer without the flag acknowledges n messages in east,
	// and west's subscription reaches the last one.
	cons, err := client(t, g.east).Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "rs"})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := client(t, g.east).CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: topic, Name: "p", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
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
		if string(m.Payload) != strconv.Itoa(i) {
			t.Fatalf("east: message %d is %q", i, m.Payload)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	// West's position of east's last message: the replicated copy's, read by a probe.
	probe, err := client(t, g.west).Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "probe",
		InitialPosition: pulsarclient.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	var last pulsarclient.MessageID
	for i := range n {
		m, err := probe.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload) != strconv.Itoa(i) {
			t.Fatalf("west: message %d is %q", i, m.Payload)
		}
		last = m.ID
	}
	_ = probe.Close(ctx)
	want := fmt.Sprintf("%d:%d", last.LedgerID, last.EntryID)
	waitFor(ctx, t, "west's rs at east's last acknowledged message", func() error {
		is, err := g.west.InternalStats(ctx, topic)
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
	_ = cons.Close(ctx)

	if err := g.east.SetReplicatedSubscriptionStatus(ctx, topic, "rs", false); err != nil {
		t.Fatal(err)
	}
	if err := g.east.Unload(ctx, topic); err != nil {
		t.Fatal(err)
	}
	checkReplicated("turned off, after an unload", false)
}
