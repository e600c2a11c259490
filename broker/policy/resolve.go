package policy

import (
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/mledger"
)

// Resolver resolves policies: a topic's value, else its namespace's, else the broker's
// default. It holds the broker's settings that serve as defaults; its fields are read-only
// after construction, and the dynamic configuration (SetDynamic, dynamic.go) changes some
// of them atomically at runtime. Safe for concurrent use.
type Resolver struct {
	// Defaults are the policies' broker-level defaults.
	Defaults Defaults
	// Cluster is this broker's cluster: per-cluster namespace policies are read for it.
	Cluster string
	// MaxMessageSize is the broker's limit; a topic's maxMessageSize only lowers it.
	MaxMessageSize int
	// ManagedLedger is the broker's managed-ledger template: its retention and ensemble
	// are the retention and persistence defaults.
	ManagedLedger mledger.Config
	// DisableDeduplication and DisableAutoTopicCreation are the broker's defaults for
	// deduplication and auto topic creation (inverted, as Config has them).
	DisableDeduplication, DisableAutoTopicCreation bool

	dyn atomic.Pointer[settings] // the dynamic configuration's settings; nil: the fields'
}

// Defaults are the broker-level defaults of the policies, used where neither the
// topic nor its namespace sets one (Pulsar's broker.conf keys in parentheses). Zero values
// take the documented defaults; 0 limits are unlimited.
type Defaults struct {
	// BacklogQuotaCheckInterval is how often the loaded topics' backlogs are checked against
	// their quotas (backlogQuotaCheckIntervalInSeconds). Default 60s.
	BacklogQuotaCheckInterval time.Duration
	// BacklogQuotaDefaultLimitBytes and BacklogQuotaDefaultLimitSeconds are the default
	// destination_storage and message_age quotas (backlogQuotaDefaultLimitBytes,
	// backlogQuotaDefaultLimitSecond; <= 0: none), enforced with
	// BacklogQuotaDefaultRetentionPolicy (default producer_request_hold).
	BacklogQuotaDefaultLimitBytes      int64
	BacklogQuotaDefaultLimitSeconds    int64
	BacklogQuotaDefaultRetentionPolicy string
	// TTLDurationDefaultInSeconds is the default message TTL (ttlDurationDefaultInSeconds;
	// 0: none), checked every MessageExpiryCheckInterval
	// (messageExpiryCheckIntervalInMinutes, default 5m).
	TTLDurationDefaultInSeconds int
	MessageExpiryCheckInterval  time.Duration
	// Limits (maxProducersPerTopic, maxConsumersPerTopic, maxConsumersPerSubscription,
	// maxSubscriptionsPerTopic, maxUnackedMessagesPerConsumer,
	// maxUnackedMessagesPerSubscription, maxTopicsPerNamespace). Pulsar's defaults for the
	// unacknowledged limits are 50000 and 200000; Magnetar's are unlimited.
	MaxProducersPerTopic, MaxConsumersPerTopic, MaxConsumersPerSubscription, MaxSubscriptionsPerTopic int
	MaxUnackedMessagesPerConsumer, MaxUnackedMessagesPerSubscription                                  int
	MaxTopicsPerNamespace                                                                             int
	// MaxPublishRatePerTopicInMessages and InBytes are the default publish rate
	// (maxPublishRatePerTopicInMessages, maxPublishRatePerTopicInBytes; 0: unlimited).
	MaxPublishRatePerTopicInMessages, MaxPublishRatePerTopicInBytes int64
	// DeleteInactiveTopics turns on the default inactive-topic policy
	// (brokerDeleteInactiveTopicsEnabled; Pulsar's default is on, Magnetar's off) with
	// DeleteInactiveTopicsMode (brokerDeleteInactiveTopicsMode, default
	// delete_when_no_subscriptions) and DeleteInactiveTopicsMaxInactive
	// (brokerDeleteInactiveTopicsMaxInactiveDurationSeconds, default 60s), checked every
	// InactiveTopicCheckInterval (brokerDeleteInactiveTopicsFrequencySeconds, default 60s).
	DeleteInactiveTopics            bool
	DeleteInactiveTopicsMode        string
	DeleteInactiveTopicsMaxInactive time.Duration
	InactiveTopicCheckInterval      time.Duration
	// SubscriptionExpirationTimeMinutes deletes the subscriptions without consumers for
	// longer (subscriptionExpirationTimeMinutes; 0: never), checked every
	// SubscriptionExpiryCheckInterval (subscriptionExpiryCheckIntervalInMinutes, default 5m).
	SubscriptionExpirationTimeMinutes int
	SubscriptionExpiryCheckInterval   time.Duration
	// SubscribeThrottlingRatePerConsumer subscribes per SubscribeRatePeriodPerConsumer are
	// allowed per consumer (subscribeThrottlingRatePerConsumer, 0: unlimited;
	// subscribeRatePeriodPerConsumerInSecond, default 30s).
	SubscribeThrottlingRatePerConsumer int
	SubscribeRatePeriodPerConsumer     time.Duration
	// DeduplicationSnapshotInterval records a deduplication snapshot of a topic that stored
	// entries since its last one this often (brokerDeduplicationSnapshotIntervalSeconds:
	// the commands' default is Pulsar's 120s; 0: by entry count only,
	// Config.DeduplicationSnapshotInterval).
	DeduplicationSnapshotInterval time.Duration
	// AutoTopicCreationType is what a producer or consumer of an unknown topic creates
	// (allowAutoTopicCreationType: "non-partitioned", the default, or "partitioned", with
	// DefaultNumPartitions partitions: defaultNumPartitions, default 1).
	AutoTopicCreationType string
	DefaultNumPartitions  int
	// Clock, if set, replaces time.Now in the inactivity checks (subscription expiration):
	// tests move it instead of waiting minutes.
	Clock func() time.Time
}

