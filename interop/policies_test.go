package interop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/backoff"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/broker"
)

// The policy tests set each policy through the admin API (pulsaradmin where it has the
// call), drive real traffic with pulsar-client-go and assert what the client sees. The
// checks run on short intervals (Config.Policies) so that nothing waits out real minutes.

func newPolicyCluster(t *testing.T, tweak func(*broker.Config)) *cluster {
	return newCluster(t, clusterOpts{admin: true, tweak: func(cfg *broker.Config) {
		cfg.Policies.BacklogQuotaCheckInterval = 100 * time.Millisecond
		cfg.Policies.MessageExpiryCheckInterval = 100 * time.Millisecond
		cfg.Policies.InactiveTopicCheckInterval = 100 * time.Millisecond
		if tweak != nil {
			tweak(cfg)
		}
	}})
}

// fixedBackoff retries every d (the tests must not wait out the client's growing backoff).
type fixedBackoff struct{ d time.Duration }

func (b fixedBackoff) Next() time.Duration       { return b.d }
func (b fixedBackoff) IsMaxBackoffReached() bool { return false }
func (b fixedBackoff) Reset()                    {}

var _ backoff.Policy = fixedBackoff{}

// stats reads a topic's statistics with Magnetar's fields.
func (c *cluster) stats(topic string) broker.TopicStats {
	c.t.Helper()
	var st broker.TopicStats
	c.getJSON("/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/stats", &st)
	return st
}

func (c *cluster) getJSON(path string, v any) {
	c.t.Helper()
	resp, err := http.Get(c.http.URL + path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		c.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
}

// post POSTs a JSON body to the admin API, failing the test unless it is 204.
func (c *cluster) post(path, body string) {
	c.t.Helper()
	resp, err := http.Post(c.http.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
	}
}

func payload(n int) []byte { return []byte(strings.Repeat("x", n)) }

// TestPolicyBacklogQuotaHold: beyond a producer_request_hold quota the producer is held
// (its sends time out while it retries) and resumes once the backlog is cleared.
func TestPolicyBacklogQuotaHold(t *testing.T) {
	c := newPolicyCluster(t, nil)
	a := c.admin()
	topic := topicName(t)
	tn := mustTopic(t, topic)
	if err := a.Topics().Create(tn, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Subscriptions().Create(tn, "slow", utils.Earliest); err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().SetBacklogQuota(tn, utils.NewBacklogQuota(10<<10, -1, utils.ProducerRequestHold), utils.DestinationStorage); err != nil {
		t.Fatal(err)
	}
	if st := c.stats(topic); st.BacklogQuotaLimitSize != 10<<10 {
		t.Fatalf("backlogQuotaLimitSize %d", st.BacklogQuotaLimitSize)
	}
	cl := c.client()
	// Batching stays on: pulsar-client-go v0.19 races with itself (under -race) when an
	// unbatched producer reconnects while sending, as a held producer does.
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: time.Second,
		BackOffPolicyFunc: func() backoff.Policy { return fixedBackoff{100 * time.Millisecond} }})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sent := 0
	for {
		_, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: payload(1024)})
		if err != nil {
			if !errors.Is(err, pulsar.ErrSendTimeout) {
				t.Fatalf("held send: %v, want a send timeout", err)
			}
			break
		}
		if sent++; sent > 2000 {
			t.Fatal("the producer was never held")
		}
	}
	if sent < 10 {
		t.Fatalf("held after %d sends of 1 KiB under a 10 KiB quota", sent)
	}
	if st := c.stats(topic); st.BacklogQuotaBlock != "producer_request_hold" {
		t.Fatalf("stats while held: block %q", st.BacklogQuotaBlock)
	}
	if err := a.Subscriptions().ClearBacklog(tn, "slow"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: payload(1024)})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the producer did not resume after the backlog was cleared: %v", err)
		}
	}
}

