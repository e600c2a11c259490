// Package ledger is the client side of BookKeeper-style ledgers: create, append (striped over
// an ensemble of E bookies, each entry written to WQ of them and confirmed at AQ), read, tail,
// close, recover and delete. Metadata lives in the metadata store (metadata.LedgerKey, JSON,
// see Metadata); entries live on bookies (proto/bk, bookie/client).
//
// # Usage
//
//	pool := client.NewPool(client.Options{})
//	c := ledger.NewClient(store, pool, ledger.Options{})
//	defer c.Close()
//	h, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, Password: pw})
//	id, err := h.Append(ctx, []byte("hello"))           // or AppendAsync(ctx, p, cb) to pipeline
//	err = h.Close(ctx)                                  // records lastEntryId and length: CLOSED
//
//	r, err := c.Open(ctx, h.ID(), ledger.OpenOptions{Recovery: true, Password: pw})
//	entries, err := r.Read(ctx, 0, r.LAC())
//
// Caller obligations:
//  1. Close every writer Handle (its owner runs until then), even after an error; then the Client.
//  2. Callbacks of AppendAsync run on the handle's owner goroutine, in entry order: they must
//     not block or call back into the same handle synchronously.
//  3. Do not modify a payload until its append completed.
//  4. Read only up to the LAC of an OPEN ledger (Read enforces it, L4): to learn the real end
//     of a ledger whose writer is gone, open it with Recovery.
//
// # Structure: sans-I/O cores and drivers
//
// The protocol lives in two pure, thread-unsafe cores in the style of etcd-io/raft's RawNode;
// they import no net, os or time:
//
//   - Writer (writer.go): Append, Close, Tick and Step(AddResult|MetaResult); Ready returns
//     the adds, explicit-LAC writes and metadata compare-and-swaps to perform and the
//     completions to deliver, and the optional Advance hands a performed Ready's slices back
//     for reuse. States Open → Draining → Closing → Closed, or Fenced / Failed.
//   - Recovery (recovery.go): Start and Step(ReadResult|AddResult|MetaResult). States
//     Marking → Fencing → Reading → Closing → Done, or Failed.
//
// The pure quorum arithmetic (write sets, ack sets, coverage, the "no such entry" rule) is in
// ledger/quorum. Drivers perform Ready and feed results back (core.go lists their
// obligations): the real one here (Client, Handle, transport) and the deterministic
// simulation in the tests (sim_test.go on package sim).
//
// Every request a core issues carries a token (bookie requests) or a sequence number
// (metadata writes); an answer whose token is no longer outstanding, or that arrives in a
// state that did not ask for it, is ignored. So a late callback can never undo a decision:
// an ack from a replaced bookie, a metadata result after the writer was fenced, a read
// answer after recovery decided the entry.
//
// # Goroutines
//
//   - Client.watchBookies (one per Client, when the default placement is used): lists the
//     bookie registrations (metadata.PrefixAvailable, PrefixReadOnly) and watches them,
//     updating the bookieSet (a mutex-guarded leaf) that placement reads. Stopped by
//     Client.Close.
//   - Handle.step (one owner per writer Handle, run.go): the owner of the Writer core and
//     its transport. It runs on a goroutine that exists only while the writer is busy
//     (internal/inbox Owner; it ends 20 ms, inbox.DefaultLinger, after the last work):
//     the append queue (AppendAsync queues under appendQueue.mu and
//     waits only while MaxPendingAdds appends are queued or in flight), close requests, the
//     transport's inbox (bookie answers, dial results, metadata results), the tick timer
//     (explicit-LAC flush and request timeouts) and the end of the client's context all
//     wake it. Each run takes everything queued (inbox results, then appends, then a close)
//     and only then asks the core for a Ready, so a burst of appends is one batch of
//     requests per bookie connection. It performs each Ready, calls completion callbacks,
//     hands the Ready back (Writer.Advance), and publishes a snapshot (metadata, LAC) under
//     Handle.mu for readers. The tick timer is armed only while the writer wants ticks
//     (Writer.WantsTick: a LAC not yet published) or a request may time out, so an idle
//     writer has no goroutine and no timer firing; inbox.Owner runs step never twice at
//     once and each run after the previous one, so the core and the transport are owned
//     as by one long-lived goroutine, and every answer is still checked by its token. The
//     owner ends once the close finished (or the client closed), failing appends still
//     queued and answering close requests not taken.
//   - Transport helpers, owned by the goroutine that owns the transport: a short-lived
//     goroutine per dial and per metadata compare-and-swap; they only push to the inbox.
//     Callbacks of bookie/client connections also only push to the inbox (never block); for
//     adds the callback is the connection's transport.bookieConn (a client.Handler keyed by
//     token), so no closure is made per request.
//   - Open with Recovery drives the Recovery core on the caller's goroutine, with the same
//     transport and inbox; Read, ReadLAC and LongPollRead run on the caller's goroutine
//     and collect answers on a channel.
//
// Locks: Handle.mu, appendQueue.mu (taken before its queue's), bookieSet.mu, the
// inbox.Queue locks and randomPlacement.mu are leaves; none is held across I/O or a callback.
//
// # Per-entry costs
//
// The append path is CPU-bound, so it avoids per-entry maps and allocations: ids in flight
// (the writer's tokens and pending adds, the transport's deadlines, the handle's callbacks,
// a connection's request ids) live in seqwin.Windows, ring buffers indexed by id; inbox and
// append queue hand their slices back and forth; completed pendingAdds and Ready slices are
// reused; entries are packaged straight into the connection's write buffer.
//
// # Invariants (docs/DESIGN.md L1–L3; checked after every step by TestSim*)
//
//   - L1: an entry is acknowledged only when AQ bookies of its write set (in the ensemble in
//     force for it) fsynced it, and strictly in entry order; LAC = the highest entry with all
//     of 0..LAC acknowledged. While an ensemble change is in flight the LAC does not move, so
//     the new ensemble's first entry (LAC+1) never covers an acknowledged entry.
//   - L2: recovery fences with the coverage rule, reads forward with fencing reads, declares
//     an entry absent only when WQ-AQ+1 members of its write set said so, re-adds every entry
//     it keeps to AQ bookies, and only then closes. So every acknowledged entry is <= the
//     closed last entry and readable. A writer that sees a fenced bookie stops at once.
//   - L3: every metadata change is a compare-and-swap; OPEN→IN_RECOVERY, OPEN→CLOSED and
//     IN_RECOVERY→CLOSED are the only state edges; a writer whose CAS finds IN_RECOVERY or
//     CLOSED fails with ErrFenced or ErrClosed; a recovery that loses the close adopts the
//     CLOSED record it finds, so concurrent recoveries return the same last entry.
//
// # Simulation
//
// sim_test.go drives Writer and Recovery over sim.Bookie and sim.Network (loss, slow ghosts,
// bookie crashes, a dead bookie, writer crashes, concurrent recoveries) and checks L1–L3 after
// every step; TestSimCatchesMutations proves each check can fail. CI runs 3,000 seeds of
// TestSimLedger and 1,500 of TestSimRecoveryDeadBookie (about 10 s with -race on two cores).
// Replay a seed with `go test ./ledger -run '^TestSimLedger$' -seed S -v`; a long run, without
// -race (≈ 1,500 seeds/s):
//
//	go test ./ledger -run '^TestSim' -seeds 1000000 -timeout 0
//
// Recovery replaces a bookie that fails a re-add (placement policy) in a local ensemble that
// starts at the first unconfirmed re-add, re-sends to the replacement, and records those
// ensembles (keys >= the last ensemble key) in the same compare-and-swap that closes the
// ledger; forward reads always use the stored ensembles, where the entries are.
//
// Not yet: placement is not rack-aware.
package ledger
