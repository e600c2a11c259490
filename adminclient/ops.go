package adminclient

import (
	"context"
	"math"
	"net/url"
	"strconv"
	"time"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
)

// The operations. A read decodes the answer into out: the type each names (from package
// broker/api where it has one), or any JSON target, e.g. *any or *json.RawMessage to keep the
// answer as the broker wrote it. A write sends its body as JSON and decodes nothing unless it
// says so.

// Position is a message id as the subscription operations take it. BatchIndex nil leaves it
// out (the broker's default).
type Position struct {
	LedgerID   int64  `json:"ledgerId"`
	EntryID    int64  `json:"entryId"`
	Partition  int32  `json:"partitionIndex"`
	BatchIndex *int32 `json:"batchIndex,omitempty"`
}

var (
	// Earliest is the position before the first message.
	Earliest = Position{LedgerID: -1, EntryID: -1, Partition: -1}
	// Latest is the position after the last message.
	Latest = Position{LedgerID: math.MaxInt64, EntryID: math.MaxInt64, Partition: -1}
)

// ---- tenants

// Tenants lists the tenants.
func (c *Client) Tenants(ctx context.Context) ([]string, error) {
	var ts []string
	return ts, c.Get(ctx, TenantsPath(), &ts)
}

// Tenant reads a tenant's record into out (*api.TenantInfo).
func (c *Client) Tenant(ctx context.Context, tenant string, out any) error {
	p, err := TenantPath(tenant)
	if err != nil {
		return err
	}
	return c.Get(ctx, p, out)
}

// CreateTenant creates a tenant.
func (c *Client) CreateTenant(ctx context.Context, tenant string, info api.TenantInfo) error {
	return c.tenantWrite(ctx, "PUT", tenant, info)
}

// UpdateTenant replaces a tenant's admin roles and allowed clusters.
func (c *Client) UpdateTenant(ctx context.Context, tenant string, info api.TenantInfo) error {
	return c.tenantWrite(ctx, "POST", tenant, info)
}

func (c *Client) tenantWrite(ctx context.Context, method, tenant string, info api.TenantInfo) error {
	p, err := TenantPath(tenant)
	if err != nil {
		return err
	}
	if info.AdminRoles == nil {
		info.AdminRoles = []string{}
	}
	if info.AllowedClusters == nil {
		info.AllowedClusters = []string{}
	}
	return c.Do(ctx, method, p, info, nil)
}

// DeleteTenant deletes a tenant without namespaces.
func (c *Client) DeleteTenant(ctx context.Context, tenant string) error {
	p, err := TenantPath(tenant)
	if err != nil {
		return err
	}
	return c.Do(ctx, "DELETE", p, nil, nil)
}

// ---- namespaces

// Namespaces lists a tenant's namespaces.
func (c *Client) Namespaces(ctx context.Context, tenant string) ([]string, error) {
	p, err := NamespacesPath(tenant)
	if err != nil {
		return nil, err
	}
	var nss []string
	return nss, c.Get(ctx, p, &nss)
}

// NamespacePolicies reads a namespace's policies into out (*api.NamespacePolicies).
func (c *Client) NamespacePolicies(ctx context.Context, namespace string, out any) error {
	p, err := NamespacePath(namespace)
	if err != nil {
		return err
	}
	return c.Get(ctx, p, out)
}

// CreateNamespace creates a namespace with bundles bundles (0: the broker's default).
func (c *Client) CreateNamespace(ctx context.Context, namespace string, bundles int) error {
	p, err := NamespacePath(namespace)
	if err != nil {
		return err
	}
	var body any
	if bundles > 0 {
		body = map[string]any{"bundles": map[string]int{"numBundles": bundles}}
	}
	return c.Do(ctx, "PUT", p, body, nil)
}

// DeleteNamespace deletes a namespace; force deletes its topics too.
func (c *Client) DeleteNamespace(ctx context.Context, namespace string, force bool) error {
	p, err := NamespacePath(namespace)
	if err != nil {
		return err
	}
	return c.Do(ctx, "DELETE", p.Query("force", btoa(force)), nil, nil)
}

// NamespaceTopics lists a namespace's topics (/namespaces/{ns}/topics).
func (c *Client) NamespaceTopics(ctx context.Context, namespace string) ([]string, error) {
	p, err := NamespacePath(namespace)
	if err != nil {
		return nil, err
	}
	var ts []string
	return ts, c.Get(ctx, p.Sub("topics"), &ts)
}

