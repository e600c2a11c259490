package interop

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/broker"
	mp "github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// TestKeepAlive: the broker answers PING with PONG, pings an idle client itself, and closes
// a connection that stays silent for twice the keep-alive interval.
func TestKeepAlive(t *testing.T) {
	c := newCluster(t, clusterOpts{memLog: true, tweak: func(cfg *broker.Config) {
		cfg.KeepAliveInterval = 200 * time.Millisecond
	}})
	nc := rawConnect(t, c.broker.Addr().String())
	b, _ := mp.AppendCommand(nil, mp.Wrap(&pb.CommandPing{}))
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	fr := mp.NewFrameReader(nc, 0)
	sawPong, sawPing := false, false
	start := time.Now()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break // closed by the broker
		}
		switch f.Cmd.GetType() {
		case pb.BaseCommand_PONG:
			sawPong = true
		case pb.BaseCommand_PING:
			sawPing = true // and we do not answer
		}
	}
	if !sawPong || !sawPing {
		t.Fatalf("pong %v, ping %v", sawPong, sawPing)
	}
	if el := time.Since(start); el < 300*time.Millisecond || el > 5*time.Second {
		t.Fatalf("silent connection closed after %v, want about 400ms", el)
	}
}

// TestAutoTopicCreationOff: with auto-creation disabled, producers of an unknown topic get
// TopicNotFound; a topic created through the service API works.
func TestAutoTopicCreationOff(t *testing.T) {
	c := newCluster(t, clusterOpts{memLog: true, tweak: func(cfg *broker.Config) { cfg.DisableAutoTopicCreation = true }})
	cl := c.client()
	topic := topicName(t)
	_, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err == nil || !strings.Contains(err.Error(), "TopicNotFound") {
		t.Fatalf("producer of an unknown topic: %v", err)
	}
	if err := c.broker.CreateTopic(ctxT(t, 10*time.Second), topic); err != nil {
		t.Fatal(err)
	}
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic})
	produceN(t, p, 1, nil)
}

// TestAckWithResponse: acknowledgements with a request id are answered (ACK_RESPONSE).
func TestAckWithResponse(t *testing.T) {
	c := newCluster(t, devOpts)
	cl := c.client()
	topic := topicName(t)
	cons := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", AckWithResponse: true})
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic})
	produceN(t, p, 3, nil)
	ctx := ctxT(t, time.Minute)
	for i := 0; i < 3; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatalf("ack with response: %v", err)
		}
	}
	st, err := c.broker.TopicStats(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if b := st.Subscriptions["s"].MsgBacklog; b != 0 {
		t.Fatalf("backlog %d after acknowledged acks", b)
	}
}
