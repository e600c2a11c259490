// Package pendingack is a subscription's pending acknowledgements (designed against
// upstream's pending-ack replay bug, apache/pulsar#26374): transactional acks lock their
// positions (whole entries, or messages of a batch entry by bits) until their transaction
// ends; each is durable in the subscription's pending-ack log (a managed ledger of Records,
// group-committed) before it is answered; a commit applies the acks to the subscription's
// cursor durably, an abort hands the messages back; the log is replayed when the
// subscription loads.
//
// # Usage
//
// Core does no I/O, reads no clock and is not safe for concurrent use: the subscription's
// goroutine owns it (broker/topic's pendingAcks), calls an input and performs Ready:
//
//   - OpenLog: open (Create: create) the log and its cursor; for a replay report the
//     transactions with a pending-ack record with Recorded, then LogOpened with the
//     position after the cursor's mark-delete;
//   - ReadLog: read from From and report with LogRead; the core classifies the failures of
//     both (Permanent: the log or its data is gone or unreadable), so the owner passes them
//     on unchanged, with the time it saw them (the backoff starts then);
//   - Registers: put the transaction's record, then read its header; if it is not OPEN or
//     does not list the subscription, delete the record again and report rejected;
//   - Appends: append to the log (Appended); Awaits: report each outcome with Ended (0:
//     the header is gone, treated as aborted); Applies: acknowledge on the cursor and flush
//     it (commit) or redeliver (abort), then Applied; Deletes: delete the record (Deleted);
//   - report the coordinator's notice that a transaction ended with EndedNotice; Drops:
//     delete each record, in the background (the core drops only the record of a
//     transaction it holds nothing of: one being applied keeps its record until Deletes);
//   - Trim: mark-delete the log up to it; Replies: answer the acks; StateChanged: answer
//     the subscribes waiting for the handle; Tick at TimerAt.
//
// Plain acks are checked with CheckPlain (consumers attach only once the handle is ready).
//
// # Invariants (DESIGN.md T5, and the locks)
//
// Checked after every step by the seeded simulation (sim_test.go, TestSim; each checker is
// shown to fail by TestSimCatchesMutations with a Mutation; the two scenarios of upstream's
// bug report are named tests in scenario_test.go):
//
//   - a position locked by a live transaction is never acknowledged by another
//     transaction or a plain ack, also across reloads (a replay locks in log order);
//   - an ack is answered exactly once, and only once it is durable; an ack whose record
//     failed is neither locked nor applied;
//   - a committed transaction's acks are applied to the cursor, all of them, before its
//     commit marker, and not again once the marker is durable; an aborted one's are never
//     applied and its positions are free once the abort is applied;
//   - T5: a failed read or open ends the replay attempt; a transient failure retries after
//     RetryDelay (from the failure's time: no attempt within 100 ms of a failed one, at most
//     10 a second) and recovers once the fault stops; a permanent one fails the handle at
//     once with an error naming the cause, and the subscribes waiting fail with it;
//   - Trim never passes an ack record of a transaction whose marker is not durable;
//   - an ended notice never drops the record of a transaction being applied (its header
//     would be collected, and a replay after a crash would take the commit for an abort);
//   - with the faults stopped and a last reload, nothing is left: no lock, no
//     transaction, no pending-ack record (a record a crash left without a durable ack is
//     deleted after the next replay, so the coordinator can collect the header).
//
// The simulation's log completes appends in order after seeded delays and fails some; reads
// and opens fail transiently (some after a timeout of up to 3 s) or during a bookie outage,
// or permanently once a ledger of the log is deleted (reads) or the whole log is (opens);
// the store fails record writes; cursor flushes fail; outcomes and the coordinator's ended
// notices arrive late, in either order; the subscription crashes and a new core replays the
// log while writes of the crashed one may still land.
//
// The owner's performance of Ready (broker/topic's pendingacks.go) has its own tests on
// fakes, broker/topic's pendingacks_test.go: the replay's backoff measured from a slow
// failure, a deleted log or ledger failing the subscribe at once, and ended notices
// before and during an apply.
//
// Replay a failing seed with `go test ./broker/topic/pendingack -run 'TestSim$' -seed S
// -v`; a long run: `go test ./broker/topic/pendingack -run 'TestSim$' -seeds 1000000
// -timeout 0`.
package pendingack
