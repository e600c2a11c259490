// Package scalablehost is the broker's part of scalable topics (package scalable): it runs
// a scalable.Controller for every scalable topic, performs the leaders' effects on the
// segment topics, keeps the stream consumers' assignments, and answers the scalable-topic
// calls of the admin API and of the protocol server. It sees the broker only through the
// small interfaces of deps.go (Broker, Segments, Topic, Peers), which the root package
// broker implements (broker/scalable.go); it imports neither the root nor broker/server.
//
// # Usage
//
//	h := scalablehost.New(brokerCtx, cfg, scalablehost.Env{Store: store, SessionTTL: ttl,
//		Registry: reg, Logger: log, Broker: b, Segments: b, Peers: peerClient})
//	defer h.Close()                       // resigns the leaderships
//	err := h.CreateScalableTopic(ctx, "topic://public/default/t", 4)
//	err = h.SplitScalableSegment(ctx, "topic://public/default/t", 0, 0)
//
// Caller obligations:
//  1. Env.Broker.ID is known before New (it is the value of the controller records this
//     broker wins); Env.Store stays open until Close returns.
//  2. Segments' methods act on this broker only and answer *api.NotOwnerError when another
//     broker serves the topic: the host then sends the operation to that broker's admin
//     API (/admin/v2/scalable/.../segments/<descriptor>/<op>), which must call the host's
//     Segment* method there.
//  3. The protocol server calls CheckAttach once a consumer is attached to a segment topic
//     (so that a fence raised concurrently either sees the consumer or is seen by it).
//
// # What it owns
//
//   - The records under metadata.PrefixScalableTopics: each topic's layout record (package
//     scalable writes it: CreateTopic and the controllers' commits; the host reads, lists
//     and deletes it, records.go) and its controller record (the leader's id, an ephemeral
//     election key; read here to name the leader). Nothing else in the broker reads them.
//   - One controller per layout record (host.go), started and stopped by the watch of the
//     records. The leader's effects (segmentEffects: create, seal, delete, drained, fence,
//     reset) run here when this broker serves the segment (Segments) and otherwise on the
//     segment's owner through Peers (onOwner).
//   - The leader's view for its stream consumers: the newest assignment of each consumer
//     (listener.Assignment) and when it last polled; RegisterStreamConsumer,
//     StreamAssignment (a long poll) and UnregisterStreamConsumer, and for the protocol
//     server RegisterStream and PollAssignment, which go to the leader through Peers when it
//     is another broker. Calls that need the leader answer *api.NotOwnerError naming it.
//   - The segment marks (segments.go), in memory on the broker serving a segment: the
//     highest controller term that acted on it (an older term's Fence or Reset is refused
//     with api.ErrNotAllowed) and per subscription the fence, the lowest assignment version
//     a consumer must hold to attach (CheckAttach).
//   - The metrics magnetar_scalable_{splits,merges,prunes,assignment_changes}_total of the
//     controllers this broker led.
//
// # Goroutines and locking
//
//   - run (one, New to Close): the list-then-watch of the layout records
//     (metadata.Follower); it starts a controller for each record and stops the controller
//     of a deleted one on a goroutine of its own; every tick it reports the stream
//     consumers that stopped polling as disconnected (sweepConsumers).
//   - sample (one, with an enabled auto-scale policy): every SampleInterval the leader's
//     active segments' rates, from their owners, into Controller.Sample.
//   - Each controller's own (package scalable).
//   - WatchScalableTopic and WatchScalableTopics: one goroutine per watch, until its ctx ends.
//
// Close cancels run and sample, waits for them and the stops they started, then closes
// the remaining controllers. Host.mu (leaf) guards the controller table; each topic's mu
// (leaf, never held with Host.mu) guards its assignments, polls and last layout; marks'
// mu is a leaf.
package scalablehost
