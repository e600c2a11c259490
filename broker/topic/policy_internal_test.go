package topic

import (
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/topic/dispatch"
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

// TestRelativeDispatchRate: with relativeToPublishRate, the topic dispatch rate becomes the
// configured one plus the publish rate measured since the last tick (messages and bytes);
// a rate not configured stays unlimited, and a non-relative policy is left alone.
func TestRelativeDispatchRate(t *testing.T) {
	tp := &Topic{core: &topicCore{}}
	now := time.Unix(1000, 0).UnixNano()
	tp.core.pol = Policies{DispatchRateMsgs: 10, DispatchRelative: true}
	tp.dispatch.rate.Msgs.Set(10, now)
	tp.dispatch.rate.Bytes.Set(0, now)
	tp.core.relative.at = now
	tp.core.rateIn.add(100, 5000) // 100 messages published in the next 2 s
	now += 2 * int64(time.Second)
	tp.relativeTick(now)
	if got := tp.dispatch.rate.Msgs.Rate; got != 60 {
		t.Fatalf("relative message rate %v, want 10 + 50", got)
	}
	if got := tp.dispatch.rate.Bytes.Rate; got != 0 {
		t.Fatalf("the byte rate, not configured, became %v", got)
	}
	// The next second nothing is published: back to the configured rate.
	now += int64(time.Second)
	tp.relativeTick(now)
	if got := tp.dispatch.rate.Msgs.Rate; got != 10 {
		t.Fatalf("relative rate %v without publishing, want 10", got)
	}
	// Not relative: the tick changes nothing.
	tp.core.pol.DispatchRelative = false
	tp.core.rateIn.add(100, 100)
	tp.relativeTick(now + int64(time.Second))
	if got := tp.dispatch.rate.Msgs.Rate; got != 10 {
		t.Fatalf("a non-relative rate moved to %v", got)
	}
	if relativeOn(Policies{DispatchRelative: true}) || !relativeOn(Policies{SubDispatchRateBytes: 1, SubDispatchRelative: true}) {
		t.Fatal("relativeOn")
	}
}

// TestPublishBucketCatchesUp: the publish rate's bucket keeps a second's worth, so a
// release the scheduler delays by 300 ms still admits the 300 ms of messages; a tenth of a
// second's bucket (the dispatch rates') keeps only its burst of 20 of the 60.
func TestPublishBucketCatchesUp(t *testing.T) {
	pub := dispatch.Bucket{Span: publishSpan}
	pub.Set(200, 0)
	pub.Spend(pub.Tokens) // drained
	pub.Refill(int64(300 * time.Millisecond))
	if pub.Tokens < 59.9 {
		t.Fatalf("publish bucket after a 300 ms stall: %.1f tokens, want 60", pub.Tokens)
	}
	var disp dispatch.Bucket
	disp.Set(200, 0)
	disp.Spend(disp.Tokens)
	disp.Refill(int64(300 * time.Millisecond))
	if disp.Tokens != 20 {
		t.Fatalf("dispatch bucket after a 300 ms stall: %.1f tokens, want its burst of 20", disp.Tokens)
	}
}

// TestTopicDispatchMatchesRate: the topic's dispatch rate (the dispatcher cores' shared
// Limiter) allows what the cores' own rate (dispatch.Rate, which the dispatch simulation
// checks) allows, on the same seeded sequence of reads.
func TestTopicDispatchMatchesRate(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for run := 0; run < 200; run++ {
		msgs, bytes := int64(r.IntN(3)*r.IntN(1000)), int64(r.IntN(3)*r.IntN(100000))
		now := time.Unix(1000, 0).UnixNano()
		var td topicDispatch
		td.rate.Set(msgs, bytes, now)
		td.on.Store(msgs > 0 || bytes > 0)
		var dr dispatch.Rate
		dr.Set(msgs, bytes, now)
		for step := 0; step < 50; step++ {
			now += r.Int64N(int64(50 * time.Millisecond))
			n1, w1 := td.Allow(now)
			n2, w2 := dr.Allow(now)
			if n1 != n2 || w1 != w2 {
				t.Fatalf("run %d (%d msg/s, %d B/s) step %d: topic allows %d (wait %d), dispatch.Rate %d (wait %d)",
					run, msgs, bytes, step, n1, w1, n2, w2)
			}
			if n1 > 0 {
				m, b := float64(1+r.IntN(n1)), float64(r.IntN(5000))
				td.Spend(m, b)
				dr.Spend(m, b)
			}
		}
	}
}
