// Package broker is Magnetar's Pulsar broker: it serves persistent and non-persistent
// topics to unmodified Pulsar clients over the Pulsar binary protocol (package
// proto/pulsar), stores each persistent topic in a managed ledger (package mledger) and
// runs each non-persistent one over a log that stores nothing (package
// broker/nonpersistent: the one hook is in openTopic), keeps tenants, namespaces, topics, schemas and
// ownership in the metadata store (package metadata), and exposes an exported service API
// for the admin REST layer and the tools.
//
// The package is the composition root of the broker's parts, each a package that imports
// nothing above it and sees the others only through small interfaces it defines:
// broker/api (the API's types and errors), broker/policy (policies and their resolution),
// broker/resources (typed metadata records and the watched cache), broker/server (the
// protocol server, behind Backend: backend.go), broker/peer (calls to other brokers, with
// this broker's credentials), broker/txnhost (transaction coordinators and the transaction
// admin calls), broker/schemareg (the schema registry), broker/loadmgr (the load manager),
// broker/topic (topics and subscriptions), broker/ownership (bundles, ownership records,
// lookups, hand-overs and the cluster API). Still here: the topic registry with policy
// application and monitors, compaction and inspection wiring, and scalable-topic hosting.
//
// # Usage
//
//	svc, err := broker.Start(ctx, broker.Config{
//		Store:  store,               // metadata.Store (etcd)
//		Listen: "127.0.0.1:6650",
//		HTTPURL: "http://127.0.0.1:8080", // where the admin REST API is mounted (lookups report it)
//		Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, // standalone
//	})
//	defer svc.Close()
//	mux.Handle("/metrics", svc.MetricsHandler())
//	// the admin package mounts /admin/v2/... on the same mux and calls svc's methods
//
// Caller obligations:
//  1. Config.Store must stay open until Close returns.
//
// Security (broker/server, authz.go, listen.go, permissions.go): Config.ListenTLS adds a
// pulsar+ssl:// listener (Config.TLS, see package tlsconf; DisablePlain turns the plain one
// off) and lookups answer both URLs. With Config.Auth, CONNECT is authenticated (package
// auth): a refusal is answered with AuthenticationError and the connection closes; every
// Config.AuthRefreshInterval the writer goroutine checks the credential's expiry and sends
// AUTH_CHALLENGE; the AUTH_RESPONSE must verify to the same role, and a client that cannot
// or does not answer is disconnected. With Config.Authz, LOOKUP and PARTITIONED_METADATA
// need produce or consume, PRODUCER produce and SUBSCRIBE consume (checked before the topic
// is loaded, so a refusal creates nothing), GET_TOPICS_OF_NAMESPACE a namespace grant;
// superusers and the tenant's admin roles may do everything; refusals are
// AuthorizationError. Grants live in the namespace record's auth_policies (Pulsar's layout).
// InitializeCluster writes what initialize-cluster-metadata writes.
//  2. Close the Service before the metadata store and before the bookies it writes to.
//  3. The exported API methods are safe for concurrent use; every one takes a ctx and
//     returns ctx.Err() or ErrServiceNotReady when it cannot finish.
//
// # Exported service API (for the admin REST handlers and tools)
//
// Names: topics are given in any form topicname.Parse accepts ("t", "tenant/ns/t",
// "persistent://tenant/ns/t", "...-partition-N"); namespaces as "tenant/ns". Errors wrap the
// sentinels in api.go (ErrTenantNotFound, ErrNamespaceNotFound, ErrTopicNotFound,
// ErrSubscriptionNotFound, ErrAlreadyExists, ErrNotEmpty, ErrInvalidName,
// ErrInvalidArgument, ErrNotAllowed, ErrServiceNotReady) or *NotOwnerError (another broker
// serves the topic: redirect to its HTTPURL).
//
//	Cluster     NamespaceBundles(ctx, ns) (BundlesData, error); TopicBundle(ctx, topic) (string, error)
//	            UnloadBundle(ctx, ns, bundle, destination) error   (*NotOwnerError if another broker owns it)
//	            UnloadNamespace(ctx, ns) error (the bundles other brokers own: asked of their owners)
//	            SplitBundle(ctx, ns, bundle, unload, algorithm) error
//	            Brokers(ctx, cluster) ([]string, error); LiveBroker(ctx, id); LeaderBroker(ctx)
//	            OwnedNamespaces(ctx) map[string]NamespaceOwnership; Healthy(ctx) error
//	            LookupAuthoritative(ctx, topic, authoritative) (LookupResult, error)
//	Lifecycle   Start(ctx, Config) (*Service, error); Close() error; Addr() net.Addr;
//	            Info() BrokerInfo; MetricsHandler() http.Handler; Registry() *prometheus.Registry
//	Tenants     Tenants(ctx) ([]string, error); Tenant(ctx, name) (TenantInfo, error);
//	            CreateTenant(ctx, name, TenantInfo) error; UpdateTenant(ctx, name, TenantInfo) error;
//	            DeleteTenant(ctx, name) error                       (ErrNotEmpty if it has namespaces)
//	Namespaces  Namespaces(ctx, tenant) ([]string, error)          ("tenant/ns" names)
//	            Namespace(ctx, ns) (NamespacePolicies, error);
//	            CreateNamespace(ctx, ns, NamespacePolicies) error;
//	            SetNamespacePolicies(ctx, ns, NamespacePolicies) error;
//	            DeleteNamespace(ctx, ns, force bool) error         (ErrNotEmpty if it has topics)
//	Topics      Topics(ctx, ns) ([]string, error)                  (persistent; full names, partitions included)
//	            NonPersistentTopics(ctx, ns) ([]string, error)
//	            PartitionedTopics(ctx, ns) ([]string, error)
//	            CreateTopic(ctx, topic) error                      (non-partitioned)
//	            DeleteTopic(ctx, topic, force bool) error
//	            CreatePartitionedTopic(ctx, topic, n int) error
//	            UpdatePartitionedTopic(ctx, topic, n int) error    (only grows)
//	            DeletePartitionedTopic(ctx, topic, force bool) error
//	            PartitionedTopicMetadata(ctx, topic) (PartitionedTopicMetadata, error) (0: not partitioned)
//	            Lookup(ctx, topic) (LookupResult, error)
//	            TopicStats(ctx, topic) (TopicStats, error)         (one topic or partition)
//	            InternalStats(ctx, topic) (InternalStats, error)
//	            LastMessageID(ctx, topic) (MessageID, error)
//	            Unload(ctx, topic) error
//	            Terminate(ctx, topic) (MessageID, error)           (last message id)
//	Compaction  Compact(ctx, topic) (<-chan struct{}, error)        (ErrCompactionRunning)
//	            CompactionStatus(ctx, topic) (CompactionStatus, error)
//	            TopicCompactionThreshold(ctx, topic, applied) / SetTopicCompactionThreshold(ctx, topic, *bytes)
//	Inspection  PeekMessage(ctx, topic, sub, n) (StoredMessage, error) (n-th of the backlog, from 1)
//	            MessageByID(ctx, topic, ledger, entry); ExamineMessage(ctx, topic, latest, n)
//	            MessageIDByTime(ctx, topic, t) (MessageID, error)   (ErrMessageNotFound)
//	Schemas     Schema(ctx, topic, version) (SchemaInfo, error)    (version < 0: latest)
//	            SchemaVersions(ctx, topic) ([]SchemaInfo, error)
//	            CreateSchema(ctx, topic, SchemaInfo) (int64, error); SchemaVersionOf(ctx, topic, SchemaInfo)
//	            DeleteSchema(ctx, topic, force) (int64, error)
//	            TestSchemaCompatibility(ctx, topic, SchemaInfo) (bool, strategy string, error)
//	            TopicSchemaCompatibility(ctx, topic, applied) / SetTopicSchemaCompatibility(ctx, topic, s)
//	Subscriptions
//	            Subscriptions(ctx, topic) ([]string, error)
//	            CreateSubscription(ctx, topic, sub, at MessageID) error   (Earliest, Latest or an id)
//	            DeleteSubscription(ctx, topic, sub, force bool) error     (ErrNotEmpty if consumers)
//	            ResetCursor(ctx, topic, sub, to MessageID) error
//	            ResetCursorToTime(ctx, topic, sub, t time.Time) error
//	            SkipMessages(ctx, topic, sub, n int) error          (n entries)
//	            ClearBacklog(ctx, topic, sub) error
//	Policies    NamespacePolicy(ctx, ns, path) / SetNamespacePolicy(ctx, ns, path, qualifier, body) /
//	            RemoveNamespacePolicy; TopicPolicy(ctx, topic, path, applied) / SetTopicPolicy /
//	            RemoveTopicPolicy (path: Pulsar's REST element, NamespacePolicyPaths, TopicPolicyPaths;
//	            qualifier: the backlog quota type); ExpireMessages(ctx, topic, sub, seconds)
//
// For a partitioned topic, the topic-level calls above take a partition name; the admin layer
// fans out over PartitionedTopicMetadata and aggregates (as Pulsar's partitioned-stats).
//
// Stats types (TopicStats, SubscriptionStats, InternalStats, ...) are aliases of the types in
// broker/topic and encode to Pulsar's admin JSON.
//
// # Bundles, ownership and lookups (package broker/ownership)
//
// Package broker/ownership keeps the bundle table: namespace bundles, the ownership records
// bound to the broker's metadata session, lookups, the default broker selector, hand-overs
// and the cluster API (unload, split, brokers); its doc.go tells how. The root builds it
// (ownership.go: ownHost gives it the broker's record, session, topic closing and the load
// manager's placement; resources.Records its namespace policies; peer.Client the calls to
// other owners) and the exported cluster methods of Service delegate to it. The session
// keeper (keepSession) stays here: when the session is lost the table drops every bundle
// and the root closes their topics in the background.
//
// # Goroutines and ownership
//
//   - Service: the session keeper (which drops every bundle and opens a new
//     metadata session if the old one is lost), the watched caches and the hand-over
//     watcher (ownership.Manager.Start, StartTransfers) are goroutines; bundle acquisitions
//     run on their own goroutines (package ownership); the topics registry
//     (name → loading/loaded entry) is a small mutex-guarded map.
//     Loading a topic runs on its own goroutine and completes a future (topicEntry.ready)
//     the callers wait on. Background metadata chores (ownership release) run through
//     goBackground and are waited for by Close.
//   - Connections: package broker/server serves the protocol (its doc.go lists its
//     goroutines and invariants): one accept loop per listener, and per connection one
//     reader goroutine, which owns the FrameReader and the connection state (Handshaking →
//     Connected → Closed) and handles every command (the ones that need I/O on goroutines of
//     their own), and one writer goroutine, which writes the outbound buffer in batches and
//     pings the client. It reaches the broker only through server.Backend, which backend.go
//     implements over the Service: authorization, lookups and namespaces' topics, loaded
//     topics (topicFor), schemas, transaction coordinators and the scalable topics' sessions
//     (backend_scalable.go: the DAG and namespace watches follow metadata-store watches; a
//     stream session long-polls the controller's leader, here or through its admin API).
//     Start binds the listeners (listen.go, server.Listen) and serves them once the broker
//     is up; Close refuses new connections at once, closes the listeners after the bundles
//     are handed over, and closes the connections after the topics are unloaded, then
//     cancels the server's context and waits for its goroutines. A malformed, oversized or
//     out-of-order frame closes that connection only, with a logged reason and a
//     magnetar_broker_bad_frames_total{reason} count.
//   - Topic (broker/topic): one goroutine per loaded topic owns the topic State
//     (Active, Terminating, Terminated, Fenced, Closing, Closed), its producers (access modes,
//     topic epoch, the WaitForExclusive queue), the deduplication state and the publish
//     pipeline; add completions of the managed ledger come back as events and are matched
//     against the in-flight queue (they complete in add order).
//   - Subscription (broker/topic): one goroutine per open subscription owns its consumers,
//     the dispatcher (Exclusive and Failover: one active consumer; Shared: round-robin over
//     permits; Key_Shared: hash ranges), permits, the pending (delivered, unacknowledged),
//     replay and delayed sets, and the subscription State (Active, Closing, Deleting,
//     Closed). Cursor reads run on helper goroutines and come back as events tagged with the
//     dispatch epoch, which a seek or a close bumps so that a stale read is dropped; a seek
//     waits for the read in flight before it moves the cursor.
//   - Managed-ledger binding (mlog.go): each cursor has an ordered worker goroutine (started
//     on demand) for acknowledgements and resets, so a reset is never overtaken by an older
//     acknowledgement; reads run on the caller's goroutine.
//
// # Data path and invariants
//
//   - A SEND_RECEIPT is sent only after the managed ledger acknowledged the entry (AQ bookies
//     fsynced it); receipts of one producer go out in sequence order (adds complete in order).
//   - Deduplication (on by default; Config.DisableDeduplication or the namespace policy turn
//     it off) follows Pulsar: per producer name, a SEND whose sequence id is at most the
//     highest stored is answered at once (message id -1:-1) and not stored; one whose original
//     is still in flight is answered with the original's position when it is stored. The
//     highest stored ids are snapshotted in the managed ledger's properties every
//     DeduplicationSnapshotInterval entries and on unload; loading replays the entries after
//     the snapshot.
//   - Backpressure: a connection stops reading once MaxPendingPublishPerConnection of its
//     SENDs are in flight, and a topic admits at most MaxPendingPublishBytesPerTopic bytes in
//     flight (topic.AcquirePublish), so a slow disk slows producers down.
//   - Permits count messages; a consumer gets an entry only while it has permits.
//   - Every unacknowledged entry of a consumer that goes away (or asks for redelivery) is
//     redelivered, before newer entries, with a higher redelivery count.
//   - Key_Shared (AUTO_SPLIT or STICKY ranges over murmur3(key) % 65536): a key's entries
//     reach consumers in order, also under consumer churn: an entry waits while an older
//     entry of its key waits for redelivery, and a key moves to a new consumer only once its
//     previous consumer acknowledged what it got of it.
//   - Delayed delivery (deliver_at_time) is honoured on Shared and Key_Shared subscriptions.
//   - Terminate seals the managed ledger and disconnects the producers, which reconnect and
//     are refused with TopicTerminatedError.
//   - Schemas (package broker/schemareg, rules in package broker/schema): versions are stored per (base)
//     topic in the metadata store. A schema that is not live yet (Avro definitions compared
//     parsed) is validated and checked against the live versions under the topic's strategy
//     (topic policy, else namespace, else Config.SchemaCompatibilityStrategy, default FULL)
//     before it becomes the next version; refusals are IncompatibleSchema. A consumer's new
//     schema on a topic with schemas is only checked, never registered; with
//     is_allow_auto_update_schema off, producers cannot register new ones (the admin API
//     can); with schema validation enforced, producers without a schema are refused on a
//     topic with one. A deletion is a version of its own (force removes every version). A
//     producer whose schema is new gets PRODUCER_SUCCESS (naming the version) only once the
//     version is stored.
//   - Compaction (compaction.go, package broker/compaction): every loaded persistent topic
//     has a compaction manager; ReadCompacted consumers (Exclusive and Failover only) and
//     readers get their cursor wrapped by it when they open their subscription. A
//     compaction keeps the __compaction subscription right after the horizon, so entries
//     not compacted yet are retained. The compaction monitor (one goroutine) checks the
//     loaded topics every CompactionCheckInterval against their compaction threshold.
//   - As in Pulsar, a producer naming initial_subscription_name (the clients' dead-letter
//     producers) gets that durable subscription created at the earliest message before its
//     PRODUCER_SUCCESS, unless the topic has a subscription of that name; and
//     GET_TOPICS_OF_NAMESPACE in PERSISTENT mode answers a namespace that does not exist
//     with no topics (NON_PERSISTENT and ALL modes: MetadataError).
//
// # Policies (policies.go, policyapply.go)
//
// Every policy has Pulsar's REST paths and record keys at two levels: the namespace record
// (Pulsar's Policies JSON: retention_policies, backlog_quota_map, message_ttl_in_seconds,
// publishMaxMessageRate by cluster, max_producers_per_topic, …) and the topic policy record
// at metadata.TopicFeaturePolicyKey (Pulsar's TopicPolicies JSON: retentionPolicies,
// backLogQuotaMap, messageTTLInSeconds, publishRate, maxProducerPerTopic, …, with the
// schema compatibility strategy and the compaction threshold). A value is resolved topic,
// then namespace, then Config.Policies / Config.ManagedLedger (the broker's configuration);
// backlog quotas per type. A set or remove is checked first (ErrInvalidArgument, nothing
// written); then the loaded topics concerned get their resolved policies at once, and a
// watch of both record prefixes (policyMonitor) does the same for changes made through
// another broker. A topic policy request to a broker that does not own the topic's bundle
// is redirected (307, NotOwnerError) to the owner, as Pulsar's validateTopicOwnership does.
// A topic gets its policies when it loads, and on every change: retention and persistence
// go into its managed ledger's configuration (live too: ManagedLedger.SetRetention trims
// under the new values, SetPersistence gives the ledgers created after it the new
// E/WQ/AQ), the rest to topic.SetPolicies, an event for the topic goroutine that passes the
// subscriptions' part on to theirs.
//
// Enforcement: in the topic and subscription goroutines (broker/topic/policy.go) for max
// producers (ProducerBusy "Topic '…' reached max producers limit"), max consumers per topic
// and per subscription (ConsumerBusy), max subscriptions (NotAllowedError), max message
// size (SEND_ERROR NotAllowedError), max unacknowledged messages per consumer and per
// subscription (the dispatcher stops at the limit until acks come), the publish rate
// (token buckets; SENDs beyond it wait in order, holding their connection's pending budget,
// so the connection stops reading: backpressure, never dropping), the topic and
// subscription dispatch rates (cursor reads wait; permits are kept), auto subscription
// creation off (SubscriptionNotFound), delayed delivery off (deliver_at_time ignored) and
// its tick time (a message due within it of now is delivered now, Pulsar's non-strict
// mode; Magnetar's default is 0, exact, where Pulsar's delayedDeliveryTickTimeMillis is
// 1000), the subscribe rate per consumer (client host, consumer name and id, as Pulsar's
// SubscribeRateLimiter keys them; beyond it NotAllowedError "Subscribe limited by
// subscribe rate limit per consumer."), deduplication on and off on the live topic
// (enabling starts from an empty state, as Pulsar's new deduplication cursor does) and
// the deduplication snapshot interval (a snapshot at that period when entries were stored
// since the last one, besides every DeduplicationSnapshotInterval entries); auto topic
// creation (allowed or not) when a topic loads, and the partitioned type on the client's
// partitioned-metadata request, binary or HTTP with checkAllowAutoCreation=true (a topic
// that does not exist is created partitioned, with defaultNumPartitions). policyMonitor, every
// Config.Policies interval, checks backlog quotas (destination_storage against each
// subscription's backlog size, message_age against the publish time of its oldest
// unacknowledged entry): consumer_backlog_eviction skips the oldest backlog of the
// subscriptions over it; producer_request_hold and producer_exception close the producers
// and refuse new ones with ProducerBlockedQuotaExceededError (the Go client retries, its
// sends time out) or ProducerBlockedQuotaExceededException (the client fails its pending
// messages) until the backlog is back under the quota. It also expires messages older than
// the TTL (a cumulative ack of the subscriptions' entries published before the cutoff,
// never moving a cursor back), deletes topics inactive for their inactive-topic policy and
// (every SubscriptionExpiryCheckInterval) the durable subscriptions seen without consumers
// for longer than their subscription expiration time (as in Pulsar, the time is counted
// from when this broker first saw the subscription without consumers). The persistence
// policy's managedLedgerMaxMarkDeleteRate (else the broker's
// managedLedgerDefaultMarkDeleteRateLimit, Pulsar's 1.0 in the broker and standalone
// commands, unlimited in a Config left zero) bounds how often each subscription's cursor
// persists its acknowledgements, live (ManagedLedger.SetMarkDeleteRate); beyond it the
// newest state is held until the next allowed persist, the flush timer
// (managedLedgerCursorPositionFlushSeconds), an unload or close: a crash may redeliver the
// held acknowledgements (at-least-once), never a committed transaction's (the commit
// flushes the cursor first). Internal stats show persistentMarkDeletePosition and
// markDeleteHeld. A dispatch rate with relativeToPublishRate (topic or subscription) is
// the configured rate plus the topic's publish rate, measured every second. The delayed
// delivery max delay refuses SENDs delayed by more (NotAllowedError). Stored and served
// (set, get with precedence, remove) but without effect: the replicator dispatch rate, as
// Magnetar has no geo-replication; it takes effect once replication exists. Retention 0 (the
// default) keeps nothing consumed: a topic with no subscription keeps only its current
// ledger (package mledger, Retention).
package broker