// Bundles reads a namespace's bundles into out (*api.BundlesData).
func (c *Client) Bundles(ctx context.Context, namespace string, out any) error {
	p, err := NamespacePath(namespace)
	if err != nil {
		return err
	}
	return c.Get(ctx, p.Sub("bundles"), out)
}

// UnloadNamespace unloads all of a namespace's bundles.
func (c *Client) UnloadNamespace(ctx context.Context, namespace string) error {
	p, err := NamespacePath(namespace)
	if err != nil {
		return err
	}
	return c.Do(ctx, "PUT", p.Sub("unload"), nil, nil)
}

// UnloadBundle unloads one bundle, handing it over to broker dest if not "".
func (c *Client) UnloadBundle(ctx context.Context, namespace, bundle, dest string) error {
	p, err := BundlePath(namespace, bundle)
	if err != nil {
		return err
	}
	p = p.Sub("unload")
	if dest != "" {
		p = p.Query("destinationBroker", dest)
	}
	return c.Do(ctx, "PUT", p, nil, nil)
}

// SplitBundle splits a bundle in two; unload unloads the halves; algorithm "" is the
// broker's default.
func (c *Client) SplitBundle(ctx context.Context, namespace, bundle string, unload bool, algorithm string) error {
	p, err := BundlePath(namespace, bundle)
	if err != nil {
		return err
	}
	p = p.Sub("split")
	if unload {
		p = p.Query("unload", "true")
	}
	if algorithm != "" {
		p = p.Query("splitAlgorithmName", algorithm)
	}
	return c.Do(ctx, "PUT", p, nil, nil)
}

// ---- permissions

// GrantNamespacePermission grants role the actions on a namespace.
func (c *Client) GrantNamespacePermission(ctx context.Context, namespace, role string, actions []auth.Action) error {
	p, err := NamespacePath(namespace)
	if err != nil {
		return err
	}
	return c.Do(ctx, "POST", p.Sub("permissions", role), actions, nil)
}

// RevokeNamespacePermission revokes role's permissions on a namespace.
func (c *Client) RevokeNamespacePermission(ctx context.Context, namespace, role string) error {
	p, err := NamespacePath(namespace)
	if err != nil {
		return err
	}
	return c.Do(ctx, "DELETE", p.Sub("permissions", role), nil, nil)
}

// NamespacePermissions returns the roles' permissions on a namespace.
func (c *Client) NamespacePermissions(ctx context.Context, namespace string) (map[string][]string, error) {
	p, err := NamespacePath(namespace)
	if err != nil {
		return nil, err
	}
	var m map[string][]string
	return m, c.Get(ctx, p.Sub("permissions"), &m)
}

// GrantTopicPermission grants role the actions on a topic.
func (c *Client) GrantTopicPermission(ctx context.Context, topic, role string, actions []auth.Action) error {
	p, err := TopicPath(topic)
	if err != nil {
		return err
	}
	return c.Do(ctx, "POST", p.Sub("permissions", role), actions, nil)
}

// RevokeTopicPermission revokes role's permissions on a topic.
func (c *Client) RevokeTopicPermission(ctx context.Context, topic, role string) error {
	p, err := TopicPath(topic)
	if err != nil {
		return err
	}
	return c.Do(ctx, "DELETE", p.Sub("permissions", role), nil, nil)
}

// TopicPermissions returns the roles' permissions on a topic.
func (c *Client) TopicPermissions(ctx context.Context, topic string) (map[string][]string, error) {
	p, err := TopicPath(topic)
	if err != nil {
		return nil, err
	}
	var m map[string][]string
	return m, c.Get(ctx, p.Sub("permissions"), &m)
}

// ---- policies

// PolicyTarget is what a policy is set on: a namespace ("tenant/ns") or a topic.
type PolicyTarget struct {
	Namespace string
	Topic     string
}

func (t PolicyTarget) path() (Path, error) {
	if t.Topic != "" {
		return TopicPath(t.Topic)
	}
	return NamespacePath(t.Namespace)
}

// SetPolicy sets policy name (its REST resource, e.g. "retention", "backlogQuota") of a
// namespace or topic to body; query adds parameters (e.g. backlogQuotaType).
func (c *Client) SetPolicy(ctx context.Context, t PolicyTarget, name string, query url.Values, body any) error {
	p, err := t.path()
	if err != nil {
		return err
	}
	return c.Do(ctx, "POST", withQuery(p.Sub(name), query), body, nil)
}

