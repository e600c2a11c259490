package metadata

import (
	"fmt"
	"net/url"
)

// Key layout. Every key Magnetar writes to the metadata store is built by a function in this
// file, so the whole layout is documented in one place. The store itself may add a
// cluster-wide prefix (the etcd namespace, see Config.Namespace). The keys marked [config]
// live in the configuration store when a cluster has one apart from its local store
// (ConfigStorePrefixes, Split); every other key is one cluster's own, in its local store.
//
//	/cluster/instance                  cluster instance id (written once at first start)
//	/counters/<name>                   monotonic counters (NextID), e.g. ledger ids
//	/bookies/available/<id>            ephemeral: bookie <id> is up and writable (value: BookieInfo JSON)
//	/bookies/readonly/<id>             ephemeral: bookie <id> is up and read-only (value: BookieInfo JSON)
//	/bookies/cookies/<id>              cookie of bookie <id> (value: Cookie JSON)
//	/ledgers/<20-digit id>             ledger metadata record (value: JSON, written by CAS)
//	/managed-ledgers/<name>            managed ledger record: ledger list, terminated position (JSON, CAS)
//	/managed-ledgers/<name>/cursors/<c> durable cursor record of managed ledger <name> (JSON, CAS)
//	/underreplication/ledgers/<20-digit id>  durable mark: ledger <id> lacks replicas (JSON: missing bookies, CAS)
//	/underreplication/locks/<20-digit id>    ephemeral: a replication worker holds ledger <id> (value: worker id)
//	/autorecovery/auditor              ephemeral: the active auditor (leader election; value: JSON)
//	/autorecovery/workers/<id>         ephemeral: replication worker <id> is up (value: JSON)
//	/admin/clusters/<cluster>          cluster record: service URLs (initialize-cluster-metadata; JSON) [config]
//	/admin/tenants/<tenant>            tenant record (broker; JSON) [config]
//	/admin/namespaces/<tenant>/<ns>    namespace policies (broker; JSON) [config]
//	/admin/partitioned-topics/<tenant>/<ns>/<domain>/<topic>  partitioned-topic metadata (JSON) [config]
//	/admin/local-policies/<tenant>/<ns>  the namespace's policies that are this cluster's own: its bundles once split (broker; JSON)
//	/topics/<tenant>/<ns>/<domain>/<topic>  topic record: the topic exists (broker; JSON)
//	/schemas/<tenant>/<ns>/<topic>/<20-digit version>  schema version of a (base) topic (JSON)
//	/topic-feature-policies/<tenant>/<ns>/<topic>  topic-level schema and compaction policies of a (base) topic (JSON)
//	/namespace/<tenant>/<ns>/<0xlower_0xupper>  ephemeral: the broker owning a namespace bundle (JSON, as Pulsar's)
//	/loadbalance/leader                ephemeral: the load manager's leader (value: BrokerInfo JSON)
//	/brokers/available/<id>            ephemeral: broker <id> is up (value: BrokerInfo JSON)
//	/loadbalance/leader                ephemeral: the load balance leader (value: BrokerInfo JSON)
//	/loadbalance/brokers/<id>          ephemeral: broker <id>'s load report (value: loadmgr.Report JSON)
const (
	KeyClusterInstance = "/cluster/instance"
	PrefixCounters     = "/counters/"
	PrefixAvailable    = "/bookies/available/"
	PrefixReadOnly     = "/bookies/readonly/"
	PrefixCookies      = "/bookies/cookies/"
	PrefixLedgers      = "/ledgers/"

	// CounterLedgerID is the NextID counter that hands out ledger ids.
	CounterLedgerID = "ledger-id"
)

// RevisionKey is a key no record uses: a Follower with it as RevisionKey learns the
// store's revision from an empty listing.
const RevisionKey = "/revision"

// CounterKey is the key of the named counter.
func CounterKey(name string) string { return PrefixCounters + name }

// AvailableBookieKey marks bookie id as writable.
func AvailableBookieKey(id string) string { return PrefixAvailable + id }

// ReadOnlyBookieKey marks bookie id as read-only.
func ReadOnlyBookieKey(id string) string { return PrefixReadOnly + id }

