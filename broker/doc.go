// Package broker is Magnetar's Pulsar broker: it serves persistent and non-persistent
// topics to unmodified Pulsar clients over the Pulsar binary protocol, stores each
// persistent topic in a managed ledger (package mledger), keeps tenants, namespaces,
// topics, schemas and ownership in the metadata store (package metadata), and exposes an
// exported service API for the admin REST layer and the tools.
//
// This package is the composition root: Start builds the parts, wires them to each other
// through the small interfaces each defines (the adapters are the root's files named after
// the part), starts them and Close stops them in reverse. Each part imports nothing above
// it (go list -deps shows neither the root nor broker/server):
//
//	broker/api          the service API's types and errors (aliased in api.go)
//	broker/resources    typed metadata records and their watched caches
//	broker/policy       the policy table and its resolution, topic > namespace > broker
//	broker/ownership    bundles, ownership records, lookups, hand-over, the cluster API (ownership.go)
//	broker/topicreg     the topic registry: load, serve, unload; policy application and
//	                    monitors; compaction; inspection; topic-level admin (topics.go)
//	broker/topic        one topic and its subscriptions (owner goroutines over sans-I/O cores)
//	broker/pulsarmetrics Pulsar's metric names, computed from the topics' stats when scraped (topics.go)
//	broker/schemareg    the schema registry (schema.go)
//	broker/replhost     the geo-replicators of the loaded topics (replication.go)
//	broker/txnhost      transaction coordinators and the topics' transaction side (txn.go)
//	broker/scalablehost scalable-topic controllers and their segments (scalable.go)
//	broker/loadmgr      the load manager (loadbalance.go)
//	broker/dynconfig    the dynamic configuration, applied to broker/policy (dynconfig.go)
//	broker/peer         calls to other brokers, with this broker's credentials
//	broker/server       the Pulsar protocol server, behind Backend (backend*.go)
//
// The root itself keeps: the configuration (config.go), the metadata session and its
// keeper, the listeners (listen.go), authorization of admin calls and of the protocol's
// commands (broker/access; permissions.go), metrics (Registry, MetricsHandler), cluster
// bootstrap (bootstrap.go) and the thin exported methods that delegate to the parts.
//
// # Usage
//
//	svc, err := broker.Start(ctx, broker.Config{
//		Store:  store,               // metadata.Store (etcd), the cluster's local store
//		// ConfigStore: shared,      // a configuration store shared with other clusters (optional)
//		Listen: "127.0.0.1:6650",
//		HTTPURL: "http://127.0.0.1:8080", // where the admin REST API is mounted (lookups report it)
//		Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, // standalone
//	})
//	defer svc.Close()
//	mux.Handle("/metrics", svc.MetricsHandler())
//	// the admin package mounts /admin/v2/... on the same mux and calls svc's methods
//
// Caller obligations:
//  1. Config.Store (and Config.ConfigStore) must stay open until Close returns; close the
//     Service before the metadata stores and before the bookies it writes to.
//  2. The exported methods are safe for concurrent use; every one takes a ctx and returns
//     ctx.Err() or ErrServiceNotReady when it cannot finish.
//
// # Exported service API
//
// Names: topics in any form topicname.Parse accepts ("t", "tenant/ns/t",
// "persistent://tenant/ns/t", "...-partition-N"); namespaces as "tenant/ns". Errors wrap
// the sentinels of api.go or are *NotOwnerError (another broker serves the topic: redirect
// to its HTTPURL). By part: tenants, namespaces, topic lists and partitioned topics
// (admin.go over broker/resources); topics, subscriptions, cursors, compaction,
// inspection, expiry and policies (broker/topicreg, promoted from the embedded registry);
// bundles, lookups, brokers and health (cluster_admin.go over broker/ownership); schemas
// (schema_admin.go); transactions (txn_admin.go); scalable topics (scalable.go);
// permissions (permissions.go). For a partitioned topic the topic-level calls take a
// partition name; PartitionStats fetches a partition another broker serves from that
// broker, so the admin layer aggregates on the broker asked, as Pulsar does.
//
// # Security
//
// Config.ListenTLS adds a pulsar+ssl:// listener (Config.TLS, see package tlsconf;
// DisablePlain turns the plain one off) and lookups answer both URLs. With Config.Auth,
// CONNECT is authenticated and credentials are refreshed (package broker/server). With
// Config.Authz, LOOKUP and PARTITIONED_METADATA need produce or consume, PRODUCER produce,
// SUBSCRIBE consume (checked before the topic is loaded, so a refusal creates nothing),
// GET_TOPICS_OF_NAMESPACE a namespace grant; superusers and the tenant's admin roles may do
// everything; refusals are AuthorizationError. Grants live in the namespace record's
// auth_policies (Pulsar's layout). InitializeCluster writes what initialize-cluster-metadata
// writes.
//
// # Goroutines
//
// The root owns: the session keeper (keepSession: when the metadata session is lost,
// ownership drops every bundle, the registry closes their topics in the background and a
// new session is opened, retried every second), the watched caches of broker/resources,
// and background metadata chores (goBackground), all waited for by Close. Every part's
// doc.go lists its own goroutines. Close refuses new connections at once, resigns the
// scalable topics' leaderships, hands the bundles over, closes the listeners, unloads the
// topics, closes the connections, then cancels the parts' context and waits for them.
package broker
