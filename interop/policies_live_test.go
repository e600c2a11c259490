package interop

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
)

// The policies take effect on live topics: subscribe rate, subscription expiration,
// partitioned auto creation, deduplication and persistence on live topics, the
// delayed-delivery tick and the redirect of a topic policy change to the owning broker.

// policyPath is the admin REST path of a topic's policy.
func policyPath(topic, policy string) string {
	return "/admin/v2/persistent/" + strings.TrimPrefix(topic, "persistent://") + "/" + policy
}

// policyTopic starts a policy test cluster and creates a topic named after the test on it.
func policyTopic(t *testing.T, tweak func(*broker.Config)) (*cluster, string, utils.TopicName) {
	t.Helper()
	c := newPolicyCluster(t, tweak)
	topic := topicName(t)
	tn := mustTopic(t, topic)
	if err := c.admin().Topics().Create(tn, 0); err != nil {
		t.Fatal(err)
	}
	return c, topic, tn
}

// adminOf is a pulsaradmin client of the admin API at url.
func adminOf(t *testing.T, url string) pulsaradmin.Client {
	t.Helper()
	a, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: url})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestPolicySubscribeRate: with a subscribe rate of 1 per minute per consumer, the second
// subscribe of the same consumer (client host, consumer name and id) within the minute is
// refused with Pulsar's NotAllowed error; another consumer name is not limited.
func TestPolicySubscribeRate(t *testing.T) {
	c, topic, tn := policyTopic(t, nil)
	a := c.admin()
	if err := a.Topics().SetSubscribeRate(tn, utils.SubscribeRate{SubscribeThrottlingRatePerConsumer: 1, RatePeriodInSecond: 60}); err != nil {
		t.Fatal(err)
	}
	// Each new client numbers its consumers from 1: the first consumer of two clients
	// with one name is one consumer to the limiter, as a reconnection is.
	subscribe := func(name string) error {
		cl := c.client()
		defer cl.Close()
		cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Name: name, Type: pulsar.Shared})
		if err == nil {
			cons.Close()
		}
		return err
	}
	if err := subscribe("c1"); err != nil {
		t.Fatal(err)
	}
	if err := subscribe("c1"); err == nil || !strings.Contains(err.Error(), "NotAllowed") ||
		!strings.Contains(err.Error(), "Subscribe limited by subscribe rate limit per consumer") {
		t.Fatalf("second subscribe of a consumer within its rate period: %v", err)
	}
	if err := subscribe("c2"); err != nil {
		t.Fatalf("another consumer: %v", err)
	}
	if err := a.Topics().RemoveSubscribeRate(tn); err != nil {
		t.Fatal(err)
	}
	if err := subscribe("c1"); err != nil {
		t.Fatalf("after the rate was removed: %v", err)
	}
}

// TestPolicySubscriptionExpiration: a subscription without consumers for longer than its
// namespace's subscriptionExpirationTime is deleted; one with a consumer is kept. The
// broker's policy clock is moved instead of waiting out the minutes.
func TestPolicySubscriptionExpiration(t *testing.T) {
	var skew atomic.Int64
	c := newPolicyCluster(t, func(cfg *broker.Config) {
		cfg.Policies.SubscriptionExpiryCheckInterval = 100 * time.Millisecond
		cfg.Policies.Clock = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	a := c.admin()
	cl := c.client()
	if err := a.Namespaces().CreateNamespace("public/subexp"); err != nil {
		t.Fatal(err)
	}
	c.post("/admin/v2/namespaces/public/subexp/subscriptionExpirationTime", "1")
	topic := "persistent://public/subexp/" + sanitize(t.Name())
	idle, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	idle.Close()
	busy := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "busy"})
	subs := func() []string {
		s, err := a.Subscriptions().List(mustTopic(t, topic))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := subs(); len(s) != 2 {
		t.Fatalf("subscriptions %v", s)
	}
	waitFor(t, 20*time.Second, "the idle subscription to expire", func() bool {
		skew.Add(int64(2 * time.Minute)) // each poll: two more minutes pass for the broker
		s := subs()
		return len(s) == 1 && s[0] == "busy"
	})
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic})
	ctx := ctxT(t, 30*time.Second)
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if m, err := busy.Receive(ctx); err != nil || string(m.Payload()) != "x" {
		t.Fatalf("the kept subscription's consumer: %v %v", m, err)
	}
}

