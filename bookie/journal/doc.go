// Package journal is the bookie's write-ahead journal. An entry is acknowledged to a
// client only after its journal record is written and fdatasynced. Many records share
// one fdatasync (group commit), and a record waits for company only for a bounded time.
//
// # Usage
//
//	j, err := journal.Open(dir, journal.DefaultOptions(), func(r journal.Record) error {
//		return storage.Apply(r) // r.Data is only valid during the call
//	})
//	...
//	j.Append(journal.Record{Type: journal.RecAddEntry, LedgerID: l, EntryID: e, Data: b},
//		func(err error) { ack(err) }) // called once, after the record is durable
//	...
//	m := j.Mark()      // before flushing ledger storage
//	storage.Flush()    // durable
//	j.Release(m)       // journal files before m are no longer needed
//	j.Close()
//
// # Caller obligations
//
//  1. Apply every replayed record to ledger storage during Open (replay is called in
//     journal order; copy r.Data if it is kept).
//  2. Treat a record as durable only when its done callback got nil. done must not
//     block: it runs on the syncer goroutine, in append order (or, for an append
//     rejected up front, inside Append).
//  3. Call Release(m) only after ledger storage has durably flushed everything
//     appended before m (and everything replayed by Open); take m with Mark before
//     starting that flush.
//  4. Call Close exactly when done; it completes every pending append.
//
// # On-disk format
//
// A journal directory holds files named by a 16-digit decimal sequence number that
// only grows: 0000000000000001.jnl, 0000000000000002.jnl, ... Each file is created
// with O_EXCL, preallocated to Options.FileSize with fallocate (so it reads as zeros) or,
// with Options.PrepareRate set and the background preparation done in time, written
// with zeros ahead of use (prepare.go: appends into written blocks keep fdatasync out of
// the filesystem journal),
// and the directory is fsynced before any record in it is acknowledged. A file holds
// records back to back from offset 0, all integers little-endian:
//
//	+----------+----------+--------+--------------+--------------+----------------+
//	| length   | crc      | type   | ledgerID     | entryID      | data           |
//	| u32      | u32      | u8     | i64          | i64          | length-17 B    |
//	+----------+----------+--------+--------------+--------------+----------------+
//	0          4          8        9              17             25       8+length
//	                      |<--- length bytes, covered by crc32c (Castagnoli) ---->|
//
// length counts type..data (17 + len(data)), so it is never 0: a zero length (the
// preallocated zeros) or the end of the file marks the end of the written data.
// Record types are frozen: 1 AddEntry, 2 Fence, 3 MasterKey (data: 20-byte key and
// 1 digest-type byte), 4 ExplicitLAC (data: the LAC body), 5 DeleteLedger.
//
// # Rolling
//
// Positions are assigned by Append: a record that does not fit in the rest of the
// current file goes to offset 0 of the next one (a record larger than FileSize gets a
// file of its own, which grows past the preallocation). The unused end of a rolled
// file stays zero. The writer fdatasyncs the old file before it writes the first byte
// into the new one, so a file that is not the last one is always complete.
//
// # Replay and truncation
//
// Open replays every file in sequence order. At each offset it finds one of:
//
//   - a complete record with a valid CRC: replayed;
//   - a zero length or the end of the file: the end of the file's data. If a valid
//     record follows anywhere later in the file, that is corruption (zeroed sectors
//     inside acknowledged data);
//   - a bad record: a partial header, a length running past the end of the file, a
//     length below 17, or a CRC mismatch. In the last file, with no valid record
//     anywhere after it, it is a torn tail: a group that was being written when the
//     process died, which therefore was never acknowledged. Anywhere else it is
//     corruption;
//   - a valid CRC with an unknown type: corruption.
//
// The search for a valid record after the end asks the filesystem for data ranges
// (SEEK_DATA) with readahead off, so the unwritten preallocated tail costs nothing.
// Corruption fails Open with a *CorruptionError (errors.Is(err, ErrCorruption)) and
// changes nothing on disk: the journal never silently drops acknowledged data. After the scan Open truncates the
// last file just after its last complete record (removing a torn tail for good, so it
// can never be resurrected, and giving back the unused preallocation), or removes it
// when it holds no record, fsyncs, and starts a new file for appends.
//
// Caveat: a power failure (not a process crash) while an fdatasync is in flight may
// persist a later, unacknowledged group while an earlier, also unacknowledged, one is
// lost. Open then sees valid records after a bad one in the last file and reports
// corruption rather than guessing; an operator decides.
//
// # Goroutines
//
// Besides the callers of Append, Mark, Release and Close there are two goroutines:
//
//   - the writer (runWriter) owns the active file, rolling, and the group commit
//     policy (nextWrite). It is woken through wakeWriter (by Append, and by the syncer
//     when it goes idle) and by its timer; it decides where a group ends, swaps the
//     queue's filled batch for an empty one, pwrites it at the positions Append
//     assigned (rolling as needed) and sends it on written. It writes the next group
//     while the syncer is still syncing the previous one.
//   - the syncer (runSyncer) owns the written-but-unsynced batches and the files seen
//     in them. It receives from written; once it holds the end of a group it
//     fdatasyncs the newest file once for everything pending, tells the writer it is
//     idle, calls the done callbacks in order, closes files rolled away from, and
//     recycles the batches into the queue's free list. OnGroupSynced runs here.
//
// The queue (Journal.q) is the only state they share with each other and with the
// callers: a mutex-guarded leaf holding the batch being filled, the free list, the
// next record position, the lifecycle state (open, failed, closed) and the syncer's
// progress as seen by the writer's policy. Lock order: q.mu is never held while taking
// another lock, doing I/O or calling out. Close moves the state to closed, closes the
// closing channel, waits for the writer (which flushes the queue and closes written)
// and the syncer (which syncs and completes everything it received), then closes the
// files.
//
// # Group commit
//
// A group ends, and is synced with one fdatasync, when (nextWrite):
//
//  1. the journal is closing or failed, or MaxGroupBytes are pending;
//  2. MaxGroupWait is 0: every batch the writer takes ends a group, and the groups
//     that queue up while an fdatasync runs share the next one ("flush as soon as the
//     queue is empty", natural group commit);
//  3. otherwise, while the syncer is busy, records queue up (and are written early in
//     64 KiB chunks); once it is idle the group ends as soon as it holds its target or
//     the wait for company is over. The target is the records already pending when the
//     syncer went idle plus one per caller it just released (in a closed loop of N
//     writers, all N are back); it is 0 (sync at once) when at least as many records
//     arrived during the fdatasync as it completed, as under open-loop load. That wait starts when the syncer
//     could have taken the oldest record and lasts MaxGroupWait, but never beyond one
//     previous-fsync duration after the syncer went idle: waiting longer than an fsync
//     gains little, since records arriving meanwhile form the next group. So a record
//     waits for company at most MaxGroupWait, and a lone writer does not wait at all
//     after a quiet period. A wait that ends without its company (an open-loop load at
//     a moderate rate, whose arrivals looked like a closed loop's) makes the next 16
//     groups sync at once: the wait costs more than it asks for, since a Go timer on
//     Linux fires no sooner than about 1.1 ms (2–3 ms at p99 on the 2-vCPU VM), and
//     perf ledger --rate 5000 at 1/1/1 measured add latency p50 2.2–2.4 ms, p99 8.1–8.6 ms
//     with those waits, 1.3–1.4 ms and 6.3–6.8 ms without. A closed loop keeps its
//     groups (BenchmarkGroupCommitVsPlain, wait=1ms: 62–63 records per fsync, was 64).
//
// Pacing (MinSyncInterval, default 750µs): unless a closed loop's company is back, a
// group does not end sooner than MinSyncInterval after the previous fdatasync started,
// and the records arriving meanwhile join it; the writer sleeps with nanosleep, since a
// Go timer would wait a millisecond or more. This is for the machine, not the disk:
// on the 2-vCPU VM every fdatasync costs the whole machine CPU (the hypervisor's block
// emulation shows up as steal and run-queue delay in every process), so that at 5k
// msg/s, unpaced (≈ 3 000 fdatasyncs/s), a process that does no I/O at all sees its
// timers fire 1.5–5.3 ms late at p99, against 1.0 ms paced. A probe with the standalone on
// tmpfs plus `perf disk --rate` beside it: 5 000 fdatasyncs/s made the tmpfs standalone's
// p99 publish 12.5 ms, the same bytes in 1 000 fdatasyncs/s 5.5–6.1 ms, in 250/s 1.9–2.8
// ms. A closed loop (sync publish) keeps its rate: its fdatasyncs are the latency.
//
// A failed write or fdatasync fails the journal for good (fsync is never retried: the
// kernel may have dropped the dirty pages): the pending and all later appends get the
// error, and Close returns it. Failed() is closed at that moment and Err() tells the
// error, for the owner to react at once (the bookie stops) rather than per append.
//
// # Performance
//
// Acceptance target: with 64 closed-loop writers appending 1 KiB records, the journal's
// MB/s is at least 0.8× that of one goroutine doing pwrite+fdatasync into a
// preallocated file in the same directory with the journal's average group size.
// Measured on a shared 2-vCPU VM (ext4 on virtio, load average 7–13 from other work),
// BenchmarkGroupCommitVsPlain, 10 runs of 30 alternating 100ms phase pairs each:
//
//	MaxGroupWait    records/fsync  journal MB/s  ratio median (min–max)  ratio-split
//	1ms (default)   62–63          40 (35–76)    0.95 (0.81–1.51)        0.88 (0.73–1.03)
//	0 (eager)       32             22 (10–28)    1.21 (0.92–1.46)        1.12 (0.75–1.37)
//
// ratio-split compares with the same loop but with the pwrite done on a helper
// goroutine, which on this VM was 1.1–1.4× faster than the single-goroutine loop (the
// journal, too, writes and syncs on different goroutines). The default 1ms gives ~1.8×
// the absolute throughput of MaxGroupWait 0 in this closed loop (one group of ~63
// instead of two alternating groups of ~32), but pays ~100µs of callbacks and
// re-appends per group on the critical path, which the eager mode hides behind the
// other group's fdatasync; its lowest ratios come from the fastest-disk phases. Run
// alone (BenchmarkGroupCommit, then BenchmarkPlainAppendFdatasync at the same batch
// size), single measurements swing from 0.4 to 3 with the disk; only side-by-side
// phases are meaningful. The append path allocates nothing per record (0 allocs/op).
//
// Reproduce:
//
//	go test -run XXX -bench VsPlain -benchtime 30x -count 5 ./bookie/journal/
//	go test -run XXX -bench . -count 3 ./bookie/journal/   # all benchmarks
//
// JOURNAL_BENCH_DIR picks the filesystem (default: the test temp dir),
// JOURNAL_BENCH_WAITS the MaxGroupWait values ("0,1ms"), JOURNAL_PLAIN_BATCHES the
// plain loop's batch sizes ("32,48,64").
package journal