// GetPolicy reads policy name into out; applied asks a topic for the policy in force
// (topic, namespace or broker).
func (c *Client) GetPolicy(ctx context.Context, t PolicyTarget, name string, applied bool, out any) error {
	p, err := t.path()
	if err != nil {
		return err
	}
	p = p.Sub(name)
	if applied {
		p = p.Query("applied", "true")
	}
	return c.Get(ctx, p, out)
}

// RemovePolicy removes policy name.
func (c *Client) RemovePolicy(ctx context.Context, t PolicyTarget, name string, query url.Values) error {
	p, err := t.path()
	if err != nil {
		return err
	}
	return c.Do(ctx, "DELETE", withQuery(p.Sub(name), query), nil, nil)
}

func withQuery(p Path, q url.Values) Path {
	for k, vs := range q {
		for _, v := range vs {
			p = p.Query(k, v)
		}
	}
	return p
}

// ---- topics

// Topics lists a namespace's persistent topics, partitions included.
func (c *Client) Topics(ctx context.Context, namespace string) ([]string, error) {
	p, err := NamespaceTopicsPath(namespace)
	if err != nil {
		return nil, err
	}
	var ts []string
	return ts, c.Get(ctx, p, &ts)
}

// PartitionedTopics lists a namespace's partitioned topics.
func (c *Client) PartitionedTopics(ctx context.Context, namespace string) ([]string, error) {
	p, err := NamespaceTopicsPath(namespace)
	if err != nil {
		return nil, err
	}
	var ts []string
	return ts, c.Get(ctx, p.Sub("partitioned"), &ts)
}

// CreateTopic creates a non-partitioned topic.
func (c *Client) CreateTopic(ctx context.Context, topic string) error {
	return c.topicDo(ctx, "PUT", topic, nil, nil)
}

// DeleteTopic deletes a non-partitioned topic; force disconnects its clients.
func (c *Client) DeleteTopic(ctx context.Context, topic string, force bool) error {
	p, err := TopicPath(topic)
	if err != nil {
		return err
	}
	return c.Do(ctx, "DELETE", p.Query("force", btoa(force)), nil, nil)
}

// CreatePartitionedTopic creates a partitioned topic.
func (c *Client) CreatePartitionedTopic(ctx context.Context, topic string, partitions int) error {
	return c.topicDo(ctx, "PUT", topic, partitions, nil, "partitions")
}

// UpdatePartitionedTopic grows a partitioned topic to partitions.
func (c *Client) UpdatePartitionedTopic(ctx context.Context, topic string, partitions int) error {
	return c.topicDo(ctx, "POST", topic, partitions, nil, "partitions")
}

// DeletePartitionedTopic deletes a partitioned topic and its partitions.
func (c *Client) DeletePartitionedTopic(ctx context.Context, topic string, force bool) error {
	p, err := TopicPath(topic)
	if err != nil {
		return err
	}
	return c.Do(ctx, "DELETE", p.Sub("partitions").Query("force", btoa(force)), nil, nil)
}

// PartitionedTopicMetadata reads a topic's partition count into out
// (*api.PartitionedTopicMetadata; 0 partitions: not partitioned).
func (c *Client) PartitionedTopicMetadata(ctx context.Context, topic string, out any) error {
	return c.topicDo(ctx, "GET", topic, nil, out, "partitions")
}

// TopicStats reads a topic's stats into out (*api.TopicStats; a partitioned topic's summed).
func (c *Client) TopicStats(ctx context.Context, topic string, out any) error {
	return c.topicDo(ctx, "GET", topic, nil, out, "stats")
}

// PartitionedTopicStats reads a partitioned topic's summed stats into out; perPartition adds
// each partition's.
func (c *Client) PartitionedTopicStats(ctx context.Context, topic string, perPartition bool, out any) error {
	p, err := TopicPath(topic)
	if err != nil {
		return err
	}
	return c.Get(ctx, p.Sub("partitioned-stats").Query("perPartition", btoa(perPartition)), out)
}

// InternalStats reads a topic's managed-ledger stats into out (*api.InternalStats).
func (c *Client) InternalStats(ctx context.Context, topic string, out any) error {
	return c.topicDo(ctx, "GET", topic, nil, out, "internalStats")
}

