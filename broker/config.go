package broker

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/compaction"
	"github.com/magnetar-io/magnetar/broker/loadmgr"
	"github.com/magnetar-io/magnetar/broker/nonpersistent"
	"github.com/magnetar-io/magnetar/broker/ownership"
	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
)

// Config configures a broker. Zero values take the documented defaults.
type Config struct {
	// PeerHTTP is the client the broker calls its peers' admin APIs with (package
	// broker/peer: the load manager's unloads and splits, scalable topics' segment
	// operations and consumer sessions). It carries the broker's credentials and TLS
	// settings towards the other brokers (Pulsar's brokerClientAuthenticationPlugin,
	// brokerClientAuthenticationParameters and brokerClientTls*). Nil: no credentials, a
	// 30 s timeout.
	PeerHTTP *http.Client
	// Store is the metadata store, the cluster's local store. Required.
	Store metadata.Store
	// ConfigStore is the configuration store shared between clusters (Pulsar's
	// configurationMetadataStoreUrl): cluster records, tenants, namespace policies and
	// partitioned-topic metadata are read, written and watched there, everything else in
	// Store (metadata.Split, metadata.ConfigStorePrefixes). Nil or Store: one store holds
	// everything, as Pulsar's default. The caller closes it.
	ConfigStore metadata.Store
	// Ledgers is the managed ledgers' port to the ledger layer. Default: a ledger client on
	// Store's bookies (the broker closes what it creates).
	Ledgers mledger.Ledgers
	// BookieDial opens the default ledger client's connections to bookies (see
	// bookie/client.Options.Dial); nil dials TCP.
	BookieDial func(ctx context.Context, addr string) (net.Conn, error)

	// Listen is the Pulsar protocol address. Default 127.0.0.1:6650.
	Listen string
	// DisablePlain turns the plain listener off (Pulsar's brokerServicePort=); then
	// ListenTLS is required.
	DisablePlain bool
	// Advertise is the host:port clients dial (lookups answer pulsar://<Advertise>). Default:
	// the bound listen address.
	Advertise string
	// ListenTLS is the pulsar+ssl:// address (Pulsar's brokerServicePortTls, 6651); "" for
	// none. TLS is its configuration (required with ListenTLS; see package tlsconf).
	ListenTLS string
	TLS       *tls.Config
	// AdvertiseTLS is the host:port TLS clients dial. Default: Advertise's host (or the
	// bound address's) with the bound TLS port.
	AdvertiseTLS string
	// AdvertisedAddress is the host advertised for every listener whose address is not
	// given above (Pulsar's advertisedAddress). Default: the bound host, or the host's name
	// (DefaultAdvertisedHost) for a listener bound to a wildcard address: a wildcard is
	// never advertised. It applies to HTTPURL and HTTPURLTLS too.
	AdvertisedAddress string
	// AdvertisedListeners are Pulsar's named advertisedListeners (ParseAdvertisedListeners);
	// the lookups of a client naming one answer its URLs. InternalListenerName (default:
	// the first) is the one the broker record's URLs, peers and clients naming none use.
	// Exclusive with AdvertisedAddress, Advertise and AdvertiseTLS.
	AdvertisedListeners  []Listener
	InternalListenerName string
	// HTTPURL is the admin/metrics base URL reported in lookups and the broker record
	// (e.g. http://127.0.0.1:8080); "" if none. HTTPURLTLS is the https:// one.
	HTTPURL, HTTPURLTLS string
	// ID identifies the broker in ownership records. Default: Advertise.
	ID string
	// Cluster is the cluster name. Default "standalone".
	Cluster string
	// Scalable configures the scalable topics' controllers (scalable.go).
	Scalable ScalableConfig
	// SessionTTL bounds how long ownership of a dead broker's bundles survives it; a broker
	// whose session is not renewed for two thirds of it stops serving. Default 10s.
	SessionTTL time.Duration
	// DefaultNumberOfNamespaceBundles is the bundle count of a namespace created without
	// bundles (Pulsar's defaultNumberOfNamespaceBundles). Default 4.
	DefaultNumberOfNamespaceBundles int
	// BrokerSelector assigns unowned bundles in place of the load manager (LoadManager is
	// then ignored).
	BrokerSelector BrokerSelector
	// LoadManager configures the load manager (package loadmgr): the broker reports its
	// load, the elected leader assigns unowned bundles to the least loaded broker, sheds load
	// from overloaded brokers and splits hot bundles. The broker sets Store, Self,
	// SessionTTL and BundleStats, and Metrics, Logger and Executor if nil. Disabled
	// (loadBalancerEnabled=false) runs none: an unowned bundle goes to the live broker owning
	// the fewest bundles.
	LoadManager loadmgr.Config

	// MaxMessageSize is the max_message_size advertised in CONNECTED and the largest
	// metadata+payload accepted. Default 1 MiB.
	MaxMessageSize int
	// DisableAutoTopicCreation makes producers and consumers of an unknown topic fail with
	// TopicNotFound (namespace policies may override it).
	DisableAutoTopicCreation bool
	// DisableDeduplication turns message deduplication off (namespace policies may override it).
	DisableDeduplication bool
	// ReplicationProducerQueueSize bounds each geo-replicator's window: the entries read
	// from its cursor and not yet acknowledged by the remote cluster (Pulsar's
	// replicationProducerQueueSize). Default 1000.
	ReplicationProducerQueueSize int
	// DisableReplicatedSubscriptions turns replicated subscriptions off (Pulsar's
	// enableReplicatedSubscriptions=false; on by default, as in Pulsar).
	// ReplicatedSubscriptionsSnapshotFrequency, ReplicatedSubscriptionsSnapshotTimeout and
	// ReplicatedSubscriptionsSnapshotMaxCached are Pulsar's
	// replicatedSubscriptionsSnapshotFrequencyMillis (default 1 s), …TimeoutSeconds (30 s)
	// and …MaxCachedPerSubscription (10).
	DisableReplicatedSubscriptions           bool
	ReplicatedSubscriptionsSnapshotFrequency time.Duration
	ReplicatedSubscriptionsSnapshotTimeout   time.Duration
	ReplicatedSubscriptionsSnapshotMaxCached int
	// DeduplicationSnapshotInterval is how many entries may be published between two
	// persisted deduplication snapshots (the rest is replayed on load). Default 1000.
	DeduplicationSnapshotInterval int

	// SchemaCompatibilityStrategy is the schema compatibility strategy of topics whose
	// namespace and topic policies set none (a name package schema parses). Default FULL.
	SchemaCompatibilityStrategy string
	// SchemaValidationEnforced refuses producers without a schema on topics with a schema
	// (namespace policies may override it).
	SchemaValidationEnforced bool

	// MaxPendingPublishPerConnection bounds the messages a connection may have in flight to
	// the managed ledger; beyond it the connection stops reading. Default 1000.
	MaxPendingPublishPerConnection int
	// MaxPendingPublishBytesPerTopic bounds the bytes a topic may have in flight; beyond it
	// the connections publishing to it stop reading. Default 64 MiB.
	MaxPendingPublishBytesPerTopic int64

	// ManagedLedger is the template for every topic's managed ledger. Ensemble, WriteQuorum
	// and AckQuorum default to 1/1/1 here only if all three are 0 in ManagedLedger and in the
	// fields below.
	ManagedLedger mledger.Config
	// Offloader is the tiered-storage offloader of every managed ledger (nil: offload off);
	// ManagedLedger.Offload is the broker-level offload policy that namespace and topic
	// policies override. The caller opens it and closes it after the Service.
	Offloader mledger.Offloader
	// Ensemble, WriteQuorum and AckQuorum override ManagedLedger's when set.
	Ensemble, WriteQuorum, AckQuorum int

	// TransactionCoordinatorEnabled turns transactions on (Pulsar's
	// transactionCoordinatorEnabled): the coordinators, the topics' transaction buffers and
	// the subscriptions' pending acknowledgements. Off, every transaction command fails with
	// "Transactions are not enabled."
	TransactionCoordinatorEnabled bool
	// TransactionCoordinators is the number of coordinators (partitions of
	// pulsar/system/transaction_coordinator_assign, fixed when it is first created).
	// Default 1.
	TransactionCoordinators int
	// MaxActiveTransactionsPerCoordinator bounds the open transactions of one coordinator
	// (Pulsar's maxActiveTransactionsPerCoordinator; 0: unlimited). Default 100000.
	MaxActiveTransactionsPerCoordinator int

	// KeepAliveInterval is how often the broker pings an idle client; a client silent for
	// twice as long is disconnected. Default 30s.
	KeepAliveInterval time.Duration

	// Auth authenticates clients on CONNECT (nil: authentication off).
	Auth *auth.Service
	// Authz authorizes lookups, producers, consumers and admin requests (nil: everything is
	// allowed). It needs Auth: the role checked is the authenticated one.
	Authz *auth.Authorizer
	// ProxyRoles are the roles of proxies (Pulsar's proxyRoles): a connection authenticated
	// as one may forward its client's role in CONNECT's original_principal, which is then
	// authorized (and the proxy's role too, unless it is a superuser). Any other role
	// sending original_principal is refused.
	ProxyRoles []string
	// AuthRefreshInterval is how often a connection's credentials are checked for expiry
	// (Pulsar's authenticationRefreshCheckSeconds); expired ones are challenged. Default 60s.
	AuthRefreshInterval time.Duration

	// Logger receives the broker's logs. Default slog.Default().
	Logger *slog.Logger

	// CompactionCheckInterval is how often the loaded topics are checked against their
	// compaction threshold. Default 1m; negative: never.
	CompactionCheckInterval time.Duration
	// CompactionBeforeCommit, if set, is called after a compacted generation is written and
	// before it is recorded; an error aborts that compaction (fault injection).
	CompactionBeforeCommit func(compaction.State) error

	// Policies are the broker-level defaults of the namespace and topic policies and the
	// intervals of their checks (broker/topicreg).
	Policies policy.Defaults

	// NamespaceLevelMetrics sums the pulsar_* topic metrics per namespace (Pulsar's
	// exposeTopicLevelMetricsInPrometheus=false); false exports them per topic, Pulsar's
	// default (package broker/pulsarmetrics).
	NamespaceLevelMetrics bool

	// NonPersistent bounds what each non-persistent topic holds for slow subscriptions.
	NonPersistent nonpersistent.Config

	// OpenLog, if set, replaces the managed ledgers of persistent topics (tests: in-memory
	// logs).
	OpenLog func(ctx context.Context, name string) (topic.Log, error)
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:6650"
	}
	if c.TransactionCoordinators <= 0 {
		c.TransactionCoordinators = 1
	}
	if c.MaxActiveTransactionsPerCoordinator == 0 {
		c.MaxActiveTransactionsPerCoordinator = 100000
	}
	if c.Cluster == "" {
		c.Cluster = "standalone"
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = 10 * time.Second
	}
	if c.DefaultNumberOfNamespaceBundles <= 0 {
		c.DefaultNumberOfNamespaceBundles = ownership.DefaultBundles
	}
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = 1 << 20
	}
	if c.DeduplicationSnapshotInterval <= 0 {
		c.DeduplicationSnapshotInterval = 1000
	}
	if c.MaxPendingPublishPerConnection <= 0 {
		c.MaxPendingPublishPerConnection = 1000
	}
	if c.MaxPendingPublishBytesPerTopic <= 0 {
		c.MaxPendingPublishBytesPerTopic = 64 << 20
	}
	if c.Ensemble > 0 {
		c.ManagedLedger.Ensemble, c.ManagedLedger.WriteQuorum, c.ManagedLedger.AckQuorum = c.Ensemble, c.WriteQuorum, c.AckQuorum
	}
	if c.CompactionCheckInterval == 0 {
		c.CompactionCheckInterval = time.Minute
	}
	if c.KeepAliveInterval <= 0 {
		c.KeepAliveInterval = 30 * time.Second
	}
	if c.AuthRefreshInterval <= 0 {
		c.AuthRefreshInterval = 60 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Policies = c.Policies.WithDefaults()
	return c
}
