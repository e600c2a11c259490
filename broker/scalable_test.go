package broker_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// TestScalableTopicLifecycle: create, subscribe, split (the parent's managed ledger is
// terminated, the children carry the subscription's cursor), the controller's broker
// closes and the other one takes over and merges, delete removes every segment.
func TestScalableTopicLifecycle(t *testing.T) {
	eps := metadatatest.Embedded(t)
	ns := metadatatest.RandomNamespace()
	mem := topictest.NewStore()
	fast := func(c *broker.Config) { c.Scalable.TickInterval = 50 * time.Millisecond }
	b1 := startServiceWith(t, metadatatest.OpenStore(t, eps, ns), mem, "b1", fast)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "topic://public/default/st"
	if err := b1.CreateScalableTopic(ctx, name, 1); err != nil {
		t.Fatal(err)
	}
	if err := b1.CreateScalableTopic(ctx, name, 1); !errors.Is(err, broker.ErrAlreadyExists) {
		t.Fatalf("second create: %v", err)
	}
	if ts, err := b1.ScalableTopics(ctx, "public/default"); err != nil || !slices.Equal(ts, []string{name}) {
		t.Fatalf("list: %v %v", ts, err)
	}
	retry := func(what string, fn func() error) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for { // the controller campaigns and loads the record asynchronously
			err := fn()
			if err == nil {
				return
			}
			if !errors.Is(err, broker.ErrServiceNotReady) || time.Now().After(deadline) {
				t.Fatalf("%s: %v", what, err)
			}
			time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
		}
	}
	retry("subscribe", func() error { return b1.CreateScalableSubscription(ctx, name, "s") })
	if err := b1.CreateScalableSubscription(ctx, name, "s"); !errors.Is(err, broker.ErrAlreadyExists) {
		t.Fatalf("second subscribe: %v", err)
	}
	retry("split", func() error { return b1.SplitScalableSegment(ctx, name, 0, 0) })
	if err := b1.SplitScalableSegment(ctx, name, 0, 0); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Fatalf("split of a sealed segment: %v", err)
	}
	l, err := b1.ScalableLayout(ctx, name)
	if err != nil || len(l.Segments) != 3 || len(l.Active()) != 2 || l.Pending != nil {
		t.Fatalf("layout after the split: %+v %v", l, err)
	}
	tp := layout.Topic{Tenant: "public", Namespace: "default", Name: "st"}
	parent, _ := l.Segment(0)
	if st, err := b1.TopicStats(ctx, tp.SegmentName(parent)); err != nil || !st.Terminated {
		t.Fatalf("parent after the split: terminated %v, %v", st.Terminated, err)
	}
	for _, c := range l.Active() {
		if subs, err := b1.Subscriptions(ctx, tp.SegmentName(c)); err != nil || !slices.Contains(subs, "s") {
			t.Fatalf("child %s: subscriptions %v %v", tp.SegmentName(c), subs, err)
		}
	}
	if ok, err := b1.SegmentDrained(ctx, tp.SegmentName(parent), "s"); err != nil || !ok {
		t.Fatalf("empty sealed parent drained: %v %v", ok, err)
	}

	// b1 closes (resigning its leadership); b2 takes over and merges the children.
	b2 := startServiceWith(t, metadatatest.OpenStore(t, eps, ns), mem, "b2", fast)
	b1.Close()
	act := l.Active()
	retry("merge on b2", func() error { return b2.MergeScalableSegments(ctx, name, uint64(act[0].ID), uint64(act[1].ID)) })
	l, err = b2.ScalableLayout(ctx, name)
	if err != nil || len(l.Active()) != 1 || len(l.Active()[0].Parents) != 2 {
		t.Fatalf("layout after the merge: %+v %v", l, err)
	}
	st, err := b2.ScalableTopicStats(ctx, name)
	if err != nil || st.Active != 1 || len(st.Segments) != len(l.Segments) {
		t.Fatalf("stats: %+v %v", st, err)
	}
	if err := b2.DeleteScalableTopic(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.ScalableLayout(ctx, name); !errors.Is(err, broker.ErrTopicNotFound) {
		t.Fatalf("layout after delete: %v", err)
	}
	for _, seg := range l.Segments {
		if _, err := b2.TopicStats(ctx, tp.SegmentName(seg)); !errors.Is(err, broker.ErrTopicNotFound) {
			t.Fatalf("segment %s after delete: %v", tp.SegmentName(seg), err)
		}
	}
}