// LastMessageID reads the id of a topic's last message into out (*api.MessageID).
func (c *Client) LastMessageID(ctx context.Context, topic string, out any) error {
	return c.topicDo(ctx, "GET", topic, nil, out, "lastMessageId")
}

// Lookup reads the broker serving a topic into out.
func (c *Client) Lookup(ctx context.Context, topic string, out any) error {
	p, err := LookupPath(topic)
	if err != nil {
		return err
	}
	return c.Get(ctx, p, out)
}

// TopicBundle returns the bundle range a topic belongs to.
func (c *Client) TopicBundle(ctx context.Context, topic string) (string, error) {
	p, err := LookupPath(topic)
	if err != nil {
		return "", err
	}
	r, err := c.Send(ctx, "GET", p.Sub("bundle"), nil)
	if err != nil {
		return "", err
	}
	return string(r.Body), nil
}

// UnloadTopic unloads a topic (its clients reconnect).
func (c *Client) UnloadTopic(ctx context.Context, topic string) error {
	return c.topicDo(ctx, "PUT", topic, nil, nil, "unload")
}

// TerminateTopic terminates a topic and decodes its last message id into out
// (*api.MessageID).
func (c *Client) TerminateTopic(ctx context.Context, topic string, out any) error {
	return c.topicDo(ctx, "POST", topic, nil, out, "terminate")
}

// Compact starts a compaction of a topic.
func (c *Client) Compact(ctx context.Context, topic string) error {
	return c.topicDo(ctx, "PUT", topic, nil, nil, "compaction")
}

// CompactionStatus reads the status of a topic's latest compaction into out
// (*api.CompactionStatus).
func (c *Client) CompactionStatus(ctx context.Context, topic string, out any) error {
	return c.topicDo(ctx, "GET", topic, nil, out, "compaction")
}

// MessageIDByTime reads the id of the first message published at or after t into out.
func (c *Client) MessageIDByTime(ctx context.Context, topic string, t time.Time, out any) error {
	return c.topicDo(ctx, "GET", topic, nil, out, "messageid", itoa(t.UnixMilli()))
}

// The message inspection operations answer a stored message as Pulsar does: its payload as
// the body and its metadata in X-Pulsar-* headers.

// PeekMessage returns the n-th message (from 1) of a subscription's backlog.
func (c *Client) PeekMessage(ctx context.Context, topic, sub string, n int) (*Response, error) {
	p, err := SubscriptionPath(topic, sub)
	if err != nil {
		return nil, err
	}
	return c.Send(ctx, "GET", p.Sub("position", strconv.Itoa(n)), nil)
}

// MessageByID returns the entry at ledger:entry.
func (c *Client) MessageByID(ctx context.Context, topic string, ledger, entry int64) (*Response, error) {
	p, err := TopicPath(topic)
	if err != nil {
		return nil, err
	}
	return c.Send(ctx, "GET", p.Sub("ledger", itoa(ledger), "entry", itoa(entry)), nil)
}

// ExamineMessage returns the n-th message (from 1) from "earliest" or "latest".
func (c *Client) ExamineMessage(ctx context.Context, topic, initial string, n int) (*Response, error) {
	p, err := TopicPath(topic)
	if err != nil {
		return nil, err
	}
	return c.Send(ctx, "GET", p.Sub("examinemessage").Query("initialPosition", initial).Query("messagePosition", strconv.Itoa(n)), nil)
}

func (c *Client) topicDo(ctx context.Context, method, topic string, body, out any, sub ...string) error {
	p, err := TopicPath(topic)
	if err != nil {
		return err
	}
	return c.Do(ctx, method, p.Sub(sub...), body, out)
}

// ---- subscriptions

// Subscriptions lists a topic's subscriptions.
func (c *Client) Subscriptions(ctx context.Context, topic string) ([]string, error) {
	var subs []string
	return subs, c.topicDo(ctx, "GET", topic, nil, &subs, "subscriptions")
}

// CreateSubscription creates a durable subscription at pos.
func (c *Client) CreateSubscription(ctx context.Context, topic, sub string, pos Position) error {
	return c.subDo(ctx, "PUT", topic, sub, pos)
}

