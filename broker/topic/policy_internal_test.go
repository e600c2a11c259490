package topic

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// TestSubscribeWindows: a consumer gets rate subscribes per period, counted apart from the
// others, and rate more once its period has passed.
func TestSubscribeWindows(t *testing.T) {
	var w subscribeWindows
	t0 := time.Unix(1000, 0)
	a, b := consumerKey{host: "10.0.0.1", name: "c", id: 1}, consumerKey{host: "10.0.0.2", name: "c", id: 1}
	for i := 0; i < 2; i++ {
		if !w.take(a, 2, 10*time.Second, t0.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("subscribe %d of 2 refused", i+1)
		}
	}
	if w.take(a, 2, 10*time.Second, t0.Add(9*time.Second)) {
		t.Fatal("third subscribe within the period admitted")
	}
	if !w.take(b, 2, 10*time.Second, t0.Add(9*time.Second)) {
		t.Fatal("another host's consumer of the same name and id refused")
	}
	if !w.take(a, 2, 10*time.Second, t0.Add(10*time.Second)) {
		t.Fatal("subscribe after the period refused")
	}
}

// TestMetaTimes: the SEND path's scan finds publish_time and deliver_at_time as a full
// decode does, and nothing in an entry without metadata.
func TestMetaTimes(t *testing.T) {
	meta := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(3), PublishTime: proto.Uint64(1000),
		PartitionKey: proto.String("k"), DeliverAtTime: proto.Int64(61000), Properties: []*pb.KeyValue{{Key: proto.String("a"), Value: proto.String("b")}}}
	b, err := pulsar.AppendHeadersAndPayload(nil, meta, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if p, d := metaTimes(b); p != 1000 || d != 61000 {
		t.Fatalf("metaTimes %d %d, want 1000 61000", p, d)
	}
	meta.DeliverAtTime = nil
	b, _ = pulsar.AppendHeadersAndPayload(nil, meta, []byte("x"))
	if p, d := metaTimes(b); p != 1000 || d != 0 {
		t.Fatalf("metaTimes %d %d without a delay", p, d)
	}
	if p, d := metaTimes([]byte("garbage")); p != 0 || d != 0 {
		t.Fatalf("metaTimes of garbage %d %d", p, d)
	}
}
