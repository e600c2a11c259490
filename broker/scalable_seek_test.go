package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/pulsarclient"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// TestSegmentFence: a segment's fence (the controller's Fence for a seek) detaches the
// subscription's consumers holding an older assignment, refuses their reattach while
// letting one holding the fence's version attach, and a Fence or Reset of a controller term
// older than one seen for the segment is refused.
func TestSegmentFence(t *testing.T) {
	eps := metadatatest.Embedded(t)
	b1 := startServiceWith(t, metadatatest.OpenStore(t, eps, metadatatest.RandomNamespace()), topictest.NewStore(), "b1",
		func(c *broker.Config) { c.Scalable.TickInterval = 50 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "topic://public/default/fence"
	if err := b1.CreateScalableTopic(ctx, name, 1); err != nil {
		t.Fatal(err)
	}
	l, err := b1.ScalableLayout(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	tp, _ := layout.ParseTopic(name)
	seg := tp.SegmentName(l.Segments[0])
	if err := b1.SegmentCreate(ctx, seg, []string{"s"}); err != nil {
		t.Fatal(err)
	}
	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + b1.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	attach := func(version string) (*pulsarclient.Consumer, error) {
		return cl.Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: seg, Subscription: "s", Type: pulsarclient.Exclusive,
			Properties: map[string]string{layout.AssignmentMetadataKey: version}})
	}
	old, err := attach("5")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(context.Background())
	const term = 1 << 40
	if err := b1.SegmentFence(ctx, seg, "s", term, 10); err != nil {
		t.Fatal(err)
	}
	// The consumer at version 5 is detached and its reconnects are refused: one at the fence's
	// version gets the exclusive subscription.
	var cur *pulsarclient.Consumer
	for deadline := time.Now().Add(20 * time.Second); cur == nil; {
		if cur, err = attach("10"); err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("attach at the fence's version: %v", err)
			}
			time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
		}
	}
	defer cur.Close(context.Background())
	if err := cur.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var se *pulsarclient.ServerError
	if c, err := attach("9"); !errors.As(err, &se) {
		if c != nil {
			c.Close(ctx)
		}
		t.Fatalf("attach below the fence: %v, want a refusal", err)
	}
	if err := b1.SegmentFence(ctx, seg, "s", term-1, 20); !errors.Is(err, broker.ErrNotAllowed) {
		t.Fatalf("fence of an older term: %v", err)
	}
	if err := b1.SegmentReset(ctx, seg, "s", term-1, broker.Earliest); !errors.Is(err, broker.ErrNotAllowed) {
		t.Fatalf("reset of an older term: %v", err)
	}
	if err := b1.SegmentReset(ctx, seg, "s", term, broker.Earliest); err != nil {
		t.Fatalf("reset of the current term: %v", err)
	}
}
