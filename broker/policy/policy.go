package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/admin/jsonbody"
	"github.com/magnetar-io/magnetar/broker/api"
)

// Policy describes one policy: its REST path element and record key at each level ("":
// not at that level) and how a body is checked (it returns the value to store).
type Policy struct {
	NSPath, NSKey       string
	TopicPath, TopicKey string
	// PerCluster: the namespace record keeps {cluster: value} (Pulsar's rate maps).
	PerCluster bool
	check      func(b []byte) (any, error)
}

// The policies. The backlog quota's body is one quota; its record is the map by type.
var policies = []*Policy{
	{NSPath: "retention", NSKey: "retention_policies", TopicPath: "retention", TopicKey: "retentionPolicies", check: checkRetention},
	{NSPath: "backlogQuota", NSKey: "backlog_quota_map", TopicPath: "backlogQuota", TopicKey: "backLogQuotaMap", check: checkBacklogQuota},
	{NSPath: "messageTTL", NSKey: "message_ttl_in_seconds", TopicPath: "messageTTL", TopicKey: "messageTTLInSeconds", check: nonNegative("messageTTL")},
	{NSPath: "publishRate", NSKey: "publishMaxMessageRate", TopicPath: "publishRate", TopicKey: "publishRate", PerCluster: true, check: checkPublishRate},
	{NSPath: "dispatchRate", NSKey: "topicDispatchRate", TopicPath: "dispatchRate", TopicKey: "dispatchRate", PerCluster: true, check: checkDispatchRate},
	{NSPath: "subscriptionDispatchRate", NSKey: "subscriptionDispatchRate", TopicPath: "subscriptionDispatchRate", TopicKey: "subscriptionDispatchRate", PerCluster: true, check: checkDispatchRate},
	{NSPath: "replicatorDispatchRate", NSKey: "replicatorDispatchRate", TopicPath: "replicatorDispatchRate", TopicKey: "replicatorDispatchRate", PerCluster: true, check: checkDispatchRate},
	{NSPath: "subscribeRate", NSKey: "clusterSubscribeRate", TopicPath: "subscribeRate", TopicKey: "subscribeRate", PerCluster: true, check: checkSubscribeRate},
	{NSPath: "maxProducersPerTopic", NSKey: "max_producers_per_topic", TopicPath: "maxProducers", TopicKey: "maxProducerPerTopic", check: nonNegative("maxProducers")},
	{NSPath: "maxConsumersPerTopic", NSKey: "max_consumers_per_topic", TopicPath: "maxConsumers", TopicKey: "maxConsumerPerTopic", check: nonNegative("maxConsumers")},
	{NSPath: "maxConsumersPerSubscription", NSKey: "max_consumers_per_subscription", TopicPath: "maxConsumersPerSubscription", TopicKey: "maxConsumersPerSubscription", check: nonNegative("maxConsumersPerSubscription")},
	{NSPath: "maxSubscriptionsPerTopic", NSKey: "max_subscriptions_per_topic", TopicPath: "maxSubscriptionsPerTopic", TopicKey: "maxSubscriptionsPerTopic", check: nonNegative("maxSubscriptionsPerTopic")},
	{NSPath: "maxUnackedMessagesPerConsumer", NSKey: "max_unacked_messages_per_consumer", TopicPath: "maxUnackedMessagesOnConsumer", TopicKey: "maxUnackedMessagesOnConsumer", check: nonNegative("maxUnackedMessages")},
	{NSPath: "maxUnackedMessagesPerSubscription", NSKey: "max_unacked_messages_per_subscription", TopicPath: "maxUnackedMessagesOnSubscription", TopicKey: "maxUnackedMessagesOnSubscription", check: nonNegative("maxUnackedMessages")},
	{TopicPath: "maxMessageSize", TopicKey: "maxMessageSize", check: nonNegative("maxMessageSize")},
	{NSPath: "maxTopicsPerNamespace", NSKey: "max_topics_per_namespace", check: nonNegative("maxTopicsPerNamespace")},
	{NSPath: "inactiveTopicPolicies", NSKey: "inactive_topic_policies", TopicPath: "inactiveTopicPolicies", TopicKey: "inactiveTopicPolicies", check: checkInactive},
	{NSPath: "subscriptionExpirationTime", NSKey: "subscription_expiration_time_minutes", TopicPath: "subscriptionExpirationTime", TopicKey: "subscriptionExpirationTimeMinutes", check: checked(func(v *int64) error {
		if *v < 0 {
			return invalid("Invalid value for subscription expiration time") // Pulsar's reason
		}
		return nil
	})},
	{NSPath: "autoTopicCreation", NSKey: "autoTopicCreationOverride", check: checkAutoTopicCreation},
	{NSPath: "autoSubscriptionCreation", NSKey: "autoSubscriptionCreationOverride", TopicPath: "autoSubscriptionCreation", TopicKey: "autoSubscriptionCreationOverride", check: decodeAs[api.AutoSubscriptionCreationOverride]},
	{NSPath: "deduplication", NSKey: "deduplicationEnabled", TopicPath: "deduplicationEnabled", TopicKey: "deduplicationEnabled", check: decodeAs[bool]},
	{NSPath: "deduplicationSnapshotInterval", NSKey: "deduplicationSnapshotIntervalSeconds", TopicPath: "deduplicationSnapshotInterval", TopicKey: "deduplicationSnapshotIntervalSeconds", check: nonNegative("deduplicationSnapshotInterval")},
	{NSPath: "delayedDelivery", NSKey: "delayed_delivery_policies", TopicPath: "delayedDelivery", TopicKey: "delayedDeliveryPolicies", check: checkDelayed},
	{NSPath: "persistence", NSKey: "persistence", TopicPath: "persistence", TopicKey: "persistence", check: checkPersistence},
	{NSPath: "properties", NSKey: "properties", TopicPath: "properties", TopicKey: "properties", check: decodeAs[map[string]string]},
	{TopicPath: "schemaValidationEnforced", TopicKey: KeySchemaValidationEnforced, check: decodeAs[bool]},
	{NSPath: "persistence/bookieAffinity", NSKey: "bookieAffinityGroup", check: checked(func(g *BookieAffinityGroup) error {
		if g.Primary == "" {
			return invalid("bookkeeperAffinityGroupPrimary is required")
		}
		return nil
	})},
	{NSPath: "offloadPolicies", NSKey: KeyNSOffloadPolicies, TopicPath: "offloadPolicies", TopicKey: KeyTopicOffloadPolicies, check: checkOffloadPolicies},
	{NSPath: "offloadThreshold", NSKey: KeyNSOffloadThreshold, check: checkOffloadThreshold},
	{NSPath: "offloadThresholdInSeconds", NSKey: KeyNSOffloadThresholdSecs, check: checkOffloadThresholdInSeconds},
	{NSPath: "offloadDeletionLagMs", NSKey: KeyNSOffloadDeletionLagMs, check: checkOffloadDeletionLag},
}

