// Package replication is the geo-replicator's state machine: the replication of one local
// topic (one partition) to one remote cluster, as Pulsar's PersistentReplicator does it, as
// a sans-I/O core (Core). It owns the remote producer's epochs, the window of entries read
// from the durable replication cursor (pulsar.repl.<remote>, CursorName), which of them are
// replicated (Classify), their sends with the original producer's dedup identity, their
// receipts, the cursor's mark-delete position, the rewinds after a remote failure, the
// admin's cursor resets and the replicator dispatch rate. It imports nothing of the broker
// or the storage and does no I/O: the broker drives it from one goroutine.
//
// # Usage
//
// The Core does no I/O, reads no clock and starts no goroutine. The owner (one goroutine per
// replicator, in the broker) calls an input and then performs Ready:
//
//	c := replication.New(replication.Config{LocalCluster: "east", RemoteCluster: "west"}, replication.Position(cursor.MarkDelete()))
//	c.Start(nowMs)
//	r := c.Ready() // r.Connect: create the producer ProducerName("east", "west") on west for r.Connect.Epoch
//	...            // the producer connected, on the owner goroutine:
//	c.ProducerConnected(epoch)
//	r = c.Ready() // r.Read: read up to r.Read.N entries after r.Read.After
//	err := c.ReadDone(r.Read.Tag, entries, nil) // an error: the read broke obligation 4 (log it)
//	r = c.Ready() // r.Sends: publish each on west; r.MarkDelete: filtered entries at the head
//	c.SendAcked(send.Ticket, dup)
//	r = c.Ready() // r.MarkDelete: persist the cursor's mark-delete position
//
// The owner's obligations:
//
//  1. Call every method from one goroutine; after each input perform the whole Ready in the
//     order its doc gives (close producers, connect, sends in order, then the cursor's
//     calls: cancel the read, the mark-delete write, the reset, the read), and arm a timer
//     for TimerAt that calls Tick. With a dispatch rate or a message TTL, tell the core the
//     time (SetTime) before each input.
//  2. Answer every Connect (ProducerConnected or ConnectFailed), Read (ReadDone), MarkDelete
//     (MarkDeleteDone) and CursorReset (ResetDone) exactly once with the epoch or tag it
//     carried, and every Send with SendAcked or SendFailed and its Ticket — or, when the
//     producer's connection is lost, Disconnected for its epoch. Answers of an older epoch
//     or tag are ignored by the core, so the owner need not filter them.
//  3. Publish the Sends of one epoch in order on that epoch's producer, one producer per
//     epoch; close the producer of every epoch in CloseProducer, also one whose connect is
//     still on its way (when it connects, the core asks again). After Close, close every
//     producer the replicator created.
//  4. Apply the cursor's calls in the order given, on the managed ledger's one owner: a
//     mark-delete write issued before a reset lands before it. A Read returns entries in log
//     order, the first one right after Read.After, and waits for one when there is none
//     (until a CancelRead of its tag). Reads go back only to the position given to New (a
//     durable cursor opened there reads from it) and after a reset (to the reset's
//     position): an owner whose cursor keeps its own read position seeks it when
//     Read.After is not the last entry it returned.
//  5. Give the core, at New, the replication cursor's persisted mark-delete position: the
//     core keeps nothing else across a crash, an unload or a transfer.
//
// The remote side's contract (what the receiving broker must do for a replicator producer,
// whose name starts with "pulsar.repl."):
//
//  1. Deduplicate on the original producer name and sequence id of each message (Pulsar's
//     MessageDeduplication for replicator producers): a sequence id at or below the highest
//     stored for that name is answered as a duplicate and not stored again; markers are not
//     deduplicated.
//  2. Take a producer's sends in order, and end the producer's session at the first send it
//     refuses: no later send of that session is stored. Pulsar's client keeps its connection
//     open after a NotAllowedError or a checksum error on a corrupted buffer and its broker
//     stores the pipelined sends behind the refused one, so the rewound head is then
//     dropped as a duplicate and lost (apache/pulsar#26113); no replicator can pipeline
//     sends safely without this rule, and the core ends its epoch on any refusal
//     (TestSimRefusalMustEndTheSession shows the loss with a remote that breaks it).
//  3. Accept a producer of the replicator's name only while no other is open (ProducerBusy
//     otherwise), so that two sessions' sends never interleave.
//
// # States
//
//	Stopped ──Start──▶ Connecting ──ProducerConnected──▶ Replicating
//	                      ▲   ▲                              │
//	                      │   └── SendFailed, Disconnected ──┘ (the window is rewound)
//	                      │
//	  Reset from Connecting or Replicating ──▶ Resetting ──ResetDone──▶ Connecting or Replicating
//	  Close from any state ──▶ Closed (final)
//
// Connecting: no usable producer; a Connect is outstanding (abandoned after
// ConnectTimeoutMs) or waits for its backoff (100 ms doubling to 60 s). Replicating: reads,
// filters and sends, as the window and the dispatch rate allow. A refused send or a lost
// connection ends the producer's epoch: the producer is closed, every send of the window
// without a receipt is queued again (a rewind in memory: the window keeps the entries, so
// nothing is re-read and no read can race the rewind, apache/pulsar#26106 and #21965), and
// the core reconnects under a new epoch and re-sends them first, in order, with the same
// identity. Resetting: an admin reset moves the cursor; the window is dropped (receipts of
// its sends match nothing any more), the read in flight cancelled, and reading starts again
// after the reset's position. Closed: the topic unloads or closes; the producer is closed
// and the mark-delete position written a last time.
//
// What is sent: Classify, in Pulsar's order. Corrupt entries, transaction markers and
// aborted transactions' messages, markers other than the replicated subscriptions' request,
// response and update (and those only with ReplicatedSubscriptions on; a snapshot marker
// never leaves its cluster), messages with replicated_from (they came from another
// cluster: never replicated again, so clusters form a full mesh), messages whose
// replicate_to does not name the remote cluster, and, with a message TTL, messages read
// past it, are acknowledged on the cursor without being sent. A Send carries the original producer name, sequence id and highest sequence
// id, replicated_from = the local cluster, and the remote producer's name is
// pulsar.repl.<local>--><remote> (ProducerName).
//
// # Invariants
//
// The DESIGN's geo-replication rules R1 and R2, and the core's own, checked after every step
// by the seeded simulation (sim_test.go, TestSim) unless said otherwise; each is shown to
// fail by a mutation in TestSimCatchesMutations:
//
//   - R1 every entry of the local topic that is replicated (Classify) and not skipped by a
//     forward reset is stored on the remote cluster exactly once, with its original identity
//     and replicated_from, in per-producer order (mutations: a re-send without its dedup
//     identity; the in-flight window lost on a reconnect; a receipt of an old epoch
//     accepted; a read issued before a reset accepted);
//   - R2 nothing filtered reaches the remote cluster: no message replicated from elsewhere,
//     none whose replicate_to excludes it, no marker that does not travel (mutations: a
//     replicated_from message replicated back; markers replicated as data,
//     apache/pulsar#24453);
//   - R4 the cursor's mark-delete position, in memory and persisted, never passes an entry
//     that is neither on the remote cluster nor filtered (nor skipped by a forward reset);
//     ahead of it, the core counts an entry as acknowledged only if the remote has it, and
//     its window has no hole (mutations: the cursor advanced on a failed send; a receipt of
//     an old epoch accepted; a read issued before a reset accepted);
//   - R5 the window — entries read and not passed by the mark-delete position, among them
//     the sends in flight — holds at most MaxPending entries, whatever the backlog
//     (mutation: reads past the window);
//   - R6 an answer of an older producer epoch, read or reset tag is ignored (mutations: a
//     receipt of an old epoch accepted; a read issued before a reset accepted);
//   - R7 liveness, checked at the end of every seed once the faults stop: the remote
//     cluster has every replicated entry and the persisted mark-delete position is at the
//     log's end, without any outside help (mutations: no reconnect after a failed connect,
//     apache/pulsar#25097 and #26002; a producer of an abandoned epoch left open, so the
//     remote refuses every later one as busy, apache/pulsar#5104; the in-flight window lost
//     on a reconnect);
//   - R8 a read is issued only while the replicator dispatch rate has budget left (mutation:
//     reads past the dispatch rate);
//   - R9 an entry read past the namespace's message TTL is not sent (it is acknowledged, as
//     Pulsar's replicator expires it) (mutation: entries past the message TTL sent).
//
// The replicated subscriptions' protocol that these markers carry (snapshots of the
// topic's positions across its clusters, and the subscriptions' updates) is package
// replication/replsub; the owner hands it the markers its remote cluster published as it
// reads them (broker/replhost does).
//
// Limits: markers are sent at least once (the remote does not deduplicate them; a repeated
// snapshot request or update is harmless). An entry skipped by a forward reset may stay
// missing on the remote even after a later backward reset sends it again: the remote's
// deduplication drops a sequence id below one it has stored.
//
// # Goroutines
//
// None. Core is not safe for concurrent use; its owner is one goroutine.
//
// # Running the simulation
//
// CI runs 200 seeds (the package in about 6 s with the race detector). Replay a failing seed with
// `go test ./replication -run 'TestSim$' -seed S -v`; a long run (about 400 seeds per second
// without the race detector): `go test ./replication -run 'TestSim$' -seeds 200000 -timeout 0`.
package replication