// TestPolicyAutoCreatePartitioned: in a namespace whose auto topic creation is partitioned
// with 3 default partitions, a producer of a new topic creates a partitioned topic of 3
// partitions and publishes to them.
func TestPolicyAutoCreatePartitioned(t *testing.T) {
	c := newPolicyCluster(t, nil)
	a := c.admin()
	cl := c.client()
	if err := a.Namespaces().CreateNamespace("public/autopart"); err != nil {
		t.Fatal(err)
	}
	c.post("/admin/v2/namespaces/public/autopart/autoTopicCreation",
		`{"allowAutoTopicCreation":true,"topicType":"partitioned","defaultNumPartitions":3}`)
	topic := "persistent://public/autopart/" + sanitize(t.Name())
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic})
	ctx := ctxT(t, 30*time.Second)
	for i := 0; i < 12; i++ {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: string(rune('a' + i)), Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	md, err := a.Topics().GetMetadata(mustTopic(t, topic))
	if err != nil || md.Partitions != 3 {
		t.Fatalf("partitioned metadata %+v %v, want 3 partitions", md, err)
	}
	parts, err := cl.TopicPartitions(topic)
	if err != nil || len(parts) != 3 {
		t.Fatalf("client partitions %v %v", parts, err)
	}
	var stored int64
	for _, part := range parts {
		stored += c.stats(part).MsgInCounter
	}
	if stored != 12 {
		t.Fatalf("partitions stored %d messages, want 12", stored)
	}

	// The same over an http:// service URL (the partitioned metadata is looked up over HTTP
	// with checkAllowAutoCreation=true).
	hcl, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.http.URL, OperationTimeout: 30 * time.Second, Logger: clientLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer hcl.Close()
	htopic := topic + "-http"
	hp := producer(t, hcl, pulsar.ProducerOptions{Topic: htopic})
	if _, err := hp.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if md, err := a.Topics().GetMetadata(mustTopic(t, htopic)); err != nil || md.Partitions != 3 {
		t.Fatalf("partitioned metadata over HTTP %+v %v, want 3 partitions", md, err)
	}
}

// TestPolicyDedupLive: deduplication turned off and on again on a loaded topic takes effect
// on its next message: a resent sequence id is stored while it is off and dropped while it
// is on, and the topic's statistics show the status.
func TestPolicyDedupLive(t *testing.T) {
	c, topic, tn := policyTopic(t, nil)
	a := c.admin()
	p := producer(t, c.client(), pulsar.ProducerOptions{Topic: topic, Name: "p", DisableBatching: true})
	ctx := ctxT(t, 30*time.Second)
	send := func(seq int64) {
		t.Helper()
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("x"), SequenceID: &seq}); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what string, stored int64, status string) {
		t.Helper()
		if st := c.stats(topic); st.MsgInCounter != stored || st.DeduplicationStatus != status {
			t.Fatalf("%s: stored %d, dedup %s; want %d, %s", what, st.MsgInCounter, st.DeduplicationStatus, stored, status)
		}
	}
	send(5)
	send(5)
	expect("enabled by default", 1, "Enabled")
	if err := a.Topics().SetDeduplicationStatus(tn, false); err != nil {
		t.Fatal(err)
	}
	send(5)
	send(5)
	expect("disabled on the live topic", 3, "Disabled")
	if err := a.Topics().SetDeduplicationStatus(tn, true); err != nil {
		t.Fatal(err)
	}
	send(9)
	send(9)
	expect("enabled again on the live topic", 4, "Enabled")
}