var checkRetention = checked(func(r *api.RetentionPolicies) error {
	if r.RetentionTimeInMinutes < -1 || r.RetentionSizeInMB < -1 {
		return invalid("retention time and size must be -1 (infinite) or more")
	}
	return nil
})

var checkBacklogQuota = checked(func(q *api.BacklogQuota) error {
	if q.Limit != nil {
		if q.LimitSize == 0 {
			q.LimitSize = *q.Limit
		}
		q.Limit = nil
	}
	switch q.Policy {
	case api.QuotaProducerRequestHold, api.QuotaProducerException, api.QuotaConsumerBacklogEviction:
	default:
		return invalid("unknown backlog quota policy %q", q.Policy)
	}
	if q.LimitSize < -1 || q.LimitTime < -1 {
		return invalid("backlog quota limits must be -1 (none) or more")
	}
	return nil
})

var checkPublishRate = checked(func(r *api.PublishRate) error {
	if r.PublishThrottlingRateInMsg < -1 || r.PublishThrottlingRateInByte < -1 {
		return invalid("publish rates must be -1 (unlimited) or more")
	}
	return nil
})

var checkDispatchRate = checked(func(r *api.DispatchRate) error {
	if r.DispatchThrottlingRateInMsg < -1 || r.DispatchThrottlingRateInByte < -1 || r.RatePeriodInSecond < 0 {
		return invalid("dispatch rates must be -1 (unlimited) or more")
	}
	return nil
})

var checkSubscribeRate = checked(func(r *api.SubscribeRate) error {
	if r.SubscribeThrottlingRatePerConsumer < -1 || r.RatePeriodInSecond < 0 {
		return invalid("subscribe rate must be -1 (unlimited) or more")
	}
	return nil
})

var checkInactive = checked(func(p *api.InactiveTopicPolicies) error {
	switch p.InactiveTopicDeleteMode {
	case "delete_when_no_subscriptions", "delete_when_subscriptions_caught_up":
	default:
		return invalid("unknown inactiveTopicDeleteMode %q", p.InactiveTopicDeleteMode)
	}
	if p.MaxInactiveDurationSeconds < 0 {
		return invalid("maxInactiveDurationSeconds must be 0 or more")
	}
	return nil
})