// CookieKey holds bookie id's cookie.
func CookieKey(id string) string { return PrefixCookies + id }

// LedgerKey holds the metadata of ledger id. Ids are zero-padded so keys sort numerically.
func LedgerKey(id int64) string { return fmt.Sprintf("%s%020d", PrefixLedgers, id) }

// LedgerIDFromKey parses a key built by LedgerKey.
func LedgerIDFromKey(key string) (int64, error) {
	var id int64
	if _, err := fmt.Sscanf(key, PrefixLedgers+"%d", &id); err != nil {
		return 0, fmt.Errorf("metadata: not a ledger key %q: %w", key, err)
	}
	return id, nil
}

// PrefixManagedLedgers is the prefix of every managed ledger record.
const PrefixManagedLedgers = "/managed-ledgers/"

// ManagedLedgerKey holds the record of managed ledger name (its ledger list and terminated
// position). Names may contain '/' (e.g. "tenant/ns/persistent/topic").
func ManagedLedgerKey(name string) string { return PrefixManagedLedgers + name }

// ManagedCursorPrefix is the prefix of the cursor records of managed ledger name.
func ManagedCursorPrefix(name string) string { return PrefixManagedLedgers + name + "/cursors/" }

// ManagedCursorKey holds the record of cursor of managed ledger name.
func ManagedCursorKey(name, cursor string) string { return ManagedCursorPrefix(name) + cursor }

// Broker keys. Topic keys take the parts of a parsed topic name (broker/topicname); the
// local name never contains '/'. Prefixes end with '/' so a listing never matches a longer
// sibling name.
const (
	PrefixTenants           = "/admin/tenants/"
	PrefixNamespaces        = "/admin/namespaces/"
	PrefixPartitionedTopics = "/admin/partitioned-topics/"
	PrefixTopics            = "/topics/"
	PrefixSchemas           = "/schemas/"
	PrefixTopicFeatures     = "/topic-feature-policies/"
	PrefixBundleOwners      = "/namespace/"
	PrefixBrokers           = "/brokers/available/"
)

// PrefixClusters is the prefix of the cluster records.
const PrefixClusters = "/admin/clusters/"

// ConfigStorePrefixes are the prefixes of the records Pulsar keeps in its configuration
// store (configurationMetadataStoreUrl), shared by the clusters of an instance: cluster
// records, tenants, namespace policies and partitioned-topic metadata. With a
// configuration store apart from the local store (Split) they live there; the partitions'
// topic records, their data and everything else stay in each cluster's local store.
var ConfigStorePrefixes = []string{PrefixClusters, PrefixTenants, PrefixNamespaces, PrefixPartitionedTopics}

// ClusterKey holds the record of cluster (its service URLs).
func ClusterKey(cluster string) string { return PrefixClusters + cluster }

// DynamicConfigKey holds the dynamic broker configuration (Pulsar's dynamic-config node,
// in the local store): a JSON object of configuration name to value, both strings, applied
// by every broker of the cluster (package broker/dynconfig).
const DynamicConfigKey = "/admin/configuration"

// PrefixLocalPolicies is the prefix of the namespaces' local policies (Pulsar's
// LocalPolicies, in the local store even with a configuration store apart).
const PrefixLocalPolicies = "/admin/local-policies/"

// LocalPoliciesKey holds the local policies of namespace tenant/ns: the bundles a split
// made in this cluster.
func LocalPoliciesKey(tenant, ns string) string { return PrefixLocalPolicies + tenant + "/" + ns }

// TenantKey holds the record of tenant.
func TenantKey(tenant string) string { return PrefixTenants + tenant }

// NamespacePrefix is the prefix of the namespace records of tenant.
func NamespacePrefix(tenant string) string { return PrefixNamespaces + tenant + "/" }

// NamespaceKey holds the policies of namespace tenant/ns.
func NamespaceKey(tenant, ns string) string { return NamespacePrefix(tenant) + ns }

