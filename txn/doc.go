// Package txn is Pulsar's transaction coordinator on the metadata store: transaction ids
// (ID: the coordinator's index in Most, a sequence number in Least), the header record of
// each transaction (Header, at metadata.TxnHeaderKey) whose one compare-and-swap from OPEN
// to COMMITTED or ABORTED is the transaction's linearization point, the coordinator that
// creates, extends, ends, times out and garbage-collects headers, and the Tracker that tells
// a broker's participants (transaction buffers, pending acknowledgements) how their
// transactions ended.
//
// # Structure and goroutines
//
//   - Core (coordinator.go) is one coordinator as a sans-I/O state machine: requests
//     (NewTxn, AddPartitions, AddSubscriptions, End), time (Tick) and completions
//     (WriteDone, GetDone, Checked) go in; what to do comes out in Ready (compare-and-swap
//     writes, reloads, participant checks, replies, the next timer). It reads no clock,
//     does no I/O and is not safe for concurrent use. Every header change is a CAS on the
//     version the core last read; a failed or refused write reloads the header before the
//     operation is judged again. Sequence numbers are reserved in blocks by a CAS on the
//     sequence record before any is handed out. NEW_TXN is answered from memory; the first
//     add creates the header, with the records of the participants it adds, in one commit
//     guarded by the epoch record (metadata.TxnEpochKey, bumped by every load); a header is
//     collected by one commit that requires its participants' records gone.
//   - Coordinator (service.go) owns a Core on one goroutine (run): requests and completions
//     are posted to its inbox; each store operation runs on a goroutine of its own and posts
//     its outcome back; replies run on the coordinator goroutine (done must not block).
//     StartCoordinator bumps the epoch record, then loads the sequence record and the
//     coordinator's headers. Writes go out by group commit: one commit in flight, the
//     writes queued meanwhile together in the next; collections of one Ready share
//     commits too. A shared commit refused for a version is retried write by write, so
//     each write gets the outcome it would have had alone.
//   - Tracker (tracker.go) watches every header on its own goroutine; Await callbacks run on
//     tracker goroutines and must not block. A coordinator of the same broker tells it of
//     each END it decided before replying (CoordinatorConfig.OnDecided, Tracker.Decided),
//     so the broker's own participants refuse a send or ack the client makes after the
//     reply; a participant on another broker learns it from the watch, milliseconds later
//     (a raw-protocol send in that window joins the transaction; pulsar-client-go refuses
//     sends and acks on an ended transaction itself).
//
// # Invariants
//
// Checked by the seeded simulation of the Core (sim_test.go, TestSim; each checker is shown
// to fail by TestSimCatchesMutations with a CoreMutation):
//
//   - a header is created OPEN once (a sequence number is never reused, also across
//     reloads and for creates reported failed), then changes only OPEN→OPEN (participants
//     added, none lost) and once OPEN→COMMITTED or OPEN→ABORTED;
//   - a participant that finds the header OPEN and listing it finds its record (T3);
//   - a success reply to a commit or abort means the stored header has that status, until
//     garbage collection deletes it, which happens only once it has ended and no
//     participant record of it remains; a second end answers TransactionNotFound;
//   - every request is answered exactly once (a closed core answers ErrNotReady);
//   - the open count exceeds MaxActive only by what a load found;
//   - with the faults stopped, every open transaction past its deadline is aborted and
//     every ended one is garbage-collected; the timer never fires in a loop.
//
// The simulation's store delays, reorders and fails writes, applies some and reports them
// failed, fails reads and participant checks, and crashes the coordinator (a new Core is
// loaded from the store) while the crashed one's writes may still land; its creates are
// refused by the epoch fence once the new one has loaded.
//
// Replay a failing seed with `go test ./txn -run 'TestSim$' -seed S -v`; a long run:
// `go test ./txn -run 'TestSim$' -seeds 1000000 -timeout 0`.
package txn
