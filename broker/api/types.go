package api

import (
	"encoding/json"
	"fmt"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

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
	// Listeners are the broker's named advertised listeners (Pulsar's advertisedListeners),
	// by name; nil if none are configured. The URLs above are the internal listener's.
	Listeners map[string]ListenerURLs `json:"advertisedListeners,omitempty"`
}

// ListenerURLs are one advertised listener's URLs (Pulsar's AdvertisedListener JSON); ""
// for a scheme the listener does not have.
type ListenerURLs struct {
	ServiceURL    string `json:"brokerServiceUrl,omitempty"`
	ServiceURLTLS string `json:"brokerServiceUrlTls,omitempty"`
	HTTPURL       string `json:"brokerHttpUrl,omitempty"`
	HTTPURLTLS    string `json:"brokerHttpsUrl,omitempty"`
}

// ForListener is b as a client of the named advertised listener sees it: name "" is the
// default (internal) listener, b itself; another name replaces the binary URLs (and the
// HTTP ones the listener has) with the listener's. A name the broker has no listener of
// is refused (ErrInvalidArgument), as Pulsar refuses such a lookup.
func (b BrokerInfo) ForListener(name string) (BrokerInfo, error) {
	if name == "" {
		return b, nil
	}
	l, ok := b.Listeners[name]
	if !ok {
		return b, fmt.Errorf("%w: the broker does not have the %s listener", ErrInvalidArgument, name)
	}
	b.ServiceURL, b.ServiceURLTLS = l.ServiceURL, l.ServiceURLTLS
	if l.HTTPURL != "" || l.HTTPURLTLS != "" {
		b.HTTPURL, b.HTTPURLTLS = l.HTTPURL, l.HTTPURLTLS
	}
	return b, nil
}

