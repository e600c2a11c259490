package interop

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// produceN sends n messages "msg-<i>" asynchronously (batched by default) and waits for
// every receipt; it returns their ids.
func produceN(t *testing.T, p pulsar.Producer, n int, key func(int) string) []pulsar.MessageID {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	ids := make([]pulsar.MessageID, n)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		msg := &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("msg-%d", i))}
		if key != nil {
			msg.Key = key(i)
		}
		p.SendAsync(ctx, msg, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err == nil {
				ids[i] = id
			}
			errs <- err
		})
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	return ids
}

func testProduceConsumeInOrder(t *testing.T, o clusterOpts, n int) {
	c := newCluster(t, o)
	cl := c.client()
	topic := topicName(t)
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produceN(t, p, n, nil)
	ctx := ctxT(t, 2*time.Minute)
	for i := 0; i < n; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if got, want := string(m.Payload()), fmt.Sprintf("msg-%d", i); got != want {
			t.Fatalf("message %d: got %q, want %q", i, got, want)
		}
		if i%100 == 99 || i == n-1 {
			if err := cons.AckCumulative(m); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestMemProduceConsumeInOrder(t *testing.T) {
	testProduceConsumeInOrder(t, clusterOpts{memLog: true}, 10000)
}

func TestProduceConsumeInOrder(t *testing.T) {
	testProduceConsumeInOrder(t, devOpts, 10000)
}
