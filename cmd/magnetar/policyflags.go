package main

import (
	"errors"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/config"
)

// policyFlags are the broker-level policy defaults (broker.PolicyDefaults) of the broker and
// standalone commands, under Pulsar's broker.conf keys (policyKeys), and the switches both
// share of the pulsar_* metrics' aggregation (exposeTopicLevelMetricsInPrometheus) and of
// replicated subscriptions (enableReplicatedSubscriptions and its snapshot settings).
type policyFlags struct {
	d                           broker.PolicyDefaults
	topicLevelMetrics           bool // false: broker.Config.NamespaceLevelMetrics
	ttl, retentionTime          time.Duration
	retentionSizeMB             int64
	backlogLimitSecs            int64
	deleteInactive, deleteFreq  time.Duration
	deleteInactiveOn            bool
	deleteMode, backlogPolicyOn string
	markDeleteRate              float64
	cursorFlush                 time.Duration
	maxPartitions               int // admin.Options.MaxPartitions
	// Replicated subscriptions (broker.Config.DisableReplicatedSubscriptions and the
	// ReplicatedSubscriptionsSnapshot* settings).
	replSubs                   bool
	replSubsFreq, replSubsWait time.Duration
	replSubsCached             int
}

func (p *policyFlags) add(f *pflag.FlagSet) {
	d := &p.d
	f.BoolVar(&p.topicLevelMetrics, "expose-topic-level-metrics-in-prometheus", true,
		"export the pulsar_* metrics per topic (false: summed per namespace)")
	f.DurationVar(&d.BacklogQuotaCheckInterval, "backlog-quota-check-interval", time.Minute, "how often backlogs are checked against their quotas")
	f.Int64Var(&d.BacklogQuotaDefaultLimitBytes, "backlog-quota-default-limit-bytes", -1, "default destination_storage quota in bytes (-1: none)")
	f.Int64Var(&p.backlogLimitSecs, "backlog-quota-default-limit-seconds", -1, "default message_age quota in seconds (-1: none)")
	f.StringVar(&p.backlogPolicyOn, "backlog-quota-default-retention-policy", broker.QuotaProducerRequestHold,
		"policy of the default quotas: producer_request_hold, producer_exception or consumer_backlog_eviction")
	f.DurationVar(&p.ttl, "ttl-duration-default", 0, "default message TTL (0: none)")
	f.DurationVar(&d.MessageExpiryCheckInterval, "message-expiry-check-interval", 5*time.Minute, "how often message TTLs are enforced")
	f.DurationVar(&p.retentionTime, "default-retention-time", 0, "default retention time of consumed data (-1ns: infinite)")
	f.Int64Var(&p.retentionSizeMB, "default-retention-size-mb", 0, "default retention size of consumed data in MB (-1: infinite)")
	f.IntVar(&d.MaxProducersPerTopic, "max-producers-per-topic", 0, "default max producers per topic (0: unlimited)")
	f.IntVar(&d.MaxConsumersPerTopic, "max-consumers-per-topic", 0, "default max consumers per topic (0: unlimited)")
	f.IntVar(&d.MaxConsumersPerSubscription, "max-consumers-per-subscription", 0, "default max consumers per subscription (0: unlimited)")
	f.IntVar(&d.MaxSubscriptionsPerTopic, "max-subscriptions-per-topic", 0, "default max subscriptions per topic (0: unlimited)")
	f.IntVar(&d.MaxUnackedMessagesPerConsumer, "max-unacked-messages-per-consumer", 0, "default max unacknowledged messages per consumer (0: unlimited)")
	f.IntVar(&d.MaxUnackedMessagesPerSubscription, "max-unacked-messages-per-subscription", 0,
		"default max unacknowledged messages per subscription (0: unlimited)")
	f.IntVar(&d.MaxTopicsPerNamespace, "max-topics-per-namespace", 0, "default max topics per namespace (0: unlimited)")
	f.Int64Var(&d.MaxPublishRatePerTopicInMessages, "max-publish-rate-per-topic-in-messages", 0, "default publish rate per topic (0: unlimited)")
	f.Int64Var(&d.MaxPublishRatePerTopicInBytes, "max-publish-rate-per-topic-in-bytes", 0, "default publish byte rate per topic (0: unlimited)")
	f.BoolVar(&p.deleteInactiveOn, "broker-delete-inactive-topics-enabled", false, "delete inactive topics by default")
	f.StringVar(&p.deleteMode, "broker-delete-inactive-topics-mode", "delete_when_no_subscriptions",
		"delete_when_no_subscriptions or delete_when_subscriptions_caught_up")
	f.DurationVar(&p.deleteInactive, "broker-delete-inactive-topics-max-inactive-duration", time.Minute, "inactive for this long")
	f.DurationVar(&p.deleteFreq, "broker-delete-inactive-topics-frequency", time.Minute, "how often inactive topics are looked for")
	f.IntVar(&d.SubscriptionExpirationTimeMinutes, "subscription-expiration-time-minutes", 0,
		"default subscription expiration time: subscriptions without consumers for longer are deleted (0: never)")
	f.DurationVar(&d.SubscriptionExpiryCheckInterval, "subscription-expiry-check-interval", 5*time.Minute, "how often expired subscriptions are looked for")
	f.IntVar(&d.SubscribeThrottlingRatePerConsumer, "subscribe-throttling-rate-per-consumer", 0, "default subscribes per consumer per period (0: unlimited)")
	f.DurationVar(&d.SubscribeRatePeriodPerConsumer, "subscribe-rate-period-per-consumer", 30*time.Second, "period of the subscribe rate")
	f.DurationVar(&d.DeduplicationSnapshotInterval, "broker-deduplication-snapshot-interval", 120*time.Second,
		"how often a topic's deduplication snapshot is taken when it stored entries since the last (0: by entry count only)")
	f.StringVar(&d.AutoTopicCreationType, "allow-auto-topic-creation-type", "non-partitioned", "what auto topic creation creates: non-partitioned or partitioned")
	f.IntVar(&d.DefaultNumPartitions, "default-num-partitions", 1, "partitions of an auto-created partitioned topic")
	f.IntVar(&p.maxPartitions, "max-num-partitions-per-partitioned-topic", 0,
		"most partitions a partitioned topic may have (0: admin.PartitionCeiling, 10000)")
	f.Float64Var(&p.markDeleteRate, "managed-ledger-default-mark-delete-rate-limit", 1.0,
		"persists of each subscription's acknowledgement state per second; beyond it the newest is held (0: unlimited)")
	f.DurationVar(&p.cursorFlush, "managed-ledger-cursor-position-flush", 60*time.Second,
		"how often held acknowledgement states are persisted")
	f.BoolVar(&p.replSubs, "enable-replicated-subscriptions", true,
		"carry replicated subscriptions' positions to the other clusters of geo-replicated topics (snapshot markers)")
	f.DurationVar(&p.replSubsFreq, "replicated-subscriptions-snapshot-frequency", time.Second,
		"how often a geo-replicated topic with new data takes a snapshot across its clusters")
	f.DurationVar(&p.replSubsWait, "replicated-subscriptions-snapshot-timeout", 30*time.Second, "a snapshot not completed by then is abandoned")
	f.IntVar(&p.replSubsCached, "replicated-subscriptions-snapshot-max-cached-per-subscription", 10,
		"snapshots a replicated subscription keeps while its position has not reached them")
}