// PartitionedTopicPrefix is the prefix of the partitioned-topic records of tenant/ns.
func PartitionedTopicPrefix(tenant, ns string) string {
	return PrefixPartitionedTopics + tenant + "/" + ns + "/"
}

// PartitionedTopicKey holds the partition count of a partitioned topic.
func PartitionedTopicKey(tenant, ns, domain, topic string) string {
	return PartitionedTopicPrefix(tenant, ns) + domain + "/" + topic
}

// TopicPrefix is the prefix of the topic records of tenant/ns.
func TopicPrefix(tenant, ns string) string { return PrefixTopics + tenant + "/" + ns + "/" }

// TopicKey holds the record of one (non-partitioned topic or partition) topic.
func TopicKey(tenant, ns, domain, topic string) string {
	return TopicPrefix(tenant, ns) + domain + "/" + topic
}

// SchemaPrefix is the prefix of the schema versions of a topic (partitions share the
// schema of their partitioned topic).
func SchemaPrefix(tenant, ns, topic string) string {
	return PrefixSchemas + tenant + "/" + ns + "/" + topic + "/"
}

// SchemaKey holds schema version v of a topic. Versions are zero-padded so keys sort
// numerically.
func SchemaKey(tenant, ns, topic string, v int64) string {
	return fmt.Sprintf("%s%020d", SchemaPrefix(tenant, ns, topic), v)
}

// TopicFeaturePolicyKey holds the topic-level schema compatibility and compaction
// policies of a (base) topic.
func TopicFeaturePolicyKey(tenant, ns, topic string) string {
	return PrefixTopicFeatures + tenant + "/" + ns + "/" + topic
}

// BundleOwnerKey is the ephemeral key of the broker that owns bundle ("0x00000000_0x40000000")
// of namespace tenant/ns.
func BundleOwnerKey(tenant, ns, bundle string) string {
	return PrefixBundleOwners + tenant + "/" + ns + "/" + bundle
}

// BrokerKey marks broker id as up.
func BrokerKey(id string) string { return PrefixBrokers + id }

// Load manager (broker/loadmgr): the elected leader (value: BrokerInfo JSON) and every
// broker's load report.
const (
	PrefixLoadBalance    = "/loadbalance/"
	LoadBalanceLeaderKey = "/loadbalance/leader"
	PrefixLoadReports    = "/loadbalance/brokers/"
)

// LoadReportKey holds broker id's load report.
func LoadReportKey(id string) string { return PrefixLoadReports + id }

// Auto-recovery (package autorecovery): under-replication marks, worker locks, the auditor's
// election key and worker registrations.
const (
	PrefixUnderReplicated  = "/underreplication/ledgers/"
	PrefixReplicationLocks = "/underreplication/locks/"
	KeyAuditor             = "/autorecovery/auditor"
	PrefixRecoveryWorkers  = "/autorecovery/workers/"
)

// UnderReplicatedKey holds the under-replication mark of ledger id.
func UnderReplicatedKey(id int64) string { return fmt.Sprintf("%s%020d", PrefixUnderReplicated, id) }

// ReplicationLockKey is the ephemeral lock a worker holds while it re-replicates ledger id.
func ReplicationLockKey(id int64) string { return fmt.Sprintf("%s%020d", PrefixReplicationLocks, id) }

// RecoveryWorkerKey registers replication worker id.
func RecoveryWorkerKey(id string) string { return PrefixRecoveryWorkers + id }

// LedgerIDFromSuffix parses the 20-digit ledger id at the end of a key built by LedgerKey,
// UnderReplicatedKey or ReplicationLockKey, given its prefix.
func LedgerIDFromSuffix(key, prefix string) (int64, error) {
	var id int64
	if len(key) != len(prefix)+20 || key[:len(prefix)] != prefix {
		return 0, fmt.Errorf("metadata: key %q is not %s<id>", key, prefix)
	}
	if _, err := fmt.Sscanf(key[len(prefix):], "%d", &id); err != nil {
		return 0, fmt.Errorf("metadata: key %q: %w", key, err)
	}
	return id, nil
}

