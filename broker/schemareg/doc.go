// Package schemareg is the broker's schema registry: it keeps the schema versions of
// topics in the metadata store, decides under each topic's policy whether a producer's,
// consumer's or admin's schema becomes a new version (the rules are package broker/schema),
// and answers the schema calls of the protocol server and the admin API. It does not
// import package broker: the store and the policy records come through the small Store
// and Policies interfaces below, which the broker root implements.
//
// # Usage
//
//	r := schemareg.New(schemareg.Config{Store: store, Policies: pols,
//		DefaultStrategy: "FULL", ValidationEnforced: false})
//	version, err := r.Offer(ctx, topic, sc, schemareg.Produce) // PRODUCER's schema
//	info, err := r.Schema(ctx, "tenant/ns/t", -1)               // the latest version
//
// # Records and rules
//
// Versions are stored per base topic at metadata.SchemaKey (partitions share their
// partitioned topic's schemas) as JSON records (Record); a deletion is a version of its
// own (Deleted set), as in Pulsar, unless forced, which removes every version so that
// versions start again at 0. The live versions are those after the last deletion. On the
// wire a version is an 8-byte big-endian integer (EncodeVersion).
//
// A schema that is not live yet (schema.Same: Avro definitions compared parsed) is
// validated and checked against the live versions under the topic's strategy before it
// becomes the next version, written with a create-only put (a concurrent registration of
// the same version makes the loser look again). The strategy is the topic policy's
// (policy.Record.SchemaStrategy), else the namespace's schema_compatibility_strategy, else
// its older schema_auto_update_compatibility_strategy, else Config.DefaultStrategy, else
// FULL. A consumer's new schema on a topic with schemas is only checked
// (schema.CheckConsumer), never registered; with is_allow_auto_update_schema off,
// producers and consumers cannot register new ones (the admin API can); with schema
// validation enforced (namespace, else Config.ValidationEnforced), producers without a
// schema are refused on a topic with one. Refusals wrap api.ErrIncompatibleSchema or
// api.ErrInvalidSchema.
//
// # Concurrency
//
// A Registry is safe for concurrent use and starts no goroutines; its cache of versions
// (per topic, refreshed from the store on admin reads and on conflicts) is guarded by a
// leaf mutex.
package schemareg
