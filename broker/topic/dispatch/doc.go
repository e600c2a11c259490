// Package dispatch is a subscription's dispatcher as a pure state machine (Core): which
// consumer gets which entry, when, and what is read from the cursor next. It decides every
// delivery of the four subscription types — Exclusive and Failover (one active consumer,
// chosen by priority and name), Shared (round robin over consumers with permits) and
// Key_Shared (hash ranges, AUTO_SPLIT or STICKY, with per-key holds) — and owns the
// consumers' permits, the pending (delivered, unacknowledged) set, the replay set
// (returned, due or undeliverable entries, re-read before new ones), redelivery counts,
// batch-index acknowledgements and the delayed-delivery heap; it gates its reads of new
// entries by the subscription's dispatch rate and the topic's (rate.go).
//
// # Usage
//
// The Core does no I/O, reads no clock and starts no goroutine. The owner (the subscription
// goroutine, broker/topic/subscription.go) calls an input and then performs Ready:
//
//	d := dispatch.New(dispatch.Config{Partition: -1})
//	id, err := d.AddConsumer(dispatch.ConsumerSpec{Type: dispatch.Shared, Name: "c1"})
//	d.Flow(id, 1000)
//	r := d.Ready() // r.Read asks for up to r.Read.N entries, tagged r.Read.Epoch
//	...            // the owner reads the cursor, then on its goroutine:
//	d.ReadDone(r.Read.Epoch, entries, dispatch.ReadOK, nowUnixMs)
//	r = d.Ready() // r.Sends: deliver each entry to its consumer
//
// Caller's obligations:
//
//  1. Call every method from one goroutine, and after each input perform the whole Ready in
//     the order its doc gives: sends, cursor acks, replies, active-consumer changes, then
//     the cancel, read, re-read and reset requests, then arm a timer for TimerAt that calls
//     Tick. With a dispatch rate (SetRate, Config.Shared), tell the core the time
//     (SetTime) before each input: a read it holds back for the rates is asked for at the
//     time they allow it, through TimerAt.
//  2. Feed every Read, Replay and Reset back exactly once (ReadDone, ReplayDone,
//     ResetDone), with the epoch it carried; a cancelled read is fed back too (ReadIdle).
//     The core drops a result of an older epoch (B6).
//  3. Apply cursor acks in the order given, and issue the reads after them, on the
//     managed ledger's one owner (mledger does), so that a read never returns an entry
//     acknowledged before it was issued.
//  4. After ResetDone(nil), disconnect the consumers it returns (they reconnect); after
//     Stop, disconnect every consumer with RemoveConsumer(id, false).
//  5. When a client subscribes an attached consumer again (a repeated SUBSCRIBE of its id
//     on the same connection), call Reattach before answering it: the client dropped what
//     it had prefetched and grants permits anew (the simulation's resubscribe).
//
// # Invariants
//
// Checked after every step by the seeded simulation (sim_test.go, TestSim; each checker is
// shown to fail by TestSimCatchesMutations):
//
//   - B1 an entry whose acknowledgement the core has received is never delivered again,
//     unless a reset moves the cursor back before it; after a crash, what the cursor had
//     persisted counts (an unpersisted acknowledgement may be redelivered: at least once);
//   - B2 every entry is delivered until acknowledged: with the faults stopped, every entry
//     ends acknowledged; after a completed reset, every entry at or after its position is
//     delivered again;
//   - B3 Exclusive, Failover and Key_Shared (in order): an entry goes to a consumer only when
//     every older unacknowledged entry (of its key, for Key_Shared) is pending with that
//     same consumer — also across consumer churn, negative acks and redelivery;
//   - B4 an entry is sent only while its consumer's permit balance is positive (a batch may
//     take it below zero, as in Pulsar);
//   - B6 nothing read before a seek was requested is delivered after it;
//   - B7 a marker entry (Info.Marker: marker_type set, e.g. a replicated subscription's
//     snapshot marker) is never delivered to a consumer; the core acknowledges it on the
//     cursor itself and hands it to the owner (Ready.Markers), as Pulsar's
//     filterEntriesForConsumer does;
//   - DR1 a read of new entries is issued only while the subscription's and the topic's
//     dispatch rates have budget left (their burst plus rate × time since set, less what
//     the reads brought), and a read they hold back is issued once they allow it (B2);
//   - internal: pending, replay and delayed are disjoint; a Key_Shared hash is pending with
//     at most one consumer.
//
// Replay a failing seed with `go test ./broker/topic/dispatch -run 'TestSim$' -seed S -v`;
// a long run (about 1,000 seeds per second without the race detector):
// `go test ./broker/topic/dispatch -run 'TestSim$' -seeds 1000000 -timeout 0`.
package dispatch
