// Package admin is Magnetar's admin REST API: Pulsar's /admin/v2 paths (tenants,
// namespaces, persistent and non-persistent topics, partitioned topics, stats, internal
// stats, subscriptions, reset cursor, skip, unload, terminate, message inspection,
// compaction, schemas and their policies, namespace and topic policies: policies.go,
// clusters and replication clusters: replication.go) and
// the /lookup/v2 topic lookup, as JSON over
// net/http, so that pulsar-admin, pulsarctl, the pulsaradmin Go package and HTTP-lookup
// clients work unmodified. It holds no state: every request calls the broker's exported
// service API (Service, implemented by *broker.Service); the feature parts are optional
// interfaces of the same value (SchemaService, InspectService, NonPersistentService,
// CompactionService, TxnService, PolicyService): a Service without one answers its paths
// with 501 (the non-persistent lists: empty; the policy paths: 404).
//
// # Usage
//
//	mux := http.NewServeMux()
//	mux.Handle("/metrics", svc.MetricsHandler())
//	mux.Handle("/", admin.Handler(svc, admin.Options{}))   // answers under /admin/ and /lookup/
//
// Caller obligations:
//  1. Mount the handler at the root: the routes are absolute Pulsar paths.
//  2. Keep svc open while the HTTP server runs.
//
// # Answers
//
// Success is 200 with a JSON body for reads, 204 without a body for writes (as Pulsar); a
// policy that is not set reads as 204 without a body (Pulsar's null, which its clients read
// as "not configured").
// Failures are 4xx/5xx with {"reason": "..."} and Pulsar's wording (errors.go has the one
// mapping table from the service's sentinel errors); a topic served by another broker is a
// 307 redirect to that broker's HTTP URL. Bad names are 412 (package broker/topicname has
// the rules: Pulsar's characters, "." and "..", control characters, lengths), bad bodies
// and parameters 400, a partition count above Options.MaxPartitions (Pulsar's
// maxNumPartitionsPerPartitionedTopic; unset, PartitionCeiling) 406, on creation, growth
// and a namespace's autoTopicCreation override; nothing is changed by a refused request:
// every check runs before the first write.
//
// For a partitioned topic's base name, the topic-level calls fan out over its partitions:
// stats and internalStats answer the partitioned forms (…/partitioned-stats,
// …/partitioned-internalStats), subscriptions are listed, created, deleted, reset by time
// and cleared on every partition, unload unloads every partition; terminate, skip,
// lastMessageId and reset-cursor-to-a-message-id are refused with 405, as Pulsar does
// (terminate/partitions terminates every partition).
//
// # Security
//
// Authentication is the caller's: wrap the handler in access.Audit.Authenticate (or
// auth.Service.Middleware), which answers 401 {"reason": ...} and puts the principal in the
// request's context; the first also writes the refusal's audit line. When the service also
// implements Authorizer (*broker.Service does, with Config.Authz), every route is authorized
// before it runs (authz.go, requiredOp): the cluster list for any authenticated role, a
// cluster's record and its changes, the tenant list and tenant changes for superusers, stats, partition metadata and lookups
// for roles that may produce or consume the topic, subscription operations for roles that
// may consume it, everything else for the tenant's admin roles; the brokers, their load
// reports, the cluster records and the transaction coordinators for superusers. A refusal
// is 403 with a reason naming the role, and an audit line (package broker/access,
// rate-limited): authorization runs before a handler validates the names of its path, so a
// role that may not act gets 403, never 412. With a PermissionService the permission endpoints are mounted
// (permissions.go: namespace and topic grants, GET/POST/DELETE .../permissions[/{role}]),
// with a ClusterService GET /admin/v2/clusters/{cluster}, with a ClusterAdminService the
// cluster records' list, create, update and delete, and with a ReplicationService the
// namespace and topic replication clusters (replication.go: …/replication). With a
// SubscriptionPermissionService a namespace's subscription roles
// (…/permissions/subscription); with a DynamicConfigService the dynamic broker configuration
// (dynconfig.go: …/brokers/configuration, superusers only). Pulsar's topic properties are
// topicprops.go's; a namespace's bookie affinity group (…/persistence/bookieAffinity,
// superusers only) is a policy, kept but not used: Magnetar has no bookie isolation groups.
//
// # Concurrency
//
// The handler is safe for concurrent use; it starts no goroutines. Each request runs on
// net/http's goroutine with a deadline (Options.RequestTimeout).
package admin
