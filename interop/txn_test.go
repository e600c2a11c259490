package interop

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/broker"
)

func newTxnCluster(t *testing.T) *cluster {
	return newCluster(t, clusterOpts{tweak: func(c *broker.Config) {
		c.TransactionCoordinatorEnabled = true
		c.TransactionCoordinators = 2
	}})
}

// txnClient is a client with transactions on.
func (c *cluster) txnClient() pulsar.Client {
	c.t.Helper()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.url, OperationTimeout: 30 * time.Second,
		ConnectionTimeout: 5 * time.Second, Logger: clientLogger(), EnableTransaction: true})
	if err != nil {
		c.t.Fatalf("client: %v", err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// receiveAll receives until no message arrives within quiet (the broker has nothing more
// to deliver: the caller checks exact contents, so a missing message fails the test).
func receiveAll(t *testing.T, cons pulsar.Consumer, want int, quiet time.Duration) []string {
	t.Helper()
	var got []string
	for {
		d := quiet
		if len(got) < want {
			d = 30 * time.Second
		}
		m, err := cons.Receive(ctxT(t, d))
		if err != nil {
			return got
		}
		got = append(got, string(m.Payload()))
		cons.Ack(m) //nolint:errcheck
	}
}

// TestTxnProduceVisibility: messages sent in a transaction reach consumers only once it
// commits; aborted ones never; a non-transactional message behind an open transaction
// waits for it (max read position); a commit or abort of an ended transaction answers
// TransactionNotFound.
func TestTxnProduceVisibility(t *testing.T) {
	c := newTxnCluster(t)
	cl := c.txnClient()
	topic := topicName(t)
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// A subscription that consumes nothing keeps the data (retention is 0, as in Pulsar).
	keeper, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "keeper",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReceiverQueueSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer keeper.Close()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, time.Minute)
	send := func(tx pulsar.Transaction, s string) {
		t.Helper()
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(s), Transaction: tx}); err != nil {
			t.Fatalf("send %s: %v", s, err)
		}
	}
	commitTx, err := cl.NewTransaction(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	abortTx, err := cl.NewTransaction(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	send(commitTx, "c1")
	send(abortTx, "a1")
	send(nil, "plain1") // behind two open transactions: held
	send(commitTx, "c2")
	send(abortTx, "a2")
	// Nothing is visible while both are open (virtual: the consumer must see nothing at
	// all until the first outcome, so a short quiet wait suffices to catch a leak).
	if m, err := cons.Receive(ctxT(t, 300*time.Millisecond)); err == nil {
		t.Fatalf("received %q while its transactions are open", m.Payload())
	}
	if err := abortTx.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if err := commitTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := receiveAll(t, cons, 3, time.Second)
	if fmt.Sprint(got) != "[c1 plain1 c2]" {
		t.Fatalf("got %v, want [c1 plain1 c2]", got)
	}
	if err := commitTx.Commit(ctx); err == nil {
		t.Fatal("second commit succeeded")
	}
	cons1, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "before-restart",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	if got := receiveAll(t, cons1, 3, time.Second); fmt.Sprint(got) != "[c1 plain1 c2]" {
		t.Fatalf("new subscription got %v, want [c1 plain1 c2]", got)
	}
	// A subscription from the earliest position after a restart sees the same.
	c.restartBroker()
	cl2 := c.txnClient()
	cons2, err := cl2.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "after-restart",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	if got := receiveAll(t, cons2, 3, time.Second); fmt.Sprint(got) != "[c1 plain1 c2]" {
		t.Fatalf("after restart got %v, want [c1 plain1 c2]", got)
	}
}
