package broker

import (
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/policy"
)

// The service API's types and errors live in the leaf package broker/api, which the admin
// REST layer, the proxy and the REST client import without importing the broker. These
// names keep the broker's own spelling of them.

// Errors of the exported service API (see package broker/api for what each means).
var (
	ErrTenantNotFound       = api.ErrTenantNotFound
	ErrNamespaceNotFound    = api.ErrNamespaceNotFound
	ErrTopicNotFound        = api.ErrTopicNotFound
	ErrSubscriptionNotFound = api.ErrSubscriptionNotFound
	ErrAlreadyExists        = api.ErrAlreadyExists
	ErrNotEmpty             = api.ErrNotEmpty
	ErrInvalidArgument      = api.ErrInvalidArgument
	ErrNotAllowed           = api.ErrNotAllowed
	ErrServiceNotReady      = api.ErrServiceNotReady
	ErrIncompatibleSchema   = api.ErrIncompatibleSchema
	ErrInvalidSchema        = api.ErrInvalidSchema
	ErrClusterNotFound      = api.ErrClusterNotFound
	ErrSchemaNotFound       = api.ErrSchemaNotFound

	Earliest = api.Earliest
	Latest   = api.Latest
)

// Records, answers and statistics of the exported service API.
type (
	NotOwnerError            = api.NotOwnerError
	BrokerInfo               = api.BrokerInfo
	TenantInfo               = api.TenantInfo
	NamespacePolicies        = api.NamespacePolicies
	MessageID                = api.MessageID
	LookupResult             = api.LookupResult
	PartitionedTopicMetadata = api.PartitionedTopicMetadata
	ClusterData              = api.ClusterData
	BundlesData              = api.BundlesData
	NamespaceOwnership       = api.NamespaceOwnership
	SchemaInfo               = api.SchemaInfo
	AdminOp                  = api.AdminOp

	CoordinatorStats     = api.CoordinatorStats
	TxnInBufferStats     = api.TxnInBufferStats
	TxnInPendingAckStats = api.TxnInPendingAckStats
	TxnMetadata          = api.TxnMetadata
	TxnBufferStats       = api.TxnBufferStats
	PendingAckStats      = api.PendingAckStats

	TopicStats        = api.TopicStats
	PublisherStats    = api.PublisherStats
	SubscriptionStats = api.SubscriptionStats
	ConsumerStats     = api.ConsumerStats
	InternalStats     = api.InternalStats
	LedgerStats       = api.LedgerStats
	CursorStats       = api.CursorStats

	DispatchRate = api.DispatchRate
)

// QuotaProducerRequestHold is a backlog quota policy name (see package broker/api).
const QuotaProducerRequestHold = api.QuotaProducerRequestHold

// PolicyDefaults are the broker-level defaults of the policies (package broker/policy).
type PolicyDefaults = policy.Defaults
