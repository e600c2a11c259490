// Package ownership is the broker's bundle ownership: which broker serves which part of a
// namespace, and how clients find it. It owns one concern and sees the broker only through
// the small interfaces of deps.go (Broker, Namespaces, Placement, Peers), which the root
// package broker implements; it imports neither the root nor broker/server.
//
// API (Manager, built by New, started by Start and StartTransfers):
//
//	Bundles      Bundle, NamespaceBundles, WithBundles, FindBundle, TopicHash, SplitBoundaries,
//	             ParseBundle, ParseBundleName; Manager.BundlesOf, BundleOf
//	Ownership    Acquire, AcquireTopic, Serving, Owned, OwnedBundles, OwnerOf, Release, Forget,
//	             DropAll, HandOverAll, WaitSessionLost (LocalDeadline)
//	Lookup       Lookup(ctx, topic, authoritative) (api.LookupResult, error)
//	Brokers      LiveBroker, LiveBrokers, FindBroker, Brokers, LeaderBroker; BrokerSelector
//	Cluster API  NamespaceBundles, TopicBundle, NamespaceBundle, BundleOwner, UnloadBundle,
//	             UnloadNamespace, SplitBundle, OwnedNamespaces (admin.go)
//
// As Pulsar's NamespaceBundleFactory, NamespaceService and OwnershipCache: a namespace's
// 32-bit hash space is cut into bundles (policies' bundles.boundaries; a namespace created
// without them gets Config.DefaultNumberOfNamespaceBundles equal ones, or numBundles); a
// topic belongs to the bundle holding the CRC-32 (Guava's Hashing.crc32(), which Pulsar
// uses) of its full name. The broker owning a bundle holds metadata.BundleOwnerKey, an
// ephemeral record bound to its metadata session, and serves the bundle's topics only while
// it holds it under its current session (a topic load checks once more when it completes).
//   - Acquiring: one write per bundle at a time (OwnedBundle.ready is the future the others
//     wait on). A record of this broker's id from an earlier session is taken over at once;
//     another broker's is *NotOwnerError, unless it names this broker in TransferTo (a
//     hand-over), then the acquisition waits for the owner to delete it.
//   - Lookup: the owner answers Connect; another broker answers Redirect (authoritative) to
//     the owner (to the destination during a hand-over); an unowned bundle goes to the
//     broker Placement.Selector chooses (the broker's Config.BrokerSelector or load
//     manager; default: the live broker owning the fewest bundles, counting its recent
//     choices; ties by id), which takes it when the redirected (authoritative) lookup
//     arrives. HTTP lookups do the same with 307 and ?authoritative=true.
//   - Releasing (unload, hand-over, split, shutdown): the bundle stops being served, its
//     record names the destination (a hand-over), its topics close with the destination's
//     URLs as CLOSE_PRODUCER/CLOSE_CONSUMER's assigned broker URLs (topic.Topic.CloseTo),
//     so the clients reconnect there without a lookup, and the record is deleted; the
//     destination watches the records (StartTransfers) and takes the bundle at once.
//   - Session: the broker's session keeper (WaitSessionLost) treats the session as lost
//     when it expires or when the store has not renewed it for two thirds of SessionTTL
//     (metadata.Renewer): the broker stops serving every bundle (DropAll; the broker closes
//     their topics in the background) before the lease can expire and another broker take
//     over; the managed ledgers' fencing backs this up. The broker's Close hands every
//     bundle over (HandOverAll) to other live brokers first (SIGTERM: a rolling restart).
//   - Watched caches (resources.Cache: list, then watch from the listed revision) of the
//     ownership records, live brokers (here) and the namespace policies (package resources)
//     answer lookups, bundles and partitioned metadata while etcd is unreachable; what
//     needs the store is bounded (resources.StoreWait, resources.StoreFirstWait) and fails
//     with ErrServiceNotReady, which the clients retry, instead of hanging.
package ownership
