// Package chaos is Magnetar's fault harness: it runs a real cluster (3 etcd members, 4
// bookies, 3 brokers, each process in its own network namespace on a private bridge), real
// Pulsar clients (pulsar-client-go, each in its own process and namespace) producing with
// deduplication and consuming, injects faults drawn from a seed, heals, and checks from the
// clients' records alone that nothing acknowledged was lost.
//
// # Why a separate module
//
// Like interop/, it needs pulsar-client-go, which the product must not depend on; and the
// checker must share no code with the broker, so this module does not import Magnetar at
// all: it runs the magnetar binary built from the checkout.
//
// # Across clusters
//
// With Options.Clusters = 2 or 3 (geo.go) a run is that many Pulsar clusters ("sites" a, b,
// c), each with its own etcd, bookies and brokers, geo-replicating the namespace geo/ns, on
// the one bridge: faults cut, or make lossy, the links between two clusters' brokers, kill
// the broker that owns a partition (its replicators), and pause a cluster's etcd. CheckGeo
// wants every message acknowledged in any cluster stored exactly once and in per-producer
// order in every cluster; CheckReplSub checks a replicated subscription moved between two.
//
// # Network
//
// A hub namespace holds a bridge; every node (e0–e2, k0–k3, b0–b2, producers p0.., the
// transactional producer t0, consumer c0, reader r0) has a namespace with one veth on it and
// an address in 10.213.0.0/24, which exists only inside these namespaces. Every server
// listens on its loopback; a Proxy of the harness listens on the node's bridge address and
// forwards to it, so all traffic between nodes passes through the harness (delay, loss as
// retransmission pauses, one-way stalls, resets). Partitions are blackhole routes inside the
// namespaces (Net.Block), no iptables needed.
//
// # Faults and checks
//
// Schedule draws the faults (kinds in FaultKind) from the seed; a run prints its schedule and
// the same seed replays the same schedule and workload (the timing of real processes varies).
// CheckFiles reads the producers' acknowledgement records, the subscription's record and a
// final reader's record of every stored message, and counts lost, undelivered, duplicated
// (stored under two message ids), out-of-order and moved (acknowledged under another message
// id) messages, and transactions that were not all-or-nothing.
//
// # Goroutines
//
//   - Proxy: one accept goroutine; per connection a serve goroutine and per direction a pump
//     (writer) goroutine fed by a reader goroutine through a channel of chunks. Rules are
//     guarded by Proxy.mu; a pump blocked by a stall waits on the changed channel.
//   - Proc: one goroutine per incarnation waits for the process and closes its done channel.
//   - Run: one goroutine per fault sleeps until its time, applies it and heals it; across
//     clusters, one more stops the replicated subscription's first consumer at its time, and
//     one per cluster runs its setup and its reader.
//   - Node.Do locks its goroutine to an OS thread while the thread is in another namespace.
//
// Every namespace, process, proxy and mount a run creates is removed when Run returns, on
// every path; CleanStale removes what a run killed with SIGKILL left behind.
package chaos
