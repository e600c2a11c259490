// Package txnbuf is a topic's transaction buffer, designed against upstream's
// transaction-buffer bug (apache/pulsar#25821: committed messages filtered after a
// restart): it decides which transactional sends may be appended to the topic, how far
// readers may read (the max read position), and applies each transaction's outcome, with
// its durable state in the metadata store: an open record per transaction that writes to
// the topic, an aborted record per aborted transaction (with its last position, pruned when
// the log is trimmed past it) and a watermark below which every transaction is resolved.
//
// # Usage
//
// Core does no I/O, reads no clock and is not safe for concurrent use: the topic's goroutine
// owns it, calls an input and performs Ready:
//
//   - Load with the durable state (watermark and its version, aborted records, open records,
//     the log's last position); transactions found open are awaited and pin reads at the
//     watermark until their outcome is applied, and take no more entries (ErrRecovered);
//   - Admit each transactional send: Append (hand it to the log, then Appending), Hold (keep
//     it, and the producer's later sends, until Released names the transaction) or Refuse;
//   - Registers: make sure the open record exists (the broker's owner reads the header: the
//     coordinator created the record in the commit that listed the topic), or report
//     Rejected if the header is not OPEN or does not list the topic; report with Registered
//     and fail the held sends with the error it returns (nil: Admit them again);
//   - Added for every add of the topic (plain ones too), in add order;
//   - Awaits: report each transaction's outcome with Ended as the tracker tells it (0: the
//     header is gone); Lookups: read the topic's aborted record of each and report with
//     LookedUp (the core resolves a gone header: aborted if the record exists, else
//     committed; a failed read is retried after a backoff);
//   - Writes: perform each record write (a WriteApply in one store commit) and report it
//     with Written; after a refused watermark compare-and-swap, feed the stored watermark
//     with WatermarkReloaded first;
//   - readers read only entries before MaxRead and skip those whose transaction IsAborted;
//     when both change, publish the aborted set to the readers before the bound;
//   - report the coordinator's notice that a transaction ended with EndedNotice; Drops:
//     delete each open record, in the background (the core drops only the record of a
//     transaction it does not know: a transaction being applied is known until its apply
//     write is durable, since until then that record is what tells a reload to filter its
//     entries);
//   - Trimmed when the log's first entry moves; Tick at TimerAt. Inputs that report a
//     failure take the time it was seen: backoffs start then.
//
// # Invariants (DESIGN.md T1–T4)
//
// Checked after every step by the seeded simulation (sim_test.go, TestSim; each checker is
// shown to fail by TestSimCatchesMutations with a Mutation; the scenarios of upstream's bug
// report are named tests in scenario_test.go):
//
//   - T3 every transactional entry has its durable open record when it is appended;
//   - T2 no reader sees an entry of an aborted or open transaction, and while a transaction
//     found open at load is unresolved nothing at or past the stored watermark is readable;
//   - T4 applies are serialized (one batch's atomic write at a time); the stored watermark never
//     moves back and never passes an entry of an open transaction or of an aborted one
//     whose aborted record is not durable; an aborted record's position covers all of its
//     transaction's entries, and it is pruned only once they are trimmed;
//   - T1 every committed entry is readable after a reload, also once its header is
//     collected ("not in the aborted set" means visible below the watermark).
//
// The simulation's log completes adds in order after seeded delays and fails some; its
// store delays, fails, and applies-then-fails record writes, and fails reads of aborted
// records; outcomes and the coordinator's ended notices arrive late, in either order; the
// topic crashes and reloads while writes of the crashed incarnation may still land. An
// open record such a write puts after the reload is unknown until the next load (the
// simulation reloads once more at the end).
//
// The owner's performance of Ready (broker/topic's txnbuffer.go) has its own tests on
// fakes, broker/topic's txnbuffer_test.go: a gone header resolved by the aborted record, a
// recovered open record pinning the log's read bound, the aborted set published before
// the bound, one store commit per apply, and ended notices during an apply.
//
// Replay a failing seed with `go test ./broker/topic/txnbuf -run 'TestSim$' -seed S -v`; a
// long run: `go test ./broker/topic/txnbuf -run 'TestSim$' -seeds 1000000 -timeout 0`.
package txnbuf
