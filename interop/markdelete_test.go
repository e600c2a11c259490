package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/broker"
)

// TestPolicyMarkDeleteRate: with a namespace persistence policy of 0.1 mark-deletes a
// second, a subscription's acknowledgements take effect at once (markDeletePosition) while
// their persist is held (persistentMarkDeletePosition behind, markDeleteHeld); the flush
// timer persists the held position within its window; a live change of the rate to
// unlimited persists at once; an unload persists the held state; after a graceful broker
// restart nothing acknowledged is delivered again.
func TestPolicyMarkDeleteRate(t *testing.T) {
	const flush = 4 * time.Second
	c := newPolicyCluster(t, func(cfg *broker.Config) { cfg.ManagedLedger.CursorFlushInterval = flush })
	a := c.admin()
	if err := a.Namespaces().CreateNamespace("public/md"); err != nil {
		t.Fatal(err)
	}
	setRate := func(r float64) {
		t.Helper()
		if err := a.Namespaces().SetPersistence("public/md", utils.NewPersistencePolicies(1, 1, 1, r)); err != nil {
			t.Fatal(err)
		}
	}
	setRate(0.1)
	topic := "persistent://public/md/" + sanitize(t.Name())
	cl := c.client()
	// Acks go one by one (no grouping), so that the second one finds no token.
	cons := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		AckGroupingOptions: &pulsar.AckGroupingOptions{MaxSize: 1}})
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	ctx := ctxT(t, 2*time.Minute)
	const n = 40
	for i := 0; i < n; i++ {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	cursor := func() broker.CursorStats {
		t.Helper()
		var in broker.InternalStats
		c.getJSON("/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/internalStats", &in)
		return in.Cursors["s"]
	}
	received := 0
	ackNext := func(k int) string {
		t.Helper()
		var last pulsar.MessageID
		for i := 0; i < k; i++ {
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("m-%d", received); string(m.Payload()) != want {
				t.Fatalf("received %q, want %q", m.Payload(), want)
			}
			received++
			if err := cons.Ack(m); err != nil {
				t.Fatal(err)
			}
			last = m.ID()
		}
		return fmt.Sprintf("%d:%d", last.LedgerID(), last.EntryID())
	}
	// Held: the flush timer may fire between an ack and the look (each try has a small
	// chance of it), so try again with the next messages.
	var held broker.CursorStats
	for try := 0; ; try++ {
		pos := ackNext(5)
		waitFor(t, 10*time.Second, "the acks in memory", func() bool { return cursor().MarkDeletePosition == pos })
		if held = cursor(); held.MarkDeleteHeld && held.PersistentMarkDeletePosition != held.MarkDeletePosition {
			break
		}
		if try == 3 {
			t.Fatalf("never held: %+v", held)
		}
	}
	t.Logf("held: markDeletePosition %s, persistentMarkDeletePosition %s", held.MarkDeletePosition, held.PersistentMarkDeletePosition)
	t0 := time.Now()
	waitFor(t, flush+10*time.Second, "the flush timer to persist", func() bool {
		st := cursor()
		return st.PersistentMarkDeletePosition == held.MarkDeletePosition && !st.MarkDeleteHeld
	})
	if d := time.Since(t0); d > flush+5*time.Second {
		t.Errorf("persisted after %v, the flush period is %v", d, flush)
	}
	t.Logf("persisted by the flush timer after %v", time.Since(t0))

	// A live change to unlimited persists the held state without waiting for the timer.
	for try := 0; ; try++ {
		ackNext(1) // the token (one per 10 s) may be back
		pos := ackNext(2)
		waitFor(t, 10*time.Second, "the acks in memory", func() bool { return cursor().MarkDeletePosition == pos })
		if held = cursor(); held.MarkDeleteHeld {
			break
		}
		if try == 3 {
			t.Fatalf("never held: %+v", held)
		}
	}
	setRate(0)
	if st := cursor(); st.MarkDeleteHeld {
		t.Fatalf("still held after the rate went unlimited: %+v", st)
	}
	waitFor(t, flush/2, "the persist of the unlimited rate", func() bool {
		return cursor().PersistentMarkDeletePosition == held.MarkDeletePosition
	})

	// An unload (a graceful close) persists what is held.
	setRate(0.1)
	ackNext(1)
	pos := ackNext(2)
	waitFor(t, 10*time.Second, "the acks in memory", func() bool { return cursor().MarkDeletePosition == pos })
	if err := a.Topics().Unload(mustTopic(t, topic)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the reloaded cursor", func() bool { // the consumer reconnects and reloads it
		st := cursor()
		return st.MarkDeletePosition == pos && st.PersistentMarkDeletePosition == pos
	})

	// A graceful restart: nothing acknowledged comes again.
	ackNext(1)
	pos = ackNext(3)
	waitFor(t, 10*time.Second, "the acks in memory", func() bool { return cursor().MarkDeletePosition == pos })
	cons.Close()
	c.restartBroker()
	cl2 := c.client()
	cons2 := subscribe(t, cl2, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	m, err := cons2.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("m-%d", received); string(m.Payload()) != want {
		t.Fatalf("after a graceful restart the subscription delivered %q first, want %q (the first unacknowledged)", m.Payload(), want)
	}
	if st := cursor(); st.PersistentMarkDeletePosition != pos {
		t.Errorf("after the restart: %+v, want persisted %s", st, pos)
	}
}

