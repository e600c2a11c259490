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
//   - wire_test.go: a fake broker built on proto/pulsar serves a real client over TCP:
//     handshake, partitioned metadata, lookup, producer, SEND (decoded and checksum-verified
//     by our codec, batched, unbatched and compressed), and delivery of MESSAGE frames that
//     our codec encodes (with and without broker entry metadata) to a real consumer.
//
// End-to-end tests against the real broker belong here too, as the broker grows.
package interop