// apply puts the defaults into a broker configuration.
func (p *policyFlags) apply(c *broker.Config) {
	d := p.d
	d.BacklogQuotaDefaultLimitSeconds, d.BacklogQuotaDefaultRetentionPolicy = p.backlogLimitSecs, p.backlogPolicyOn
	d.TTLDurationDefaultInSeconds = int(p.ttl / time.Second)
	d.DeleteInactiveTopics, d.DeleteInactiveTopicsMode = p.deleteInactiveOn, p.deleteMode
	d.DeleteInactiveTopicsMaxInactive, d.InactiveTopicCheckInterval = p.deleteInactive, p.deleteFreq
	c.Policies = d
	c.NamespaceLevelMetrics = !p.topicLevelMetrics
	c.ManagedLedger.MaxMarkDeleteRate, c.ManagedLedger.CursorFlushInterval = p.markDeleteRate, p.cursorFlush
	c.ManagedLedger.RetentionTime = p.retentionTime
	c.ManagedLedger.RetentionSize = p.retentionSizeMB << 20
	if p.retentionSizeMB < 0 {
		c.ManagedLedger.RetentionSize = -1
	}
	c.DisableReplicatedSubscriptions = !p.replSubs
	c.ReplicatedSubscriptionsSnapshotFrequency, c.ReplicatedSubscriptionsSnapshotTimeout = p.replSubsFreq, p.replSubsWait
	c.ReplicatedSubscriptionsSnapshotMaxCached = p.replSubsCached
}

// quotaGB maps Pulsar's deprecated backlogQuotaDefaultLimitGB (a decimal number of GiB) to
// bytes. As in Pulsar, a value above 0 wins over backlogQuotaDefaultLimitBytes; 0 or less
// leaves the bytes key in force.
func quotaGB(v string, _ func(string) (string, bool)) (string, error) {
	gb, ok, err := legacyQuotaGB(v)
	if err != nil || !ok {
		return "", err
	}
	return strconv.FormatInt(int64(gb*(1<<30)), 10), nil
}

// quotaBytes keeps backlogQuotaDefaultLimitBytes unless backlogQuotaDefaultLimitGB is above 0.
func quotaBytes(v string, get func(string) (string, bool)) (string, error) {
	if gb, _ := get("backlogQuotaDefaultLimitGB"); v == "" {
		return "", config.Skip
	} else if _, ok, err := legacyQuotaGB(gb); err == nil && ok {
		return "", config.Skip
	}
	return v, nil
}

func legacyQuotaGB(v string) (gb float64, set bool, err error) {
	if v == "" {
		return 0, false, config.Skip
	}
	gb, err = strconv.ParseFloat(v, 64)
	if err != nil || gb != gb || gb > 1<<32 {
		return 0, false, errors.New("want a number of gigabytes")
	}
	if gb <= 0 {
		return 0, false, config.Skip
	}
	return gb, true, nil
}