// TestPolicyDispatchRelativeToPublish: a topic dispatch rate of 10 msg/s relative to the
// publish rate lets a tailing consumer follow a producer publishing about 100 msg/s (the
// rate is 10 plus the publish rate measured every second); the same rate not relative
// holds it at 10 msg/s.
func TestPolicyDispatchRelativeToPublish(t *testing.T) {
	c, topic, tn := policyTopic(t, nil)
	a := c.admin()
	cl := c.client()
	ctx := ctxT(t, 2*time.Minute)
	cons := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	// run publishes about 100 msg/s for d while the consumer receives, and returns how many
	// were published, and when each message was received, by the end.
	run := func(d time.Duration) (published int, received []time.Time) {
		t.Helper()
		got := make(chan []time.Time)
		stop := make(chan struct{})
		go func() {
			var at []time.Time
			for {
				rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				m, err := cons.Receive(rctx)
				cancel()
				if err == nil {
					cons.Ack(m) //nolint:errcheck // acks are not what is tested
					at = append(at, time.Now())
				}
				select {
				case <-stop:
					got <- at
					return
				default:
				}
			}
		}()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			<-tick.C
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			published++
		}
		close(stop)
		return published, <-got
	}
	set := func(relative bool) {
		t.Helper()
		if err := a.Topics().SetDispatchRate(tn, utils.DispatchRateData{DispatchThrottlingRateInMsg: 10,
			DispatchThrottlingRateInByte: -1, RatePeriodInSecond: 1, RelativeToPublishRate: relative}); err != nil {
			t.Fatal(err)
		}
	}
	const d = 6 * time.Second
	set(true)
	pub, at := run(d)
	rec := len(at)
	t.Logf("relative: %d published, %d received in %v", pub, rec, d)
	if limit := int(10*d.Seconds()) + 2; rec <= 3*limit || rec < pub/2 {
		t.Errorf("relative to a publish rate of %.0f msg/s, the consumer got %d of %d in %v (10 msg/s alone allows %d)",
			float64(pub)/d.Seconds(), rec, pub, d, limit)
	}
	// Not relative: 10 msg/s whatever is published. The first second is left out: it has
	// what was dispatched before the change (a read in flight, the client's queue).
	set(false)
	start := time.Now()
	pub2, at2 := run(4 * time.Second)
	late := 0
	for _, r := range at2 {
		if r.After(start.Add(time.Second)) {
			late++
		}
	}
	t.Logf("not relative: %d published, %d received in 4 s, %d of them in the last 3 s", pub2, len(at2), late)
	if late > 10*3+5 { // 30, the bucket's 1 token, and receipt jitter at the window's start
		t.Errorf("not relative: received %d in 3 s at 10 msg/s", late)
	}
}