// DeleteSubscription deletes a subscription; force disconnects its consumers.
func (c *Client) DeleteSubscription(ctx context.Context, topic, sub string, force bool) error {
	p, err := SubscriptionPath(topic, sub)
	if err != nil {
		return err
	}
	return c.Do(ctx, "DELETE", p.Query("force", btoa(force)), nil, nil)
}

// ResetCursorToTime moves a subscription to the first message published at or after t.
func (c *Client) ResetCursorToTime(ctx context.Context, topic, sub string, t time.Time) error {
	return c.subDo(ctx, "POST", topic, sub, nil, "resetcursor", itoa(t.UnixMilli()))
}

// ResetCursor moves a subscription to pos.
func (c *Client) ResetCursor(ctx context.Context, topic, sub string, pos Position) error {
	return c.subDo(ctx, "POST", topic, sub, pos, "resetcursor")
}

// Skip acknowledges the next n entries of a subscription.
func (c *Client) Skip(ctx context.Context, topic, sub string, n int) error {
	return c.subDo(ctx, "POST", topic, sub, nil, "skip", strconv.Itoa(n))
}

// ClearBacklog acknowledges a subscription's whole backlog.
func (c *Client) ClearBacklog(ctx context.Context, topic, sub string) error {
	return c.subDo(ctx, "POST", topic, sub, nil, "skip_all")
}

// ExpireMessages expires a subscription's messages older than age.
func (c *Client) ExpireMessages(ctx context.Context, topic, sub string, age time.Duration) error {
	return c.subDo(ctx, "POST", topic, sub, nil, "expireMessages", itoa(int64(age/time.Second)))
}

// ExpireMessagesAllSubscriptions expires every subscription's messages older than age.
func (c *Client) ExpireMessagesAllSubscriptions(ctx context.Context, topic string, age time.Duration) error {
	return c.topicDo(ctx, "POST", topic, nil, nil, "all_subscription", "expireMessages", itoa(int64(age/time.Second)))
}

func (c *Client) subDo(ctx context.Context, method, topic, sub string, body any, rest ...string) error {
	p, err := SubscriptionPath(topic, sub)
	if err != nil {
		return err
	}
	return c.Do(ctx, method, p.Sub(rest...), body, nil)
}

// ---- schemas

// Schema reads a topic's latest schema (version < 0) or one version into out
// (*api.SchemaInfo-like GetSchemaResponse).
func (c *Client) Schema(ctx context.Context, topic string, version int64, out any) error {
	p, err := SchemaPath(topic)
	if err != nil {
		return err
	}
	p = p.Sub("schema")
	if version >= 0 {
		p = p.Sub(itoa(version))
	}
	return c.Get(ctx, p, out)
}

// Schemas reads every schema version of a topic into out.
func (c *Client) Schemas(ctx context.Context, topic string, out any) error {
	p, err := SchemaPath(topic)
	if err != nil {
		return err
	}
	return c.Get(ctx, p.Sub("schemas"), out)
}

// UploadSchema registers a schema payload ({"type","schema","properties"}) and decodes the
// answer (the version) into out.
func (c *Client) UploadSchema(ctx context.Context, topic string, payload, out any) error {
	return c.schemaDo(ctx, "POST", topic, payload, out, "schema")
}

// TestSchemaCompatibility asks whether a topic would take a schema payload; the answer goes
// into out.
func (c *Client) TestSchemaCompatibility(ctx context.Context, topic string, payload, out any) error {
	return c.schemaDo(ctx, "POST", topic, payload, out, "compatibility")
}

// DeleteSchema deletes a topic's schema (force: every version) and decodes the answer into
// out.
func (c *Client) DeleteSchema(ctx context.Context, topic string, force bool, out any) error {
	p, err := SchemaPath(topic)
	if err != nil {
		return err
	}
	return c.Do(ctx, "DELETE", p.Sub("schema").Query("force", btoa(force)), nil, out)
}

func (c *Client) schemaDo(ctx context.Context, method, topic string, body, out any, sub string) error {
	p, err := SchemaPath(topic)
	if err != nil {
		return err
	}
	return c.Do(ctx, method, p.Sub(sub), body, out)
}

// SchemaCompatibilityStrategy reads the strategy of a namespace or topic into out (*string);
// applied asks a topic for the one in force.
func (c *Client) SchemaCompatibilityStrategy(ctx context.Context, t PolicyTarget, applied bool, out any) error {
	return c.GetPolicy(ctx, t, "schemaCompatibilityStrategy", applied && t.Topic != "", out)
}

