package topic_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// countConn counts the receipts a topic sends and signals when the count reaches want.
type countConn struct {
	receipts atomic.Int64
	want     int64
	done     chan struct{}
}

func (c *countConn) Send(cmd *pb.BaseCommand) {
	if cmd.GetType() == pb.BaseCommand_SEND_RECEIPT && c.receipts.Add(1) == c.want {
		close(c.done)
	}
}
func (c *countConn) SendMessage(*pb.BaseCommand, []byte) {}
func (c *countConn) ProducerClosed(*topic.Producer)      {}
func (c *countConn) ConsumerClosed(*topic.Consumer)      {}
func (c *countConn) PublishDone()                        {}
func (c *countConn) RemoteAddr() string                  { return "bench" }
func (c *countConn) ClientVersion() string               { return "bench" }

// BenchmarkPublish measures the publish pipeline (SEND to receipt) on the in-memory log,
// with deduplication on: b.N messages published back to back, timed until the last receipt.
func BenchmarkPublish(b *testing.B) { benchPublish(b, nil) }

// BenchmarkPublishPolicies is BenchmarkPublish without policies and with every data-path
// policy set but none triggered (limits, message size, publish rates far above the load):
// the A/B of the policies' per-message cost.
func BenchmarkPublishPolicies(b *testing.B) {
	b.Run("none", func(b *testing.B) { benchPublish(b, nil) })
	b.Run("all", func(b *testing.B) {
		benchPublish(b, &topic.Policies{MaxProducers: 100, MaxConsumers: 100, MaxConsumersPerSubscription: 100,
			MaxSubscriptions: 100, MaxUnackedPerConsumer: 1 << 30, MaxUnackedPerSubscription: 1 << 30, MaxMessageSize: 1 << 20,
			PublishRateMsgs: 1 << 40, PublishRateBytes: 1 << 50, BacklogQuotaLimitSize: 1 << 40, BacklogQuotaLimitTime: 1 << 20,
			SubscribeRate: 1 << 20, SubscribeRatePeriod: time.Second, DelayedTickMs: 1000, MaxDeliveryDelayMs: 1 << 40,
			DedupSnapshotInterval: 2 * time.Minute})
	})
}

func benchPublish(b *testing.B, pol *topic.Policies) {
	tp, err := topic.Open(context.Background(), topic.Config{Name: topicname.MustParse("bench"),
		Log: topictest.NewStore().Open("bench"), Dedup: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		tp.Close(context.Background())
		<-tp.Done()
	}()
	conn := &countConn{want: int64(b.N), done: make(chan struct{})}
	p := &topic.Producer{ID: 1, Name: "p", Conn: conn, AccessMode: pb.ProducerAccessMode_Shared}
	ready := make(chan error, 1)
	tp.AddProducer(p, topic.ProducerCallbacks{
		Queued: func() {}, Ready: func(topic.ProducerReady) { ready <- nil }, Failed: func(err error) { ready <- err },
	})
	if err := <-ready; err != nil {
		b.Fatal(err)
	}
	if pol != nil {
		tp.SetPolicies(*pol)
	}
	data := entry(nil, 0, "", 0)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Publish(topic.Message{SequenceID: uint64(i), HighestSequenceID: uint64(i), NumMessages: 1, Data: data})
	}
	<-conn.done
}
