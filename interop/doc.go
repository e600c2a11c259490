// Package interop holds Magnetar's tests against the real Apache Pulsar Go client
// (github.com/apache/pulsar-client-go). It has no non-test code.
//
// # Why a separate module
//
// The client pulls in ≈ 250 MB of modules (Kubernetes apimachinery, AthenZ, roaring
// bitmaps, …) that the product never needs. Keeping it in its own go.mod (module
// github.com/magnetar-io/magnetar/interop, with `replace github.com/magnetar-io/magnetar =>
// ../`) keeps the product's dependency graph lean: `go build ./...`, `go vet ./...` and
// `go test ./...` at the repository root do not see this directory, and the main go.mod
// never mentions the client. scripts/test runs both modules:
//
//	cd interop && go vet ./... && go test -race ./...
//
// # What is here
//
//   - descriptor_test.go: every message, field (number, name, type, label, default) and
//     enum value of proto/pulsar/pulsar.proto equals the descriptors the client registers
//     at run time (its PulsarApi.proto), both ways.
//
//   - wire_test.go: a fake broker built on proto/pulsar serves a real client over TCP:
//     handshake, partitioned metadata, lookup, producer, SEND (decoded and checksum-verified
//     by our codec, batched, unbatched and compressed), and delivery of MESSAGE frames that
//     our codec encodes (with and without broker entry metadata) to a real consumer.
//
//   - End-to-end tests of the broker (cluster_test.go starts, per test, a namespace in one
//     shared embedded etcd, a real bookie and a broker in the test process, over real TCP):
//     produce_test.go (10,000 batched messages in order with cumulative acks),
//     subscriptions_test.go (Exclusive, Failover switch and active-consumer events, Shared
//     spreading, Key_Shared per-key order under consumer churn, nack and redelivery count),
//     features_test.go (seek by id and time, readers, GetLastMessageId with batches,
//     unsubscribe, terminate, delayed delivery, access modes, batch-index acks, the
//     dead-letter producer's initial subscription), schema_test.go, topics_test.go
//     (partitioned topics, regex subscriptions, also over a namespace that does not exist),
//     protocol_test.go (keep-alive, auto-creation off, ack responses), durability_test.go
//     (dedup across a producer reconnect through proxy_test.go's TCP proxy, broker restart
//     mid-stream, bad frames close only their connection) and standalone_test.go (the built
//     binary survives kill -9 with every acknowledged message).
//
// # Clusters
//
// A test starts its cluster in one of two ways, each in its own metadata namespace of the
// shared etcd:
//
//   - newCluster (cluster_test.go): one bookie (or in-memory logs, clusterOpts.memLog) and one
//     broker, optionally serving the admin REST API over HTTP (clusterOpts.admin); the
//     security, policy, transaction and compaction tests set its options.
//   - newMultiBroker (multibroker_test.go): one bookie and n brokers, each with its admin API
//     on its own port, in the test process or as child processes (mbOpts.children, for
//     kill -9); the proxy tests put proxies in front of one (startProxy, mbOpts.relayed);
//     mbOpts.secure makes the brokers (in process) TLS-only with an authenticated admin API,
//     as TestSecureMultiBroker (security_multibroker_test.go) runs every inter-broker call.
//
// Brokers and bookies that restart on their address listen on ports reserved for the test
// (itest.FreeAddr), which nothing else on the machine can take in between.
//
// MAGNETAR_TEST_LOG=info|debug prints the broker's logs (debug also the client's).
package interop
