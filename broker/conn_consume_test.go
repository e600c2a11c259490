package broker_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// TestResubscribeRedelivers (as TestMultiBrokerPausedCoordinatorAbort saw it: a message
// stored and acknowledged to its producer never reached the Failover consumer, which had it
// unacknowledged on the broker): a client that subscribes a consumer id again on the same
// connection — pulsar-client-go does when it reconnects the consumer while the broker kept
// it — has dropped what it had prefetched. The broker answers success, as Pulsar does, sends
// the consumer's unacknowledged messages again, and counts its permits from the new FLOW.
func TestResubscribeRedelivers(t *testing.T) {
	svc := startService(t, metadatatest.NewStore(t, metadatatest.Embedded(t)), topictest.NewStore(), "b1")
	c := dialRaw(t, svc)
	const name = "persistent://public/default/resubscribe"
	tp, pid, cid := name, uint64(1), uint64(7)
	if got := c.roundTrip(&pb.CommandProducer{Topic: &tp, ProducerId: &pid, RequestId: c.nextID()}); got.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("producer: %v", got)
	}
	subscribe := func() {
		t.Helper()
		got := c.roundTrip(&pb.CommandSubscribe{Topic: &tp, Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Failover.Enum(),
			ConsumerId: &cid, RequestId: c.nextID(), InitialPosition: pb.CommandSubscribe_Earliest.Enum()})
		if got.GetType() != pb.BaseCommand_SUCCESS {
			t.Fatalf("subscribe: %v", got)
		}
	}
	subscribe()
	for seq := uint64(1); seq <= 3; seq++ {
		if got := c.send(pid, seq, nil); got.GetType() != pb.BaseCommand_SEND_RECEIPT {
			t.Fatalf("send %d: %v", seq, got)
		}
	}
	receive := func(n int) []uint64 {
		t.Helper()
		var entries []uint64
		for len(entries) < n {
			m := c.until("a message", 30*time.Second, func(cmd *pb.BaseCommand) bool { return cmd.GetType() == pb.BaseCommand_MESSAGE }).GetMessage()
			entries = append(entries, m.GetMessageId().GetEntryId())
		}
		return entries
	}
	c.push(&pb.CommandFlow{ConsumerId: &cid, MessagePermits: proto.Uint32(10)})
	first := receive(3)

	// Subscribed again (nothing acknowledged): the same consumer, restarted.
	subscribe()
	c.push(&pb.CommandFlow{ConsumerId: &cid, MessagePermits: proto.Uint32(2)})
	if again := receive(2); again[0] != first[0] || again[1] != first[1] {
		t.Fatalf("after subscribing again: entries %v, want %v redelivered first", again, first[:2])
	}
	st, err := svc.TopicStats(testCtx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	cs := st.Subscriptions["s"].Consumers
	if len(cs) != 1 || cs[0].AvailablePermits != 0 || cs[0].UnackedMessages != 2 {
		t.Fatalf("consumers after the second FLOW: %+v, want one with 0 permits and 2 unacknowledged", cs)
	}
	c.push(&pb.CommandFlow{ConsumerId: &cid, MessagePermits: proto.Uint32(1)})
	if last := receive(1); last[0] != first[2] {
		t.Fatalf("third entry %v, want %d", last, first[2])
	}
}
