package interop

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
)

// Seed 003's reproduction end to end: several hundred pending acks of an open transaction
// span several ledgers of the subscription's pending-ack log.

const paAcks = 300

// newPACluster is a cluster with transactions on and small ledgers (the pending-ack log
// rolls over every 50 records).
func newPACluster(t *testing.T) *cluster {
	return newCluster(t, clusterOpts{tweak: func(c *broker.Config) {
		c.TransactionCoordinatorEnabled = true
		c.TransactionCoordinators = 2
		c.ManagedLedger.MaxEntriesPerLedger = 50
	}})
}

// pendingAcks produces paAcks messages to tp and acknowledges each on subscription sub in
// one transaction, left open; it returns the ledgers of the pending-ack log.
func (c *cluster) pendingAcks(cl pulsar.Client, tp, sub string) []mledger.LedgerInfo {
	t := c.t
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: tp, SubscriptionName: sub, Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for i := 0; i < paAcks; i++ {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i))}, nil)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	tx, err := cl.NewTransaction(10 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < paAcks; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if err := cons.AckWithTxn(m, tx); err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
	}
	n, err := topicname.Parse(tp)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := c.store.Get(ctx, metadata.ManagedLedgerKey(topic.PendingAckLogName(n.ManagedLedgerName(), sub)))
	if err != nil {
		t.Fatalf("pending-ack log: %v", err)
	}
	var in mledger.Info
	if err := json.Unmarshal(kv.Value, &in); err != nil {
		t.Fatal(err)
	}
	if len(in.Ledgers) < 4 {
		t.Fatalf("the pending-ack log has %d ledgers, want several: %+v", len(in.Ledgers), in.Ledgers)
	}
	return in.Ledgers
}

// TestPendingAckLogLedgerDeleted: a ledger of the pending-ack log is deleted and the topic
// reloaded: subscribing fails within a few seconds with an error naming the cause, and a
// subscription of another topic on the same broker subscribes normally meanwhile.
func TestPendingAckLogLedgerDeleted(t *testing.T) {
	c := newPACluster(t)
	cl := c.txnClient()
	victim, other := topicName(t), topicName(t)
	ls := c.pendingAcks(cl, victim, "s")
	ctx := ctxT(t, time.Minute)
	gone := ls[1].ID
	if err := c.store.Delete(ctx, metadata.LedgerKey(gone), metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	// Unloading is not enough here: the broker's ledger handles and entry cache still serve
	// the deleted ledger's entries (the bookie keeps them until its garbage collection), so
	// the broker restarts (a bookie shell deleteledger would also remove the entries).
	c.restartBroker()
	cl2, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.url, OperationTimeout: 20 * time.Second,
		ConnectionTimeout: 5 * time.Second, Logger: clientLogger(), EnableTransaction: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	type result struct {
		err error
		d   time.Duration
	}
	start := time.Now()
	victimDone := make(chan result, 1)
	go func() {
		cons, err := cl2.Subscribe(pulsar.ConsumerOptions{Topic: victim, SubscriptionName: "s", Type: pulsar.Shared})
		if err == nil {
			cons.Close()
		}
		victimDone <- result{err, time.Since(start)}
	}()
	cons, err := cl2.Subscribe(pulsar.ConsumerOptions{Topic: other, SubscriptionName: "s", Type: pulsar.Shared})
	if err != nil {
		t.Fatalf("subscribe to another topic meanwhile: %v", err)
	}
	cons.Close()
	t.Logf("another topic subscribed in %v", time.Since(start))
	r := <-victimDone
	t.Logf("victim subscribe: %v after %v", r.err, r.d)
	if r.err == nil {
		t.Fatal("subscribe succeeded on a pending-ack log missing a ledger")
	}
	if r.d > 5*time.Second {
		t.Fatalf("subscribe failed after %v, want within a few seconds", r.d)
	}
	if msg := r.err.Error(); !strings.Contains(msg, "pending-ack log") || !strings.Contains(msg, fmt.Sprint(gone)) {
		t.Fatalf("the error %q does not name the cause (ledger %d of the pending-ack log)", msg, gone)
	}
}

// TestPendingAckReplayBookieOutage: with the bookie stopped while a subscription's
// pending-ack log must be replayed, the replay retries with backoff (a few attempts per
// second at most, none of them a hot loop) and the subscribe succeeds, with every pending
// ack locked again, once the bookie is back.
func TestPendingAckReplayBookieOutage(t *testing.T) {
	c := newPACluster(t)
	cl := c.txnClient()
	victim := topicName(t)
	c.pendingAcks(cl, victim, "s")
	c.restartBroker()
	cl2, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.url, OperationTimeout: 90 * time.Second,
		ConnectionTimeout: 5 * time.Second, Logger: clientLogger(), EnableTransaction: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	// Load the topic while the bookie is up, then stop it: the subscription's pending-ack log
	// cannot be opened or read.
	p, err := cl2.CreateProducer(pulsar.ProducerOptions{Topic: victim})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c.bookie.Close()
	subscribed := make(chan error, 1)
	go func() {
		cons, err := cl2.Subscribe(pulsar.ConsumerOptions{Topic: victim, SubscriptionName: "s", Type: pulsar.Shared})
		if err == nil {
			defer cons.Close()
		}
		subscribed <- err
	}()
	ctx := ctxT(t, 2*time.Minute)
	attempts := func() int {
		st, err := c.broker.PendingAckStats(ctx, victim, "s")
		if err != nil {
			return -1
		}
		return st.ReplayFailures
	}
	waitAttempts := func(n int) (time.Time, int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if a := attempts(); a >= n {
				return time.Now(), a
			}
			if time.Now().After(deadline) {
				t.Fatalf("the replay failed only %d times in 30 s with the bookie down", attempts())
			}
			select {
			case err := <-subscribed:
				t.Fatalf("subscribe ended with the bookie down: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	t1, a1 := waitAttempts(2)
	t2, a2 := waitAttempts(a1 + 2)
	rate := float64(a2-a1) / t2.Sub(t1).Seconds()
	t.Logf("replay attempts with the bookie down: %d, then %d more in %v (%.1f/s)", a1, a2-a1, t2.Sub(t1).Round(time.Millisecond), rate)
	if rate > 5 {
		t.Fatalf("%.1f replay attempts per second with the bookie down, want a few at most", rate)
	}
	c.startBookie()
	if err := <-subscribed; err != nil {
		t.Fatalf("subscribe after the bookie came back: %v", err)
	}
	st, err := c.broker.PendingAckStats(ctx, victim, "s")
	if err != nil || st.State != "Ready" || st.LockedPositions != paAcks {
		t.Fatalf("pending acks after the outage: %+v %v (want Ready with %d locked)", st, err, paAcks)
	}
}
