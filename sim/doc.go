// Package sim is Magnetar's deterministic simulation harness: a discrete-event loop on a
// virtual clock (Sim), a network of request/response calls with seeded delays, reordering,
// slow "ghost" messages and loss (Network), simulated bookies with journal semantics
// (Bookie), and a metadata store with compare-and-swap versions (MetaStore). A seed fixes
// everything: every delivery order, delay, drop, fsync and crash. Tests wire protocol cores
// (e.g. package ledger's Writer and Recovery) to these doubles and check invariants after
// every step.
//
// # Usage
//
//	s := sim.New(seed)
//	net := sim.NewNetwork(s, sim.NetConfig{MinDelay: 100 * time.Microsecond, MaxDelay: 2 * time.Millisecond,
//		DropRate: 0.01, Timeout: 20 * time.Millisecond})
//	b := sim.NewBookie(s, "10.0.0.1:3181", sim.BookieConfig{FsyncMin: time.Millisecond, FsyncMax: 3 * time.Millisecond})
//	net.Add(b.ID(), b)
//	net.Call(b.ID(), &bk.Request{...}, func(resp any, err error) { ... })
//	s.After(5*time.Millisecond, "crash", b.Crash)
//	for s.Step() {
//		checkInvariants()
//	}
//
// Caller obligations:
//  1. Draw every random choice from Sim.Rand (never the global source) and never iterate a
//     Go map where the order can reach the simulation: a seed must replay exactly.
//  2. Run everything on one goroutine: Sim, Network, Bookie and MetaStore are not safe for
//     concurrent use and start no goroutines.
//  3. Print the seed on failure; Sim.Trace holds the last events (all of them with Verbose).
//
// # Seed runners
//
// RunSeeds runs a range of seeds (or replays one, verbosely), stops at the first failing seed
// and reports it with its parameters, trace and replay command; CatchMutation proves a checker
// can fail (some seed of a deliberately broken variant must fail); CheckDeterministic requires
// two runs of a seed to have the same trace; AddCounts sums coverage counters. They take a T
// (what they need of *testing.T), so that this package does not import testing. Every
// simulation test takes the same flags: -seeds N (how many), -first-seed S and -seed S (replay
// one seed with its whole trace).
//
// # Models
//
//   - Network.Call: the callback runs exactly once, with the response, ErrUnreachable (the
//     node was down) or ErrTimeout (request or response lost, reply too slow, or the node
//     crashed before answering). A slow message may arrive after its caller timed out: the
//     request still takes effect.
//   - Bookie: a request is applied to memory at once (reads see it), journaled, and
//     answered after the group commit that fsyncs it. Crash loses the unsynced journal and
//     its answers; Restart serves exactly the durable state. A fencing read durably fences
//     the ledger before it is answered; a fenced ledger refuses non-recovery adds. The
//     bookie records a violation if it ever accepts a non-recovery add after answering a
//     fencing read for that ledger.
//   - Bookie also answers OpListEntries (the ranges of entries it holds in memory), and
//     records the highest LAC it ever held per ledger (KnownLAC), for checkers of L4.
//   - MetaStore: etcd-like versions (the store revision of the last change); Put and Delete
//     succeed only at the expected version (or AnyVersion); List returns a prefix in key
//     order; sessions (NewSession, ExpireSession) make keys ephemeral, deleted in key order
//     when the session expires, as etcd does with a lease; OnChange sees every change, Put
//     or Delete (for transition checks).
//
// # Invariants
//
//   - Events run in (time, scheduling order): the same seed gives the same trace.
//   - Durable bookie state only grows: a crash never loses fsynced data.
package sim
