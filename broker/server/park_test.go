package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/server"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// TestBackpressureServesOtherCommands: a connection whose SENDs are held back by its
// in-flight limit (its topic's adds do not complete) goes on serving the commands behind
// them that do not depend on them: a FLOW of a consumer on the same connection delivers, a
// PING is answered, a new producer is created. A CLOSE_PRODUCER behind the held SENDs waits
// for them: once the adds complete, every SEND is stored and answered in order, and the
// producer closes. (With the reader stopped at the limit, as a connection did, nothing
// behind the third SEND is read until the adds complete: one client that both publishes
// and consumes starved its consumers.)
func TestBackpressureServesOtherCommands(t *testing.T) {
	const held, flowing = "persistent://public/default/held", "persistent://public/default/flowing"
	b := newFakeBackend()
	gate := newAddGate()
	b.gates = map[string]*addGate{held: gate}
	ts := startServer(t, b, server.Config{MaxPendingPublishPerConnection: 2})
	c := ts.connected(t)

	// A message on a topic whose adds complete, and a consumer of it without permits yet.
	pidF, cid := uint64(10), uint64(20)
	if got := c.roundTrip(&pb.CommandProducer{Topic: proto.String(flowing), ProducerId: &pidF, RequestId: c.nextID()}); got.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("producer: %v", got)
	}
	if got := c.send(pidF, 0, nil); got.GetType() != pb.BaseCommand_SEND_RECEIPT {
		t.Fatalf("send: %v", got)
	}
	if got := c.roundTrip(&pb.CommandSubscribe{Topic: proto.String(flowing), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: &cid, RequestId: c.nextID(), InitialPosition: pb.CommandSubscribe_Earliest.Enum()}); got.GetType() != pb.BaseCommand_SUCCESS {
		t.Fatalf("subscribe: %v", got)
	}

	// Four SENDs on the held topic: two in flight (the limit), two held back.
	pid := uint64(1)
	if got := c.roundTrip(&pb.CommandProducer{Topic: proto.String(held), ProducerId: &pid, RequestId: c.nextID()}); got.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("producer: %v", got)
	}
	for seq := range uint64(4) {
		c.pushSend(pid, seq, nil)
	}
	closeRID := c.nextID()
	c.push(&pb.CommandCloseProducer{ProducerId: &pid, RequestId: closeRID})
	c.push(&pb.CommandFlow{ConsumerId: &cid, MessagePermits: proto.Uint32(1)})
	c.push(&pb.CommandPing{})
	pid2 := uint64(2)
	c.push(&pb.CommandProducer{Topic: proto.String(held), ProducerId: &pid2, RequestId: c.nextID()})

	// All three are served while the SENDs are held; nothing of the held producer's comes.
	var message, pong, created bool
	for !message || !pong || !created {
		got := c.next()
		switch got.GetType() {
		case pb.BaseCommand_MESSAGE:
			message = got.GetMessage().GetConsumerId() == cid
		case pb.BaseCommand_PONG:
			pong = true
		case pb.BaseCommand_PRODUCER_SUCCESS:
			created = true
		default:
			t.Fatalf("while the SENDs are held: %v", got)
		}
	}
	if n := gate.heldAdds(); n != 2 {
		t.Fatalf("%d adds in flight, want the limit, 2", n)
	}
	if n := ts.metric(t, "magnetar_broker_publish_throttled_total", ""); n < 1 {
		t.Fatalf("throttled %v times, want at least once", n)
	}

	// The adds complete: the four SENDs are stored and answered in order, and the close is
	// answered (served after the SENDs were handed to the topic, as without parking).
	gate.release()
	var seq uint64
	for closed := false; seq < 4 || !closed; {
		got := c.next()
		switch r := got.GetSendReceipt(); {
		case got.GetType() == pb.BaseCommand_SUCCESS && got.GetSuccess().GetRequestId() == *closeRID:
			closed = true
		case got.GetType() == pb.BaseCommand_SEND_RECEIPT && r.GetSequenceId() == seq && r.GetMessageId().GetEntryId() == seq:
			seq++
		default:
			t.Fatalf("after %d receipts: %v", seq, got)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	last, err := b.loaded(held).LastMessageID(ctx)
	if err != nil || last.EntryID != 3 {
		t.Fatalf("last message %v %v, want entry 3: every SEND before the close stored", last, err)
	}
}