// checkAutoTopicCreation checks an autoTopicCreation override as Pulsar's
// AutoTopicCreationOverrideImpl.validateOverride does (only an override that allows
// creation is checked), refusing with its 412 and reason; an unset topicType is stored as
// non-partitioned.
var checkAutoTopicCreation = checked(func(a *api.AutoTopicCreationOverride) error {
	refuse := func(detail string) error {
		return fmt.Errorf("%w: Invalid configuration for autoTopicCreationOverride. the detail is %s", api.ErrPreconditionFailed, detail)
	}
	if a.TopicType == "" {
		a.TopicType = "non-partitioned"
	}
	if !a.AllowAutoTopicCreation {
		return nil
	}
	switch a.TopicType {
	case "non-partitioned":
		if a.DefaultNumPartitions != nil {
			return refuse("[defaultNumPartitions] is not allowed to be set when the type is non-partition.")
		}
	case "partitioned":
		if a.DefaultNumPartitions == nil {
			return refuse("[defaultNumPartitions] cannot be null when the type is partitioned.")
		}
		if *a.DefaultNumPartitions < 1 {
			return refuse("[defaultNumPartitions] cannot be less than 1 for partition type.")
		}
	default:
		return refuse(fmt.Sprintf("Unknown topic type [%s]", a.TopicType))
	}
	return nil
})

var checkDelayed = checked(func(d *api.DelayedDeliveryPolicies) error {
	if d.TickTime < 0 || d.MaxDeliveryDelayInMillis < 0 {
		return invalid("delayed delivery times must be 0 or more")
	}
	return nil
})

var checkPersistence = checked(func(p *api.PersistencePolicies) error {
	if p.BookkeeperAckQuorum < 1 || p.BookkeeperWriteQuorum < p.BookkeeperAckQuorum || p.BookkeeperEnsemble < p.BookkeeperWriteQuorum ||
		p.ManagedLedgerMaxMarkDeleteRate < 0 {
		return invalid("persistence needs an ack quorum of 1 or more, a write quorum of at least the ack quorum, " +
			"an ensemble of at least the write quorum and a mark-delete rate of 0 or more")
	}
	return nil
})

// Record is a level's policies by record key, as stored.
type Record map[string]json.RawMessage

// schemaStrategy is the topic-level schema compatibility strategy ("": none).
func (r Record) SchemaStrategy() string {
	var v string
	_ = json.Unmarshal(r[KeySchemaStrategy], &v)
	return v
}

// compactionThreshold is the topic-level compaction threshold (nil: none).
func (r Record) CompactionThreshold() *int64 {
	var v *int64
	if b := r[KeyCompactionThreshold]; len(b) > 0 {
		_ = json.Unmarshal(b, &v)
	}
	return v
}

// set stores v under key (nil: removes it). For the backlog quota map, qualifier is the
// quota type; for per-cluster policies, the cluster.
func (r Record) Set(p *Policy, key, qualifier string, v any) error {
	inner := qualifier
	if inner == "" {
		if v == nil {
			delete(r, key)
			return nil
		}
		b, err := json.Marshal(v)
		r[key] = b
		return err
	}
	m := map[string]json.RawMessage{}
	if old := r[key]; len(old) > 0 && !bytes.Equal(old, []byte("null")) {
		if err := json.Unmarshal(old, &m); err != nil {
			return fmt.Errorf("policy %s: %w", key, err)
		}
	}
	if v == nil {
		delete(m, inner)
	} else {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		m[inner] = b
	}
	if len(m) == 0 {
		delete(r, key)
		return nil
	}
	b, err := json.Marshal(m)
	r[key] = b
	return err
}

// value is the stored value of p at a level (nil: none); at namespace level (cluster set),
// per-cluster values are unwrapped.
func (r Record) Value(p *Policy, key, cluster string) json.RawMessage {
	v := r[key]
	if len(v) == 0 || bytes.Equal(v, []byte("null")) {
		return nil
	}
	if p.PerCluster && cluster != "" {
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) != nil {
			return nil
		}
		return m[cluster]
	}
	return v
}

// NamespacePaths and TopicPaths list the REST path elements of the policies at
// each level (…/namespaces/{t}/{ns}/<path>, …/persistent/{t}/{ns}/{topic}/<path>).
func NamespacePaths() []string { return policyPaths(func(p *Policy) string { return p.NSPath }) }

// TopicPaths: see NamespacePaths.
func TopicPaths() []string { return policyPaths(func(p *Policy) string { return p.TopicPath }) }

func policyPaths(f func(*Policy) string) []string {
	var out []string
	for _, p := range policies {
		if f(p) != "" {
			out = append(out, f(p))
		}
	}
	return out
}