// TestPolicyBacklogQuotaException: beyond a producer_exception quota the producer's
// messages fail with the quota error and new producers are refused with it.
func TestPolicyBacklogQuotaException(t *testing.T) {
	c := newPolicyCluster(t, nil)
	a := c.admin()
	topic := topicName(t)
	tn := mustTopic(t, topic)
	if err := a.Topics().Create(tn, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Subscriptions().Create(tn, "slow", utils.Earliest); err != nil {
		t.Fatal(err)
	}
	// At namespace level this time.
	if err := a.Namespaces().SetBacklogQuota("public/default", utils.NewBacklogQuota(8<<10, -1, utils.ProducerException),
		utils.DestinationStorage); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Namespaces().RemoveBacklogQuota("public/default") })
	cl := c.client()
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 5 * time.Second, DisableBatching: true,
		BackOffPolicyFunc: func() backoff.Policy { return fixedBackoff{100 * time.Millisecond} }})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sendErr error
	for i := 0; i < 2000 && sendErr == nil; i++ {
		_, sendErr = prod.Send(ctx, &pulsar.ProducerMessage{Payload: payload(1024)})
	}
	if !errors.Is(sendErr, pulsar.ErrProducerBlockedQuotaExceeded) {
		t.Fatalf("send beyond the quota: %v, want ErrProducerBlockedQuotaExceeded", sendErr)
	}
	_, err = cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err == nil || !strings.Contains(err.Error(), "ProducerBlockedQuotaExceededException") {
		t.Fatalf("new producer beyond the quota: %v", err)
	}
}

// TestPolicyBacklogEviction: consumer_backlog_eviction moves the slow subscription's cursor
// past its oldest backlog (size and age quotas); the producer is never held.
func TestPolicyBacklogEviction(t *testing.T) {
	c := newPolicyCluster(t, nil)
	a := c.admin()
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, kind := range []utils.BacklogQuotaType{utils.DestinationStorage, utils.MessageAge} {
		topic := topicName(t) + "-" + string(kind)
		tn := mustTopic(t, topic)
		if err := a.Topics().Create(tn, 0); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"slow", "other"} {
			if err := a.Subscriptions().Create(tn, s, utils.Earliest); err != nil {
				t.Fatal(err)
			}
		}
		q := utils.NewBacklogQuota(20<<10, -1, utils.ConsumerBacklogEviction)
		if kind == utils.MessageAge {
			q = utils.NewBacklogQuota(-1, 1, utils.ConsumerBacklogEviction)
		}
		if err := a.Topics().SetBacklogQuota(tn, q, kind); err != nil {
			t.Fatal(err)
		}
		prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: payload(1024)}); err != nil {
				t.Fatalf("%s: send %d: %v", kind, i, err)
			}
		}
		prod.Close()
		waitFor(t, 20*time.Second, string(kind)+" eviction", func() bool {
			st := c.stats(topic)
			slow := st.Subscriptions["slow"]
			if kind == utils.MessageAge {
				return slow.MsgBacklog == 0
			}
			return slow.MsgBacklog > 0 && slow.MsgBacklog < 100 && slow.BacklogSize <= 20<<10
		})
	}
}

// TestPolicyMessageTTL: unacknowledged messages older than the TTL are expired from the
// subscriptions, and expire-messages expires on demand.
func TestPolicyMessageTTL(t *testing.T) {
	c := newPolicyCluster(t, nil)
	a := c.admin()
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := topicName(t)
	tn := mustTopic(t, topic)
	if err := a.Topics().Create(tn, 0); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"a", "b"} {
		if err := a.Subscriptions().Create(tn, s, utils.Earliest); err != nil {
			t.Fatal(err)
		}
	}
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := 0; i < 10; i++ {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("m")}); err != nil {
			t.Fatal(err)
		}
	}
	// On demand first: every message is older than 0 s.
	if err := a.Subscriptions().ExpireMessages(tn, "a", 0); err != nil {
		t.Fatal(err)
	}
	if st := c.stats(topic); st.Subscriptions["a"].MsgBacklog != 0 || st.Subscriptions["b"].MsgBacklog != 10 {
		t.Fatalf("after expire-messages on a: backlogs a %d, b %d", st.Subscriptions["a"].MsgBacklog, st.Subscriptions["b"].MsgBacklog)
	}
	if err := a.Topics().SetMessageTTL(tn, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "TTL expiry", func() bool { return c.stats(topic).Subscriptions["b"].MsgBacklog == 0 })
	// A consumer sees nothing of what expired, and what is new.
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("fresh")}); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil || string(m.Payload()) != "fresh" {
		t.Fatalf("after expiry: %v %v", m, err)
	}
}

