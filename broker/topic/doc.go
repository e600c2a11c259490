// Package topic is a loaded persistent topic of the broker: its producers and publish
// pipeline, its subscriptions and their dispatchers, on a managed ledger (the Log port;
// broker/topicreg/mlog.go binds it to package mledger, package topictest to an in-memory log).
//
// # Usage
//
//	t, err := topic.Open(ctx, topic.Config{Name: name, Log: log, Dedup: true})
//	t.AddProducer(p, topic.ProducerCallbacks{Ready: ..., Queued: ..., Failed: ...})
//	p.Publish(topic.Message{SequenceID: 1, HighestSequenceID: 1, NumMessages: 1, Data: entry})
//	t.Subscribe(topic.SubscribeRequest{Consumer: c, Subscription: "s", Durable: true}, done)
//	c.Flow(1000)           // MESSAGEs go to c.Conn.SendMessage
//	c.Ack(ack, done)
//	err = t.Close(ctx)     // unload: clients reconnect
//
// Caller's obligations:
//
//  1. Conn implementations never block (they queue frames for the connection's writer) and
//     are safe for concurrent use.
//  2. The connection bounds its pending publishes: the topic calls Conn.PublishDone exactly
//     once per Publish, when the SEND is answered or dropped.
//  3. A Producer or Consumer is used with one topic, and its exported fields are set before
//     AddProducer or Subscribe and not changed after.
//
// # Goroutines and ownership
//
// Every stateful thing is a sans-I/O core owned by one goroutine, fed by one unbounded event
// queue (internal/inbox) of closures:
//
//   - Topic.step owns the topic core (topicCore, topiccore.go): state, producers and access
//     modes, the topic epoch, deduplication, the publish pipeline, the publish rate (which
//     SENDs are admitted, held and released) and the subscribe-rate windows. API calls,
//     SENDs, policies, subscribes, add and property-write completions, terminate
//     completions and the core's timers arrive as events, with the time where the core
//     decides by it; after each one the goroutine publishes the SENDs the core released,
//     performs the core's Ready (Log.AddAsync, Log.SetProperty, Log.Terminate, frames to
//     the clients, relative dispatch rates to set, timers to arm) and feeds the
//     completions back tagged with what they were issued for (a timer with the time it
//     was asked for); the core drops a stale one.
//     The core is a field of Topic, changed only through its methods. Log I/O runs on
//     helper goroutines that the topic tracks (spawn): the owner waits for them after it
//     stops taking events, and Done, Close and Delete wait for that.
//     The topic's goroutine exists only while the topic is busy (internal/inbox Owner):
//     step runs everything queued; the goroutine waits for more for a moment
//     (inbox.DefaultLinger, 20 ms) and then ends; the next event starts another. Owner
//     runs step never twice at once, each run after the previous one, so step owns the
//     core as a long-lived goroutine would, and every completion still comes back as a
//     tagged event that the core checks against its state. The core's timers are
//     time.AfterFunc that post an event, so an idle topic (no event queued, whatever its
//     timers) has no goroutine and no stack.
//   - Subscription.run owns one subscription: its lifecycle (SubState) and its dispatcher
//     core (package dispatch), which decides every delivery. Flows, acks, redeliveries,
//     seeks, consumer arrivals and departures, cursor read results and timers arrive as
//     events, each told the time first (Core.SetTime); the core decides by it whether the
//     dispatch rates allow a read. The goroutine performs the core's Ready (MESSAGEs,
//     cursor acks, reads, re-reads, resets, a timer) and feeds the results back tagged with
//     the dispatch epoch.
//     Cursor I/O runs on helper goroutines that the subscription tracks: run waits for
//     them before it ends.
//   - Nothing else touches a core. Stats and admin calls are events that reply (call).
//   - Policies (policy.go) are events too: SetPolicies and SetQuotaBlock run on the topic
//     goroutine, which gives them to the topic core and passes the limits on to each
//     subscription's goroutine, whose dispatcher core takes its dispatch rate (SetRate).
//     The topic core asks for its timers (the publish rate's release, the measurement of
//     the publish rate for relative dispatch rates, the timed deduplication snapshots); a
//     timer only posts the core's timerFired to the topic goroutine. The topic dispatch
//     rate is a leaf structure under a mutex (topicDispatch) that the subscriptions'
//     dispatcher cores draw on together (dispatch.Limiter). For a dispatch rate relative to
//     the publish rate (Policies.DispatchRelative, SubDispatchRelative: Pulsar's
//     relativeToPublishRate) the core measures the publish rate every second; the topic
//     goroutine retunes the topic's dispatch buckets and posts the subscriptions' retune to
//     theirs (Core.RetuneRate).
//
// # States
//
// Topic: Active ⇄ Terminating → Terminated; any → Fenced (another broker took the managed
// ledger over) → Closing → Closed (state.go, topicEdges). Subscription: Active → Closing →
// Closed, Active → Deleting → Closed (or back to Active if deleting the cursor failed).
//
// # Invariants
//
// Checked after every step by the seeded simulations, each shown to fail by mutations:
//
//   - B1–B4, B6 (deliveries, acknowledgements, order, permits, seeks) and DR1 (no read of
//     new entries beyond the budget of the subscription's or the topic's dispatch rate):
//     package dispatch, dispatch/sim_test.go TestSim and TestSimCatchesMutations;
//   - B5 (a producer is told it is connected only after its epoch is durable; an older epoch
//     is never accepted after a newer one; a reload never sees an epoch older than one given),
//     receipts in order and exactly once, deduplication across reloads, nothing accepted
//     after termination, P1 (no SEND admitted beyond the publish rate's budget), P2 (held
//     SENDs are released in arrival order and no SEND overtakes them; every held SEND is
//     released in the end), S1 (a subscribe is admitted exactly when its consumer's
//     rate window has room) and the replicator's (every original message stored exactly
//     once, in order per original producer, a duplicate receipt only for a stored one):
//     topiccore_sim_test.go TestSim and TestSimCatchesMutations.
//
// Replay a failing seed with `go test ./broker/topic -run 'TestSim$' -seed S -v` (or
// ./broker/topic/dispatch); long runs: `-seeds 1000000 -timeout 0`.
//
// # The data path as clients see it (with packages broker/server, broker/schemareg, broker/topicreg)
//
//   - A SEND_RECEIPT is sent only after the managed ledger acknowledged the entry (AQ bookies
//     fsynced it); receipts of one producer go out in sequence order (adds complete in order).
//   - Deduplication (on by default; Config.DisableDeduplication or the namespace policy turn
//     it off) follows Pulsar: per producer name, a SEND whose sequence id is at most the
//     highest stored is answered at once (message id -1:-1) and not stored; one whose original
//     is still in flight is answered with the original's position when it is stored. The
//     highest stored ids are snapshotted in the managed ledger's properties every
//     DeduplicationSnapshotInterval entries and on unload; loading replays the entries after
//     the snapshot.
//   - Geo-replication, the receiving side (replicated.go): another cluster's replicator
//     publishes with a producer named "pulsar.repl.<from>--><to>"; its messages are
//     deduplicated on their original producer name and sequence ids (from their metadata,
//     as Pulsar's MessageDeduplication does for replicator producers), markers not at all;
//     its session ends at the first SEND refused (SEND_ERROR, then CLOSE_PRODUCER), so no
//     later SEND of it is stored ahead of the refused one (apache/pulsar#26113); a second
//     producer of its name while one is open gets ProducerBusy; it is exempt from max
//     producers. topiccore_sim_test.go runs such a replicator (replicated_sim_test.go) with
//     two mutations of these rules.
//   - Backpressure: a connection stops reading once MaxPendingPublishPerConnection of its
//     SENDs are in flight, and a topic admits at most MaxPendingPublishBytesPerTopic bytes in
//     flight (topic.AcquirePublish), so a slow disk slows producers down.
//   - Permits count messages; a consumer gets an entry only while it has permits.
//   - Every unacknowledged entry of a consumer that goes away (or asks for redelivery) is
//     redelivered, before newer entries, with a higher redelivery count.
//   - Key_Shared (AUTO_SPLIT or STICKY ranges over murmur3(key) % 65536): a key's entries
//     reach consumers in order, also under consumer churn: an entry waits while an older
//     entry of its key waits for redelivery, and a key moves to a new consumer only once its
//     previous consumer acknowledged what it got of it.
//   - Delayed delivery (deliver_at_time) is honoured on Shared and Key_Shared subscriptions.
//   - Terminate seals the managed ledger and disconnects the producers, which reconnect and
//     are refused with TopicTerminatedError.
//   - Schemas (package broker/schemareg, rules in package broker/schema): versions are stored per (base)
//     topic in the metadata store. A schema that is not live yet (Avro definitions compared
//     parsed) is validated and checked against the live versions under the topic's strategy
//     (topic policy, else namespace, else Config.SchemaCompatibilityStrategy, default FULL)
//     before it becomes the next version; refusals are IncompatibleSchema. A consumer's new
//     schema on a topic with schemas is only checked, never registered; with
//     is_allow_auto_update_schema off, producers cannot register new ones (the admin API
//     can); with schema validation enforced, producers without a schema are refused on a
//     topic with one. A deletion is a version of its own (force removes every version). A
//     producer whose schema is new gets PRODUCER_SUCCESS (naming the version) only once the
//     version is stored.
//   - Compaction (broker/topicreg, package broker/compaction): every loaded persistent topic
//     has a compaction manager; ReadCompacted consumers (Exclusive and Failover only) and
//     readers get their cursor wrapped by it when they open their subscription. A
//     compaction keeps the __compaction subscription right after the horizon, so entries
//     not compacted yet are retained. The compaction monitor (one goroutine) checks the
//     loaded topics every CompactionCheckInterval against their compaction threshold.
//   - As in Pulsar, a producer naming initial_subscription_name (the clients' dead-letter
//     producers) gets that durable subscription created at the earliest message before its
//     PRODUCER_SUCCESS, unless the topic has a subscription of that name; and
//     GET_TOPICS_OF_NAMESPACE in PERSISTENT mode answers a namespace that does not exist
//     with no topics (NON_PERSISTENT and ALL modes: MetadataError).
package topic