func (d Defaults) WithDefaults() Defaults {
	if d.BacklogQuotaCheckInterval <= 0 {
		d.BacklogQuotaCheckInterval = time.Minute
	}
	if d.BacklogQuotaDefaultRetentionPolicy == "" {
		d.BacklogQuotaDefaultRetentionPolicy = api.QuotaProducerRequestHold
	}
	if d.MessageExpiryCheckInterval <= 0 {
		d.MessageExpiryCheckInterval = 5 * time.Minute
	}
	if d.DeleteInactiveTopicsMode == "" {
		d.DeleteInactiveTopicsMode = "delete_when_no_subscriptions"
	}
	if d.DeleteInactiveTopicsMaxInactive <= 0 {
		d.DeleteInactiveTopicsMaxInactive = time.Minute
	}
	if d.InactiveTopicCheckInterval <= 0 {
		d.InactiveTopicCheckInterval = time.Minute
	}
	if d.SubscriptionExpiryCheckInterval <= 0 {
		d.SubscriptionExpiryCheckInterval = 5 * time.Minute
	}
	if d.SubscribeRatePeriodPerConsumer <= 0 {
		d.SubscribeRatePeriodPerConsumer = 30 * time.Second
	}
	if d.AutoTopicCreationType == "" {
		d.AutoTopicCreationType = "non-partitioned"
	}
	if d.DefaultNumPartitions <= 0 {
		d.DefaultNumPartitions = 1
	}
	if d.Clock == nil {
		d.Clock = time.Now
	}
	return d
}