// TestPolicyLimits: the N+1st producer, consumer and subscription are refused with
// Pulsar's errors, a consumer stops receiving at its unacknowledged limit until it acks,
// and precedence is topic > namespace > broker default.
func TestPolicyLimits(t *testing.T) {
	c := newPolicyCluster(t, func(cfg *broker.Config) { cfg.Policies.MaxProducersPerTopic = 4 })
	a := c.admin()
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := a.Namespaces().CreateNamespace("public/limits"); err != nil {
		t.Fatal(err)
	}
	ns := mustNS(t, "public/limits")
	if err := a.Namespaces().SetMaxProducersPerTopic(*ns, 2); err != nil {
		t.Fatal(err)
	}
	base := sanitize(t.Name())
	topicTopic, nsTopic, defTopic := "persistent://public/limits/"+base+"-t", "persistent://public/limits/"+base+"-n",
		"persistent://public/default/"+base+"-d"
	for _, tp := range []string{topicTopic, nsTopic, defTopic} {
		if err := a.Topics().Create(mustTopic(t, tp), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Topics().SetMaxProducers(mustTopic(t, topicTopic), 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		topic string
		limit int
	}{{topicTopic, 1}, {nsTopic, 2}, {defTopic, 4}} {
		for i := 0; i <= tc.limit; i++ {
			p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: tc.topic})
			if i < tc.limit {
				if err != nil {
					t.Fatalf("%s: producer %d of %d: %v", tc.topic, i+1, tc.limit, err)
				}
				defer p.Close()
				continue
			}
			if err == nil || !strings.Contains(err.Error(), "ProducerBusy") || !strings.Contains(err.Error(), "reached max producers limit") {
				t.Fatalf("%s: producer %d over a limit of %d: %v", tc.topic, i+1, tc.limit, err)
			}
		}
	}

	// Consumers and subscriptions, on one topic.
	topic := topicName(t)
	tn := mustTopic(t, topic)
	if err := a.Topics().Create(tn, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().SetMaxConsumers(tn, 3); err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().SetMaxConsumersPerSubscription(tn, 2); err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().SetMaxSubscriptionsPerTopic(tn, 2); err != nil {
		t.Fatal(err)
	}
	sub := func(name string) (pulsar.Consumer, error) {
		return cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: name, Type: pulsar.Shared})
	}
	for _, name := range []string{"s1", "s1"} {
		cons, err := sub(name)
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
	}
	if _, err := sub("s1"); err == nil || !strings.Contains(err.Error(), "ConsumerBusy") {
		t.Fatalf("third consumer of a subscription limited to 2: %v", err)
	}
	cons, err := sub("s2")
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if _, err := sub("s2"); err == nil || !strings.Contains(err.Error(), "ConsumerBusy") ||
		!strings.Contains(err.Error(), "max consumers") {
		t.Fatalf("fourth consumer of a topic limited to 3: %v", err)
	}
	if err := a.Topics().SetMaxConsumers(tn, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := sub("s3"); err == nil || !strings.Contains(err.Error(), "NotAllowed") {
		t.Fatalf("third subscription of a topic limited to 2: %v", err)
	}

	// Unacknowledged messages per consumer.
	utopic := topicName(t) + "-unacked"
	utn := mustTopic(t, utopic)
	if err := a.Topics().Create(utn, 0); err != nil {
		t.Fatal(err)
	}
	// pulsaradmin's Topics has no call for this one: Pulsar's REST path.
	c.post("/admin/v2/persistent/"+strings.TrimPrefix(utopic, "persistent://")+"/maxUnackedMessagesOnConsumer", "5")
	uc, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: utopic, SubscriptionName: "u", Type: pulsar.Shared})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: utopic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := 0; i < 12; i++ {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	blocked := func() bool {
		st := c.stats(utopic).Subscriptions["u"]
		return len(st.Consumers) == 1 && st.Consumers[0].BlockedConsumerOnUnackedMsgs && st.Consumers[0].UnackedMessages == 5 &&
			st.MsgOutCounter == 5
	}
	waitFor(t, 10*time.Second, "the consumer blocked at 5 unacknowledged", blocked)
	var got []pulsar.Message
	for len(got) < 5 {
		m, err := uc.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	for _, m := range got {
		if err := uc.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "5 more after the acks", func() bool { return c.stats(utopic).Subscriptions["u"].MsgOutCounter == 10 })

	// Max message size.
	mtopic := topicName(t) + "-size"
	mtn := mustTopic(t, mtopic)
	if err := a.Topics().Create(mtn, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().SetMaxMessageSize(mtn, 1000); err != nil {
		t.Fatal(err)
	}
	mp, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: mtopic, DisableBatching: true, SendTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Close()
	if _, err := mp.Send(ctx, &pulsar.ProducerMessage{Payload: payload(500)}); err != nil {
		t.Fatal(err)
	}
	if _, err := mp.Send(ctx, &pulsar.ProducerMessage{Payload: payload(2000)}); err == nil {
		t.Fatal("a 2000-byte message passed a 1000-byte limit")
	}
	if st := c.stats(mtopic); st.MsgInCounter != 1 {
		t.Fatalf("stored %d messages, want 1", st.MsgInCounter)
	}
}

// TestPolicyPublishRate: a publish rate of N msg/s holds an unthrottled async producer to N
// within ±10%, measured over a 10 s window of receipts.
func TestPolicyPublishRate(t *testing.T) {
	const rate, window = 200, 10 * time.Second
	c := newPolicyCluster(t, nil)
	a := c.admin()
	cl := c.client()
	topic := topicName(t)
	tn := mustTopic(t, topic)
	if err := a.Topics().Create(tn, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().SetPublishRate(tn, utils.PublishRateData{PublishThrottlingRateInMsg: rate, PublishThrottlingRateInByte: -1}); err != nil {
		t.Fatal(err)
	}
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var mu sync.Mutex
	var done []time.Time
	var failed error
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	go func() {
		for ctx.Err() == nil && time.Since(start) < window+3*time.Second {
			prod.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload(100)}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil && failed == nil && ctx.Err() == nil {
					failed = err
				}
				done = append(done, time.Now())
			})
		}
	}()
	// Count the receipts of [1 s, 11 s): the first second holds the start-up.
	from, to := start.Add(time.Second), start.Add(time.Second+window)
	waitFor(t, window+20*time.Second, "the window to pass", func() bool { return time.Now().After(to.Add(100 * time.Millisecond)) })
	mu.Lock()
	n := 0
	for _, d := range done {
		if !d.Before(from) && d.Before(to) {
			n++
		}
	}
	err = failed
	mu.Unlock()
	cancel()
	if err != nil {
		t.Fatalf("a throttled send failed: %v", err)
	}
	want := rate * int(window/time.Second)
	t.Logf("%d receipts in %v at %d msg/s (want %d ±10%%)", n, window, rate, want)
	if n < want*9/10 || n > want*11/10 {
		t.Fatalf("%d receipts in %v, want %d ±10%%", n, window, want)
	}
	if st := c.stats(topic); st.PublishRateLimitedTimes == 0 {
		t.Fatal("publishRateLimitedTimes is 0")
	}
}

