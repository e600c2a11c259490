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
