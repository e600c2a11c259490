package topic_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// TestDedupSnapshotInterval: with a deduplication snapshot interval, a topic that stored
// fewer entries than DedupSnapshotEvery still records its snapshot, within the interval.
func TestDedupSnapshotInterval(t *testing.T) {
	log := topictest.NewStore().Open("t")
	tp := openTopic(t, log)
	tp.SetPolicies(topic.Policies{DedupSnapshotInterval: 20 * time.Millisecond})
	conn := newConn(t)
	p := &topic.Producer{ID: 1, Name: "p", Conn: conn, AccessMode: pb.ProducerAccessMode_Shared}
	if r := result(t, addProducer(t, tp, p)); r.ready == nil {
		t.Fatalf("producer: %+v", r)
	}
	publish(p, t, 7, "")
	conn.expect(pb.BaseCommand_SEND_RECEIPT)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := log.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(st.Properties["magnetar.dedup"], `"p":7`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no deduplication snapshot recorded: %v", st.Properties)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
}

// TestPublishRateHoldsSends: beyond a publish rate of 20 msg/s (a second's burst) SENDs are
// held and released in order by the rate, none before the rate allows it; the stats show
// the throttling.
func TestPublishRateHoldsSends(t *testing.T) {
	tp := openTopic(t, topictest.NewStore().Open("t"))
	tp.SetPolicies(topic.Policies{PublishRateMsgs: 20})
	conn := newConn(t)
	p := &topic.Producer{ID: 1, Name: "p", Conn: conn, AccessMode: pb.ProducerAccessMode_Shared}
	if r := result(t, addProducer(t, tp, p)); r.ready == nil {
		t.Fatalf("producer: %+v", r)
	}
	start := time.Now()
	for seq := uint64(0); seq < 30; seq++ {
		publish(p, t, seq, "")
	}
	for seq := uint64(0); seq < 30; seq++ {
		if r := conn.expect(pb.BaseCommand_SEND_RECEIPT).GetSendReceipt(); r.GetSequenceId() != seq {
			t.Fatalf("receipt %v, want sequence %d", r, seq)
		}
	}
	// The 10 SENDs beyond the burst are admitted once 20/s has earned them: the last at
	// 9/20 s at the earliest.
	if el := time.Since(start); el < 400*time.Millisecond {
		t.Fatalf("30 SENDs at 20 msg/s (burst 20) all stored within %v", el)
	}
	st, err := tp.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.PublishRateLimitedTimes == 0 || st.ThrottledPublishes != 0 {
		t.Fatalf("stats: publishRateLimitedTimes %d, throttledPublishes %d; want throttling counted, none held",
			st.PublishRateLimitedTimes, st.ThrottledPublishes)
	}
}

// TestPublishRateLiftedReleases: SENDs held by a publish rate of 1 B/s (a message every
// half minute) are released at once when the rate is lifted, in order.
func TestPublishRateLiftedReleases(t *testing.T) {
	tp := openTopic(t, topictest.NewStore().Open("t"))
	tp.SetPolicies(topic.Policies{PublishRateBytes: 1})
	conn := newConn(t)
	p := &topic.Producer{ID: 1, Name: "p", Conn: conn, AccessMode: pb.ProducerAccessMode_Shared}
	if r := result(t, addProducer(t, tp, p)); r.ready == nil {
		t.Fatalf("producer: %+v", r)
	}
	for seq := uint64(0); seq < 4; seq++ {
		publish(p, t, seq, "")
	}
	conn.expect(pb.BaseCommand_SEND_RECEIPT) // the burst's one
	conn.quiet(50 * time.Millisecond)
	tp.SetPolicies(topic.Policies{})
	for seq := uint64(1); seq < 4; seq++ {
		if r := conn.expect(pb.BaseCommand_SEND_RECEIPT).GetSendReceipt(); r.GetSequenceId() != seq {
			t.Fatalf("receipt %v, want sequence %d", r, seq)
		}
	}
}

// TestCloseAnswersHeldSends: closing a topic completes the SENDs its publish rate holds
// (Conn.PublishDone once per Publish).
func TestCloseAnswersHeldSends(t *testing.T) {
	tp := openTopic(t, topictest.NewStore().Open("t"))
	tp.SetPolicies(topic.Policies{PublishRateBytes: 1})
	conn := newConn(t)
	p := &topic.Producer{ID: 1, Name: "p", Conn: conn, AccessMode: pb.ProducerAccessMode_Shared}
	if r := result(t, addProducer(t, tp, p)); r.ready == nil {
		t.Fatalf("producer: %+v", r)
	}
	for seq := uint64(0); seq < 3; seq++ {
		publish(p, t, seq, "")
	}
	conn.expect(pb.BaseCommand_SEND_RECEIPT)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	conn.mu.Lock()
	defer conn.mu.Unlock()
	if conn.budget != -3 {
		t.Fatalf("PublishDone called %d times for 3 SENDs", -conn.budget)
	}
}