// TestPolicyReplicatorDispatchRate: the replicator dispatch rate is set, read and removed at
// the namespace and the topic level (pulsaradmin and the REST paths) with Pulsar's
// precedence for ?applied=true; bad values get 400 with a JSON reason and change nothing.
// (Magnetar has no geo-replication: the rate takes effect once replication exists.)
func TestPolicyReplicatorDispatchRate(t *testing.T) {
	c, topic, tn := policyTopic(t, nil)
	a := c.admin()
	ns := "public/default"
	nsRate := utils.DispatchRate{DispatchThrottlingRateInMsg: 100, DispatchThrottlingRateInByte: 1000, RatePeriodInSecond: 1}
	if err := a.Namespaces().SetReplicatorDispatchRate(*mustNS(t, ns), nsRate); err != nil {
		t.Fatal(err)
	}
	nsPath := "/admin/v2/namespaces/" + ns + "/replicatorDispatchRate"
	removeNS := func() error { // pulsaradmin has no call for it
		req, _ := http.NewRequest(http.MethodDelete, c.http.URL+nsPath, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			return fmt.Errorf("DELETE %s: %d", nsPath, resp.StatusCode)
		}
		return nil
	}
	t.Cleanup(func() { _ = removeNS() })
	if got, err := a.Namespaces().GetReplicatorDispatchRate(*mustNS(t, ns)); err != nil || got.DispatchThrottlingRateInMsg != 100 ||
		got.DispatchThrottlingRateInByte != 1000 {
		t.Fatalf("namespace rate %+v %v", got, err)
	}
	path := policyPath(topic, "replicatorDispatchRate")
	applied := func() broker.DispatchRate {
		t.Helper()
		var r broker.DispatchRate
		c.getJSON(path+"?applied=true", &r)
		return r
	}
	if r := applied(); r.DispatchThrottlingRateInMsg != 100 {
		t.Fatalf("applied without a topic rate: %+v, want the namespace's", r)
	}
	if err := a.Topics().SetReplicatorDispatchRate(tn, utils.DispatchRateData{DispatchThrottlingRateInMsg: 7,
		DispatchThrottlingRateInByte: -1, RatePeriodInSecond: 2, RelativeToPublishRate: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Topics().GetReplicatorDispatchRate(tn); err != nil || got.DispatchThrottlingRateInMsg != 7 ||
		got.RatePeriodInSecond != 2 || !got.RelativeToPublishRate {
		t.Fatalf("topic rate %+v %v", got, err)
	}
	if r := applied(); r.DispatchThrottlingRateInMsg != 7 {
		t.Fatalf("applied with a topic rate: %+v, want the topic's", r)
	}
	// Bad input: 400 with a reason, nothing changed.
	for _, body := range []string{`{"dispatchThrottlingRateInMsg":-5}`, `{"ratePeriodInSecond":-1}`, `{"dispatchThrottlingRateInMsg":`, `[1]`} {
		for _, p := range []string{path, nsPath} {
			resp, err := http.Post(c.http.URL+p, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			var reason struct{ Reason string }
			err = json.NewDecoder(resp.Body).Decode(&reason)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || err != nil || reason.Reason == "" {
				t.Fatalf("POST %s %s: %d, reason %q (%v)", p, body, resp.StatusCode, reason.Reason, err)
			}
		}
	}
	if r := applied(); r.DispatchThrottlingRateInMsg != 7 {
		t.Fatalf("a bad value changed the topic rate: %+v", r)
	}
	if got, _ := a.Namespaces().GetReplicatorDispatchRate(*mustNS(t, ns)); got.DispatchThrottlingRateInMsg != 100 {
		t.Fatalf("a bad value changed the namespace rate: %+v", got)
	}
	// Remove: the topic falls back to the namespace's, then to none.
	if err := a.Topics().RemoveReplicatorDispatchRate(tn); err != nil {
		t.Fatal(err)
	}
	if r := applied(); r.DispatchThrottlingRateInMsg != 100 {
		t.Fatalf("applied after the topic's removal: %+v, want the namespace's", r)
	}
	if err := removeNS(); err != nil {
		t.Fatal(err)
	}
	if r := applied(); r.DispatchThrottlingRateInMsg == 100 || r.DispatchThrottlingRateInMsg == 7 {
		t.Fatalf("applied after both removals: %+v", r)
	}
}

// TestMarkDeleteRateTxnCommitDurable: with a mark-delete rate that holds every plain ack
// (0.001/s, no flush timer within the test), a committed transaction's acks are persisted
// at once — the commit flushes the cursor before its marker, so a crash can never deliver
// a committed transactional ack again (exactly-once) — while plain acks stay held.
func TestMarkDeleteRateTxnCommitDurable(t *testing.T) {
	c := newPolicyCluster(t, func(cfg *broker.Config) {
		cfg.TransactionCoordinatorEnabled = true
		cfg.TransactionCoordinators = 2
		cfg.ManagedLedger.CursorFlushInterval = time.Hour
	})
	a := c.admin()
	if err := a.Namespaces().CreateNamespace("public/mdtxn"); err != nil {
		t.Fatal(err)
	}
	if err := a.Namespaces().SetPersistence("public/mdtxn", utils.NewPersistencePolicies(1, 1, 1, 0.001)); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/mdtxn/" + sanitize(t.Name())
	cl := c.txnClient()
	ctx := ctxT(t, time.Minute)
	cons := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		AckGroupingOptions: &pulsar.AckGroupingOptions{MaxSize: 1}})
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	const n = 10
	for i := 0; i < n; i++ {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	cursor := func() broker.CursorStats {
		t.Helper()
		var in broker.InternalStats
		c.getJSON("/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/internalStats", &in)
		return in.Cursors["s"]
	}
	pos := func(m pulsar.Message) string { return fmt.Sprintf("%d:%d", m.ID().LedgerID(), m.ID().EntryID()) }
	var ms []pulsar.Message
	for i := 0; i < n; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	// Two plain acks: the first takes the cursor's token (and creates the cursor's ledger,
	// whose first entry takes what comes meanwhile), the second is held.
	if err := cons.Ack(ms[0]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the first plain ack persisted", func() bool { return cursor().PersistentMarkDeletePosition == pos(ms[0]) })
	if err := cons.Ack(ms[1]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the plain acks in memory", func() bool { return cursor().MarkDeletePosition == pos(ms[1]) })
	if st := cursor(); !st.MarkDeleteHeld || st.PersistentMarkDeletePosition == pos(ms[1]) {
		t.Fatalf("the second plain ack is not held: %+v", st)
	}
	// The rest in a transaction: its commit persists the cursor whatever the rate.
	tx, err := cl.NewTransaction(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[2:] {
		if err := cons.AckWithTxn(m, tx); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	last := pos(ms[n-1])
	waitFor(t, 10*time.Second, "the committed acks in memory", func() bool { return cursor().MarkDeletePosition == last })
	waitFor(t, 10*time.Second, "the committed acks persisted", func() bool {
		st := cursor()
		return st.PersistentMarkDeletePosition == last && !st.MarkDeleteHeld
	})
}
