package topic_test

import (
	"context"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/replication"
	"github.com/magnetar-io/magnetar/replication/replsub"
)

// TestMarkersAreNeitherDeliveredNorLast: a marker the topic stores (PublishMarker) is never
// delivered to a consumer, and the last message id stays the last data message's — before
// and after a reload (else a reader's HasNext never ends).
func TestMarkersAreNeitherDeliveredNorLast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := topictest.NewStore()
	tp := openTopic(t, store.Open("t"))
	conn := newConn(t)
	p := &topic.Producer{ID: 1, Name: "p", Conn: conn, AccessMode: pb.ProducerAccessMode_Shared}
	if r := result(t, addProducer(t, tp, p)); r.ready == nil {
		t.Fatalf("producer: %+v", r)
	}
	publish(p, t, 0, "")
	conn.expect(pb.BaseCommand_SEND_RECEIPT)
	done := make(chan error, 1)
	var markerPos topic.Position
	tp.PublishMarker(ctx, replication.MarkerSnapshotRequest, replsub.EncodeRequest("id", "east"), nil, func(pos topic.Position, err error) {
		markerPos = pos
		done <- err
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if markerPos.EntryID != 1 {
		t.Fatalf("the marker is at %v, want entry 1", markerPos)
	}
	last, err := tp.LastMessageID(ctx)
	if err != nil || last.EntryID != 0 {
		t.Fatalf("last message id %+v, %v: want the data message at entry 0", last, err)
	}
	// A consumer from the earliest entry gets entries 0 and 2, never the marker at 1, and
	// the marker is acknowledged for it: acknowledging both messages empties the backlog.
	publish(p, t, 1, "")
	conn.expect(pb.BaseCommand_SEND_RECEIPT)
	cc := newConn(t)
	c := &topic.Consumer{ID: 1, Name: "c", Conn: cc, Type: pb.CommandSubscribe_Exclusive}
	subscribe(t, tp, c, "s")
	c.Flow(10)
	var ids []*pb.MessageIdData
	for _, want := range []uint64{0, 2} {
		_, id := msgID(cc.expect(pb.BaseCommand_MESSAGE))
		if id.GetEntryId() != want {
			t.Fatalf("delivered entry %d, want %d (the marker is entry 1)", id.GetEntryId(), want)
		}
		ids = append(ids, id)
	}
	ackOf(c, ids...)
	st, err := tp.Stats(ctx)
	if err != nil || st.Subscriptions["s"].MsgBacklog != 0 {
		t.Fatalf("backlog after acknowledging both messages: %+v, %v", st.Subscriptions["s"], err)
	}
	if last, err := tp.LastMessageID(ctx); err != nil || last.EntryID != 2 {
		t.Fatalf("last message id %+v, %v: want entry 2", last, err)
	}
	tp.PublishMarker(ctx, replication.MarkerSnapshotRequest, replsub.EncodeRequest("id2", "east"), nil, func(_ topic.Position, err error) {
		done <- err
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := tp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tp = openTopic(t, store.Open("t"))
	if last, err := tp.LastMessageID(ctx); err != nil || last.EntryID != 2 {
		t.Fatalf("after a reload: last message id %+v, %v: want entry 2 (entry 3 is a marker)", last, err)
	}
}