// minutes maps a number of minutes to a duration flag (-1: infinite).
func minutes(v string, _ func(string) (string, bool)) (string, error) {
	if v == "" {
		return "", config.Skip
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < -1 {
		return "", errors.New("want a number of minutes (-1: infinite)")
	}
	if n < 0 {
		return "-1ns", nil
	}
	return (time.Duration(n) * time.Minute).String(), nil
}

// policyKeys are the broker.conf keys of the policy defaults.
var policyKeys = []config.Key{
	{Name: "backlogQuotaCheckIntervalInSeconds", Flag: "backlog-quota-check-interval", Map: config.Seconds},
	{Name: "backlogQuotaDefaultLimitBytes", Flag: "backlog-quota-default-limit-bytes", Map: quotaBytes},
	{Name: "backlogQuotaDefaultLimitGB", Flag: "backlog-quota-default-limit-bytes", Map: quotaGB},
	{Name: "backlogQuotaDefaultLimitSecond", Flag: "backlog-quota-default-limit-seconds"},
	{Name: "backlogQuotaDefaultRetentionPolicy", Flag: "backlog-quota-default-retention-policy"},
	{Name: "ttlDurationDefaultInSeconds", Flag: "ttl-duration-default", Map: config.Seconds},
	{Name: "messageExpiryCheckIntervalInMinutes", Flag: "message-expiry-check-interval", Map: minutes},
	{Name: "defaultRetentionTimeInMinutes", Flag: "default-retention-time", Map: minutes},
	{Name: "defaultRetentionSizeInMB", Flag: "default-retention-size-mb"},
	{Name: "maxProducersPerTopic", Flag: "max-producers-per-topic"},
	{Name: "maxConsumersPerTopic", Flag: "max-consumers-per-topic"},
	{Name: "maxConsumersPerSubscription", Flag: "max-consumers-per-subscription"},
	{Name: "maxSubscriptionsPerTopic", Flag: "max-subscriptions-per-topic"},
	{Name: "maxUnackedMessagesPerConsumer", Flag: "max-unacked-messages-per-consumer"},
	{Name: "maxUnackedMessagesPerSubscription", Flag: "max-unacked-messages-per-subscription"},
	{Name: "maxTopicsPerNamespace", Flag: "max-topics-per-namespace"},
	{Name: "maxPublishRatePerTopicInMessages", Flag: "max-publish-rate-per-topic-in-messages"},
	{Name: "maxPublishRatePerTopicInBytes", Flag: "max-publish-rate-per-topic-in-bytes"},
	{Name: "brokerDeleteInactiveTopicsEnabled", Flag: "broker-delete-inactive-topics-enabled"},
	{Name: "brokerDeleteInactiveTopicsMode", Flag: "broker-delete-inactive-topics-mode"},
	{Name: "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds", Flag: "broker-delete-inactive-topics-max-inactive-duration", Map: config.Seconds},
	{Name: "brokerDeleteInactiveTopicsFrequencySeconds", Flag: "broker-delete-inactive-topics-frequency", Map: config.Seconds},
	{Name: "subscriptionExpirationTimeMinutes", Flag: "subscription-expiration-time-minutes"},
	{Name: "subscriptionExpiryCheckIntervalInMinutes", Flag: "subscription-expiry-check-interval", Map: minutes},
	{Name: "subscribeThrottlingRatePerConsumer", Flag: "subscribe-throttling-rate-per-consumer"},
	{Name: "subscribeRatePeriodPerConsumerInSecond", Flag: "subscribe-rate-period-per-consumer", Map: config.Seconds},
	{Name: "brokerDeduplicationSnapshotIntervalSeconds", Flag: "broker-deduplication-snapshot-interval", Map: config.Seconds},
	{Name: "allowAutoTopicCreationType", Flag: "allow-auto-topic-creation-type"},
	{Name: "defaultNumPartitions", Flag: "default-num-partitions"},
	{Name: "maxNumPartitionsPerPartitionedTopic", Flag: "max-num-partitions-per-partitioned-topic"},
	{Name: "managedLedgerDefaultMarkDeleteRateLimit", Flag: "managed-ledger-default-mark-delete-rate-limit"},
	{Name: "managedLedgerCursorPositionFlushSeconds", Flag: "managed-ledger-cursor-position-flush", Map: config.Seconds},
	{Name: "exposeTopicLevelMetricsInPrometheus", Flag: "expose-topic-level-metrics-in-prometheus"},
	{Name: "enableReplicatedSubscriptions", Flag: "enable-replicated-subscriptions"},
	{Name: "replicatedSubscriptionsSnapshotFrequencyMillis", Flag: "replicated-subscriptions-snapshot-frequency", Map: config.Millis},
	{Name: "replicatedSubscriptionsSnapshotTimeoutSeconds", Flag: "replicated-subscriptions-snapshot-timeout", Map: config.Seconds},
	{Name: "replicatedSubscriptionsSnapshotMaxCachedPerSubscription", Flag: "replicated-subscriptions-snapshot-max-cached-per-subscription"},
}
