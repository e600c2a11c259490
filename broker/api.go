package broker

import (
	"errors"
	"fmt"
	"github.com/magnetar-io/magnetar/auth"

	"github.com/magnetar-io/magnetar/broker/schema"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// Errors of the exported service API. Callers (the admin REST handlers) test them with
// errors.Is and map them to HTTP statuses as noted. This list is the whole truth: the ones
// shared with broker/topic are the same values (topic.ErrFenced wraps ErrServiceNotReady;
// mledger's errors surface only wrapped in one of these or as internal errors).
var (
	// ErrTenantNotFound: no such tenant (404).
	ErrTenantNotFound = errors.New("broker: tenant does not exist")
	// ErrNamespaceNotFound: no such namespace (404).
	ErrNamespaceNotFound = errors.New("broker: namespace does not exist")
	// ErrTopicNotFound: no such topic, or auto-creation is off (404).
	ErrTopicNotFound = errors.New("broker: topic not found")
	// ErrSubscriptionNotFound: no such subscription (404).
	ErrSubscriptionNotFound = topic.ErrSubscriptionNotFound
	// ErrAlreadyExists: the tenant, namespace, topic, partitioned topic or subscription exists
	// (409).
	ErrAlreadyExists = topic.ErrAlreadyExists
	// ErrNotEmpty: a tenant still has namespaces, a namespace still has topics, or a topic or
	// subscription still has connected clients and force was not given (409; Pulsar answers
	// 412 for "has active producers/subscriptions").
	ErrNotEmpty = topic.ErrNotEmpty
	// ErrInvalidName wraps topicname.ErrInvalid: a malformed tenant, namespace or topic name
	// (400; 412 for topic names in Pulsar).
	ErrInvalidName = topicname.ErrInvalid
	// ErrInvalidArgument: a bad value, e.g. fewer partitions than before (400 or 412).
	ErrInvalidArgument = topic.ErrInvalid
	// ErrNotAllowed: the operation is not permitted in the topic's state, e.g. a cumulative
	// operation on a partitioned topic's base name (405).
	ErrNotAllowed = topic.ErrNotAllowed
	// ErrTopicTerminated: the topic is terminated and takes no more messages.
	ErrTopicTerminated = topic.ErrTerminated
	// ErrServiceNotReady: the broker is starting or stopping, or the topic is being
	// loaded/unloaded elsewhere; retry (503).
	ErrServiceNotReady = topic.ErrClosed
	// ErrIncompatibleSchema wraps schema.ErrIncompatible: the topic's compatibility strategy
	// refuses the schema, or a producer without a schema meets schema validation enforcement
	// (409; IncompatibleSchema on the wire).
	ErrIncompatibleSchema = schema.ErrIncompatible
	// ErrInvalidSchema wraps schema.ErrInvalid: a schema definition that does not parse as its
	// type, or an unknown strategy or type name (422 for definitions, 400 for names).
	ErrInvalidSchema = schema.ErrInvalid
	// ErrNotOwner is wrapped by *NotOwnerError: another broker serves the topic (307 to its
	// HTTP URL).
	ErrNotOwner = errors.New("broker: topic served by another broker")
)

// NotOwnerError says which broker serves a topic.
type NotOwnerError struct {
	Topic string
	Owner BrokerInfo
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("broker: topic %s is served by broker %s (%s)", e.Topic, e.Owner.ID, e.Owner.ServiceURL)
}

// Unwrap makes errors.Is(err, ErrNotOwner) true.
func (e *NotOwnerError) Unwrap() error { return ErrNotOwner }

// BrokerInfo describes a live broker (metadata.BrokerKey records; lookup answers).
type BrokerInfo struct {
	ID         string `json:"id"`
	ServiceURL string `json:"serviceUrl"`    // pulsar://host:port, "" if the plain listener is off
	HTTPURL    string `json:"webServiceUrl"` // http://host:port (admin), "" if none
	// ServiceURLTLS and HTTPURLTLS are the TLS listeners' URLs (pulsar+ssl://, https://); ""
	// if none.
	ServiceURLTLS string `json:"serviceUrlTls,omitempty"`
	HTTPURLTLS    string `json:"webServiceUrlTls,omitempty"`
	Cluster       string `json:"cluster,omitempty"` // cluster name
	StartedAt     int64  `json:"startedAt"`         // Unix ms
}

// TenantInfo is a tenant's record (Pulsar's TenantInfo JSON).
type TenantInfo struct {
	AdminRoles      []string `json:"adminRoles"`
	AllowedClusters []string `json:"allowedClusters"`
}

// NamespacePolicies is a namespace's record: a subset of Pulsar's Policies JSON. Unknown
// policies sent by admin clients are kept in Other and returned as they were.
type NamespacePolicies struct {
	// Deduplication overrides Config.Deduplication for the namespace's topics (nil: broker
	// default).
	Deduplication *bool `json:"deduplicationEnabled,omitempty"`
	// AutoTopicCreation overrides Config.AutoTopicCreation (nil: broker default).
	AutoTopicCreation *bool `json:"autoTopicCreation,omitempty"`
	// SchemaCompatibility is the namespace's schema compatibility strategy ("" or UNDEFINED:
	// the broker's Config.SchemaCompatibilityStrategy); topic policies may override it.
	SchemaCompatibility string `json:"schema_compatibility_strategy,omitempty"`
	// SchemaValidationEnforced overrides Config.SchemaValidationEnforced (nil: broker default).
	SchemaValidationEnforced *bool `json:"schema_validation_enforced,omitempty"`
	// AllowAutoUpdateSchema says whether producers and consumers may register new schemas
	// (nil: yes); the admin API always may.
	AllowAutoUpdateSchema *bool `json:"is_allow_auto_update_schema,omitempty"`
	// Auth holds the namespace's and its topics' permission grants (auth_policies).
	Auth auth.Policies `json:"auth_policies"`
	// Other keeps the policies Magnetar does not interpret.
	Other map[string]any `json:"-"`
}

// MessageID addresses a message: the entry's ledger and entry ids, and the message's index
// in a batch entry (-1: not batched, or the whole entry). Partition is -1 for a
// non-partitioned topic.
type MessageID struct {
	LedgerID   int64 `json:"ledgerId"`
	EntryID    int64 `json:"entryId"`
	Partition  int32 `json:"partitionIndex"`
	BatchIndex int32 `json:"batchIndex"`
}

// Special message ids for CreateSubscription and ResetCursor.
var (
	// Earliest is before every message.
	Earliest = MessageID{LedgerID: -1, EntryID: -1, Partition: -1, BatchIndex: -1}
	// Latest is after every message.
	Latest = MessageID{LedgerID: 1<<63 - 1, EntryID: 1<<63 - 1, Partition: -1, BatchIndex: -1}
)

func (m MessageID) String() string {
	return fmt.Sprintf("%d:%d:%d", m.LedgerID, m.EntryID, m.BatchIndex)
}

// LookupResult tells where a topic is served.
type LookupResult struct {
	BrokerInfo
	// Self reports that this broker serves it.
	Self bool
	// Assigned reports that the bundle was unowned and BrokerInfo's broker was chosen for
	// it: a lookup redirected there (authoritative) makes it take the bundle.
	Assigned bool
	// ToLeader reports that the bundle is unowned and BrokerInfo is the load manager's
	// leader, which assigns it: the lookup is redirected there, not authoritatively.
	ToLeader bool
}

// Statistics types, JSON-compatible with Pulsar's admin v2 responses (see broker/topic).
type (
	TopicStats        = topic.Stats
	PublisherStats    = topic.PublisherStats
	SubscriptionStats = topic.SubscriptionStats
	ConsumerStats     = topic.ConsumerStats
	InternalStats     = topic.InternalStats
	LedgerStats       = topic.LedgerStats
	CursorStats       = topic.CursorStats
)

// PartitionedTopicMetadata is the answer for GET .../partitions.
type PartitionedTopicMetadata struct {
	Partitions int `json:"partitions"`
}
