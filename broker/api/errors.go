package api

import (
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/broker/topicname"
)

// Errors of the broker's service API. Callers (the admin REST handlers, the protocol
// server) test them with errors.Is and map them to HTTP statuses as noted, or to the
// protocol's ServerError codes. This list is the whole truth: packages below the broker
// (broker/topic, broker/schema, broker/compaction) alias these values rather than define
// their own, and mledger's errors surface only wrapped in one of these or as internal
// errors.
var (
	// ErrTenantNotFound: no such tenant (404).
	ErrTenantNotFound = errors.New("broker: tenant does not exist")
	// ErrNamespaceNotFound: no such namespace (404).
	ErrNamespaceNotFound = errors.New("broker: namespace does not exist")
	// ErrTopicNotFound: no such topic, or auto-creation is off (404).
	ErrTopicNotFound = errors.New("broker: topic not found")
	// ErrSubscriptionNotFound: no such subscription (404; SubscriptionNotFound on the wire).
	ErrSubscriptionNotFound = errors.New("subscription not found")
	// ErrAlreadyExists: the tenant, namespace, topic, partitioned topic or subscription exists
	// (409).
	ErrAlreadyExists = errors.New("already exists")
	// ErrNotEmpty: a tenant still has namespaces, a namespace still has topics, or a topic or
	// subscription still has connected clients and force was not given (409; Pulsar answers
	// 412 for "has active producers/subscriptions").
	ErrNotEmpty = errors.New("not empty")
	// ErrInvalidName wraps topicname.ErrInvalid: a malformed tenant, namespace or topic name
	// (400; 412 for topic names in Pulsar).
	ErrInvalidName = topicname.ErrInvalid
	// ErrInvalidArgument: a bad value, e.g. fewer partitions than before (400 or 412).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotAllowed: the operation is not permitted in the topic's state, e.g. a cumulative
	// operation on a partitioned topic's base name, or not allowed for the subscription's
	// type (405; NotAllowedError on the wire).
	ErrNotAllowed = errors.New("operation not allowed")
	// ErrTopicTerminated: the topic is terminated and takes no more messages
	// (TopicTerminatedError on the wire).
	ErrTopicTerminated = errors.New("topic: terminated")
	// ErrServiceNotReady: the broker is starting or stopping, or the topic or subscription is
	// closing, being loaded or unloaded elsewhere; the client should look the topic up again
	// and retry (503; ServiceNotReady on the wire).
	ErrServiceNotReady = errors.New("service not ready: topic closed")
	// ErrIncompatibleSchema: the topic's compatibility strategy refuses the schema, or a
	// producer without a schema meets schema validation enforcement (409; IncompatibleSchema
	// on the wire).
	ErrIncompatibleSchema = errors.New("schema: incompatible schema")
	// ErrInvalidSchema: a schema definition that does not parse as its type, or an unknown
	// strategy or type name (422 for definitions, 400 for names).
	ErrInvalidSchema = errors.New("schema: invalid schema definition")
	// ErrNotOwner is wrapped by *NotOwnerError: another broker serves the topic (307 to its
	// HTTP URL).
	ErrNotOwner = errors.New("broker: topic served by another broker")
	// ErrClusterNotFound: no record for the cluster (404).
	ErrClusterNotFound = errors.New("broker: cluster does not exist")
	// ErrBundleNotFound: no such bundle in the namespace (404).
	ErrBundleNotFound = errors.New("broker: namespace bundle not found")
	// ErrSchemaNotFound: the topic has no schema, or not that version (404).
	ErrSchemaNotFound = errors.New("broker: schema not found")
	// ErrMessageNotFound: no stored message at that id, backlog position or time (404).
	ErrMessageNotFound = errors.New("topic: message not found")
	// ErrCompactionRunning: a compaction of the topic is in progress (409).
	ErrCompactionRunning = errors.New("compaction: compaction already in progress")
	// ErrTransactionNotFound: no such transaction (or coordinator) (404).
	ErrTransactionNotFound = errors.New("transaction not found")
	// ErrPreconditionFailed: a change refused because of the state of other records, e.g.
	// a tenant allowed on a cluster that has no record, or the deletion of a cluster still
	// in use (412). The text after "precondition failed: " is Pulsar's reason.
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrClusterNotAllowed: a replication list names a cluster that has no record or is
	// not allowed for the tenant or namespace (403, as Pulsar answers). The text after
	// "cluster not allowed: " is Pulsar's reason.
	ErrClusterNotAllowed = errors.New("cluster not allowed")
	// ErrClusterConflict: a replication list names a cluster and one of its peers (409).
	ErrClusterConflict = errors.New("cluster conflict")
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
