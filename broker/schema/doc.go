// Package schema holds the pure parts of Magnetar's schema registry: the schema types as
// Pulsar clients send them, the compatibility strategies, validation of schema definitions
// and the compatibility checks, following Pulsar's SchemaRegistryServiceImpl and its
// per-type checks. It does no I/O: the registry (package broker, schema.go) stores the
// versions in the metadata store and calls Validate and Check before it adds one.
//
// # Rules
//
//   - A definition is Validated before it is stored: AVRO, JSON and PROTOBUF definitions must
//     be Avro schemas (JSON also accepts a JSON-Schema document, as old Java clients sent);
//     KEY_VALUE definitions must decode into a valid key and value definition; the other
//     types are taken as they are. A bad definition wraps ErrInvalid.
//   - Check(existing, next, strategy) decides whether next may become a new version after
//     existing (oldest first, only the versions after the last deletion). ALWAYS_COMPATIBLE
//     accepts everything; ALWAYS_INCOMPATIBLE refuses every new schema once one exists; a
//     schema of another type than an existing one is refused; AVRO, JSON (Avro form) and
//     PROTOBUF use Avro schema resolution (BACKWARD: next reads data written with the
//     latest existing, FORWARD: the latest existing reads data written with next, FULL:
//     both; the _TRANSITIVE forms check every existing version); KEY_VALUE checks its key
//     and value parts; every other type is compatible unless the strategy is
//     ALWAYS_INCOMPATIBLE. A refusal wraps ErrIncompatible.
//   - CheckConsumer is the check of a consumer's schema on a topic that has schemas: BACKWARD
//     against the latest for the non-transitive strategies and FORWARD_TRANSITIVE, the
//     strategy itself against every version for the other transitive ones (as Pulsar's
//     checkConsumerCompatibility).
//
// Avro definitions are parsed with github.com/hamba/avro/v2, each with its own name cache,
// so the definitions of different topics never see each other's named types.
//
// # Concurrency
//
// Every function is safe for concurrent use; the package starts no goroutines.
package schema
