// Package compaction is Magnetar's topic compaction (Pulsar's compacted topics): the
// latest message of every key of a persistent topic, kept in a compacted log beside it, and
// the cursor wrapper through which ReadCompacted consumers and readers read that view up
// to the compaction horizon and the topic itself after it.
//
// # Compacting
//
// Manager.Trigger reads the current generation (if any) and the topic's entries after its
// horizon up to the topic's last entry, and keeps the latest message per key: an unbatched
// entry keyed by its partition key, each message of a batch by its own; an empty payload
// (or null_value) deletes the key; messages without a key are not kept (Pulsar's default);
// a compressed batch is decompressed (bounded by Config.MaxMessageSize) and split like a
// plain one; encrypted batches, and compressed ones that do not decompress, are kept whole.
// It writes the kept messages as the next generation, one entry per original entry in
// position order (the messages kept of a batch batched again, in their order,
// uncompressed), each framed as
//
//	[8B ledger id][8B entry id][headersAndPayload]
//
// in a log of its own (Config.Open; the broker uses a managed ledger named
// "tenant/ns/compacted/<topic>-<generation>" that keeps its ledgers), and only then records
// the new State (generation, horizon, counts) in the topic's managed-ledger property
// PropState, which is the commit: a crash or error before it leaves the previous
// generation and horizon in force (a leftover generation is deleted by the next attempt).
// The previous generation is deleted after the commit. Status reports NOT_RUN, RUNNING,
// SUCCESS or ERROR (with the error) for the manager's lifetime.
//
// # Reading
//
// WrapCursor wraps a subscription's cursor: while its position is at or before the horizon
// it delivers the view's entries (their original positions, so acknowledgements go to the
// underlying cursor unchanged), then resets the underlying cursor to just after the horizon
// and delivers the topic. A cursor at the first entry the topic still holds starts at the
// beginning of the view, so retention may trim the topic's ledgers below the horizon.
// ReadPositions (redelivery) serves positions up to the horizon from the view. The view of
// the current generation is held in memory once a compacted reader needs it.
//
// # Concurrency
//
// A Manager is safe for concurrent use: a mutex guards its status and view; a compaction
// runs on a goroutine of its own (one at a time), which Close cancels and waits for. A
// wrapped cursor's reads run on its subscription's goroutines; a mutex guards its position.
package compaction