// AdminURL is the base URL of the broker's admin API: the https:// one if tls is set and
// it has one, else the http:// one, else the https:// one ("" if it serves neither). A
// broker serving only https:// is reached there.
func (b BrokerInfo) AdminURL(tls bool) string {
	if tls && b.HTTPURLTLS != "" || b.HTTPURL == "" {
		return b.HTTPURLTLS
	}
	return b.HTTPURL
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
	// ReplicationClusters are the clusters the namespace's topics live in and replicate
	// between (replication_clusters; nil: not set, the local cluster only).
	ReplicationClusters []string `json:"replication_clusters,omitempty"`
	// AllowedClusters (PIP-321's allowed_clusters; nil: not set) bounds the replication
	// clusters of the namespace and its topics; unset, the tenant's allowed clusters do.
	AllowedClusters []string `json:"allowed_clusters,omitempty"`
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

// PartitionedTopicMetadata is the answer for GET .../partitions.
type PartitionedTopicMetadata struct {
	Partitions int `json:"partitions"`
}

// MarshalJSON writes the known policies and the kept unknown ones.
func (p NamespacePolicies) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	for k, v := range p.Other {
		m[k] = v
	}
	if p.Deduplication != nil {
		m["deduplicationEnabled"] = *p.Deduplication
	}
	if p.AutoTopicCreation != nil {
		m["autoTopicCreation"] = *p.AutoTopicCreation
	}
	if p.SchemaCompatibility != "" {
		m["schema_compatibility_strategy"] = p.SchemaCompatibility
	}
	if p.SchemaValidationEnforced != nil {
		m["schema_validation_enforced"] = *p.SchemaValidationEnforced
	}
	if p.AllowAutoUpdateSchema != nil {
		m["is_allow_auto_update_schema"] = *p.AllowAutoUpdateSchema
	}
	m["auth_policies"] = p.Auth.WithEmpty()
	if p.ReplicationClusters != nil {
		m["replication_clusters"] = p.ReplicationClusters
	}
	if p.AllowedClusters != nil {
		m["allowed_clusters"] = p.AllowedClusters
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads the known policies and keeps the others in Other.
func (p *NamespacePolicies) UnmarshalJSON(b []byte) error {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*p = NamespacePolicies{}
	for k, v := range m {
		switch k {
		case "deduplicationEnabled":
			if bv, ok := v.(bool); ok {
				p.Deduplication = &bv
			}
		case "autoTopicCreation":
			if bv, ok := v.(bool); ok {
				p.AutoTopicCreation = &bv
			}
		case "schema_compatibility_strategy":
			p.SchemaCompatibility, _ = v.(string)
		case "schema_validation_enforced":
			if bv, ok := v.(bool); ok {
				p.SchemaValidationEnforced = &bv
			}
		case "is_allow_auto_update_schema":
			if bv, ok := v.(bool); ok {
				p.AllowAutoUpdateSchema = &bv
			}
		case "replication_clusters", "allowed_clusters":
			var l []string
			if v != nil {
				b, _ := json.Marshal(v)
				if err := json.Unmarshal(b, &l); err != nil {
					return fmt.Errorf("%s: %w", k, err)
				}
				if l == nil {
					l = []string{}
				}
			}
			if k == "replication_clusters" {
				p.ReplicationClusters = l
			} else {
				p.AllowedClusters = l
			}
		case "auth_policies":
			// Re-decode the one value into its type (a malformed one is refused).
			b, _ := json.Marshal(v)
			if err := json.Unmarshal(b, &p.Auth); err != nil {
				return fmt.Errorf("auth_policies: %w", err)
			}
		default:
			if p.Other == nil {
				p.Other = map[string]any{}
			}
			p.Other[k] = v
		}
	}
	return nil
}

// ClusterData is a cluster's record (Pulsar's ClusterData JSON, ClusterDataImpl's fields):
// where its brokers are reached (admin and binary URLs, plain and TLS, or through a proxy)
// and the credentials and TLS settings another cluster's broker uses toward it. Empty
// strings are absent values.
type ClusterData struct {
	ServiceURL          string `json:"serviceUrl,omitempty"`          // http://host:8080
	ServiceURLTLS       string `json:"serviceUrlTls,omitempty"`       // https://host:8443
	BrokerServiceURL    string `json:"brokerServiceUrl,omitempty"`    // pulsar://host:6650
	BrokerServiceURLTLS string `json:"brokerServiceUrlTls,omitempty"` // pulsar+ssl://host:6651
	// ProxyServiceURL and ProxyProtocol ("SNI"): the cluster is reached through this proxy.
	ProxyServiceURL string `json:"proxyServiceUrl,omitempty"`
	ProxyProtocol   string `json:"proxyProtocol,omitempty"`
	// AuthenticationPlugin and AuthenticationParameters authenticate a broker toward the
	// cluster (empty: the broker's own client credentials). The parameters are a secret.
	AuthenticationPlugin     string `json:"authenticationPlugin,omitempty"`
	AuthenticationParameters string `json:"authenticationParameters,omitempty"`
	// PeerClusterNames are the cluster's peers (PIP-8): a namespace never replicates to a
	// cluster and its peer at once.
	PeerClusterNames []string `json:"peerClusterNames,omitempty"`
	// BrokerClientTLSEnabled: use the TLS URLs toward the cluster.
	BrokerClientTLSEnabled     bool `json:"brokerClientTlsEnabled"`
	TLSAllowInsecureConnection bool `json:"tlsAllowInsecureConnection"`
	// The Java key-store settings are kept for Pulsar's tools; Magnetar's brokers use the
	// PEM files (BrokerClientTrustCertsFilePath, BrokerClientCertificateFilePath,
	// BrokerClientKeyFilePath).
	BrokerClientTLSEnabledWithKeyStore bool   `json:"brokerClientTlsEnabledWithKeyStore"`
	BrokerClientTLSTrustStoreType      string `json:"brokerClientTlsTrustStoreType,omitempty"`
	BrokerClientTLSTrustStore          string `json:"brokerClientTlsTrustStore,omitempty"`
	BrokerClientTLSTrustStorePassword  string `json:"brokerClientTlsTrustStorePassword,omitempty"`
	BrokerClientTLSKeyStoreType        string `json:"brokerClientTlsKeyStoreType,omitempty"`
	BrokerClientTLSKeyStore            string `json:"brokerClientTlsKeyStore,omitempty"`
	BrokerClientTLSKeyStorePassword    string `json:"brokerClientTlsKeyStorePassword,omitempty"`
	BrokerClientTrustCertsFilePath     string `json:"brokerClientTrustCertsFilePath,omitempty"`
	BrokerClientKeyFilePath            string `json:"brokerClientKeyFilePath,omitempty"`
	BrokerClientCertificateFilePath    string `json:"brokerClientCertificateFilePath,omitempty"`
	// ListenerName is the advertised listener to use on the cluster's brokers.
	ListenerName string `json:"listenerName,omitempty"`
}

// GlobalCluster is the pseudo-cluster name Pulsar accepts in a tenant's allowed clusters
// without a record and refuses in replication lists.
const GlobalCluster = "global"

// BundlesData is a namespace's bundles as Pulsar's admin API writes them.
type BundlesData struct {
	Boundaries []string `json:"boundaries"`
	NumBundles int      `json:"numBundles"`
}

// NamespaceOwnership is one entry of Pulsar's ownedNamespaces answer.
type NamespaceOwnership struct {
	BrokerAssignment string `json:"broker_assignment"`
	IsControlled     bool   `json:"is_controlled"`
	IsActive         bool   `json:"is_active"`
}

// SchemaInfo is one schema version of a topic (the admin API's GetSchemaResponse), or a
// schema offered to it (PostSchemaPayload: Version and Timestamp unused).
type SchemaInfo struct {
	Version    int64             `json:"version"`
	Type       string            `json:"type"` // Pulsar's type name: AVRO, JSON, STRING, KEY_VALUE, ...
	Timestamp  int64             `json:"timestamp"`
	Data       []byte            `json:"data"` // the definition (for AVRO and JSON: the schema's JSON text)
	Properties map[string]string `json:"properties"`
}

// StoredMessage is one stored entry as the inspection calls return it: its id (BatchIndex
// -1), its metadata as stored, and its payload uncompressed (for a batch entry, the batch
// of SingleMessageMetadata-framed messages), as Pulsar's admin answers it. An encrypted
// payload stays as stored (compressed if Metadata.compression says so): only its
// consumers can decrypt it.
type StoredMessage struct {
	ID       MessageID
	Metadata *pb.MessageMetadata
	Payload  []byte
}

// CompactionStatus is Pulsar's LongRunningProcessStatus of a topic's compaction.
type CompactionStatus struct {
	Status    string `json:"status"` // NOT_RUN, RUNNING, SUCCESS or ERROR
	LastError string `json:"lastError"`
}

// ScalableStats is a scalable topic's statistics: each segment's (by segment name) and their
// sums.
type ScalableStats struct {
	Topic    string                `json:"topic"`
	Epoch    int64                 `json:"epoch"`
	Active   int                   `json:"activeSegments"`
	Sealed   int                   `json:"sealedSegments"`
	MsgIn    int64                 `json:"msgInCounter"`
	MsgOut   int64                 `json:"msgOutCounter"`
	RateIn   float64               `json:"msgRateIn"`
	RateOut  float64               `json:"msgRateOut"`
	Backlog  map[string]int64      `json:"backlog"` // per subscription, summed over segments
	Segments map[string]TopicStats `json:"segments"`
}

// AdminOp is what an admin request needs.
type AdminOp int

const (
	// OpAuthenticated: any authenticated principal (cluster list, health).
	OpAuthenticated AdminOp = iota + 1
	// OpSuperUser: superusers only (tenant creation and deletion, tenant list).
	OpSuperUser
	// OpTenantAdmin: superusers and the tenant's admin roles (namespaces, topics,
	// permissions).
	OpTenantAdmin
	// OpLookup: also roles that may produce or consume the topic (lookup, stats).
	OpLookup
	// OpConsume: also roles that may consume the topic (subscription operations).
	OpConsume
)

// Special message ids for CreateSubscription and ResetCursor.
var (
	// Earliest is before every message.
	Earliest = MessageID{LedgerID: -1, EntryID: -1, Partition: -1, BatchIndex: -1}
	// Latest is after every message.
	Latest = MessageID{LedgerID: 1<<63 - 1, EntryID: 1<<63 - 1, Partition: -1, BatchIndex: -1}
)
