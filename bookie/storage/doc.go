// Package storage is the bookie's durable entry storage: append-only entry
// logs hold the entry bytes of all ledgers interleaved, and a Pebble index
// maps (ledgerID, entryID) to where each entry's record lives. Per-ledger
// metadata (master key, digest type, fenced flag, explicit LAC) and per-log
// live-byte counters live in the same Pebble instance. Put only copies the
// entry into an in-memory write cache; a background flusher writes the cache
// to the entry log and the index in large batches. It is the Go counterpart
// of BookKeeper's DbLedgerStorage (its WriteCache and DefaultEntryLogger, with
// a RocksDB index where this one uses Pebble).
//
// # Usage
//
//	s, err := storage.Open(dir, storage.Options{Logger: log})
//	// replay the journal from its last checkpoint with s.Put / s.SetMeta
//	err = s.Put(ledgerID, entryID, entryBytes) // cached; then journal the entry
//	b, err := s.Get(ledgerID, -1)              // the last entry
//	// checkpoint: note the journal position p, then
//	err = s.Flush()                            // everything before is durable
//	// trim the journal before p
//	n, err := s.Compact(ctx, 0.5)              // from a GC loop
//	err = s.Close()
//
// # Caller obligations
//
//  1. Journal every Put, SetMeta (fence, explicit LAC, master key) before
//     acknowledging it. Storage writes do not fsync; until Flush returns they
//     may be lost in a crash (never corrupted — see Invariants). Entries
//     still in the write cache are always lost.
//  2. Checkpoint as: note the journal position, call Flush, and only after it
//     returns trim the journal up to the noted position.
//  3. After a restart, replay the journal from the last checkpoint with Put
//     (and SetMeta). Re-putting an entry already held is cheap and
//     idempotent; a lost or torn one is written again.
//  4. DeleteLedger is not journaled by this package: a crash before the next
//     Flush may bring a deleted ledger back, so the garbage collector that
//     deletes ledgers must be able to delete them again.
//  5. Call Compact periodically (BookKeeper: minor 0.2 hourly, major 0.8
//     daily); DeleteLedger alone frees no disk space.
//  6. Entry IDs are ≥ 0 and immutable: the same (ledger, entry) is always
//     re-put with the same bytes (different bytes replace the entry).
//  7. After ErrSyncFailed (State Failed) restart the process: the storage
//     stops writing (cached entries stay readable until Close, but are
//     never written) and the journal replays.
//  8. Put may block while the write cache is full (back-pressure, see Write
//     cache); it never blocks on a Flush or a Compact otherwise.
//
// # Directory layout
//
//	<dir>/
//	  0000000000000001.log     entry logs, id in 16 lower-case hex digits;
//	  0000000000000002.log     each Open starts a new one, older ones are
//	  ...                      read-only; rolled at Options.EntryLogSize
//	  index/                   Pebble (WAL disabled)
//
// # Entry-log format (frozen; all integers big-endian)
//
// A log is a 16-byte file header followed by records, back to back:
//
//	 0      6      8                16
//	+------+------+-----------------+--------+--------+-----
//	|MGTRLG| ver=1|    log id u64    | record | record | ...
//	+------+------+-----------------+--------+--------+-----
//
// Each record is a 24-byte header and the entry bytes exactly as received
// (BookKeeper's digest header + digest + payload; this package does not look
// inside):
//
//	 0          4          8                  16                 24
//	+----------+----------+------------------+------------------+-----------
//	| crc32c   | length   | ledger id        | entry id         | entry
//	| u32      | u32      | u64              | u64              | (length B)
//	+----------+----------+------------------+------------------+-----------
//	  crc32c (Castagnoli) covers bytes 4..24 and the entry bytes.
//
// Records are self-describing so a log can be scanned without the index
// (compaction does; so could a rebuild). Get re-verifies the crc, length
// and (ledger, entry) of every record it returns and reports a mismatch as
// a *CorruptionError (errors.Is ErrCorruption), never as wrong bytes. A log
// may end in a torn record or zeros after a crash; those bytes are dead.
//
// # Index format (Pebble keys, frozen; integers big-endian)
//
//	key                                   value
//	'e' | ledger u64 | entry u64          log id u64 | record offset u64 | entry length u32
//	'm' | ledger u64                      ledger metadata (below)
//	'c' | log id u64                      live bytes i64 | live records i64
//	"vformat"                             "magnetar-storage-1"
//
// The 'c' counters are written only as Pebble merge operands (+record size,
// +1 on Put; negated on DeleteLedger, overwrite and relocation) in the same
// batch as the 'e' change they account for, with the merger
// "magnetar.storage.counters.v1" summing them; so the persisted counters
// always match the persisted index, and Open reads them instead of scanning
// the index. Live bytes include the 24-byte record headers.
//
// Ledger metadata value:
//
//	+-----+-------+--------+----------------+-----------------+--------------
//	| ver | flags | digest | master key     | LAC length      | explicit LAC
//	| =1  | u8    | u8     | 20 bytes       | uvarint         | body
//	+-----+-------+--------+----------------+-----------------+--------------
//	  flags bit 0: fenced; other bits must be zero.
//
// # Write cache (in memory only)
//
// Put copies the entry into the active generation of the write cache: an
// append-only arena of 1 MiB chunks and a map ledger → (entry → slot), where
// a slot is (chunk, offset, length, mayBeIndexed). No syscall, no Pebble
// call and, in steady state, no allocation: a flushed generation is emptied
// and becomes the next active one, its chunks and per-ledger maps reused.
// Entries over 128 KiB get a chunk of their own. Replacing a cached entry
// leaves its old bytes in the arena until the generation is recycled.
//
//	Put ──copy──► active ──seal (swap, under the cache lock)──► sealed ──► flusher
//	Get ──► active, then sealed, then the index
//
//	flusher, per sealed generation:
//	  1. write its records, sorted by (ledger, entry), in 128 KiB pwrites,
//	     rolling logs at EntryLogSize
//	  2. fdatasync the entry log
//	  3. commit one Pebble batch (NoSync): its 'e' keys and summed 'c' merges
//	  4. drop the generation (emptied, it becomes the next active one)
//
// A generation is sealed when it reaches Options.WriteCacheSize (default
// 32 MiB: about a second of a bookie's peak ingest; big enough to make the
// per-flush fsync and Pebble commit negligible per entry, small enough that
// the two generations cost 64 MiB) or when Flush is called. At most one
// generation is sealed: a Put that finds the active generation full while
// the sealed one is still being flushed waits for it (Stats.CacheBlockedPuts
// counts such Puts). An entry larger than the threshold is accepted; it just
// fills its generation at once.
//
// Records are written grouped by ledger, in entry order, as BookKeeper's
// flush does, so a ledger's entries of one generation are contiguous on
// disk (sequential reads of a ledger then use the OS read-ahead). The sort
// costs ≈ 70 ns per entry, 2% of a flush (BenchmarkWriteCache/flush-order).
//
// The flusher is gentle with the disk it shares with the journal: after every
// 128 KiB write it starts that range's write-back (sync_file_range through
// vfs.File.SyncTo), so the final fdatasync finds little dirty data, and it
// spreads a generation sealed for size over half the time the generation took
// to fill (at most 10 s; see pacing). Written in one burst, 32 MiB at 5 MB/s of
// adds made the journal's fdatasyncs wait ≈ 20 ms once per generation. A Put
// that waits for cache space or a Flush call ends the pacing (hurry).
// FlushPaced (the bookie's periodic checkpoint) flushes the active generation
// at the same pace instead of at full speed: after a 30k msg/s phase, a 5k
// msg/s run spanning the checkpoint had p99 publish 2.9–5.8 ms (median 4.3)
// against 2.9–6.3 ms (median 5.2) with a hurried checkpoint, and no stall
// (p99.9 ≤ 12 ms, against 52 and 78 ms in 2 of 6 runs; standalone, fresh per
// run).
//
// # Durability and invariants
//
// Nothing is written on the add path. The flusher writes a sealed
// generation's records to the current entry log (no fsync per write; a log
// is fsynced when rolled), fdatasyncs the log, and only then commits the
// generation's index entries and counter merges in one batch with NoSync to
// a Pebble whose WAL is disabled: the journal, not Pebble, is the
// write-ahead log. Flush has the flusher flush the sealed generation and
// then the active one (so every Put that returned before the call is
// written, synced and indexed), and then flushes Pebble's memtable to a
// synced sstable.
//
// Invariant: an index entry references only synced log bytes, by
// construction: the flusher and compaction's relocation both fdatasync
// before they commit the index entries pointing at what they wrote. So
// however Pebble flushes its memtables (on its own when one fills, every
// 64 MiB, or in Flush), after a crash the index may lack recent entries (the
// journal replays them) but never points at a torn record. TestCrashPowerLoss
// checks this with Pebble's crashable in-memory filesystem (it fails if the
// flusher's fdatasync is removed; TestCrashAfterCompact does for
// relocation's), and TestCrashDropsCache that cached entries are simply
// absent after a crash while flushed ones survive.
//
// Invariant: an entry whose Put returned is found by Get, LastEntryID,
// ListEntries and Ledgers at every instant until it is replaced or deleted:
// readers look in the active generation, then the sealed one (one read lock
// for both), then the index; sealing moves the active generation to sealed
// atomically, and the flusher drops a generation only after its index batch
// is committed. TestWriteCacheHandover checks at every stage of every flush.
//
// Invariant: a deleted ledger's cached entries are never indexed.
// DeleteLedger removes them from the active generation and marks the ledger
// dead in the sealed one (whose maps the flusher reads unlocked); it does so,
// and deletes the index entries, under indexMu, which the flusher holds from
// reading the dead set to its commit. TestWriteCacheDeleteDuringFlush.
//
// Invariant: a log is not compacted while records written to it may still be
// indexed (logFile.pending counts the writers between write and commit; it
// is raised only while the log is current), since its counters don't count
// those records yet.
//
// Invariant: a log file is deleted only after the index changes that stopped
// referencing it (DeleteLedger, relocation) are durable, and only if its
// counter is zero.
//
// Invariant: the log ids only grow (next = 1 + max of the ids on disk and in
// the counters), and a log's directory entry is synced when it is created.
//
// # Compaction
//
// Compact picks every log but the current one (and those with pending
// writers) whose live ratio is below the threshold (always those with no
// live bytes), and scans each. The records the index still references at
// that exact location are copied, 4 MiB at a time, to the current log; the
// copies are fdatasynced, and then, under indexMu, every index entry still
// pointing at the old copy is re-pointed (others were deleted or replaced
// meanwhile, by DeleteLedger or a flushed Put, and their new copies are
// dead). Then it deletes the drained logs' counters, calls Flush, and
// renames the files (deletingExt). A concurrent Get that read the old location
// keeps the file open through a reference count, or re-reads the index if the
// log is already gone. Once a dropped log's last reference is released,
// Compact removes its file gradually (16 MiB truncations 20 ms apart, then the
// unlink: fsutil.RemoveGradually), because unlinking a whole 512 MiB log in one
// filesystem transaction stalls every journal fdatasync on the disk. Open
// removes renamed files left by a crash or by a stopped Compact.
//
// # Concurrency
//
// All exported methods are safe for concurrent use. Storage runs one
// goroutine, the flusher (flushLoop), started by Open and stopped by Close
// after its final flush. It owns writing sealed generations: it alone drops
// the sealed generation, and it and compaction alone append to entry logs.
// It is fed by two channels: fl.kick (capacity 1), sent by the Put that
// seals a full generation, and fl.reqs, on which Flush (and Close, and
// Compact's drop step) send a reply channel; the flusher answers every
// request queued before it starts draining once both generations present at
// that point are flushed. A failure in the flusher (write, fsync or index
// commit) moves the Storage to Failed and releases waiting Puts.
//
// Pebble's own goroutines flush memtables and compact. A failed background
// write of Pebble's (a missing directory, EIO, a full disk) also moves the
// Storage to Failed (onBackgroundError, under Pebble's mutex), so a Flush
// waiting for the index returns ErrSyncFailed; Pebble retries such a write
// for ever, so its file creations go through backoffFS, which spaces the
// retries out (100 ms doubling to 10 s) and lets Close through at once.
// Failed() is closed on failure, for the owner to react (the bookie stops).
//
// Locks, in acquisition order (a lock may only be taken while holding locks
// above it):
//
//  1. gate (RWMutex): shared for the whole of every method, exclusive in
//     Close, so Close waits for running calls. Never re-acquired.
//  2. compactMu: one Compact at a time.
//  3. stripes[hash(ledger)]: the mutations of a ledger — Put (compare and
//     cache), SetMeta, DeleteLedger — and the stripe's last-entry cache.
//     Reads and the flusher take no stripe, so a Put may wait for the
//     flusher (back-pressure) while holding its stripe.
//  4. flushMu: one flush at a time (Flush, Close, Compact's drop step); held
//     while waiting for the flusher, which never takes it.
//  5. indexMu: the index changes of entry keys with their counter merges —
//     the flusher's commit, DeleteLedger, relocation's commit — each atomic
//     from reading the locations it replaces to its commit.
//  6. w (append mutex): the current log, its size, rolling (which fsyncs the
//     old log before publishing the new one). Taken by the flusher and
//     compaction only, never with indexMu held.
//  7. cache (RWMutex): the generations. Put holds it exclusively to insert;
//     readers share it to look and copy; the flusher briefly to drop.
//  8. files (RWMutex, leaf): the id → *logFile map.
//
// Pebble's internal locks come after all of these: Pebble calls are made with
// any of locks 1–5 held, never with w, cache or files held. Counters and log
// sizes are atomics, published after the Pebble commit they account for.
//
// # Write cache: measurements
//
// BenchmarkPut before the write cache (commit 7126d05: one pwrite and one
// Pebble commit per Put, roll fsync inline) and with it, three alternating
// runs each on the same machine state (go1.26.8, 2 cores shared with other
// work; 1 KiB entries of 100 interleaved ledgers, 1M puts ≈ 1 GiB, so two
// log rolls):
//
//	                                 per-Put I/O             write cache
//	Put, no Flush (serial)           6.7 / 8.6 / 7.2 µs      3.1 / 3.1 / 2.9 µs
//	Put, no Flush (2 goroutines)     7.7 / 8.6 / 9.2 µs      3.1 / 3.0 / 2.9 µs
//	Put, Flush every 10k entries    11.0 / 10.9 / 11.3 µs    7.1 / 6.8 / 10.1 µs
//	allocations per Put              2 (65 B)                0
//	Put latency p50 / p99            4 / 28 µs               0.42 / 1.2 µs (p99.9 18 µs)
//	Put latency max                  10–14 ms (roll fsync)   4–5 ms (one run 15 ms)
//
// Without Flush calls the write-cache Put runs at the flusher's speed
// (≈ 330 MB/s here: ≈ 95 ms per 32 MiB generation, written, synced and
// indexed), waiting at a full cache; the add path itself costs ≈ 0.4 µs
// (p50; BenchmarkWriteCache/put, the core without locks: 0.29 µs). The
// remaining multi-ms maxima come with no blocked Put and also with GOGC=off;
// they are scheduling delays with the flusher and Pebble's goroutines on
// two shared cores, not I/O on the add path. Reproduce with
//
//	go test -run '^$' -bench 'Put/' -benchtime=1000000x -count 3 ./bookie/storage/
//
// # Why entry logs plus an index, not payloads in Pebble
//
// Measured with this package's benchmarks (as above; Pebble configured as
// the index is — WAL off, NoSync, 64 MiB memtable; the Get row predates the
// write cache, which does not change the read path of indexed entries):
//
//	                                  this package     payload in Pebble  ratio
//	Put, Flush every 10k entries      6.8 / 7.1 µs     22.6 / 26.5 µs     3.2–3.7x
//	Put, no Flush                     2.9 / 3.1 µs     5.9 / 6.1 µs       2.0x
//	Get, random over 100k entries     8.4 / 12.3 µs    25.8 / 67.2 µs     3.1–5.5x
//	Pebble write amplification        index only       2.9 after 1 GiB, rising
//
// Without checkpoints, payload-in-Pebble puts only fill the memtable and
// look cheap; the flushes and compactions that rewrite every payload (write
// amplification ≈ 6 at steady state, as measured when the storage was chosen) show up once data is
// made durable, and random reads must search sstable blocks of payloads
// rather than a small, cached index. The entry log writes each byte once
// (plus compaction of partly dead logs, which the caller controls).
// Reproduce with
//
//	go test -run '^$' -bench 'Put/(serial|checkpoint)|PebbleValues/put' -benchtime=1000000x ./bookie/storage/
//	go test -run '^$' -bench 'GetRandom|PebbleValues/get' ./bookie/storage/
package storage
