package topic_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/mledger"
)

// TestInspection: peeking a subscription's backlog skips its acknowledged entries and
// consumes nothing; examine counts from either end; reads past the end are
// ErrMessageNotFound rather than waits; the publish-time search finds the first entry at or
// after a time.
func TestInspection(t *testing.T) {
	log := topictest.NewStore().Open("t")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps := make([]topic.Position, 5)
	for i := range ps {
		done := make(chan error, 1)
		log.AddAsync(entry(t, uint64(i), "", 0), func(p topic.Position, err error) { ps[i] = p; done <- err })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	cur, err := log.OpenCursor(ctx, "s", mledger.Earliest)
	if err != nil {
		t.Fatal(err)
	}
	acked := make(chan error, 1)
	cur.Ack([]topic.Position{ps[1], ps[3]}, func(err error) { acked <- err })
	if err := <-acked; err != nil {
		t.Fatal(err)
	}
	cur.Close(ctx)
	tp := openTopic(t, log)

	for n, want := range map[int]int{1: 0, 2: 2, 3: 4} {
		for range 2 { // twice: peeking consumes nothing
			e, err := tp.PeekBacklog(ctx, "s", n)
			if err != nil || e.Position != ps[want] {
				t.Fatalf("peek %d: %v, %v; want %v", n, e.Position, err, ps[want])
			}
		}
	}
	if _, err := tp.PeekBacklog(ctx, "s", 4); !errors.Is(err, topic.ErrMessageNotFound) {
		t.Fatalf("peek past the backlog: %v", err)
	}
	// A peek of a subscription that does not exist creates it at the earliest entry (as
	// Pulsar's), unless the policy refuses auto subscription creation.
	tp.SetPolicies(topic.Policies{NoAutoSubscriptionCreation: true})
	if _, err := tp.PeekBacklog(ctx, "nope", 1); !errors.Is(err, topic.ErrSubscriptionNotFound) {
		t.Fatalf("peek on no subscription, auto creation refused: %v", err)
	}
	tp.SetPolicies(topic.Policies{})
	if e, err := tp.PeekBacklog(ctx, "new", 2); err != nil || e.Position != ps[1] {
		t.Fatalf("peek on a new subscription: %v, %v; want %v", e.Position, err, ps[1])
	}
	if subs, err := tp.Subscriptions(ctx); err != nil || !slices.Contains(subs, "new") || slices.Contains(subs, "nope") {
		t.Fatalf("subscriptions after the peeks: %v, %v", subs, err)
	}
	for _, c := range []struct {
		latest bool
		n      int
		want   int
	}{{false, 1, 0}, {false, 2, 1}, {true, 1, 4}, {true, 5, 0}} {
		e, err := tp.ExamineEntry(ctx, c.latest, c.n)
		if err != nil || e.Position != ps[c.want] {
			t.Fatalf("examine latest=%v %d: %v, %v", c.latest, c.n, e.Position, err)
		}
	}
	if _, err := tp.ExamineEntry(ctx, true, 6); !errors.Is(err, topic.ErrMessageNotFound) {
		t.Fatalf("examine past the start: %v", err)
	}
	if e, err := tp.ReadEntry(ctx, ps[3]); err != nil || e.Position != ps[3] {
		t.Fatalf("read %v: %v, %v", ps[3], e.Position, err)
	}
	past := topic.Position{LedgerID: ps[4].LedgerID, EntryID: ps[4].EntryID + 1}
	if _, err := tp.ReadEntry(ctx, past); !errors.Is(err, topic.ErrMessageNotFound) {
		t.Fatalf("read past the end: %v", err)
	}
	if p, err := tp.FindByPublishTime(ctx, 0); err != nil || p != ps[0] {
		t.Fatalf("find at 0: %v, %v", p, err)
	}
	if _, err := tp.FindByPublishTime(ctx, time.Now().Add(time.Hour).UnixMilli()); !errors.Is(err, topic.ErrMessageNotFound) {
		t.Fatalf("find in the future: %v", err)
	}
}
