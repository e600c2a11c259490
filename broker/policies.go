package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// Policies (Pulsar's namespace and topic policies). Each policy is stored at two levels —
// the namespace record (metadata.NamespaceKey, Pulsar's Policies JSON keys) and the topic
// policy record (metadata.TopicFeaturePolicyKey, Pulsar's TopicPolicies JSON keys) — and
// resolved topic, then namespace, then the broker's configuration (policydefaults.go).
// Changes reach the loaded topics through a watch of both prefixes (policyapply.go).

// RetentionPolicies is Pulsar's retention policy (-1: infinite).
type RetentionPolicies struct {
	RetentionTimeInMinutes int   `json:"retentionTimeInMinutes"`
	RetentionSizeInMB      int64 `json:"retentionSizeInMB"`
}

// BacklogQuota is Pulsar's backlog quota: limitSize bytes (destination_storage) or limitTime
// seconds (message_age), and what happens beyond it.
type BacklogQuota struct {
	Limit     *int64 `json:"limit,omitempty"` // legacy form of LimitSize
	LimitSize int64  `json:"limitSize"`
	LimitTime int64  `json:"limitTime"`
	Policy    string `json:"policy"`
}

// Backlog quota types and policies (Pulsar's names).
const (
	QuotaDestinationStorage = "destination_storage"
	QuotaMessageAge         = "message_age"

	QuotaProducerRequestHold     = "producer_request_hold"
	QuotaProducerException       = "producer_exception"
	QuotaConsumerBacklogEviction = "consumer_backlog_eviction"
)

// PublishRate is Pulsar's publish rate (per second; -1 or 0: unlimited).
type PublishRate struct {
	PublishThrottlingRateInMsg  int64 `json:"publishThrottlingRateInMsg"`
	PublishThrottlingRateInByte int64 `json:"publishThrottlingRateInByte"`
}

// DispatchRate is Pulsar's dispatch rate (per ratePeriodInSecond; -1: unlimited).
type DispatchRate struct {
	DispatchThrottlingRateInMsg  int64 `json:"dispatchThrottlingRateInMsg"`
	DispatchThrottlingRateInByte int64 `json:"dispatchThrottlingRateInByte"`
	RelativeToPublishRate        bool  `json:"relativeToPublishRate"`
	RatePeriodInSecond           int   `json:"ratePeriodInSecond"`
}

// SubscribeRate is Pulsar's subscribe rate per consumer.
type SubscribeRate struct {
	SubscribeThrottlingRatePerConsumer int `json:"subscribeThrottlingRatePerConsumer"`
	RatePeriodInSecond                 int `json:"ratePeriodInSecond"`
}

// InactiveTopicPolicies is Pulsar's inactive topic policy.
type InactiveTopicPolicies struct {
	InactiveTopicDeleteMode    string `json:"inactiveTopicDeleteMode"`
	MaxInactiveDurationSeconds int    `json:"maxInactiveDurationSeconds"`
	DeleteWhileInactive        bool   `json:"deleteWhileInactive"`
}

// PersistencePolicies is Pulsar's persistence policy for new ledgers.
type PersistencePolicies struct {
	BookkeeperEnsemble             int     `json:"bookkeeperEnsemble"`
	BookkeeperWriteQuorum          int     `json:"bookkeeperWriteQuorum"`
	BookkeeperAckQuorum            int     `json:"bookkeeperAckQuorum"`
	ManagedLedgerMaxMarkDeleteRate float64 `json:"managedLedgerMaxMarkDeleteRate"`
}

// DelayedDeliveryPolicies is Pulsar's delayed delivery policy.
type DelayedDeliveryPolicies struct {
	Active                   bool  `json:"active"`
	TickTime                 int64 `json:"tickTime"`
	MaxDeliveryDelayInMillis int64 `json:"maxDeliveryDelayInMillis"`
}

