package admin

import (
	"context"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
)

// Service is the broker API the handlers call. *broker.Service implements it; tests may
// substitute a fake. Every method is safe for concurrent use and returns the sentinel
// errors of package broker (see errors.go for their HTTP statuses).
type Service interface {
	Info() api.BrokerInfo

	Tenants(ctx context.Context) ([]string, error)
	Tenant(ctx context.Context, name string) (api.TenantInfo, error)
	CreateTenant(ctx context.Context, name string, info api.TenantInfo) error
	UpdateTenant(ctx context.Context, name string, info api.TenantInfo) error
	DeleteTenant(ctx context.Context, name string) error

	Namespaces(ctx context.Context, tenant string) ([]string, error)
	Namespace(ctx context.Context, ns string) (api.NamespacePolicies, error)
	CreateNamespace(ctx context.Context, ns string, p api.NamespacePolicies) error
	SetNamespacePolicies(ctx context.Context, ns string, p api.NamespacePolicies) error
	DeleteNamespace(ctx context.Context, ns string, force bool) error

	Topics(ctx context.Context, ns string) ([]string, error)
	PartitionedTopics(ctx context.Context, ns string) ([]string, error)
	CreateTopic(ctx context.Context, topic string) error
	DeleteTopic(ctx context.Context, topic string, force bool) error
	CreatePartitionedTopic(ctx context.Context, topic string, n int) error
	UpdatePartitionedTopic(ctx context.Context, topic string, n int) error
	DeletePartitionedTopic(ctx context.Context, topic string, force bool) error
	PartitionedTopicMetadata(ctx context.Context, topic string) (api.PartitionedTopicMetadata, error)
	Lookup(ctx context.Context, topic string) (api.LookupResult, error)
	TopicStats(ctx context.Context, topic string) (api.TopicStats, error)
	InternalStats(ctx context.Context, topic string) (api.InternalStats, error)
	LastMessageID(ctx context.Context, topic string) (api.MessageID, error)
	Unload(ctx context.Context, topic string) error
	Terminate(ctx context.Context, topic string) (api.MessageID, error)

	Subscriptions(ctx context.Context, topic string) ([]string, error)
	CreateSubscription(ctx context.Context, topic, sub string, at api.MessageID) error
	DeleteSubscription(ctx context.Context, topic, sub string, force bool) error
	ResetCursor(ctx context.Context, topic, sub string, to api.MessageID) error
	ResetCursorToTime(ctx context.Context, topic, sub string, at time.Time) error
	SkipMessages(ctx context.Context, topic, sub string, n int) error
	ClearBacklog(ctx context.Context, topic, sub string) error
}

// The broker's service is the production implementation.
