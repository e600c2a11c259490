// Package scalable is the controller of scalable topics (upstream PIP-460/468/483):
// per topic, one leader among the brokers runs a Core that changes the layout (split, merge,
// subscribe), assigns segments to stream consumers (the subscription coordinator) and
// garbage-collects sealed segments. The model — the DAG of segments and its record — is
// package layout.
//
// # Usage
//
// Core does no I/O, reads no clock and is not safe for concurrent use. The owner (one
// goroutine per topic on the leader, see Controller) calls an input and then performs Ready:
//
//	c := scalable.New(scalable.Config{Topic: t, Term: term, RetentionMs: ..., TickMs: 1000}, scalable.Mutation{}, now)
//	perform(c.Ready()) // Reload: read the record, then c.Load(l, version)
//	tag := c.Split(seg, 0)
//	perform(c.Ready()) // Write, Creates, Seals, ..., Results{tag}
//
// The owner's obligations:
//  1. Perform every item of every Ready and report each outcome with its tag: Written for
//     Write (a refused or unknown compare-and-swap is an error: the core reloads), Done for
//     Create, Seal, Delete, Fence and Reset, Checked for Check; Load after Reload.
//  2. Feed every change of the record seen by a watch with Watched, and Tick at TimerAt.
//  3. Effects are idempotent and may be retried under new tags; they carry the leader's
//     term, and a segment's broker must refuse a Check, Fence or Reset of an older term than
//     one it has seen for the segment (so a deposed leader's seek cannot land after a new
//     leader found the segment drained).
//  4. A stream consumer attaches exclusively to the segments of the newest Assignment it got
//     (versions increase across terms), with that version; a broker refuses an attach older
//     than the segment's fence and detaches a consumer that a Fence makes stale.
//  5. Producers route a key's hash to the active segment of the newest layout (Ready.Layout)
//     and re-route after TopicTerminated once a newer layout arrives.
//  6. Stop the core when leadership is lost; a new leader starts a new Core with a higher
//     term, which completes any operation the record has pending.
//
// # Operations
//
// A split or merge is recorded in the record first (layout.Op, the intent, with the
// children's ids and ranges), then: create the children with a cursor at the earliest for
// every subscription; seal (terminate) the parents; commit the whole record by
// compare-and-swap (parents sealed, children active, epoch + 1); publish the layout. A crash
// at any step leaves either no intent (nothing happened but maybe orphan child topics, never
// in the layout) or the intent, which the next leader completes from its first step (every
// step is idempotent). Parent and child are never both writable: the children become active
// only after the parents are terminated, and producers learn them from the committed layout.
// A subscribe is the same with a cursor on every segment and no seal. Admin requests and the
// auto-scale policy (Decide: split on message rate, bandwidth or consumer count, merge cold
// neighbours; cooldowns, minimum and maximum segments, maximum merge depth) queue
// operations, run one at a time.
//
// # Subscriptions
//
// For each subscription the coordinator keeps the sealed segments known drained (polled with
// Check; in memory: a new leader starts empty, which only delays assignments) and deals the
// assignable segments round-robin over the consumers in name order, segments in hash order
// (ComputeAssignment: any leader computes the same). A segment, sealed or active, is
// assignable when it is not drained and every ancestor still in the layout is drained — all
// ancestors, not just the direct parents (S2). A Seek takes the segment out of the drained
// set, recomputes (its descendants drop out), fences the descendants at the new assignment
// version, and only then resets the cursor; no drain check of the segment runs meanwhile.
// Queue consumers attach to every segment (QueueSegments) without order.
//
// # Garbage collection
//
// At each Tick with nothing pending, the sealed segments past RetentionMs since their seal,
// with no parent left in the layout (S3: ancestors first, one generation per write) and
// drained by every subscription are pruned in one compare-and-swap (the point of no return;
// they move to the record's Deleting list); their topics are deleted after, and dropped from
// Deleting at the next write, so a crash in between loses no deletion.
//
// # Goroutines
//
// Core starts none. A Controller (driver.go: the driver over metadata.Store, leader election
// through the ephemeral key metadata.ScalableControllerKey, the record at
// metadata.ScalableLayoutKey) runs one goroutine per topic: it campaigns and, while it leads,
// owns that term's Core; while leading it also runs a watch of the record and one goroutine
// per effect in flight, which only perform I/O and hand the outcome back to the owner.
// Close cancels them all and waits.
//
// # Invariants (DESIGN.md S1–S3)
//
// Checked by the seeded simulation (sim_test.go, TestSim, 2,000 seeds in CI; each checker is
// shown to fail by TestSimCatchesMutations; the upstream cases apache/pulsar#26842 and
// #26850 are named tests in scenario_test.go, a seek racing a drain check of its segment is
// TestScenarioSeekRacesDrainCheck in scenario_seekdrain_test.go): at every change of the record S1 and the DAG's structure (Validate), S3
// and "pruned only when drained by every subscription", children active only after their
// parents are terminated, a cursor of every subscription on every segment; at every append
// no segment is written after a descendant; at every read of a stream subscription S2 and
// per-key order (no older message of the key unread on any segment of the layout); at the
// end every acknowledged message consumed by every subscription, nothing pending and every
// sealed segment pruned and deleted.
//
// # The broker, the protocol and the client (broker/scalablehost, admin/scalable.go, pulsarclient/scalable.go)
//
// Every broker runs a Controller for every scalable topic whose layout record exists (a
// watch on metadata.PrefixScalableTopics); one leads. Its Segments are the broker's: Create
// through the topic loader (segment:// topics are persistent topics owned through bundles;
// only their controller creates them, a producer or consumer never auto-creates one) with
// durable cursors at the earliest, Seal as the managed ledger's terminate, Drained as
// "terminated and the subscription's backlog 0", Reset as a reset-cursor; on a segment that
// another broker serves, the leader calls that broker's admin API
// (/admin/v2/scalable/.../segments/<descriptor>/...). Its Listener keeps the assignments for
// the consumers' polls and counts splits, merges, prunes and assignment changes. With an
// auto-scale policy the leader samples its active segments' rates (SampleInterval) into
// Controller.Sample. Calls that need the leader (split, merge, subscribe, stream consumers)
// answer 307 to it from any other broker.
//
// Protocol (broker/server/conn_scalable.go): upstream's scalable-topic commands,
// BaseCommand types 70..78 (proto/pulsar/doc.go says what was checked against upstream),
// served only to clients whose CONNECT set FeatureFlags.supports_scalable_topics; any other
// client (pulsar-client-go v0.19) gets ERROR NotAllowedError for one and is never sent one.
// Any broker serves a DAG watch (SCALABLE_TOPIC_LOOKUP/UPDATE/CLOSE) from the metadata
// store: a watch on the topic's keys pushes the DAG (segments, the brokers serving them, the
// controller's URL) at every change of the layout record or of the controller's election;
// the session dies with the connection or on CLOSE. The segments' broker addresses are
// those of the push (a bundle that moves later is not pushed: clients look segments up as
// for any topic). SCALABLE_TOPIC_SUBSCRIBE registers a
// stream consumer with the controller's leader (here, or forwarded to the leader's admin
// API, as the HTTP calls are redirected) and answers its assignment; the session long-polls
// the leader and pushes SCALABLE_TOPIC_ASSIGNMENT_UPDATE at every newer one, which also
// keeps the consumer alive at the controller; when the connection ends the session reports
// the consumer Disconnected at once if this broker leads (its grace period starts), and
// otherwise its polls stop and the leader reports it after a while; a leader change
// registers it again. The protocol (70..78) has no unsubscribe: a client closing a
// stream consumer unregisters it over the admin API, which ends the broker's session at its
// next poll; if that call fails while the client's connection stays up, the session keeps
// the consumer registered (and its segments assigned) until the connection ends.
// WATCH_SCALABLE_TOPICS answers a snapshot of the namespace's
// scalable topics, then diffs (property filters are refused: topics have no properties).
// The admin API stays for administration (create, delete, layout, split, merge, stats,
// subscriptions) and the consumers' HTTP register and poll remain for other tools.
//
// Client (package pulsarclient): ScalableProducer routes murmur3-32(key) >> 16
// (layout.KeyHash, upstream's ScalableTopicHashing.segmentHash) with layout.FindActive,
// round-robin for unkeyed messages, pipelined (SendAsync, a window of MaxPendingMessages,
// Flush): after TopicTerminated it holds every message for the sealed segment and for the
// segments overlapping it, waits for the pushed layout showing the seal, waits until nothing
// is in flight to the sealed segment, then re-routes its failed and held messages in their
// SendAsync order before any later one, so a key's messages keep their SendAsync order
// across splits and merges (pulsarclient's TestScalableProducerSealInFlight, a seal timed by
// the test, catches a re-route that does not wait for the in-flight messages, one that puts
// the held messages before the failed ones and one that lets the children's messages go
// while the parent is unresolved; admin's TestScalableTopicPipelinedSplit under real
// brokers). A stream consumer attaches
// Exclusive to each assigned segment (detaching the others first); a queue consumer attaches
// Shared to every segment of the layout. Admin: create, delete, list, layout, split,
// merge, stats, subscriptions, seek (docs/TOOLS.md; `magnetar admin scalable-topics`).
//
// Seek (admin: POST .../subscription/<sub>/seek?segment=ID&earliest|ledger=L&entry=E;
// `magnetar admin scalable-topics seek|reset-cursor`): the leader's Controller.Seek. The
// broker keeps, per segment it serves, the highest controller term seen by a Fence or Reset
// (an older one is refused) and, per subscription, the fence: Fence raises it and detaches
// the consumers holding an older assignment; a stream consumer names its newest assignment
// version in its subscribe's metadata (layout.AssignmentMetadataKey, at every reconnect) and
// the broker refuses an attach below the fence (checked once attached, so a concurrent fence
// either detaches it or is seen). The drained marks are not persisted: a new leader
// recomputes them with Check from the cursors, so a rewound segment (backlog > 0) keeps its
// descendants blocked across a failover (admin's TestScalableSeekSurvivesLeaderFailover); a seek in progress at a failover fails (the caller
// retries it). The fence marks are in memory on the broker serving the segment: a segment
// that moves loses them, which leaves only a consumer that has not polled its new
// assignment yet able to reattach in that window.
//
// Not built: the Check term high-water mark (a deposed leader's drain check is not refused),
// a seek by publish time (the seek takes a message id of the segment), persisted consumer
// sessions, and the entry-bucket scheme (PIP-486).
//
// Replay a failing seed with `go test ./scalable -run 'TestSim$' -seed S -v`; a long run:
// `go test ./scalable -run 'TestSim$' -seeds 1000000 -timeout 0`. Seeds 1–59,999 pass; among
// them seed 5,675 drives a seek whose fence is below an earlier leader's assignment versions,
// and seed 58,581 a consumer's disconnect seen after its reconnect.
package scalable