// AutoTopicCreationOverride is Pulsar's namespace auto topic creation policy.
type AutoTopicCreationOverride struct {
	AllowAutoTopicCreation bool   `json:"allowAutoTopicCreation"`
	TopicType              string `json:"topicType"`
	DefaultNumPartitions   *int   `json:"defaultNumPartitions,omitempty"`
}

// AutoSubscriptionCreationOverride is Pulsar's auto subscription creation policy.
type AutoSubscriptionCreationOverride struct {
	AllowAutoSubscriptionCreation bool `json:"allowAutoSubscriptionCreation"`
}

// policy describes one policy: its REST path element and record key at each level ("":
// not at that level) and how a body is checked (it returns the value to store).
type policy struct {
	nsPath, nsKey       string
	topicPath, topicKey string
	// perCluster: the namespace record keeps {cluster: value} (Pulsar's rate maps).
	perCluster bool
	check      func(b []byte) (any, error)
}

// The policies. The backlog quota's body is one quota; its record is the map by type.
var policies = []*policy{
	{nsPath: "retention", nsKey: "retention_policies", topicPath: "retention", topicKey: "retentionPolicies", check: checkRetention},
	{nsPath: "backlogQuota", nsKey: "backlog_quota_map", topicPath: "backlogQuota", topicKey: "backLogQuotaMap", check: checkBacklogQuota},
	{nsPath: "messageTTL", nsKey: "message_ttl_in_seconds", topicPath: "messageTTL", topicKey: "messageTTLInSeconds", check: nonNegative("messageTTL")},
	{nsPath: "publishRate", nsKey: "publishMaxMessageRate", topicPath: "publishRate", topicKey: "publishRate", perCluster: true, check: checkPublishRate},
	{nsPath: "dispatchRate", nsKey: "topicDispatchRate", topicPath: "dispatchRate", topicKey: "dispatchRate", perCluster: true, check: checkDispatchRate},
	{nsPath: "subscriptionDispatchRate", nsKey: "subscriptionDispatchRate", topicPath: "subscriptionDispatchRate", topicKey: "subscriptionDispatchRate", perCluster: true, check: checkDispatchRate},
	{nsPath: "replicatorDispatchRate", nsKey: "replicatorDispatchRate", topicPath: "replicatorDispatchRate", topicKey: "replicatorDispatchRate", perCluster: true, check: checkDispatchRate},
	{nsPath: "subscribeRate", nsKey: "clusterSubscribeRate", topicPath: "subscribeRate", topicKey: "subscribeRate", perCluster: true, check: checkSubscribeRate},
	{nsPath: "maxProducersPerTopic", nsKey: "max_producers_per_topic", topicPath: "maxProducers", topicKey: "maxProducerPerTopic", check: nonNegative("maxProducers")},
	{nsPath: "maxConsumersPerTopic", nsKey: "max_consumers_per_topic", topicPath: "maxConsumers", topicKey: "maxConsumerPerTopic", check: nonNegative("maxConsumers")},
	{nsPath: "maxConsumersPerSubscription", nsKey: "max_consumers_per_subscription", topicPath: "maxConsumersPerSubscription", topicKey: "maxConsumersPerSubscription", check: nonNegative("maxConsumersPerSubscription")},
	{nsPath: "maxSubscriptionsPerTopic", nsKey: "max_subscriptions_per_topic", topicPath: "maxSubscriptionsPerTopic", topicKey: "maxSubscriptionsPerTopic", check: nonNegative("maxSubscriptionsPerTopic")},
	{nsPath: "maxUnackedMessagesPerConsumer", nsKey: "max_unacked_messages_per_consumer", topicPath: "maxUnackedMessagesOnConsumer", topicKey: "maxUnackedMessagesOnConsumer", check: nonNegative("maxUnackedMessages")},
	{nsPath: "maxUnackedMessagesPerSubscription", nsKey: "max_unacked_messages_per_subscription", topicPath: "maxUnackedMessagesOnSubscription", topicKey: "maxUnackedMessagesOnSubscription", check: nonNegative("maxUnackedMessages")},
	{topicPath: "maxMessageSize", topicKey: "maxMessageSize", check: nonNegative("maxMessageSize")},
	{nsPath: "maxTopicsPerNamespace", nsKey: "max_topics_per_namespace", check: nonNegative("maxTopicsPerNamespace")},
	{nsPath: "inactiveTopicPolicies", nsKey: "inactive_topic_policies", topicPath: "inactiveTopicPolicies", topicKey: "inactiveTopicPolicies", check: checkInactive},
	{nsPath: "subscriptionExpirationTime", nsKey: "subscription_expiration_time_minutes", topicPath: "subscriptionExpirationTime", topicKey: "subscriptionExpirationTimeMinutes", check: nonNegative("subscriptionExpirationTime")},
	{nsPath: "autoTopicCreation", nsKey: "autoTopicCreationOverride", check: checkAutoTopicCreation},
	{nsPath: "autoSubscriptionCreation", nsKey: "autoSubscriptionCreationOverride", topicPath: "autoSubscriptionCreation", topicKey: "autoSubscriptionCreationOverride", check: decodeAs[AutoSubscriptionCreationOverride]},
	{nsPath: "deduplication", nsKey: "deduplicationEnabled", topicPath: "deduplicationEnabled", topicKey: "deduplicationEnabled", check: decodeAs[bool]},
	{nsPath: "deduplicationSnapshotInterval", nsKey: "deduplicationSnapshotIntervalSeconds", topicPath: "deduplicationSnapshotInterval", topicKey: "deduplicationSnapshotIntervalSeconds", check: nonNegative("deduplicationSnapshotInterval")},
	{nsPath: "delayedDelivery", nsKey: "delayed_delivery_policies", topicPath: "delayedDelivery", topicKey: "delayedDeliveryPolicies", check: checkDelayed},
	{nsPath: "persistence", nsKey: "persistence", topicPath: "persistence", topicKey: "persistence", check: checkPersistence},
	{nsPath: "properties", nsKey: "properties", topicPath: "properties", topicKey: "properties", check: decodeAs[map[string]string]},
}

