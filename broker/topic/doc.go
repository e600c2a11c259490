// Package topic is a loaded persistent topic of the broker: its producers and publish
// pipeline, its subscriptions and their dispatchers, on a managed ledger (the Log port;
// broker/mlog.go binds it to package mledger, package topictest to an in-memory log).
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
//   - Topic.run owns the topic core (topicCore, topiccore.go): state, producers and access
//     modes, the topic epoch, deduplication and the publish pipeline. API calls, SENDs,
//     add and property-write completions and terminate completions arrive as events; after
//     each one the goroutine performs the core's Ready (Log.AddAsync, Log.SetProperty,
//     Log.Terminate, frames to the clients) and feeds the completions back tagged with
//     what they were issued for; the core drops a stale one.
//   - Subscription.run owns one subscription: its lifecycle (SubState) and its dispatcher
//     core (package dispatch), which decides every delivery. Flows, acks, redeliveries,
//     seeks, consumer arrivals and departures, cursor read results and timers arrive as
//     events; the goroutine performs the core's Ready (MESSAGEs, cursor acks, reads,
//     re-reads, resets, a timer) and feeds the results back tagged with the dispatch epoch.
//     Cursor I/O runs on helper goroutines that the subscription tracks: run waits for
//     them before it ends.
//   - Nothing else touches a core. Stats and admin calls are events that reply (call).
//   - Policies (policy.go) are events too: SetPolicies and SetQuotaBlock run on the topic
//     goroutine, which passes the limits on to each subscription's goroutine. The publish
//     rate's held SENDs and their release timer belong to the topic goroutine; the timer
//     only posts an event, as the timed deduplication snapshots' timer does. The subscribe
//     rate's per-consumer windows belong to the topic goroutine. A dispatch rate relative
//     to the publish rate (Policies.DispatchRelative, SubDispatchRelative: Pulsar's
//     relativeToPublishRate) is retuned every second by a timer that posts to the topic
//     goroutine: it measures the publish rate since the last tick, retunes the topic's
//     dispatch buckets (under their mutex) and posts the subscriptions' retune to theirs.
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
//   - B1–B4, B6 (deliveries, acknowledgements, order, permits, seeks): package dispatch,
//     dispatch/sim_test.go TestSim and TestSimCatchesMutations;
//   - B5 (a producer is told it is connected only after its epoch is durable; an older epoch
//     is never accepted after a newer one; a reload never sees an epoch older than one given),
//     receipts in order and exactly once, deduplication across reloads, nothing accepted
//     after termination: topiccore_sim_test.go TestSim and TestSimCatchesMutations.
//
// Replay a failing seed with `go test ./broker/topic -run 'TestSim$' -seed S -v` (or
// ./broker/topic/dispatch); long runs: `-seeds 1000000 -timeout 0`.
package topic
