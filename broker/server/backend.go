package server

import (
	"context"
	"time"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
	"github.com/magnetar-io/magnetar/txn"
)

// Backend is what the connections need from the broker, in small groups. It must be safe
// for concurrent use: every connection calls it from its reader goroutine and from the
// goroutines it starts. A method taking a ctx returns when ctx ends; its errors are mapped
// to the protocol's codes by serverError (errors.go), so they wrap the sentinels of
// broker/api, broker/topic, auth, txn, mledger or metadata that the table knows.
type Backend interface {
	Authorizer
	Lookups
	Topics
	Schemas
	Transactions
	ScalableTopics
	StreamConsumers
}

// Authorizer checks a role's permissions; it is called only when Config.Authz is on, and
// never for a superuser's proxy role. A refusal wraps auth.ErrNotAuthorized.
type Authorizer interface {
	// AuthorizeTopic checks that role may perform act on topic n.
	AuthorizeTopic(ctx context.Context, role string, n topicname.Name, act auth.Action) error
	// AuthorizeSubscription checks that role may consume topic n through subscription sub
	// (the namespace's subscription roles, Pulsar's subscription_auth_roles, included).
	AuthorizeSubscription(ctx context.Context, role string, n topicname.Name, sub string) error
	// AuthorizeNamespace checks that role may act on namespace tenant/ns as a whole (list
	// its topics).
	AuthorizeNamespace(ctx context.Context, role, tenant, ns string) error
}

// Lookups answer where a topic is served and what a namespace holds (LOOKUP,
// PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE, WATCH_SCALABLE_TOPICS).
type Lookups interface {
	// Lookup tells which broker serves topic (authoritative: the client was redirected
	// here, so an unowned bundle is taken rather than redirected again).
	Lookup(ctx context.Context, topic string, authoritative bool) (api.LookupResult, error)
	// PartitionedMetadata is topic's partition count (0: not partitioned); a topic that
	// does not exist is created as the auto-creation policy says.
	PartitionedMetadata(ctx context.Context, topic string) (int, error)
	// CheckNamespace returns an error wrapping api.ErrNamespaceNotFound (or
	// api.ErrTenantNotFound) if namespace tenant/ns does not exist.
	CheckNamespace(ctx context.Context, tenant, ns string) error
	// NamespaceTopics lists the topics of domain (topicname.Persistent or NonPersistent)
	// stored under tenant/ns, partitions included; none if the namespace does not exist.
	NamespaceTopics(ctx context.Context, tenant, ns, domain string) ([]string, error)
}

// Topics gives connections the loaded topics their producers and consumers attach to.
type Topics interface {
	// Topic returns topic n loaded on this broker, loading it if needed; create allows
	// creating a topic that does not exist (subject to the auto-creation policy). Another
	// broker's topic is *api.NotOwnerError.
	Topic(ctx context.Context, n topicname.Name, create bool) (*topic.Topic, error)
	// NewProducerName returns a broker-assigned producer name, unique across restarts.
	NewProducerName() string
}

// SchemaUse says who offers a schema.
type SchemaUse uint8

const (
	// SchemaProduce: a producer's schema, registered if compatible (and enforced: a
	// producer without a schema may be refused).
	SchemaProduce SchemaUse = iota + 1
	// SchemaConsume: a consumer's schema, registered only on a topic without schemas.
	SchemaConsume
)

// Schemas are the topics' schema registry.
type Schemas interface {
	// OfferSchema registers or checks sc (nil: none) for topic n and returns the version it
	// has (nil for none); a producer's new version is stored before it returns.
	OfferSchema(ctx context.Context, n topicname.Name, sc *pb.Schema, use SchemaUse) (version []byte, err error)
	// Schema returns topic n's schema of version (empty: the latest) and its encoded
	// version; a missing one wraps api.ErrSchemaNotFound.
	Schema(ctx context.Context, n topicname.Name, version []byte) (*pb.Schema, []byte, error)
}

// Transactions give the transaction coordinators' commands a coordinator.
type Transactions interface {
	// TxnCoordinator returns coordinator tc, loading it if this broker serves it. With
	// transactions off the error wraps topic.ErrTxnDisabled; a coordinator not served here
	// wraps ErrNoCoordinator.
	TxnCoordinator(ctx context.Context, tc uint64) (Coordinator, error)
}

// Coordinator is a transaction coordinator (*txn.Coordinator). Each call answers through
// reply, on any goroutine, exactly once.
type Coordinator interface {
	NewTxn(ttl time.Duration, reply func(txn.ID, error))
	AddPartitions(id txn.ID, partitions []string, reply func(txn.ID, error))
	AddSubscriptions(id txn.ID, subs []txn.SubRef, reply func(txn.ID, error))
	End(id txn.ID, commit bool, reply func(txn.ID, error))
}

// ScalableTopics serve the DAG watch and namespace watch sessions of scalable topics.
type ScalableTopics interface {
	// ScalableDAG builds topic t's DAG now: its segments, the brokers serving them and its
	// controller's URL. A topic that does not exist wraps api.ErrTopicNotFound.
	ScalableDAG(ctx context.Context, t layout.Topic) (*pb.ScalableTopicDAG, error)
	// WatchScalableTopic ticks once when it is watching topic t's layout and controller,
	// then once at every change of them, until ctx ends; the channel is closed then. A tick
	// is sent unbuffered: the next change is looked for once it is received.
	WatchScalableTopic(ctx context.Context, t layout.Topic) <-chan struct{}
	// WatchScalableTopics sends the scalable topics of namespace tenant/ns (full names,
	// sorted) once it is watching them, then again at every change, until ctx ends; the
	// channel is closed then.
	WatchScalableTopics(ctx context.Context, tenant, ns string) <-chan []string
}

// StreamConsumers serve the stream-consumer sessions of scalable topics: registration with
// the topic's controller leader (this broker or another) and its assignments.
type StreamConsumers interface {
	// RegisterStream registers stream consumer consumer of sub on scalable topic name, in
	// session session, with the topic's controller leader, and returns the leader's id.
	RegisterStream(ctx context.Context, name, sub, consumer string, session uint64) (leader string, err error)
	// StreamAssignment asks leader for the consumer's assignment, waiting up to wait for one
	// newer than version after. An unregistered consumer wraps api.ErrSubscriptionNotFound.
	StreamAssignment(ctx context.Context, leader, name, sub, consumer string, after uint64, wait time.Duration) (scalable.Assignment, error)
	// AssignmentProto is assignment a of topic t with its segments' ranges and names.
	AssignmentProto(ctx context.Context, t layout.Topic, a scalable.Assignment) (*pb.ScalableConsumerAssignment, error)
	// StreamLeader is the id of the broker leading topic name's controller.
	StreamLeader(ctx context.Context, name string) (string, error)
	// StreamEnded reports that the connection's session of the consumer ended (its close,
	// or the connection's); leader is the last leader it registered with.
	StreamEnded(leader, name, sub, consumer string, session uint64)
	// CheckAttach refuses a consumer of sub on segment topic name that a seek fenced
	// (md: the consumer's metadata); nil for any other topic.
	CheckAttach(topic, sub string, md map[string]string) error
}