// NamespacePolicyPaths and TopicPolicyPaths list the REST path elements of the policies at
// each level (…/namespaces/{t}/{ns}/<path>, …/persistent/{t}/{ns}/{topic}/<path>).
func NamespacePolicyPaths() []string { return policyPaths(func(p *policy) string { return p.nsPath }) }

// TopicPolicyPaths: see NamespacePolicyPaths.
func TopicPolicyPaths() []string { return policyPaths(func(p *policy) string { return p.topicPath }) }

func policyPaths(f func(*policy) string) []string {
	var out []string
	for _, p := range policies {
		if f(p) != "" {
			out = append(out, f(p))
		}
	}
	return out
}

func findPolicy(path string, topicLevel bool) (*policy, error) {
	for _, p := range policies {
		if (topicLevel && p.topicPath == path) || (!topicLevel && p.nsPath == path) {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w: unknown policy %q", ErrInvalidArgument, path)
}

// Checking bodies.

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// decodeAs decodes a body into a T (malformed: ErrInvalidArgument).
func decodeAs[T any](b []byte) (any, error) {
	var v T
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, invalid("a body is required")
	}
	if err := json.Unmarshal(b, &v); err != nil {
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

var checkRetention = checked(func(r *RetentionPolicies) error {
	if r.RetentionTimeInMinutes < -1 || r.RetentionSizeInMB < -1 {
		return invalid("retention time and size must be -1 (infinite) or more")
	}
	return nil
})

var checkBacklogQuota = checked(func(q *BacklogQuota) error {
	if q.Limit != nil {
		if q.LimitSize == 0 {
			q.LimitSize = *q.Limit
		}
		q.Limit = nil
	}
	switch q.Policy {
	case QuotaProducerRequestHold, QuotaProducerException, QuotaConsumerBacklogEviction:
	default:
		return invalid("unknown backlog quota policy %q", q.Policy)
	}
	if q.LimitSize < -1 || q.LimitTime < -1 {
		return invalid("backlog quota limits must be -1 (none) or more")
	}
	return nil
})

var checkPublishRate = checked(func(r *PublishRate) error {
	if r.PublishThrottlingRateInMsg < -1 || r.PublishThrottlingRateInByte < -1 {
		return invalid("publish rates must be -1 (unlimited) or more")
	}
	return nil
})

var checkDispatchRate = checked(func(r *DispatchRate) error {
	if r.DispatchThrottlingRateInMsg < -1 || r.DispatchThrottlingRateInByte < -1 || r.RatePeriodInSecond < 0 {
		return invalid("dispatch rates must be -1 (unlimited) or more")
	}
	return nil
})

var checkSubscribeRate = checked(func(r *SubscribeRate) error {
	if r.SubscribeThrottlingRatePerConsumer < -1 || r.RatePeriodInSecond < 0 {
		return invalid("subscribe rate must be -1 (unlimited) or more")
	}
	return nil
})

var checkInactive = checked(func(p *InactiveTopicPolicies) error {
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

var checkAutoTopicCreation = checked(func(a *AutoTopicCreationOverride) error {
	switch a.TopicType {
	case "non-partitioned", "":
		a.TopicType = "non-partitioned"
	case "partitioned":
		if a.DefaultNumPartitions == nil || *a.DefaultNumPartitions < 1 {
			return invalid("defaultNumPartitions must be 1 or more for partitioned topics")
		}
	default:
		return invalid("unknown topicType %q", a.TopicType)
	}
	return nil
})

var checkDelayed = checked(func(d *DelayedDeliveryPolicies) error {
	if d.TickTime < 0 || d.MaxDeliveryDelayInMillis < 0 {
		return invalid("delayed delivery times must be 0 or more")
	}
	return nil
})

var checkPersistence = checked(func(p *PersistencePolicies) error {
	if p.BookkeeperAckQuorum < 1 || p.BookkeeperWriteQuorum < p.BookkeeperAckQuorum || p.BookkeeperEnsemble < p.BookkeeperWriteQuorum ||
		p.ManagedLedgerMaxMarkDeleteRate < 0 {
		return invalid("persistence needs an ack quorum of 1 or more, a write quorum of at least the ack quorum, " +
			"an ensemble of at least the write quorum and a mark-delete rate of 0 or more")
	}
	return nil
})

// backlogQuotaType checks a backlogQuotaType parameter ("": destination_storage).
func backlogQuotaType(q string) (string, error) {
	switch q {
	case "", QuotaDestinationStorage:
		return QuotaDestinationStorage, nil
	case QuotaMessageAge:
		return QuotaMessageAge, nil
	}
	return "", invalid("unknown backlogQuotaType %q", q)
}

// Records.

// policyRecord is a level's policies by record key, as stored.
type policyRecord map[string]json.RawMessage

// Keys of the topic record that other files' policies use (schema_admin.go, compaction.go).
const (
	keySchemaStrategy      = "schemaCompatibilityStrategy"
	keyCompactionThreshold = "compactionThreshold"
)

// schemaStrategy is the topic-level schema compatibility strategy ("": none).
func (r policyRecord) schemaStrategy() string {
	var v string
	_ = json.Unmarshal(r[keySchemaStrategy], &v)
	return v
}

// compactionThreshold is the topic-level compaction threshold (nil: none).
func (r policyRecord) compactionThreshold() *int64 {
	var v *int64
	if b := r[keyCompactionThreshold]; len(b) > 0 {
		_ = json.Unmarshal(b, &v)
	}
	return v
}

// set stores v under key (nil: removes it). For the backlog quota map, qualifier is the
// quota type; for per-cluster policies, the cluster.
func (r policyRecord) set(p *policy, key, qualifier string, v any) error {
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
func (r policyRecord) value(p *policy, key, cluster string) json.RawMessage {
	v := r[key]
	if len(v) == 0 || bytes.Equal(v, []byte("null")) {
		return nil
	}
	if p.perCluster && cluster != "" {
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) != nil {
			return nil
		}
		return m[cluster]
	}
	return v
}

func (s *Service) topicRecord(ctx context.Context, n topicname.Name) (policyRecord, error) {
	b := n.Base()
	r := policyRecord{}
	kv, err := s.cfg.Store.Get(ctx, metadata.TopicFeaturePolicyKey(b.Tenant, b.Namespace, b.Local))
	if errors.Is(err, metadata.ErrNotFound) {
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return nil, fmt.Errorf("topic policies of %s: %w", n, err)
	}
	return r, nil
}

// updateTopicRecord changes a topic's policy record with a compare-and-swap.
func (s *Service) updateTopicRecord(ctx context.Context, n topicname.Name, change func(policyRecord) error) error {
	n = n.Base()
	key := metadata.TopicFeaturePolicyKey(n.Tenant, n.Namespace, n.Local)
	for attempt := 0; attempt < 10; attempt++ {
		r := policyRecord{}
		ver := metadata.NotExists
		kv, err := s.cfg.Store.Get(ctx, key)
		switch {
		case err == nil:
			if err := json.Unmarshal(kv.Value, &r); err != nil {
				return fmt.Errorf("topic policies of %s: %w", n, err)
			}
			ver = kv.Version
		case !errors.Is(err, metadata.ErrNotFound):
			return err
		}
		if err := change(r); err != nil {
			return err
		}
		b, _ := json.Marshal(r)
		_, err = s.cfg.Store.Put(ctx, key, b, ver)
		if errors.Is(err, metadata.ErrBadVersion) {
			continue
		}
		return err
	}
	return fmt.Errorf("%w: topic policies of %s keep changing", ErrServiceNotReady, n)
}

// namespaceRecord returns a namespace's policies by Pulsar key.
func (s *Service) namespaceRecord(ctx context.Context, t, ns string) (policyRecord, error) {
	pol, err := s.res.namespacePolicies(ctx, t, ns)
	if err != nil {
		return nil, err
	}
	return recordOf(pol)
}

// recordOf is a namespace's policies by Pulsar key.
func recordOf(pol NamespacePolicies) (policyRecord, error) {
	b, err := json.Marshal(pol)
	if err != nil {
		return nil, err
	}
	r := policyRecord{}
	return r, json.Unmarshal(b, &r)
}

// updateNamespaceRecord changes a namespace's policies (by Pulsar key) with a
// compare-and-swap.
func (s *Service) updateNamespaceRecord(ctx context.Context, ns string, change func(policyRecord) error) error {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return err
	}
	for attempt := 0; attempt < 10; attempt++ {
		r, err := s.namespaceRecord(ctx, t, n)
		if err != nil {
			return err
		}
		if err := change(r); err != nil {
			return err
		}
		b, _ := json.Marshal(r)
		var pol NamespacePolicies
		if err := json.Unmarshal(b, &pol); err != nil {
			return err
		}
		err = s.setNamespaceSeen(ctx, ns, pol)
		if errors.Is(err, ErrServiceNotReady) {
			continue
		}
		return err
	}
	return fmt.Errorf("%w: namespace %s keeps changing", ErrServiceNotReady, ns)
}

// The exported API (the admin REST layer's PolicyService).

// NamespacePolicy returns a namespace's policy named by its REST path element (null: not
// set; the backlog quota: the map by type).
func (s *Service) NamespacePolicy(ctx context.Context, ns, path string) (json.RawMessage, error) {
	p, err := findPolicy(path, false)
	if err != nil {
		return nil, err
	}
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return nil, err
	}
	r, err := s.namespaceRecord(ctx, t, n)
	if err != nil {
		return nil, err
	}
	if v := r.value(p, p.nsKey, s.cfg.Cluster); v != nil {
		return v, nil
	}
	return nullJSON(p), nil
}

func nullJSON(p *policy) json.RawMessage {
	if p.nsPath == "backlogQuota" || p.nsPath == "properties" {
		return json.RawMessage("{}")
	}
	return json.RawMessage("null")
}

// SetNamespacePolicy checks body and sets a namespace's policy (qualifier: the backlog quota
// type). A bad body or name is ErrInvalidArgument and changes nothing.
func (s *Service) SetNamespacePolicy(ctx context.Context, ns, path, qualifier string, body []byte) error {
	return s.changeNamespacePolicy(ctx, ns, path, qualifier, body, false)
}

// RemoveNamespacePolicy removes a namespace's policy (qualifier: the backlog quota type).
func (s *Service) RemoveNamespacePolicy(ctx context.Context, ns, path, qualifier string) error {
	return s.changeNamespacePolicy(ctx, ns, path, qualifier, nil, true)
}

func (s *Service) changeNamespacePolicy(ctx context.Context, ns, path, qualifier string, body []byte, remove bool) error {
	p, v, q, err := checkChange(path, false, qualifier, body, remove, s.cfg.Cluster)
	if err != nil {
		return err
	}
	if err := s.updateNamespaceRecord(ctx, ns, func(r policyRecord) error { return r.set(p, p.nsKey, q, v) }); err != nil {
		return err
	}
	s.reapplyNamespace(ctx, ns)
	return nil
}

// checkChange parses a change of policy path: the policy, the value to store (nil:
// remove) and the record qualifier.
func checkChange(path string, topicLevel bool, qualifier string, body []byte, remove bool, cluster string) (*policy, any, string, error) {
	p, err := findPolicy(path, topicLevel)
	if err != nil {
		return nil, nil, "", err
	}
	q := ""
	switch {
	case p.nsPath == "backlogQuota":
		if q, err = backlogQuotaType(qualifier); err != nil {
			return nil, nil, "", err
		}
	case p.perCluster && !topicLevel:
		q = cluster
	}
	if remove {
		return p, nil, q, nil
	}
	v, err := p.check(body)
	if err != nil {
		return nil, nil, "", err
	}
	if p.nsPath == "backlogQuota" {
		bq := v.(BacklogQuota)
		if q == QuotaMessageAge && bq.LimitTime <= 0 {
			return nil, nil, "", invalid("a message_age quota needs limitTime")
		}
		if q == QuotaDestinationStorage && bq.LimitSize == 0 {
			return nil, nil, "", invalid("a destination_storage quota needs limitSize")
		}
	}
	return p, v, q, nil
}

// TopicPolicy returns a topic's own policy named by its REST path element (null: not set)
// or, if applied, the one in force (topic, else namespace, else the broker's default).
func (s *Service) TopicPolicy(ctx context.Context, topic, path string, applied bool) (json.RawMessage, error) {
	p, err := findPolicy(path, true)
	if err != nil {
		return nil, err
	}
	n, err := topicname.Parse(topic)
	if err != nil {
		return nil, err
	}
	if err := s.ownedElsewhere(ctx, n); err != nil {
		return nil, err
	}
	if !applied {
		r, err := s.topicRecord(ctx, n)
		if err != nil {
			return nil, err
		}
		if v := r.value(p, p.topicKey, ""); v != nil {
			return v, nil
		}
		return nullJSON(p), nil
	}
	v, err := s.appliedValue(ctx, n, p)
	if err != nil || v != nil {
		return v, err
	}
	return nullJSON(p), nil
}

// SetTopicPolicy checks body and sets a topic's policy (qualifier: the backlog quota type).
func (s *Service) SetTopicPolicy(ctx context.Context, topic, path, qualifier string, body []byte) error {
	return s.changeTopicPolicy(ctx, topic, path, qualifier, body, false)
}

// RemoveTopicPolicy removes a topic's policy, so that the namespace's applies.
func (s *Service) RemoveTopicPolicy(ctx context.Context, topic, path, qualifier string) error {
	return s.changeTopicPolicy(ctx, topic, path, qualifier, nil, true)
}

func (s *Service) changeTopicPolicy(ctx context.Context, topic, path, qualifier string, body []byte, remove bool) error {
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	p, v, q, err := checkChange(path, true, qualifier, body, remove, s.cfg.Cluster)
	if err != nil {
		return err
	}
	if err := s.res.checkNamespace(ctx, n.Tenant, n.Namespace); err != nil {
		return err
	}
	if err := s.ownedElsewhere(ctx, n); err != nil {
		return err
	}
	if err := s.updateTopicRecord(ctx, n, func(r policyRecord) error { return r.set(p, p.topicKey, q, v) }); err != nil {
		return err
	}
	s.reapplyTopic(ctx, n.Base())
	return nil
}

// ownedElsewhere returns *NotOwnerError if another broker owns topic n's bundle: a topic
// policy request is redirected there, as Pulsar's validateTopicOwnership does (a topic no
// broker owns is served here).
func (s *Service) ownedElsewhere(ctx context.Context, n topicname.Name) error {
	b, err := s.bundleOf(ctx, n)
	if err != nil {
		return nil //nolint:nilerr // no bundle known: nothing to redirect to
	}
	err = s.bundleOwner(ctx, b)
	if no := (*NotOwnerError)(nil); errors.As(err, &no) {
		no.Topic = n.String()
		return no
	}
	return nil
}

// appliedValue is the value of p in force on topic n: the topic's, else the namespace's,
// else the broker's default (nil: none).
func (s *Service) appliedValue(ctx context.Context, n topicname.Name, p *policy) (json.RawMessage, error) {
	tr, nr, err := s.policyRecords(ctx, n)
	if err != nil {
		return nil, err
	}
	return s.pick(tr, nr, p), nil
}

func (s *Service) policyRecords(ctx context.Context, n topicname.Name) (tr, nr policyRecord, err error) {
	if tr, err = s.topicRecord(ctx, n); err != nil {
		return nil, nil, err
	}
	nr, err = s.namespaceRecord(ctx, n.Tenant, n.Namespace)
	return tr, nr, err
}

// pick resolves p from the topic and namespace records and the broker's defaults. The
// backlog quota map merges per type.
func (s *Service) pick(tr, nr policyRecord, p *policy) json.RawMessage {
	if p.nsPath == "backlogQuota" {
		m := map[string]BacklogQuota{}
		for _, typ := range []string{QuotaDestinationStorage, QuotaMessageAge} {
			if q, ok := s.quotaOf(tr, nr, typ); ok {
				m[typ] = q
			}
		}
		b, _ := json.Marshal(m)
		return b
	}
	if p.topicKey != "" {
		if v := tr.value(p, p.topicKey, ""); v != nil {
			return v
		}
	}
	if p.nsKey != "" {
		if v := nr.value(p, p.nsKey, s.cfg.Cluster); v != nil {
			return v
		}
	}
	if d := s.policyDefault(p); d != nil {
		b, _ := json.Marshal(d)
		return b
	}
	return nil
}

// quotaOf resolves the backlog quota of one type.
func (s *Service) quotaOf(tr, nr policyRecord, typ string) (BacklogQuota, bool) {
	p := policyFor("backlogQuota")
	for _, v := range []json.RawMessage{tr.value(p, p.topicKey, ""), nr.value(p, p.nsKey, "")} {
		var m map[string]BacklogQuota
		if v != nil && json.Unmarshal(v, &m) == nil {
			if q, ok := m[typ]; ok {
				return q, true
			}
		}
	}
	return s.defaultQuota(typ)
}

// policyFor is the policy whose namespace or topic path is path.
func policyFor(path string) *policy {
	i := slices.IndexFunc(policies, func(p *policy) bool { return p.nsPath == path || p.topicPath == path })
	return policies[i]
}

// decodeApplied resolves p for records tr and nr into v (false: none in force).
func (s *Service) decodeApplied(tr, nr policyRecord, path string, v any) bool {
	b := s.pick(tr, nr, policyFor(path))
	return b != nil && json.Unmarshal(b, v) == nil
}