func Find(path string, topicLevel bool) (*Policy, error) {
	for _, p := range policies {
		if (topicLevel && p.TopicPath == path) || (!topicLevel && p.NSPath == path) {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w: unknown policy %q", api.ErrInvalidArgument, path)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", api.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// decodeAs decodes a body into a T (malformed: api.ErrInvalidArgument).
func decodeAs[T any](b []byte) (any, error) {
	var v T
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, invalid("a body is required")
	}
	if err := jsonbody.Decode(b, &v); err != nil { // as Pulsar's Jackson reads it
		return nil, invalid("invalid body: %v", err)
	}
	return v, nil
}

func nonNegative(name string) func([]byte) (any, error) {
	return checked(func(v *int64) error {
		if *v < 0 {
			return invalid("%s must be 0 or more", name)
		}
		return nil
	})
}

// checked decodes a body into a T and checks (and may normalize) it with ok.
func checked[T any](ok func(*T) error) func([]byte) (any, error) {
	return func(b []byte) (any, error) {
		v, err := decodeAs[T](b)
		if err != nil {
			return nil, err
		}
		t := v.(T)
		if err := ok(&t); err != nil {
			return nil, err
		}
		return t, nil
	}
}

// backlogQuotaType checks a backlogQuotaType parameter ("": destination_storage).
func backlogQuotaType(q string) (string, error) {
	switch q {
	case "", api.QuotaDestinationStorage:
		return api.QuotaDestinationStorage, nil
	case api.QuotaMessageAge:
		return api.QuotaMessageAge, nil
	}
	return "", invalid("unknown backlogQuotaType %q", q)
}

// RecordOf is a namespace's policies by Pulsar key.
func RecordOf(pol api.NamespacePolicies) (Record, error) {
	b, err := json.Marshal(pol)
	if err != nil {
		return nil, err
	}
	r := Record{}
	return r, json.Unmarshal(b, &r)
}

func NullJSON(p *Policy) json.RawMessage {
	if p.NSPath == "backlogQuota" || p.NSPath == "properties" {
		return json.RawMessage("{}")
	}
	if d := offloadDefault(p.NSPath); d != nil {
		b, _ := json.Marshal(d) // Pulsar's Policies default of the offload thresholds
		return b
	}
	return json.RawMessage("null")
}

// CheckChange parses a change of policy path: the policy, the value to store (nil:
// remove) and the record qualifier.
func CheckChange(path string, topicLevel bool, qualifier string, body []byte, remove bool, cluster string) (*Policy, any, string, error) {
	p, err := Find(path, topicLevel)
	if err != nil {
		return nil, nil, "", err
	}
	q := ""
	switch {
	case p.NSPath == "backlogQuota":
		if q, err = backlogQuotaType(qualifier); err != nil {
			return nil, nil, "", err
		}
	case p.PerCluster && !topicLevel:
		q = cluster
	}
	if remove {
		return p, nil, q, nil
	}
	v, err := p.check(body)
	if err != nil {
		return nil, nil, "", err
	}
	if p.NSPath == "backlogQuota" {
		bq := v.(api.BacklogQuota)
		if q == api.QuotaMessageAge && bq.LimitTime <= 0 {
			return nil, nil, "", invalid("a message_age quota needs limitTime")
		}
		if q == api.QuotaDestinationStorage && bq.LimitSize == 0 {
			return nil, nil, "", invalid("a destination_storage quota needs limitSize")
		}
	}
	return p, v, q, nil
}

// For is the policy whose namespace or topic path is path.
func For(path string) *Policy {
	i := slices.IndexFunc(policies, func(p *Policy) bool { return p.NSPath == path || p.TopicPath == path })
	return policies[i]
}

// Keys of the topic record that other parts use (broker/schemareg, compaction in broker/topicreg).
const (
	KeySchemaStrategy           = "schemaCompatibilityStrategy"
	KeySchemaValidationEnforced = "schemaValidationEnforced"
	KeyCompactionThreshold      = "compactionThreshold"
)

// SchemaValidationEnforced is the topic-level schemaValidationEnforced (nil: not set, the
// namespace's applies).
func (r Record) SchemaValidationEnforced() *bool {
	var v *bool
	if b := r[KeySchemaValidationEnforced]; len(b) > 0 {
		_ = json.Unmarshal(b, &v)
	}
	return v
}

// BookieAffinityGroup is Pulsar's BookieAffinityGroupData, a namespace's bookie isolation
// groups (…/persistence/bookieAffinity, kept in the namespace record as
// "bookieAffinityGroup"). Magnetar keeps it for Pulsar's tools; its ensemble placement
// does not read it (no bookie isolation groups).
type BookieAffinityGroup struct {
	Primary   string `json:"bookkeeperAffinityGroupPrimary"`
	Secondary string `json:"bookkeeperAffinityGroupSecondary,omitempty"`
}