// Default is the broker's default of p (nil: none).
func (pr *Resolver) Default(p *Policy) any {
	cur := pr.current()
	d := cur.d
	pos := func(v int) any {
		if v > 0 {
			return v
		}
		return nil
	}
	switch p.TopicPath + "|" + p.NSPath {
	case "retention|retention":
		ml := pr.ManagedLedger
		r := api.RetentionPolicies{RetentionTimeInMinutes: int(ml.RetentionTime / time.Minute), RetentionSizeInMB: ml.RetentionSize >> 20}
		if ml.RetentionTime < 0 {
			r.RetentionTimeInMinutes = -1
		}
		if ml.RetentionSize < 0 {
			r.RetentionSizeInMB = -1
		}
		return r
	case "messageTTL|messageTTL":
		return pos(d.TTLDurationDefaultInSeconds)
	case "maxProducers|maxProducersPerTopic":
		return pos(d.MaxProducersPerTopic)
	case "maxConsumers|maxConsumersPerTopic":
		return pos(d.MaxConsumersPerTopic)
	case "maxConsumersPerSubscription|maxConsumersPerSubscription":
		return pos(d.MaxConsumersPerSubscription)
	case "maxSubscriptionsPerTopic|maxSubscriptionsPerTopic":
		return pos(d.MaxSubscriptionsPerTopic)
	case "maxUnackedMessagesOnConsumer|maxUnackedMessagesPerConsumer":
		return pos(d.MaxUnackedMessagesPerConsumer)
	case "maxUnackedMessagesOnSubscription|maxUnackedMessagesPerSubscription":
		return pos(d.MaxUnackedMessagesPerSubscription)
	case "|maxTopicsPerNamespace":
		return pos(d.MaxTopicsPerNamespace)
	case "maxMessageSize|":
		return pr.MaxMessageSize
	case "publishRate|publishRate":
		if d.MaxPublishRatePerTopicInMessages > 0 || d.MaxPublishRatePerTopicInBytes > 0 {
			return api.PublishRate{PublishThrottlingRateInMsg: d.MaxPublishRatePerTopicInMessages, PublishThrottlingRateInByte: d.MaxPublishRatePerTopicInBytes}
		}
	case "inactiveTopicPolicies|inactiveTopicPolicies":
		return api.InactiveTopicPolicies{InactiveTopicDeleteMode: d.DeleteInactiveTopicsMode,
			MaxInactiveDurationSeconds: int(d.DeleteInactiveTopicsMaxInactive / time.Second), DeleteWhileInactive: d.DeleteInactiveTopics}
	case "subscriptionExpirationTime|subscriptionExpirationTime":
		return pos(d.SubscriptionExpirationTimeMinutes)
	case "subscribeRate|subscribeRate":
		if d.SubscribeThrottlingRatePerConsumer > 0 {
			return api.SubscribeRate{SubscribeThrottlingRatePerConsumer: d.SubscribeThrottlingRatePerConsumer,
				RatePeriodInSecond: int(d.SubscribeRatePeriodPerConsumer / time.Second)}
		}
	case "deduplicationSnapshotInterval|deduplicationSnapshotInterval":
		return pos(int(d.DeduplicationSnapshotInterval / time.Second))
	case "deduplicationEnabled|deduplication":
		return !pr.DisableDeduplication
	case "autoSubscriptionCreation|autoSubscriptionCreation":
		if cur.disableAutoSubscriptionCreation { // allowAutoSubscriptionCreation=false
			return api.AutoSubscriptionCreationOverride{}
		}
	case "persistence|persistence":
		ml := pr.ManagedLedger
		return api.PersistencePolicies{BookkeeperEnsemble: ml.Ensemble, BookkeeperWriteQuorum: ml.WriteQuorum, BookkeeperAckQuorum: ml.AckQuorum}
	}
	return nil
}

func (pr *Resolver) DefaultQuota(typ string) (api.BacklogQuota, bool) {
	d := pr.current().d
	switch {
	case typ == api.QuotaDestinationStorage && d.BacklogQuotaDefaultLimitBytes > 0:
		return api.BacklogQuota{LimitSize: d.BacklogQuotaDefaultLimitBytes, Policy: d.BacklogQuotaDefaultRetentionPolicy}, true
	case typ == api.QuotaMessageAge && d.BacklogQuotaDefaultLimitSeconds > 0:
		return api.BacklogQuota{LimitTime: d.BacklogQuotaDefaultLimitSeconds, Policy: d.BacklogQuotaDefaultRetentionPolicy}, true
	}
	return api.BacklogQuota{}, false
}

// Resolved are the policies in force on a topic.
type Resolved struct {
	Topic     topic.Policies
	Retention api.RetentionPolicies
	Quotas    map[string]api.BacklogQuota
	TTL       int64 // seconds; 0: none
	Inactive  api.InactiveTopicPolicies
	Dedup     *bool
	Persist   api.PersistencePolicies
	MaxTopics int
	// subExpiry deletes subscriptions without consumers for longer (0: never).
	SubExpiry time.Duration
	// autoPartitions is the partition count a producer or consumer of an unknown topic
	// creates (0: a non-partitioned topic).
	AutoPartitions int
	// autoCreate is the namespace's autoTopicCreationOverride (nil: none).
	AutoCreate *bool
	// ReplicationClusters are the clusters the topic lives in and replicates between: the
	// topic's replicationClusters, else its namespace's replication_clusters, else this
	// cluster only.
	ReplicationClusters []string
	// Offload is the tiered-storage policy (OffloadPolicy).
	Offload mledger.OffloadPolicy
}

