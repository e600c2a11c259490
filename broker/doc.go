// Package broker is Magnetar's Pulsar broker: it serves persistent topics to unmodified
// Pulsar clients over the Pulsar binary protocol (package proto/pulsar), stores each topic
// in a managed ledger (package mledger), keeps tenants, namespaces, topics, schemas and
// ownership in the metadata store (package metadata), and exposes an exported service API
// for the admin REST layer and the tools.
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
//	Topics      Topics(ctx, ns) ([]string, error)                  (full names, partitions included)
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
//	Subscriptions
//	            Subscriptions(ctx, topic) ([]string, error)
//	            CreateSubscription(ctx, topic, sub, at MessageID) error   (Earliest, Latest or an id)
//	            DeleteSubscription(ctx, topic, sub, force bool) error     (ErrNotEmpty if consumers)
//	            ResetCursor(ctx, topic, sub, to MessageID) error
//	            ResetCursorToTime(ctx, topic, sub, t time.Time) error
//	            SkipMessages(ctx, topic, sub, n int) error          (n entries)
//	            ClearBacklog(ctx, topic, sub) error
//
// For a partitioned topic, the topic-level calls above take a partition name; the admin layer
// fans out over PartitionedTopicMetadata and aggregates (as Pulsar's partitioned-stats).
//
// Stats types (TopicStats, SubscriptionStats, InternalStats, ...) are aliases of the types in
// broker/topic and encode to Pulsar's admin JSON.
//
// # Goroutines and ownership
//
//   - Service: the listener goroutine accepts connections; the topics registry
//     (name → loading/ready/closing entry) is a small mutex-guarded map; loading a topic runs
//     on its own goroutine and completes a future the callers wait on.
//   - Connection (conn.go): one reader goroutine owns the FrameReader, decodes frames and
//     handles every command; it owns the connection State (Handshaking → Connected →
//     Closing → Closed) and the producer/consumer id maps (guarded by a leaf mutex because
//     topic completions register and remove entries). One writer goroutine drains the
//     outbound queue (encoded frames appended under a leaf mutex) and writes it in batches.
//     A malformed or oversized frame closes that connection only, with a logged reason.
//   - Topic (broker/topic): one goroutine per loaded topic owns the topic State, its
//     producers (access modes, names, deduplication state) and the publish pipeline into the
//     managed ledger; add completions come back as events checked against the topic state
//     and the producer's epoch.
//   - Subscription (broker/topic): one goroutine per subscription owns its consumers, the
//     dispatcher (Exclusive, Failover, Shared, Key_Shared), permits, the redelivery and
//     delayed-delivery sets and the cursor; cursor read completions come back as events
//     tagged with the subscription's read epoch, so a seek or a consumer change discards a
//     stale read.
//
// # Invariants
//
//   - A SEND_RECEIPT is sent only after the managed ledger acknowledged the entry (AQ bookies
//     fsynced it); receipts of one producer go out in sequence order.
//   - A duplicate (producer name, sequence id) is not stored twice: it is answered with the
//     original's receipt once that one is durable.
//   - Permits count messages; a consumer is never sent more messages than its permits.
//   - Every unacknowledged message of a consumer that goes away is redelivered with a higher
//     redelivery count.
package broker
