// Package nonpersistent is the log of Magnetar's non-persistent topics
// (non-persistent://tenant/ns/topic): a topic.Log that stores nothing. The broker opens the
// same topic machinery (package broker/topic) over it as over a managed ledger, so
// producers, subscriptions of every type, partitions, stats and admin work alike; what
// differs is the log:
//
//   - An added entry is acknowledged at once (the producer's receipt does not wait for any
//     disk) and is kept only while some cursor has not read it. With no subscription, a
//     message is dropped on arrival.
//   - What cursors have not read is held in a window bounded by Config.MaxEntries and
//     MaxBytes. A slow consumer (one that gives no permits) does not slow the producer: once
//     the window is full, the oldest entry is dropped for every cursor that had not read it,
//     and counted in that cursor's Dropped and DropRate (which the subscription stats show
//     as msgDropped and msgDropRate).
//   - A cursor starts after the last entry whatever start position it is opened at (a
//     subscription sees only what is published after it), an entry read is acknowledged,
//     and nothing is redelivered (ReadPositions returns nothing).
//   - Positions are (ledger, index) with ledger the Unix ms at which the Log was made, so a
//     topic loaded again hands out larger message ids than before.
//   - Close (unload, broker stop) and Delete forget everything.
//
// # Concurrency
//
// A Log and its cursors are safe for concurrent use: one mutex per Log guards the window
// and every cursor's state; cursor reads wait on a channel the Log closes on every change.
// The package starts no goroutines.
package nonpersistent