// Resolve returns the policies in force on topic n, given its topic record tr and its
// namespace's record nr: each one the topic's, else the namespace's, else the broker's
// default. It is a pure function of its arguments and the Resolver.
func (pr *Resolver) Resolve(tr, nr Record, n topicname.Name) Resolved {
	var r Resolved
	num := func(path string) int {
		var v int
		pr.DecodeApplied(tr, nr, path, &v)
		return v
	}
	tp := &r.Topic
	tp.MaxProducers, tp.MaxConsumers = num("maxProducers"), num("maxConsumers")
	tp.MaxConsumersPerSubscription, tp.MaxSubscriptions = num("maxConsumersPerSubscription"), num("maxSubscriptionsPerTopic")
	tp.MaxUnackedPerConsumer, tp.MaxUnackedPerSubscription = num("maxUnackedMessagesOnConsumer"), num("maxUnackedMessagesOnSubscription")
	if v := num("maxMessageSize"); v > 0 && v < pr.MaxMessageSize {
		tp.MaxMessageSize = v
	}
	r.TTL = int64(num("messageTTL"))
	r.MaxTopics = num("maxTopicsPerNamespace")
	r.SubExpiry = time.Duration(num("subscriptionExpirationTime")) * time.Minute
	var rate api.PublishRate
	if pr.DecodeApplied(tr, nr, "publishRate", &rate) {
		tp.PublishRateMsgs, tp.PublishRateBytes = max(rate.PublishThrottlingRateInMsg, 0), max(rate.PublishThrottlingRateInByte, 0)
	}
	for path, to := range map[string]struct {
		msgs, bytes *int64
		relative    *bool
	}{"dispatchRate": {&tp.DispatchRateMsgs, &tp.DispatchRateBytes, &tp.DispatchRelative},
		"subscriptionDispatchRate": {&tp.SubDispatchRateMsgs, &tp.SubDispatchRateBytes, &tp.SubDispatchRelative}} {
		var dr api.DispatchRate
		if pr.DecodeApplied(tr, nr, path, &dr) {
			period := int64(max(dr.RatePeriodInSecond, 1))
			*to.msgs, *to.bytes = max(dr.DispatchThrottlingRateInMsg, 0)/period, max(dr.DispatchThrottlingRateInByte, 0)/period
			*to.relative = dr.RelativeToPublishRate
		}
	}
	pr.DecodeApplied(tr, nr, "retention", &r.Retention)
	pr.DecodeApplied(tr, nr, "inactiveTopicPolicies", &r.Inactive)
	pr.DecodeApplied(tr, nr, "persistence", &r.Persist)
	var dd bool
	if pr.DecodeApplied(tr, nr, "deduplicationEnabled", &dd) {
		r.Dedup = &dd
	}
	on := r.Dedup != nil && *r.Dedup && n.IsPersistent()
	tp.Dedup = &on
	tp.DedupSnapshotInterval = time.Duration(num("deduplicationSnapshotInterval")) * time.Second
	var sr api.SubscribeRate
	if pr.DecodeApplied(tr, nr, "subscribeRate", &sr) && sr.SubscribeThrottlingRatePerConsumer > 0 && sr.RatePeriodInSecond > 0 {
		tp.SubscribeRate, tp.SubscribeRatePeriod = sr.SubscribeThrottlingRatePerConsumer, time.Duration(sr.RatePeriodInSecond)*time.Second
	}
	var asc api.AutoSubscriptionCreationOverride
	tp.NoAutoSubscriptionCreation = pr.DecodeApplied(tr, nr, "autoSubscriptionCreation", &asc) && !asc.AllowAutoSubscriptionCreation
	var ddp api.DelayedDeliveryPolicies
	if pr.DecodeApplied(tr, nr, "delayedDelivery", &ddp) {
		tp.NoDelayedDelivery, tp.DelayedTickMs, tp.MaxDeliveryDelayMs = !ddp.Active, ddp.TickTime, ddp.MaxDeliveryDelayInMillis
	}
	r.AutoCreate, r.AutoPartitions = pr.AutoTopicCreation(tr, nr)
	r.ReplicationClusters = pr.ReplicationClusters(tr, nr)
	r.Offload = pr.OffloadPolicy(tr, nr)
	r.Quotas = map[string]api.BacklogQuota{}
	tp.BacklogQuotaLimitSize, tp.BacklogQuotaLimitTime = -1, -1
	for _, typ := range []string{api.QuotaDestinationStorage, api.QuotaMessageAge} {
		if q, ok := pr.QuotaOf(tr, nr, typ); ok {
			r.Quotas[typ] = q
			if typ == api.QuotaDestinationStorage && q.LimitSize > 0 {
				tp.BacklogQuotaLimitSize = q.LimitSize
			}
			if typ == api.QuotaMessageAge && q.LimitTime > 0 {
				tp.BacklogQuotaLimitTime = q.LimitTime
			}
		}
	}
	return r
}

