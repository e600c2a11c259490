// Package bookie is Magnetar's storage node: it stores ledger entries for ledger clients over
// the protocol of package proto/bk, durably (journal fsync before every acknowledgement), and
// registers itself in the metadata store.
//
// # Usage
//
//	b, err := bookie.Start(ctx, bookie.Config{Listen: "127.0.0.1:3181", DataDir: dir, Store: store})
//	...
//	defer b.Close()
//
// # Data directory
//
//	<data-dir>/current/VERSION       the cookie (JSON): bookie id + cluster instance id
//	<data-dir>/current/journal/      journal files (package bookie/journal)
//	<data-dir>/current/ledgers/      entry logs + Pebble index (package bookie/storage)
//
// # Request handling and durability
//
//  1. Add: refused while read-only, if larger than MaxEntrySize, if the entry's digest or
//     header ids do not verify, if the master key differs from the ledger's (the first add,
//     fence or LAC write of a ledger records its key), or if the ledger is fenced and the add
//     is not a recovery add. Otherwise the entry is stored (entry log + index, not yet
//     synced), its piggybacked LAC is noted, and it is appended to the journal; the reply is
//     sent from the journal's completion, i.e. after fdatasync. Refusals store nothing.
//  2. Fencing read: under the ledger's lock the fence is set, stored and journaled and the
//     requested entry is read; the reply waits for the fence record's fsync. Because the
//     journal completes in order, every add accepted before the fence is durable first, and
//     no add passes the fence check after it. Fencing survives restart (journal replay and the
//     ledger's stored metadata).
//  3. Journal replay on start re-applies every record to storage (idempotently), flushes
//     storage and releases the replayed files. A periodic checkpoint does the same while
//     running: take the journal mark, flush storage, delete files before the mark.
//  4. Garbage collection lists local ledgers, then the metadata store's; a local ledger missing
//     from metadata is deleted (journaled) and its entry-log space compacted.
//
// # Registration and identity
//
// The cookie binds the data dir to the bookie id and the cluster instance (see checkCookie).
// A session (lease with keep-alive, Config.SessionTTL) holds the registration key under
// metadata.PrefixAvailable or metadata.PrefixReadOnly; the key vanishes within the TTL when the
// process dies. Disk usage at or above Config.DiskThreshold switches the bookie to read-only
// (adds get StatusReadOnly); below DiskThreshold-0.05 it turns writable again.
//
// # Disk faults
//
// As in BookKeeper (allDisksFull → read-only, diskFailed → shutdown): a write of the
// journal or the storage that fails on a full disk (ENOSPC, EDQUOT) turns the bookie
// read-only until it is restarted — it keeps serving reads; any other failure of the
// journal or the storage (EIO, …), or a data directory gone from under it (its cookie file
// missing at a disk check, every DiskCheckInterval), stops the bookie: it logs one
// "bookie stopping" error, closes (unregistering, so ledger writers replace it by an
// ensemble change), and Done is closed with Err telling the cause (errors.Is
// ErrDiskFailed). The owner of the process exits on Done. The storage's and the journal's
// Failed channels tell the registrar at once; the per-request errors meanwhile are left to
// the logger's rate limit (internal/ratelog in the magnetar command).
//
// # Goroutines
//
//   - acceptLoop: accepts connections; each connection gets readLoop (decodes frames and
//     dispatches; a malformed or oversized frame closes only that connection, with a logged
//     reason) and writeLoop (owns the socket's write side; drains the connection's response
//     queue, which any goroutine may append to without blocking).
//   - registrar.run: owns the metadata session, the registration key and Bookie.state; reacts
//     to disk faults (see Disk faults), starting Close on a goroutine of its own to stop.
//   - checkpointLoop, gcLoop: periodic checkpoint and garbage collection. The periodic
//     checkpoint flushes storage paced (Storage.FlushPaced), hurried by Close.
//   - the journal's own goroutines call completion callbacks, which only queue responses.
//
// Locks: ledgerTable.mu before ledgerState.mu; conn.mu is a leaf. Nothing waits while holding
// ledgerTable.mu.
package bookie
