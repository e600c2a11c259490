package admin

import (
	"net/http"

	"github.com/magnetar-io/magnetar/admin/jsonbody"
	"github.com/magnetar-io/magnetar/broker/api"
)

// pulsarPolicies is the schema of Pulsar's Policies object (the body of POST/PUT
// /admin/v2/namespaces/{t}/{ns}): its members with their Java types, so that a whole-policies
// body is read as Pulsar's Jackson reads it (jsonbody.Normalize) before the broker keeps it.
// Members typed any are the broker's to read.
type pulsarPolicies struct {
	AuthPolicies                      any                                   `json:"auth_policies"`
	ReplicationClusters               []string                              `json:"replication_clusters"`
	AllowedClusters                   []string                              `json:"allowed_clusters"`
	Bundles                           *api.BundlesData                      `json:"bundles"`
	BacklogQuotaMap                   map[string]api.BacklogQuota           `json:"backlog_quota_map"`
	ClusterDispatchRate               map[string]api.DispatchRate           `json:"clusterDispatchRate"`
	TopicDispatchRate                 map[string]api.DispatchRate           `json:"topicDispatchRate"`
	SubscriptionDispatchRate          map[string]api.DispatchRate           `json:"subscriptionDispatchRate"`
	ReplicatorDispatchRate            map[string]api.DispatchRate           `json:"replicatorDispatchRate"`
	ClusterSubscribeRate              map[string]api.SubscribeRate          `json:"clusterSubscribeRate"`
	Persistence                       *api.PersistencePolicies              `json:"persistence"`
	DeduplicationEnabled              *bool                                 `json:"deduplicationEnabled"`
	AutoTopicCreationOverride         *api.AutoTopicCreationOverride        `json:"autoTopicCreationOverride"`
	AutoSubscriptionCreationOverride  *api.AutoSubscriptionCreationOverride `json:"autoSubscriptionCreationOverride"`
	PublishMaxMessageRate             map[string]api.PublishRate            `json:"publishMaxMessageRate"`
	LatencyStatsSampleRate            map[string]int32                      `json:"latency_stats_sample_rate"`
	MessageTTLInSeconds               *int32                                `json:"message_ttl_in_seconds"`
	SubscriptionExpirationTimeMinutes *int32                                `json:"subscription_expiration_time_minutes"`
	RetentionPolicies                 *api.RetentionPolicies                `json:"retention_policies"`
	Deleted                           *bool                                 `json:"deleted"`
	EncryptionRequired                *bool                                 `json:"encryption_required"`
	DelayedDeliveryPolicies           *api.DelayedDeliveryPolicies          `json:"delayed_delivery_policies"`
	InactiveTopicPolicies             *api.InactiveTopicPolicies            `json:"inactive_topic_policies"`
	SubscriptionAuthMode              *string                               `json:"subscription_auth_mode"`
	MaxProducersPerTopic              *int32                                `json:"max_producers_per_topic"`
	MaxConsumersPerTopic              *int32                                `json:"max_consumers_per_topic"`
	MaxConsumersPerSubscription       *int32                                `json:"max_consumers_per_subscription"`
	MaxUnackedMessagesPerConsumer     *int32                                `json:"max_unacked_messages_per_consumer"`
	MaxUnackedMessagesPerSubscription *int32                                `json:"max_unacked_messages_per_subscription"`
	MaxSubscriptionsPerTopic          *int32                                `json:"max_subscriptions_per_topic"`
	CompactionThreshold               *int64                                `json:"compaction_threshold"`
	OffloadThreshold                  *int64                                `json:"offload_threshold"`
	OffloadDeletionLagMs              *int64                                `json:"offload_deletion_lag_ms"`
	MaxTopicsPerNamespace             *int32                                `json:"max_topics_per_namespace"`
	SchemaAutoUpdateCompatibility     *string                               `json:"schema_auto_update_compatibility_strategy"`
	SchemaCompatibilityStrategy       *string                               `json:"schema_compatibility_strategy"`
	IsAllowAutoUpdateSchema           *bool                                 `json:"is_allow_auto_update_schema"`
	SchemaValidationEnforced          *bool                                 `json:"schema_validation_enforced"`
	OffloadPolicies                   any                                   `json:"offload_policies"`
	DeduplicationSnapshotInterval     *int32                                `json:"deduplicationSnapshotIntervalSeconds"`
	SubscriptionTypesEnabled          []string                              `json:"subscription_types_enabled"`
	Properties                        map[string]string                     `json:"properties"`
	ResourceGroupName                 *string                               `json:"resource_group_name"`
}

// readPolicies reads an optional whole-policies body into p as Pulsar reads its Policies
// object (pulsarPolicies' members coerced, the others kept for the broker); it reports
// whether there was one.
func readPolicies(r *http.Request, p *api.NamespacePolicies) (bool, error) {
	b, err := readBody(r)
	if err != nil || len(b) == 0 {
		return false, err
	}
	nb, err := jsonbody.Normalize(b, pulsarPolicies{})
	if err == nil {
		err = jsonbody.Decode(nb, p)
	}
	if err != nil {
		return false, restErr(http.StatusBadRequest, "invalid JSON body: %v", err)
	}
	return true, nil
}