// autoTopicCreation resolves the auto topic creation policy: whether it is allowed (nil:
// not set) and the partitions of what it creates (0: a non-partitioned topic).
func (pr *Resolver) AutoTopicCreation(tr, nr Record) (*bool, int) {
	var atc api.AutoTopicCreationOverride
	if !pr.DecodeApplied(tr, nr, "autoTopicCreation", &atc) {
		if d := pr.current().d; d.AutoTopicCreationType == "partitioned" {
			return nil, d.DefaultNumPartitions
		}
		return nil, 0
	}
	if atc.TopicType == "partitioned" && atc.DefaultNumPartitions != nil {
		return &atc.AllowAutoTopicCreation, *atc.DefaultNumPartitions
	}
	return &atc.AllowAutoTopicCreation, 0
}

// AutoCreateAllowed reports whether a producer or consumer of an unknown topic creates it:
// the namespace's autoTopicCreationOverride, else its legacy flag, else the broker's.
func (pr *Resolver) AutoCreateAllowed(pol api.NamespacePolicies, r Resolved) bool {
	switch {
	case r.AutoCreate != nil:
		return *r.AutoCreate
	case pol.AutoTopicCreation != nil:
		return *pol.AutoTopicCreation
	}
	return !pr.current().disableAutoTopicCreation
}
func RetentionOf(r api.RetentionPolicies) (time.Duration, int64) {
	d, size := time.Duration(r.RetentionTimeInMinutes)*time.Minute, r.RetentionSizeInMB<<20
	if r.RetentionTimeInMinutes < 0 {
		d = -1
	}
	if r.RetentionSizeInMB < 0 {
		size = -1
	}
	return d, size
}

// Pick resolves p from the topic and namespace records and the broker's defaults. The
// backlog quota map merges per type.
func (pr *Resolver) Pick(tr, nr Record, p *Policy) json.RawMessage {
	if p.NSPath == "backlogQuota" {
		m := map[string]api.BacklogQuota{}
		for _, typ := range []string{api.QuotaDestinationStorage, api.QuotaMessageAge} {
			if q, ok := pr.QuotaOf(tr, nr, typ); ok {
				m[typ] = q
			}
		}
		b, _ := json.Marshal(m)
		return b
	}
	if p.TopicKey == KeyTopicOffloadPolicies {
		// The applied offload policy merges field by field (OffloadPolicy).
		b, _ := json.Marshal(OffloadPoliciesOf(pr.OffloadPolicy(tr, nr)))
		return b
	}
	if p.TopicKey != "" {
		if v := tr.Value(p, p.TopicKey, ""); v != nil {
			return v
		}
	}
	if p.NSKey != "" {
		if v := nr.Value(p, p.NSKey, pr.Cluster); v != nil {
			return v
		}
	}
	if d := pr.Default(p); d != nil {
		b, _ := json.Marshal(d)
		return b
	}
	return nil
}

// QuotaOf resolves the backlog quota of one type.
func (pr *Resolver) QuotaOf(tr, nr Record, typ string) (api.BacklogQuota, bool) {
	p := For("backlogQuota")
	for _, v := range []json.RawMessage{tr.Value(p, p.TopicKey, ""), nr.Value(p, p.NSKey, "")} {
		var m map[string]api.BacklogQuota
		if v != nil && json.Unmarshal(v, &m) == nil {
			if q, ok := m[typ]; ok {
				return q, true
			}
		}
	}
	return pr.DefaultQuota(typ)
}

// DecodeApplied resolves p for records tr and nr into v (false: none in force).
func (pr *Resolver) DecodeApplied(tr, nr Record, path string, v any) bool {
	b := pr.Pick(tr, nr, For(path))
	return b != nil && json.Unmarshal(b, v) == nil
}

// Record keys of the replication clusters (Pulsar's TopicPolicies and Policies fields).
const (
	KeyTopicReplicationClusters = "replicationClusters"
	KeyNamespaceReplication     = "replication_clusters"
)

// ReplicationClusters resolves a topic's replication clusters: the topic record's list,
// else the namespace record's, else this cluster only (a list that does not decode is
// skipped).
func (pr *Resolver) ReplicationClusters(tr, nr Record) []string {
	for _, b := range []json.RawMessage{tr[KeyTopicReplicationClusters], nr[KeyNamespaceReplication]} {
		var l []string
		if len(b) > 0 && json.Unmarshal(b, &l) == nil && len(l) > 0 {
			return l
		}
	}
	return []string{pr.Cluster}
}
