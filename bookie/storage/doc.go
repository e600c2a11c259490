// Package storage is the bookie's durable entry storage: append-only entry
// logs hold the entry bytes of all ledgers interleaved, and a Pebble index
// maps (ledgerID, entryID) to where each entry's record lives. Per-ledger
// metadata (master key, digest type, fenced flag, explicit LAC) and per-log
// live-byte counters live in the same Pebble instance. It is the Go
// counterpart of BookKeeper's DbLedgerStorage with the default entry logger
// (see /work/shared/reference/internals.md §2).
//
// # Usage
//
//	s, err := storage.Open(dir, storage.Options{Logger: log})
//	// replay the journal from its last checkpoint with s.Put / s.SetMeta
//	err = s.Put(ledgerID, entryID, entryBytes) // then journal the entry
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
//     may be lost in a crash (never corrupted — see Invariants).
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
//     stops writing and the journal replays.
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
// # Durability and invariants
//
// Put writes the record with one pwrite (no fsync) under the append mutex,
// then commits the index batch with NoSync to a Pebble whose WAL is
// disabled: the journal, not Pebble, is the write-ahead log. Flush fsyncs the
// current entry log and then flushes Pebble's memtable to a synced sstable.
//
// Invariant: an index entry that is durable references only synced log
// bytes. Pebble also flushes memtables on its own (when one fills, every
// 64 MiB); Storage registers a FlushBegin event hook that fsyncs the current
// log before any such flush writes output, and a log is fsynced when it is
// rolled. Hence after a crash the index may lack recent entries (the journal
// replays them) but never points at a torn record. TestCrashPowerLoss checks
// this with Pebble's crashable in-memory filesystem, and fails if the hook
// is removed.
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
// Compact picks every log but the current one whose live ratio is below the
// threshold (always those with no live bytes), scans each, and for every
// record the index still references at that exact location appends it to
// the current log and re-points the index (under the ledger's stripe lock, so
// a concurrent Put, overwrite or DeleteLedger of the ledger is ordered with
// it). Then it deletes the drained logs' counters, calls Flush, and removes
// the files. A concurrent Get that read the old location keeps the file open
// through a reference count, or re-reads the index if the log is already
// gone.
//
// # Concurrency
//
// All exported methods are safe for concurrent use. Storage starts no
// goroutines of its own. Pebble's flush goroutine calls onFlushBegin, which
// fsyncs the current log while Pebble holds its DB mutex (commits stall for
// that fsync; the 64 MiB memtable makes it rare) and takes no Storage lock.
//
// Locks, in acquisition order (a lock may only be taken while holding locks
// above it):
//
//  1. gate (RWMutex): shared for the whole of every method, exclusive in
//     Close, so Close waits for running calls. Never re-acquired.
//  2. compactMu: one Compact at a time.
//  3. stripes[hash(ledger)]: all index mutations of a ledger — Put
//     (lookup + append + batch), SetMeta, DeleteLedger, relocation — and the
//     stripe's last-entry cache. Reads take no stripe.
//  4. flushMu: one flush at a time (Flush, Close, Compact's drop step).
//  5. w (append mutex): the current log, its size, rolling (which fsyncs the
//     old log before publishing the new one), the scratch buffer.
//  6. files (RWMutex, leaf): the id → *logFile map.
//
// Pebble's internal locks come after all of these: Pebble calls are made with
// any of locks 1–4 held, never with w or files held, and the Pebble hook takes
// none. Counters and log sizes are atomics, published after the Pebble
// commit they account for.
//
// # Why entry logs plus an index, not payloads in Pebble
//
// Measured with this package's benchmarks (go1.26.8, 2 cores shared with
// other work, so two runs are shown; 1 KiB entries of 100 interleaved
// ledgers, 1M puts ≈ 1 GiB; Pebble configured as the index is — WAL off,
// NoSync, 64 MiB memtable):
//
//	                                  this package     payload in Pebble  ratio
//	Put, Flush every 10k entries      12.7 / 16.5 µs   25.2 / 33.7 µs     2.0x
//	Put, no Flush                      9.2 / 11.0 µs   10.6 / 11.0 µs     1.0–1.15x
//	Get, random over 100k entries      8.4 / 12.3 µs   25.8 / 67.2 µs     3.1–5.5x
//	Pebble write amplification        index only       2.9 after 1 GiB, rising
//
// Without checkpoints, payload-in-Pebble puts only fill the memtable and
// look cheap; the flushes and compactions that rewrite every payload (write
// amplification ≈ 6 at steady state, dependencies.md) show up once data is
// made durable, and random reads must search sstable blocks of payloads
// rather than a small, cached index. The entry log writes each byte once
// (plus compaction of partly dead logs, which the caller controls).
// Reproduce with
//
//	go test -run '^$' -bench 'Put/(serial|checkpoint)|PebbleValues/put' -benchtime=1000000x ./bookie/storage/
//	go test -run '^$' -bench 'GetRandom|PebbleValues/get' ./bookie/storage/
package storage