// SetSchemaCompatibilityStrategy sets the strategy of a namespace or topic.
func (c *Client) SetSchemaCompatibilityStrategy(ctx context.Context, t PolicyTarget, strategy string) error {
	p, err := t.path()
	if err != nil {
		return err
	}
	return c.Do(ctx, "PUT", p.Sub("schemaCompatibilityStrategy"), strategy, nil)
}

// RemoveSchemaCompatibilityStrategy removes a topic's own strategy.
func (c *Client) RemoveSchemaCompatibilityStrategy(ctx context.Context, t PolicyTarget) error {
	return c.RemovePolicy(ctx, t, "schemaCompatibilityStrategy", nil)
}

// ---- clusters and brokers

// Clusters reads the cluster names into out (*[]string).
func (c *Client) Clusters(ctx context.Context, out any) error { return c.Get(ctx, ClustersPath(), out) }

// Cluster reads a cluster's record into out (*api.ClusterData).
func (c *Client) Cluster(ctx context.Context, cluster string, out any) error {
	return c.Get(ctx, ClusterPath(cluster), out)
}

// Brokers reads the live brokers (of cluster, if not "") into out (*[]string).
func (c *Client) Brokers(ctx context.Context, cluster string, out any) error {
	p := BrokersPath()
	if cluster != "" {
		p = p.Sub(cluster)
	}
	return c.Get(ctx, p, out)
}

// LeaderBroker reads the load manager's leader into out.
func (c *Client) LeaderBroker(ctx context.Context, out any) error {
	return c.Get(ctx, BrokersPath().Sub("leaderBroker"), out)
}

// Health checks the broker's health (its metadata session and store).
func (c *Client) Health(ctx context.Context) error {
	_, err := c.Send(ctx, "GET", BrokersPath().Sub("health"), nil)
	return err
}

// OwnedNamespaces reads the bundles a broker owns into out
// (*map[string]api.NamespaceOwnership).
func (c *Client) OwnedNamespaces(ctx context.Context, cluster, broker string, out any) error {
	return c.Get(ctx, BrokersPath().Sub(cluster, broker, "ownedNamespaces"), out)
}

// ---- transactions (/admin/v3/transactions)

// TxnID is a transaction id.
type TxnID struct{ Most, Least uint64 }

func (id TxnID) segs() []string {
	return []string{strconv.FormatUint(id.Most, 10), strconv.FormatUint(id.Least, 10)}
}

func coordQuery(p Path, coordinator int) Path {
	if coordinator < 0 {
		return p
	}
	return p.Query("coordinatorId", strconv.Itoa(coordinator))
}

// CoordinatorStats reads the stats of one coordinator (or all, coordinator < 0) into out.
func (c *Client) CoordinatorStats(ctx context.Context, coordinator int, out any) error {
	return c.Get(ctx, coordQuery(TransactionsPath("coordinatorStats"), coordinator), out)
}

// TransactionMetadata reads a transaction's metadata into out (*api.TxnMetadata).
func (c *Client) TransactionMetadata(ctx context.Context, id TxnID, out any) error {
	return c.Get(ctx, TransactionsPath("transactionMetadata").Sub(id.segs()...), out)
}

// SlowTransactions reads the open transactions older than age into out.
func (c *Client) SlowTransactions(ctx context.Context, age time.Duration, coordinator int, out any) error {
	return c.Get(ctx, coordQuery(TransactionsPath("slowTransactions").Sub(itoa(age.Milliseconds())), coordinator), out)
}

// TransactionInBufferStats reads a transaction in a topic's transaction buffer into out.
func (c *Client) TransactionInBufferStats(ctx context.Context, topic string, id TxnID, out any) error {
	p, err := txnTopic(TransactionsPath("transactionInBufferStats"), topic)
	if err != nil {
		return err
	}
	return c.Get(ctx, p.Sub(id.segs()...), out)
}

// TransactionBufferStats reads a topic's transaction buffer stats into out.
func (c *Client) TransactionBufferStats(ctx context.Context, topic string, out any) error {
	p, err := txnTopic(TransactionsPath("transactionBufferStats"), topic)
	if err != nil {
		return err
	}
	return c.Get(ctx, p, out)
}