// TestPolicyRetention: with retention 0 a topic without subscriptions keeps nothing
// consumed (its closed ledgers are trimmed); with infinite retention (set live) it keeps
// everything.
func TestPolicyRetention(t *testing.T) {
	c := newPolicyCluster(t, func(cfg *broker.Config) {
		cfg.ManagedLedger.MaxEntriesPerLedger = 10
		cfg.ManagedLedger.TrimInterval = 100 * time.Millisecond
	})
	a := c.admin()
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	count := func(topic string) int {
		r, err := cl.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		n := 0
		for r.HasNext() {
			if _, err := r.Next(ctx); err != nil {
				t.Fatal(err)
			}
			n++
		}
		return n
	}
	for _, keep := range []bool{false, true} {
		topic := fmt.Sprintf("%s-%v", topicName(t), keep)
		tn := mustTopic(t, topic)
		if err := a.Topics().Create(tn, 0); err != nil {
			t.Fatal(err)
		}
		if keep {
			if err := a.Topics().SetRetention(tn, utils.RetentionPolicies{RetentionTimeInMinutes: -1, RetentionSizeInMB: -1}); err != nil {
				t.Fatal(err)
			}
		}
		prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 50; i++ {
			if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("r")}); err != nil {
				t.Fatal(err)
			}
		}
		prod.Close()
		if keep {
			if n := count(topic); n != 50 {
				t.Fatalf("infinite retention kept %d of 50", n)
			}
			continue
		}
		// The ledgers roll over when full, so all data is trimmed, down to the empty current
		// ledger; the last message's ledger is gone, so a reader has nothing next.
		waitFor(t, 20*time.Second, "retention 0 to trim", func() bool {
			var in broker.InternalStats
			c.getJSON("/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/internalStats", &in)
			return len(in.Ledgers) == 1 && in.Ledgers[0].Entries == 0
		})
		if n := count(topic); n != 0 {
			t.Fatalf("retention 0 kept %d of 50", n)
		}
	}
}

