package interop

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// TestBenchPolicyOverhead measures #19's overhead criterion in one run on one standalone
// (etcd, one bookie, the broker) driven by pulsar-client-go: async publish throughput to a
// topic with every policy set but none triggered (limits, rates and quotas far above the
// load, TTL and expirations far away) against a topic with none, in alternating rounds
// (A, B, A, B, …) so that both see the same machine. It prints the ratio of the medians
// (criterion: ≥ 0.95). Run with MAGNETAR_BENCH_POLICY=N (N messages a round, e.g. 100000;
// MAGNETAR_BENCH_POLICY_ROUNDS rounds of each, default 5); it is skipped otherwise.
func TestBenchPolicyOverhead(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("MAGNETAR_BENCH_POLICY"))
	if n <= 0 {
		t.Skip("set MAGNETAR_BENCH_POLICY=<messages a round> to run")
	}
	rounds, _ := strconv.Atoi(os.Getenv("MAGNETAR_BENCH_POLICY_ROUNDS"))
	if rounds <= 0 {
		rounds = 5
	}
	const size, window = 100, 2000
	c := newCluster(t, clusterOpts{admin: true}) // the broker's default check intervals
	a := c.admin()
	cl := c.client()
	plain, policed := topicName(t)+"-none", topicName(t)+"-all"
	for _, tp := range []string{plain, policed} {
		if err := a.Topics().Create(mustTopic(t, tp), 0); err != nil {
			t.Fatal(err)
		}
	}
	setEveryPolicy(t, c, policed)

	payload := make([]byte, size)
	run := func(topic string) float64 {
		p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, MaxPendingMessages: window})
		defer p.Close()
		ctx := ctxT(t, 10*time.Minute)
		errs := make(chan error, window)
		start := time.Now()
		for i := range n {
			if i >= window {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
		}
		for range min(n, window) {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		return float64(n) / time.Since(start).Seconds()
	}
	run(plain) // warm up
	run(policed)
	var none, all []float64
	for r := range rounds {
		none = append(none, run(plain))
		all = append(all, run(policed))
		t.Logf("round %d: none %.0f msg/s, every policy %.0f msg/s", r+1, none[r], all[r])
	}
	if st := c.stats(policed); st.MsgInCounter < int64(n*(rounds+1)) {
		t.Fatalf("the policed topic stored %d messages, want %d: a policy triggered", st.MsgInCounter, n*(rounds+1))
	}
	median := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[len(s)/2]
	}
	mn, ma := median(none), median(all)
	t.Logf("RESULT policy overhead: messages=%d size=%d rounds=%d none %.0f msg/s, every policy %.0f msg/s, ratio %.3f (criterion >= 0.95)",
		n, size, rounds, mn, ma, ma/mn)
}

// setEveryPolicy sets every topic policy on topic, each far from triggering: the data path
// runs its checks (the publish rate's bucket, the dispatch rates, the limits) without
// throttling, refusing or expiring anything.
func setEveryPolicy(t *testing.T, c *cluster, topic string) {
	t.Helper()
	a := c.admin()
	tn := mustTopic(t, topic)
	mode := utils.DeleteWhenNoSubscriptions
	for _, err := range []error{
		a.Topics().SetRetention(tn, utils.RetentionPolicies{RetentionTimeInMinutes: 60, RetentionSizeInMB: 1 << 20}),
		a.Topics().SetBacklogQuota(tn, utils.BacklogQuota{LimitSize: 1 << 40, Policy: utils.ProducerRequestHold}, utils.DestinationStorage),
		a.Topics().SetBacklogQuota(tn, utils.BacklogQuota{LimitTime: 1 << 30, Policy: utils.ProducerException}, utils.MessageAge),
		a.Topics().SetMessageTTL(tn, 1<<30),
		a.Topics().SetPublishRate(tn, utils.PublishRateData{PublishThrottlingRateInMsg: 1 << 40, PublishThrottlingRateInByte: 1 << 50}),
		a.Topics().SetDispatchRate(tn, utils.DispatchRateData{DispatchThrottlingRateInMsg: 1 << 40, DispatchThrottlingRateInByte: 1 << 50, RatePeriodInSecond: 1,
			RelativeToPublishRate: true}), // the publish rate's measurement every second
		a.Topics().SetSubscriptionDispatchRate(tn, utils.DispatchRateData{DispatchThrottlingRateInMsg: 1 << 40, DispatchThrottlingRateInByte: 1 << 50, RatePeriodInSecond: 1}),
		a.Topics().SetReplicatorDispatchRate(tn, utils.DispatchRateData{DispatchThrottlingRateInMsg: 1 << 40, DispatchThrottlingRateInByte: 1 << 50, RatePeriodInSecond: 1}),
		a.Topics().SetSubscribeRate(tn, utils.SubscribeRate{SubscribeThrottlingRatePerConsumer: 1 << 20, RatePeriodInSecond: 1}),
		a.Topics().SetMaxProducers(tn, 1<<20),
		a.Topics().SetMaxConsumers(tn, 1<<20),
		a.Topics().SetMaxConsumersPerSubscription(tn, 1<<20),
		a.Topics().SetMaxSubscriptionsPerTopic(tn, 1<<20),
		a.Topics().SetMaxMessageSize(tn, 5<<20),
		a.Topics().SetInactiveTopicPolicies(tn, utils.InactiveTopicPolicies{InactiveTopicDeleteMode: &mode,
			MaxInactiveDurationSeconds: 1 << 30, DeleteWhileInactive: true}),
		a.Topics().SetDeduplicationStatus(tn, true),
		a.Topics().SetPersistence(tn, utils.PersistenceData{BookkeeperEnsemble: 1, BookkeeperWriteQuorum: 1, BookkeeperAckQuorum: 1,
			ManagedLedgerMaxMarkDeleteRate: 1}), // Pulsar's default
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for path, body := range map[string]string{
		"maxUnackedMessagesOnConsumer":     "1000000",
		"maxUnackedMessagesOnSubscription": "1000000",
		"subscriptionExpirationTime":       "1000000",
		"deduplicationSnapshotInterval":    "120",
		"delayedDelivery":                  `{"active":true,"tickTime":1000,"maxDeliveryDelayInMillis":86400000}`,
		"autoSubscriptionCreation":         `{"allowAutoSubscriptionCreation":true}`,
	} {
		c.post(policyPath(topic, path), body)
	}
}