// TestPolicyPersistenceLive: a persistence policy set on a loaded topic applies to the
// ledgers created after it: the ledger the topic rolls over to has the new E/WQ/AQ, the one
// it had keeps its own.
func TestPolicyPersistenceLive(t *testing.T) {
	c, topic, tn := policyTopic(t, func(cfg *broker.Config) { cfg.ManagedLedger.MaxEntriesPerLedger = 5 })
	b2, err := bookie.Start(ctxT(t, 30*time.Second), bookie.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Store: c.store,
		Logger: testLogger(t), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b2.Close() })
	a := c.admin()
	if err := a.Subscriptions().Create(tn, "keep", utils.Earliest); err != nil { // keeps the ledgers
		t.Fatal(err)
	}
	p := producer(t, c.client(), pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	ctx := ctxT(t, 30*time.Second)
	send := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(2)
	if err := a.Topics().SetPersistence(tn, utils.PersistenceData{BookkeeperEnsemble: 2, BookkeeperWriteQuorum: 2,
		BookkeeperAckQuorum: 2}); err != nil {
		t.Fatal(err)
	}
	send(8) // past 5 entries: a rollover
	st, err := a.Topics().GetInternalStats(tn)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Ledgers) < 2 {
		t.Fatalf("ledgers %+v: no rollover", st.Ledgers)
	}
	quorum := func(id int64) [3]int {
		kv, err := c.store.Get(ctx, metadata.LedgerKey(id))
		if err != nil {
			t.Fatal(err)
		}
		m, err := ledger.UnmarshalMetadata(kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		return [3]int{m.EnsembleSize, m.WriteQuorum, m.AckQuorum}
	}
	if q := quorum(st.Ledgers[0].LedgerID); q != [3]int{1, 1, 1} {
		t.Errorf("first ledger %v, want 1/1/1", q)
	}
	if q := quorum(st.Ledgers[len(st.Ledgers)-1].LedgerID); q != [3]int{2, 2, 2} {
		t.Errorf("ledger after the rollover %v, want 2/2/2", q)
	}
}

// TestPolicyDelayedDeliveryTick: with a tick time of 30 s, a message delayed by 20 s is due
// within a tick and delivered at once (Pulsar's non-strict delayed delivery); a max delivery
// delay refuses a message delayed by more with NotAllowed.
func TestPolicyDelayedDeliveryTick(t *testing.T) {
	c, topic, _ := policyTopic(t, nil)
	cl := c.client()
	c.post(policyPath(topic, "delayedDelivery"), `{"active":true,"tickTime":30000}`)
	cons := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	ctx := ctxT(t, 30*time.Second)
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("soon"), DeliverAfter: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if m, err := cons.Receive(rctx); err != nil || string(m.Payload()) != "soon" {
		t.Fatalf("a message due within the tick time: %v %v", m, err)
	}

	// maxDeliveryDelayInMillis refuses a message delayed by more.
	c.post(policyPath(topic, "delayedDelivery"), `{"active":true,"tickTime":1000,"maxDeliveryDelayInMillis":60000}`)
	// The Go client drops a producer refused a SEND with NotAllowed: its send times out.
	late := producer(t, cl, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 2 * time.Second})
	if _, err := late.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("late"), DeliverAfter: time.Hour}); err == nil {
		t.Fatal("a message delayed by an hour passed a max delivery delay of a minute")
	}
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("ok"), DeliverAfter: time.Second}); err != nil {
		t.Fatalf("a message within the max delivery delay: %v", err)
	}
	if st := c.stats(topic); st.MsgInCounter != 2 {
		t.Fatalf("stored %d messages, want 2", st.MsgInCounter)
	}
}

// TestPolicyRedirectToOwner: a topic policy set through a broker that does not own the
// topic is redirected (307) to the owner, and takes effect there: the owner refuses the
// producer over the new limit.
func TestPolicyRedirectToOwner(t *testing.T) {
	m := newMultiBroker(t, 2, mbOpts{})
	cl := m.clientOf(m.serviceURL())
	topic := topicName(t)
	producer(t, cl, pulsar.ProducerOptions{Topic: topic})
	owner := m.ownerNode(t, topic)
	var other *mbNode
	for _, nd := range m.nodes {
		if nd != owner {
			other = nd
		}
	}
	if code, loc := httpDo(t, "GET", other.httpURL+policyPath(topic, "maxProducers")); code != 307 || !strings.HasPrefix(loc, owner.httpURL) {
		t.Fatalf("policy request on the non-owner: %d %s, want 307 to %s", code, loc, owner.httpURL)
	}
	// pulsaradmin follows the redirect.
	a := adminOf(t, other.httpURL)
	tn := mustTopic(t, topic)
	if err := a.Topics().SetMaxProducers(tn, 1); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Topics().GetMaxProducers(tn); err != nil || n != 1 {
		t.Fatalf("max producers %d %v", n, err)
	}
	if _, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil || !strings.Contains(err.Error(), "ProducerBusy") {
		t.Fatalf("second producer with max producers 1 set through the non-owner: %v", err)
	}
}
