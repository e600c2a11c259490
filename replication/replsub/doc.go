// Package replsub is geo-replication's replicated subscriptions (Pulsar's PIP-33) as a
// sans-I/O core: a subscription whose consumer asked for it (CommandSubscribe
// replicate_subscription_state, the cursor property pulsar.replicated.subscription) has its
// mark-delete position carried to the topic's other clusters, so a consumer that fails over
// to another cluster resumes near where it left off, and never after a message it has not
// acknowledged.
//
// # How
//
// The clusters exchange marker messages in the topic itself (proto/pulsar/markers.proto;
// entries with marker_type set, never delivered to consumers):
//
//  1. Every FrequencyMs, if data was published since the last completed snapshot started
//     and every replicator of the topic is connected, the Controller writes a snapshot
//     REQUEST (replicated to every cluster).
//  2. A cluster that reads the request (its replicator to the requesting cluster sees it)
//     writes a RESPONSE with its last position L, replicated to the requesting cluster
//     only. Replication keeps the log's order, so when the response arrives, every entry
//     that cluster had up to L is here too, or was published here first.
//  3. When every remote cluster has answered, the controller writes the SNAPSHOT (local
//     only): the position P where the last response arrived, and each cluster's L. With
//     more than one remote cluster a second round of requests is made first (under a new
//     id, see below): a cluster's L may cover entries it got from a third cluster that
//     have not arrived here yet; they have once the second round's responses are here.
//  4. A replicated subscription's dispatcher hands the SNAPSHOT markers it reads to the
//     subscription's Cache. When its mark-delete position reaches a cached snapshot's P,
//     the controller writes an UPDATE (to every cluster) with the clusters' positions.
//  5. A cluster that reads the UPDATE acknowledges the subscription cumulatively at its own
//     entry, creating the subscription at the earliest position first if it has none.
//
// Unlike Pulsar's ReplicatedSubscriptionsSnapshotBuilder, the second round's request
// carries its own snapshot id (the remote clusters only echo it, so this is compatible):
// with the same id, a first-round response that a replicator sends again after a rewind
// (markers are not deduplicated) counts as a second-round answer, and the snapshot can
// then cover a third cluster's entries that have not arrived here.
//
// # Usage
//
//	c := replsub.NewController(replsub.Config{LocalCluster: "east", NewID: uuid})
//	c.SetRemotes([]string{"west"}); c.SetConnected("west", true)
//	c.Start(nowMs)
//	r := c.Ready()           // r.Writes: markers to publish; r.TimerAt: call Tick then
//	c.DataPublished(publishMs) // a data message was published
//	c.MarkerRead("west", pos, markerType, payload, lastPos) // a marker from west, read by the replicator to west
//	c.Written(tag, pos, err) // a marker write completed
//	c.SubscriptionAdvanced("sub", snap) // from the subscription's Cache.Advanced
//	r = c.Ready()            // r.Acks: acknowledge subscriptions (updates from other clusters)
//
// The owner's obligations:
//
//  1. Call every method of a Controller from one goroutine; after each input perform the
//     whole Ready: the marker writes in order on the topic's publish path (producer name
//     MarkerProducer, marker_type, replicate_to as given), each answered with Written; the
//     subscription acknowledgements (SubscriptionAck); a timer for TimerAt calling Tick.
//  2. Give the controller every request, response and update marker that another cluster
//     published and that was replicated here (replicated_from = that cluster), with its
//     position here and the topic's last position (at or after it) — Pulsar's replicators
//     do this for the cluster they replicate to, as they read; again after a restart is
//     fine. Tell it the replicators' connections (SetConnected) and data publishes
//     (DataPublished).
//  3. Keep a Cache per replicated subscription, fed with the SNAPSHOT markers its
//     dispatcher reads (dispatch.Ready.Markers), and call Cache.Advanced whenever the
//     subscription's mark-delete position moves; a snapshot it returns goes to
//     SubscriptionAdvanced.
//  4. Never deliver a marker to a consumer; acknowledge it on the subscription (package
//     broker/topic/dispatch does, B7). Replicate request, response and update markers as
//     data is replicated, with their replicate_to honoured; a SNAPSHOT never leaves its
//     cluster (replication.Classify).
//
// # Invariants
//
// R3 of the project's DESIGN, checked after every step by the seeded simulation
// (sim_test.go, TestSim, two and three clusters) and shown to fail by the mutations of
// TestSimCatchesMutations:
//
//   - R3 in every cluster, every data message at or before a replicated subscription's
//     mark-delete position was acknowledged by its consumer, in whichever cluster it was
//     reading: moving the consumer never skips a message it has not acknowledged
//     (mutations: an UPDATE from a snapshot the subscription's position has not reached;
//     a SNAPSHOT written before the second round's responses; an UPDATE applied at another
//     cluster's entry); no marker is ever delivered to a consumer (mutation: the
//     dispatcher delivers markers);
//   - liveness, at the end of every seed once the faults stop: the consumer's last
//     acknowledgements reach every cluster (a snapshot after its last message becomes an
//     update that every other cluster applies).
//
// Limits, as in Pulsar: only the mark-delete position is carried, not individual
// acknowledgements; a cluster's subscription moves only as far as the newest snapshot the
// other cluster's position passed (so a consumer that fails over sees again what was
// acknowledged after it, within about FrequencyMs plus a round trip); messages a cluster
// never replicates to the other (replicate_to, the message TTL) are not covered.
//
// # Goroutines
//
// None. Controller and Cache are not safe for concurrent use.
//
// # Running the simulation
//
// Replay a failing seed with `go test ./replication/replsub -run 'TestSim$' -seed S -v`; a
// long run: `go test ./replication/replsub -run 'TestSim$' -seeds 100000 -timeout 0`.
package replsub