// TransactionInPendingAckStats reads a transaction in a subscription's pending
// acknowledgements into out.
func (c *Client) TransactionInPendingAckStats(ctx context.Context, topic, sub string, id TxnID, out any) error {
	p, err := txnTopic(TransactionsPath("transactionInPendingAckStats"), topic)
	if err != nil {
		return err
	}
	return c.Get(ctx, p.Sub(sub).Sub(id.segs()...), out)
}

// PendingAckStats reads a subscription's pending acknowledgements into out.
func (c *Client) PendingAckStats(ctx context.Context, topic, sub string, out any) error {
	p, err := txnTopic(TransactionsPath("pendingAckStats"), topic)
	if err != nil {
		return err
	}
	return c.Get(ctx, p.Sub(sub), out)
}

// ---- scalable topics (topic://tenant/ns/name)

// CreateScalableTopic creates a scalable topic with segments initial segments.
func (c *Client) CreateScalableTopic(ctx context.Context, topic string, segments int) error {
	p, err := ScalablePath(topic)
	if err != nil {
		return err
	}
	return c.Do(ctx, "PUT", p.Query("segments", strconv.Itoa(segments)), nil, nil)
}

// DeleteScalableTopic deletes a scalable topic and all its segments.
func (c *Client) DeleteScalableTopic(ctx context.Context, topic string) error {
	return c.scalableDo(ctx, "DELETE", topic, nil, nil)
}

// ScalableTopics lists a namespace's scalable topics.
func (c *Client) ScalableTopics(ctx context.Context, namespace string) ([]string, error) {
	p, err := ScalableNamespacePath(namespace)
	if err != nil {
		return nil, err
	}
	var ts []string
	return ts, c.Get(ctx, p, &ts)
}

// ScalableLayout reads a scalable topic's layout record into out (*json.RawMessage for
// layout.Unmarshal).
func (c *Client) ScalableLayout(ctx context.Context, topic string, out any) error {
	return c.scalableDo(ctx, "GET", topic, nil, out)
}

// SplitSegment splits an active segment at its midpoint, or at hash at (hex) if not "".
func (c *Client) SplitSegment(ctx context.Context, topic string, segment uint64, at string) error {
	p, err := ScalablePath(topic)
	if err != nil {
		return err
	}
	p = p.Sub("split", strconv.FormatUint(segment, 10))
	if at != "" {
		p = p.Query("at", at)
	}
	return c.Do(ctx, "POST", p, nil, nil)
}

// MergeSegments merges two adjacent active segments.
func (c *Client) MergeSegments(ctx context.Context, topic string, s1, s2 uint64) error {
	return c.scalableDo(ctx, "POST", topic, nil, nil, "merge", strconv.FormatUint(s1, 10), strconv.FormatUint(s2, 10))
}

// ScalableStats reads a scalable topic's stats into out (*api.ScalableStats).
func (c *Client) ScalableStats(ctx context.Context, topic string, out any) error {
	return c.scalableDo(ctx, "GET", topic, nil, out, "stats")
}

// ScalableSubscriptions lists a scalable topic's subscriptions.
func (c *Client) ScalableSubscriptions(ctx context.Context, topic string) ([]string, error) {
	var subs []string
	return subs, c.scalableDo(ctx, "GET", topic, nil, &subs, "subscriptions")
}

// CreateScalableSubscription adds a subscription (a cursor at the earliest of every
// segment).
func (c *Client) CreateScalableSubscription(ctx context.Context, topic, sub string) error {
	return c.scalableDo(ctx, "PUT", topic, nil, nil, "subscription", sub)
}

// SeekScalableSubscription rewinds a subscription on one segment to the earliest (pos nil)
// or to ledger:entry.
func (c *Client) SeekScalableSubscription(ctx context.Context, topic, sub string, segment uint64, pos *Position) error {
	p, err := ScalablePath(topic)
	if err != nil {
		return err
	}
	p = p.Sub("subscription", sub, "seek").Query("segment", strconv.FormatUint(segment, 10))
	if pos == nil {
		p = p.Query("earliest", "")
	} else {
		p = p.Query("ledger", itoa(pos.LedgerID)).Query("entry", itoa(pos.EntryID))
	}
	return c.Do(ctx, "POST", p, nil, nil)
}

func (c *Client) scalableDo(ctx context.Context, method, topic string, body, out any, sub ...string) error {
	p, err := ScalablePath(topic)
	if err != nil {
		return err
	}
	return c.Do(ctx, method, p.Sub(sub...), body, out)
}