// TestPolicyInactiveTopic: a topic without producers, consumers and subscriptions is
// deleted once inactive for its namespace's maxInactiveDurationSeconds.
func TestPolicyInactiveTopic(t *testing.T) {
	c := newPolicyCluster(t, nil)
	a := c.admin()
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := a.Namespaces().CreateNamespace("public/idle"); err != nil {
		t.Fatal(err)
	}
	mode := utils.DeleteWhenNoSubscriptions
	if err := a.Namespaces().SetInactiveTopicPolicies(*mustNS(t, "public/idle"), utils.InactiveTopicPolicies{
		InactiveTopicDeleteMode: &mode, MaxInactiveDurationSeconds: 1, DeleteWhileInactive: true}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/idle/" + sanitize(t.Name())
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	exists := func() bool {
		_, list, err := a.Topics().List(*mustNS(t, "public/idle"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(strings.Join(list, ","), topic)
	}
	if !exists() {
		t.Fatal("topic not listed")
	}
	// Active: not deleted while the producer is connected (checked over several checks).
	inactiveSince := time.Now()
	prod.Close()
	waitFor(t, 20*time.Second, "the inactive topic to be deleted", func() bool { return !exists() })
	if d := time.Since(inactiveSince); d < time.Second {
		t.Fatalf("deleted after %v of inactivity, before maxInactiveDurationSeconds", d)
	}
}

// TestPolicyDispatchRate: a subscription dispatch rate slows a consumer down (its backlog of
// 100 takes at least a second at 50 msg/s) and loses nothing.
func TestPolicyDispatchRate(t *testing.T) {
	c := newPolicyCluster(t, nil)
	a := c.admin()
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := topicName(t)
	tn := mustTopic(t, topic)
	if err := a.Topics().Create(tn, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Subscriptions().Create(tn, "s", utils.Earliest); err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().SetSubscriptionDispatchRate(tn, utils.DispatchRateData{DispatchThrottlingRateInMsg: 50,
		DispatchThrottlingRateInByte: -1, RatePeriodInSecond: 1}); err != nil {
		t.Fatal(err)
	}
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := 0; i < 100; i++ {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	start := time.Now()
	for i := 0; i < 100; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload()) != fmt.Sprint(i) {
			t.Fatalf("message %d: %q", i, m.Payload())
		}
		cons.Ack(m) //nolint:errcheck // acks are not what is tested
	}
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Fatalf("100 messages at 50 msg/s took %v", d)
	}
}

// TestPolicyLifecycle: auto subscription creation off refuses a consumer of a new
// subscription (an existing one works), delayed delivery off delivers a delayed message at
// once, and auto topic creation off refuses a producer of a new topic.
func TestPolicyLifecycle(t *testing.T) {
	c := newPolicyCluster(t, nil)
	a := c.admin()
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := topicName(t)
	tn := mustTopic(t, topic)
	if err := a.Topics().Create(tn, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Subscriptions().Create(tn, "made", utils.Latest); err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().SetAutoSubscriptionCreation(tn, utils.AutoSubscriptionCreationOverride{AllowAutoSubscriptionCreation: false}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "new"}); err == nil ||
		!strings.Contains(err.Error(), "SubscriptionNotFound") {
		t.Fatalf("consumer of a new subscription with auto creation off: %v", err)
	}
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "made", Type: pulsar.Shared})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()

	c.post("/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/delayedDelivery", `{"active":false,"tickTime":1000}`)
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("later"), DeliverAfter: time.Hour}); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	if m, err := cons.Receive(rctx); err != nil || string(m.Payload()) != "later" {
		t.Fatalf("delayed message with delayed delivery off: %v %v", m, err)
	}

	if err := a.Namespaces().CreateNamespace("public/noauto"); err != nil {
		t.Fatal(err)
	}
	c.post("/admin/v2/namespaces/public/noauto/autoTopicCreation", `{"allowAutoTopicCreation":false,"topicType":"non-partitioned"}`)
	if _, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/noauto/x"}); err == nil ||
		!strings.Contains(err.Error(), "TopicNotFound") {
		t.Fatalf("producer of a new topic with auto creation off: %v", err)
	}
}
