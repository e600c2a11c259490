package interop

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/admin"
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
	// Nothing is readable while both are open: reads are bounded before the first entry of
	// the oldest open transaction (the buffer's max read position), checked directly rather
	// than by waiting for a message not to arrive; the final order [c1 plain1 c2] then shows
	// that plain1 waited for it.
	bs, err := c.broker.TransactionBufferStats(ctx, topic)
	if err != nil || bs.OngoingTxnSize != 2 || bs.MaxReadPosition == nil {
		t.Fatalf("transaction buffer with two open transactions: %+v %v", bs, err)
	}
	// c1 is the topic's first entry: reads stop before entry 0, so nothing is readable.
	if got := *bs.MaxReadPosition; !strings.HasSuffix(got, ":0") {
		t.Fatalf("max read position %s, want c1's position (the first entry; last stored %s)", got, bs.LastStored)
	}
	// All five stored entries are held back, in the admin stats and in the metrics.
	if bs.MaxReadPositionLag != 5 {
		t.Fatalf("max read position lag %d, want the 5 entries stored", bs.MaxReadPositionLag)
	}
	rec := httptest.NewRecorder()
	c.broker.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if want := fmt.Sprintf("magnetar_txn_buffer_max_read_lag_entries{topic=%q} 5", topic); !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("metrics lack %s", want)
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

// TestTxnConsumeTransformProduce: receive from A, send to B and acknowledge on A in one
// transaction; committed ones are acknowledged on A and visible on B, aborted ones are
// redelivered on A and invisible on B; a conflicting acknowledgement of a position another
// open transaction holds fails.
func TestTxnConsumeTransformProduce(t *testing.T) {
	c := newTxnCluster(t)
	cl := c.txnClient()
	a, b := topicName(t), topicName(t)
	pa, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: a, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: b, DisableBatching: true, SendTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: a, SubscriptionName: "transform", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, NackRedeliveryDelay: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: b, SubscriptionName: "check",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 2*time.Minute)
	const n = 20
	for i := 0; i < n; i++ {
		if _, err := pa.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%02d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	// Every third message's transaction aborts the first time; its message comes back.
	aborted := map[string]bool{}
	done := map[string]bool{}
	for len(done) < n {
		m, err := ca.Receive(ctx)
		if err != nil {
			t.Fatalf("receive on A: %v (done %d)", err, len(done))
		}
		s := string(m.Payload())
		if done[s] {
			t.Fatalf("%s redelivered after its transaction committed", s)
		}
		tx, err := cl.NewTransaction(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pb.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("t-" + s), Transaction: tx}); err != nil {
			t.Fatal(err)
		}
		if err := ca.AckWithTxn(m, tx); err != nil {
			t.Fatalf("ack %s: %v", s, err)
		}
		var i int
		fmt.Sscanf(s, "m%d", &i)
		if i%3 == 0 && !aborted[s] {
			aborted[s] = true
			// Another transaction cannot acknowledge what this one holds.
			tx2, err := cl.NewTransaction(time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := ca.AckWithTxn(m, tx2); err == nil {
				t.Fatalf("conflicting ack of %s succeeded", s)
			}
			_ = tx2.Abort(ctx)
			if err := tx.Abort(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		done[s] = true
	}
	got := receiveAll(t, cb, n, time.Second)
	if len(got) != n {
		t.Fatalf("B has %d messages, want %d: %v", len(got), n, got)
	}
	seen := map[string]bool{}
	for _, s := range got {
		if seen[s] || !done[s[2:]] {
			t.Fatalf("B: unexpected or duplicate %s in %v", s, got)
		}
		seen[s] = true
	}
}

// getJSON GETs url and decodes the answer; it returns the HTTP status.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("decode %s: %v", url, err)
		}
	}
	return resp.StatusCode
}

// TestTxnAdmin: /admin/v3/transactions as Pulsar serves them — a transaction's metadata
// with the participants keyed by the names the client sent, the buffer's view of it, the
// coordinators, slow transactions, and 404 for an unknown transaction.
func TestTxnAdmin(t *testing.T) {
	var h http.Handler = http.NotFoundHandler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	c := newCluster(t, clusterOpts{tweak: func(cfg *broker.Config) {
		cfg.HTTPURL = srv.URL
		cfg.TransactionCoordinatorEnabled = true
	}})
	h = admin.Handler(c.broker, admin.Options{Logger: testLogger(t)})
	cl := c.txnClient()
	topic := topicName(t)
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := cl.NewTransaction(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctxT(t, time.Minute), &pulsar.ProducerMessage{Payload: []byte("x"), Transaction: tx}); err != nil {
		t.Fatal(err)
	}
	id := tx.GetTxnID()
	base := srv.URL + "/admin/v3/transactions/"
	var md broker.TxnMetadata
	if st := getJSON(t, fmt.Sprintf("%stransactionMetadata/%d/%d", base, id.MostSigBits, id.LeastSigBits), &md); st != 200 {
		t.Fatalf("transactionMetadata: %d", st)
	}
	if md.Status != "OPEN" || md.TxnID != fmt.Sprintf("(%d,%d)", id.MostSigBits, id.LeastSigBits) || md.TimeoutAt != 60000 {
		t.Fatalf("metadata %+v", md)
	}
	in, ok := md.ProducedPartitions[topic]
	if !ok || in.StartPosition == nil || in.Aborted {
		t.Fatalf("producedPartitions %+v (want %s with a start position)", md.ProducedPartitions, topic)
	}
	var slow map[string]broker.TxnMetadata
	if st := getJSON(t, base+"slowTransactions/0", &slow); st != 200 || len(slow) != 1 {
		t.Fatalf("slowTransactions: %d %v", st, slow)
	}
	rest := strings.TrimPrefix(topic, "persistent://")
	var bs broker.TxnBufferStats
	if st := getJSON(t, base+"transactionBufferStats/"+rest, &bs); st != 200 || bs.OngoingTxnSize != 1 || bs.MaxReadPosition == nil {
		t.Fatalf("transactionBufferStats: %d %+v", st, bs)
	}
	var cs map[string]broker.CoordinatorStats
	if st := getJSON(t, base+"coordinatorStats", &cs); st != 200 || cs["0"].OngoingTxnSize != 1 || cs["0"].State != "Ready" {
		t.Fatalf("coordinatorStats: %d %+v", st, cs)
	}
	if err := tx.Abort(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if st := getJSON(t, base+"transactionMetadata/0/999999", nil); st != http.StatusNotFound {
		t.Fatalf("unknown transaction: %d, want 404", st)
	}
	if st := getJSON(t, base+"transactionMetadata/x/1", nil); st != http.StatusBadRequest {
		t.Fatalf("malformed id: %d, want 400", st)
	}
}
