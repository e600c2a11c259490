// Package scalable is the controller of scalable topics (issue #17, upstream PIP-460/468/483):
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
// # Operations (item 2)
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
// # Subscriptions (item 3)
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
// # Garbage collection (item 4)
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
// shown to fail by TestSimCatchesMutations; seed 004's cases are named tests in
// scenario_test.go): at every change of the record S1 and the DAG's structure (Validate), S3
// and "pruned only when drained by every subscription", children active only after their
// parents are terminated, a cursor of every subscription on every segment; at every append
// no segment is written after a descendant; at every read of a stream subscription S2 and
// per-key order (no older message of the key unread on any segment of the layout); at the
// end every acknowledged message consumed by every subscription, nothing pending and every
// sealed segment pruned and deleted.
//
// # Not built yet (issue #17 items 5–7 and the wiring)
//
// Broker wiring: a broker starts a Controller for every scalable topic whose layout record
// exists (a watch on metadata.PrefixScalableTopics), implements Segments over its topics —
// Create through the topic loader with durable cursors at the earliest, Seal as the managed
// ledger's terminate, Drained as "terminated and the cursor's read position at the end",
// Fence and Reset in the segment topic's subscription with the per-segment term high-water
// mark kept in the cursor's properties — and a Listener that pushes layouts to DAG
// watchers and assignments to registered stream consumers. segment:// names must resolve
// through the ownership/lookup of cluster mode (bundles) like persistent:// ones; producers
// on a sealed segment get TopicTerminated. A consumer session survives a reconnect: Disconnected
// starts its grace period (Config.GraceMs), during which it keeps its assignment, and a
// Register within it restores the session unchanged. Sessions are not persisted for a new
// leader (it learns them as consumers re-register, which may reshuffle assignments once);
// upstream persists them under .../subscriptions/<sub>/consumers/<name> and restarts every
// grace timer on failover.
//
// Protocol (item 5), as far as the reference index shows upstream: BaseCommand types
// SCALABLE_TOPIC_LOOKUP / _UPDATE / _CLOSE (internals.md: 70, 71, 72), with
// CommandScalableTopicLookup{session_id, topic, create_if_missing} and
// CommandScalableTopicClose{session_id}; SCALABLE_TOPIC_SUBSCRIBE / _SUBSCRIBE_RESPONSE
// {request_id, error, message, assignment} / _ASSIGNMENT_UPDATE {consumer_id, assignment},
// ScalableConsumerAssignment{layout_epoch, segments: {segment_id, hash_start, hash_end,
// segment_topic}}, ScalableConsumerType STREAM | CHECKPOINT | QUEUE; WATCH_SCALABLE_TOPICS /
// _UPDATE / _CLOSE for the namespace watch; FeatureFlags.supports_scalable_topics in
// CONNECT gates them all. The field numbers of these messages and of the other types were
// not found and must be taken from upstream's PulsarApi.proto before the wire is built.
// Upstream orders assignments by layout_epoch; this package orders them by Version (term and
// sequence), which also orders two assignments of one epoch (a seek, a drain): the wire
// form must carry it (or an epoch made to move with it).
//
// Client (item 6): a producer routes murmur3-32(key) >> 16 (upstream's
// ScalableTopicHashing.segmentHash) with layout.FindActive, round-robin for unkeyed
// messages, and re-routes after TopicTerminated once the DAG watch brings a newer layout;
// a stream consumer registers and attaches Exclusive to each assigned segment://, sending
// its assignment Version; a queue consumer attaches Shared to QueueSegments. Admin (item 7):
// create (CreateTopic), delete, layout (Layout.Marshal and a tree), split, merge, stats,
// subscriptions over the Controller; metrics for splits, merges, prunes and assignment
// changes are to be counted where Results and Assignments leave the core.
//
// Replay a failing seed with `go test ./scalable -run 'TestSim$' -seed S -v`; a long run:
// `go test ./scalable -run 'TestSim$' -seeds 1000000 -timeout 0`. Session 10 ran seeds
// 1–59,999 (all passing at the end); long runs found two bugs, both fixed: a seek's fence
// below an earlier leader's assignment versions (seed 5,675) and a consumer's disconnect
// seen after its reconnect (seed 58,581).
package scalable
