// Package resources is the one typed layer over the broker's records in the metadata
// store: clusters (clusters.go, clusteradmin.go), tenants, namespaces (their policies,
// permission grants and replication clusters: replication.go), topics and partitioned
// topics (Records), and the watched caches that mirror a prefix of the store
// (Cache), so that the rest of the broker asks for "the namespace's policies", never for a
// key. The keys themselves are built in metadata/keys.go. Given a metadata.Split (a
// configuration store apart from the local store), the cluster records, tenants, namespaces
// and partitioned topics are the configuration store's, shared with the other clusters
// that use it; topic records and local policies (localpolicies.go: the bundles after a
// split here) stay in the local store.
//
// # Usage
//
//	r := resources.New(store, "cluster-a", log)
//	for _, c := range r.Caches() {
//		go c.Run(ctx) // until the broker closes
//	}
//	err := r.CreateNamespace(ctx, "tenant/ns", api.NamespacePolicies{})
//	p, err := r.CachedPolicies(ctx, "tenant", "ns") // the cache, else the store within StoreWait
//	err = r.UpdateNamespace(ctx, "tenant/ns", func(p *api.NamespacePolicies) { ... }) // CAS, retried
//
// # Caller obligations
//
//  1. Run every cache of Caches (and every Cache made with NewCache) until the broker
//     closes; until a cache's first listing its reads go to the store.
//  2. Treat api.ErrServiceNotReady from a read as "the store is unreachable now": clients
//     retry it.
//
// # Invariants
//
//   - Every update is a compare-and-swap on the record's version (a create: "must not
//     exist"); a lost race is api.ErrAlreadyExists, api.ErrServiceNotReady, or retried
//     (UpdateNamespace).
//   - A change that names clusters (a tenant's allowed clusters, a replication list, peers)
//     is checked against the cluster records before it is written, as Pulsar checks it; a
//     refused change writes nothing. This broker's own cluster counts as known without a
//     record.
//   - A namespace's bundles in force are its local policies' if a split recorded them for
//     this incarnation of the namespace record, else its policies': a split changes one
//     cluster's bundles only.
//   - A Cache holds, once synced, what the store held at the revision of its last listing
//     plus every later change its watch delivered, in order.
//
// # Goroutines
//
// Cache.Run, one per cache, owns its refresh (a metadata.Follower) and runs until its ctx
// ends. Everything else runs on the caller's goroutine; Records and Cache are safe for
// concurrent use.
//
// The package imports only lower packages (metadata, broker/api, broker/topicname, auth),
// never package broker.
package resources
