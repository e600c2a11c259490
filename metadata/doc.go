// Package metadata is Magnetar's metadata store: the cluster-wide, strongly consistent
// key/value state that ZooKeeper holds in Pulsar and BookKeeper (bookie registration, cookies,
// ledger metadata, id counters). Store is the interface every component uses; EtcdStore
// implements it on etcd v3 (go.etcd.io/etcd/client/v3), and Embedded runs a single-member etcd
// inside the magnetar binary (`magnetar etcd`). The key layout lives in keys.go.
//
// # Usage
//
//	eps, err := metadata.ParseURL("etcd://10.0.0.1:2379,10.0.0.2:2379")
//	...
//	s, err := metadata.Open(ctx, metadata.Config{Endpoints: eps, Namespace: "/magnetar/prod"})
//	...
//	defer s.Close()
//
//	// Register this bookie while the process lives.
//	sess, err := s.NewSession(ctx, 10*time.Second)
//	...
//	defer sess.Close()
//	_, err = sess.Put(ctx, metadata.AvailableBookieKey(id), info, metadata.NotExists)
//
//	// Follow the set of bookies: list, then watch from the next revision.
//	kvs, rev, err := s.List(ctx, metadata.PrefixAvailable)
//	w := s.Watch(ctx, metadata.PrefixAvailable, rev+1)
//	for b := range w.C {
//		// apply b.Events; remember b.Rev to resume with Watch(prefix, b.Rev+1)
//	}
//	err = w.Err() // ctx error, ErrClosed or ErrCompacted (then List again)
//
//	// The same loop, with the re-listing and the backoff, is Follower: use it.
//	metadata.Follower{Store: s, Prefix: metadata.PrefixAvailable}.Run(ctx, func(u metadata.Update) {
//		// u.Kind: Listed (u.KVs is everything), Changed (u.Events), WatchEnded
//	})
//
//	// Read-modify-write with compare-and-swap.
//	kv, err := s.Get(ctx, metadata.LedgerKey(7))
//	_, err = s.Put(ctx, kv.Key, update(kv.Value), kv.Version) // ErrBadVersion: re-read, retry
//
// A cluster with a configuration store apart from its local store (Pulsar's
// configurationMetadataStoreUrl, shared between clusters) uses NewSplit(local, config): one
// Store that keeps the records of ConfigStorePrefixes (cluster records, tenants, namespace
// policies, partitioned-topic metadata) in config and everything else in local.
//
// # Caller obligations
//
//  1. Close every Session before its Store, and every Store before the etcd it uses (an
//     Embedded waits for open client streams when it stops). Store.Close abandons open
//     sessions without revoking them: their keys vanish only when the lease expires.
//  2. Drain Watch.C or cancel the watch's context: an unread watch holds a goroutine and
//     buffers events in the etcd client.
//  3. On ErrCompacted, rebuild state with List and watch again from its revision+1.
//  4. Watch Session.Done: once it closes, every ephemeral key of the session is gone (or soon
//     will be) and the session cannot be revived; start a new one and re-register.
//  5. Keep values metadata-sized (etcd's request limit is 1.5 MiB) and keep puts off
//     per-message paths: one durable put costs 1–2 ms.
//  6. Compaction (EtcdStore.Compact, Embedded's hourly auto-compaction) is cluster-wide, not
//     per namespace.
//  7. On a Split, list, watch and commit within one store: a prefix or a commit that covers
//     both fails with ErrSpansStores; a revision or version from one store means nothing in
//     the other. Close the two stores, not the Split.
//
// # Invariants
//
//   - Version is etcd's ModRevision; a key's versions only grow, and every revision of the store
//     is a single atomic change (one key, or one NextID/CAS transaction).
//   - A conditional Put or Delete either applies at the expected version or changes nothing
//     and returns ErrBadVersion.
//   - A Watch delivers events in revision order, each once, with no gaps; WatchBatch.Rev is the
//     revision of the batch's last event.
//   - NextID values of one counter are unique and increasing across all clients, starting at 1.
//
// # Goroutines
//
// EtcdStore (all stopped and waited for by Close):
//   - one per Session: drains the lease keep-alive channel of the etcd client (which sends the
//     keep-alives every ttl/3 from its own goroutines) and closes Session.Done when the channel
//     ends (expiry, revocation, Session.Close, Store.Close).
//   - one per Watch: owns the etcd watch, converts responses to WatchBatch, sends them on
//     Watch.C, and restarts the etcd watch from the first undelivered revision after a
//     transient failure.
//   - the etcd client's own gRPC goroutines, ended by Close.
//
// Follower: Run and Resume run on the caller's goroutine; Chan and ResumeChan start one that
// owns the list-then-watch loop and sends on the returned channel until ctx ends.
//
// Embedded: etcd's server goroutines (raft, gRPC, HTTP gateway, compactor, lessor), ended by
// Close.
//
// Errors are wrapped with the operation and key; test them with errors.Is against ErrNotFound,
// ErrBadVersion, ErrSessionExpired, ErrClosed and ErrCompacted.
package metadata