// Transactions (package txn, broker/topic): coordinators' sequence blocks, transaction
// headers, and each participant's records. <txn> is "<most>-<least>" (see txn.ID.Key);
// <topic> is "<tenant>/<ns>/<domain>/<local name>" and <sub> is path-escaped.
//
//	/txn/coordinators/<tc>/seq              next free sequence block of coordinator <tc> (JSON, CAS)
//	/txn/headers/<tc>/<20-digit seq>        transaction header: status, timeout, participants (JSON, CAS)
//	/txn/buffers/<topic>/watermark          position below which every transaction of the topic is resolved (JSON, CAS forward)
//	/txn/buffers/<topic>/aborted/<txn>      an aborted transaction of the topic and its last position (JSON)
//	/txn/buffers/<topic>/open/<txn>         the transaction writes to the topic (before its first append)
//	/txn/pending-acks/<topic>/<sub>/open/<txn>  the transaction acknowledges on the subscription (before its first ack)
const (
	PrefixTxnHeaders     = "/txn/headers/"
	PrefixTxnBuffers     = "/txn/buffers/"
	PrefixTxnPendingAcks = "/txn/pending-acks/"
)

// TxnEpochKey is bumped by every load of coordinator tc: its version fences the header
// creations of earlier incarnations.
func TxnEpochKey(tc uint64) string { return fmt.Sprintf("/txn/coordinators/%d/epoch", tc) }

// TxnSeqKey holds the next free sequence block of coordinator tc.
func TxnSeqKey(tc uint64) string { return fmt.Sprintf("/txn/coordinators/%d/seq", tc) }

// TxnHeaderPrefix is the prefix of the headers of coordinator tc.
func TxnHeaderPrefix(tc uint64) string { return fmt.Sprintf("%s%d/", PrefixTxnHeaders, tc) }

// TxnHeaderKey holds the header of transaction (tc, seq).
func TxnHeaderKey(tc, seq uint64) string { return fmt.Sprintf("%s%020d", TxnHeaderPrefix(tc), seq) }

// TxnBufferPrefix is the prefix of the transaction-buffer records of topic.
func TxnBufferPrefix(topic string) string { return PrefixTxnBuffers + topic + "/" }

// TxnWatermarkKey holds the watermark of topic's transaction buffer.
func TxnWatermarkKey(topic string) string { return TxnBufferPrefix(topic) + "watermark" }

// TxnAbortedKey marks transaction txn aborted on topic.
func TxnAbortedKey(topic, txn string) string { return TxnBufferPrefix(topic) + "aborted/" + txn }

// TxnOpenKey records that transaction txn writes to topic.
func TxnOpenKey(topic, txn string) string { return TxnBufferPrefix(topic) + "open/" + txn }

// TxnPendingAckPrefix is the prefix of the pending-ack records of subscription sub of topic.
func TxnPendingAckPrefix(topic, sub string) string {
	return PrefixTxnPendingAcks + topic + "/" + url.PathEscape(sub) + "/"
}

// TxnPendingAckKey records that transaction txn acknowledges on subscription sub of topic.
func TxnPendingAckKey(topic, sub, txn string) string {
	return TxnPendingAckPrefix(topic, sub) + "open/" + txn
}

// Scalable topics (package scalable):
//
//	/scalable-topics/<tenant>/<ns>/<name>/layout      the layout record (JSON, changed only by CAS)
//	/scalable-topics/<tenant>/<ns>/<name>/controller  ephemeral: the controller leader (value: broker id)
const PrefixScalableTopics = "/scalable-topics/"

// ScalableTopicPrefix is the prefix of scalable topic tenant/ns/name's keys.
func ScalableTopicPrefix(tenant, ns, name string) string {
	return PrefixScalableTopics + tenant + "/" + ns + "/" + name + "/"
}

// ScalableLayoutKey holds the layout record of scalable topic tenant/ns/name.
func ScalableLayoutKey(tenant, ns, name string) string {
	return ScalableTopicPrefix(tenant, ns, name) + "layout"
}

// ScalableControllerKey is the election key of scalable topic tenant/ns/name's controller.
func ScalableControllerKey(tenant, ns, name string) string {
	return ScalableTopicPrefix(tenant, ns, name) + "controller"
}
