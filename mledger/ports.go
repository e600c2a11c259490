package mledger

import (
	"context"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
)

// Ledgers is the managed ledger's port to the ledger layer. Every method returns promptly and
// reports its outcome by calling cb exactly once, on any goroutine (possibly before it
// returns). Callbacks must not block. BookieLedgers binds it to ledger.Client; tests bind it to a
// seeded simulator that delays and reorders completions.
//
// Error categories: an error wrapping ErrLedgerFenced means another client recovered the
// ledger; ErrNoSuchLedger means it does not exist. Anything else is treated as transient.
//
// With an Offloader, Read is also called from upload goroutines (EntryReader), concurrently
// with the owner's calls: implementations must be safe for concurrent use (BookieLedgers is).
type Ledgers interface {
	// Create makes a new, empty, writable ledger.
	Create(cfg LedgerConfig, cb func(Writer, error))
	// OpenRecover fences ledger id, closes it at its last recoverable entry (if it is not
	// closed yet) and reports its end. Any writer of it fails with ErrLedgerFenced from then.
	OpenRecover(id int64, password []byte, cb func(LedgerEnd, error))
	// Read returns the payloads of entries first..last (inclusive) of ledger id. last never
	// exceeds what the managed ledger knows to be confirmed.
	Read(id int64, password []byte, first, last int64, cb func([][]byte, error))
	// Delete removes ledger id. Deleting a missing ledger reports ErrNoSuchLedger.
	Delete(id int64, cb func(error))
}

// Writer is a ledger open for appending.
//
// Contract (BookKeeper's): the i-th Append call (from 0) is entry i; a successful completion
// of entry e means entries 0..e are all confirmed (LAC >= e), whatever order completions
// arrive in; once an Append fails, all later ones fail too. Close seals the ledger: its end
// is the last confirmed entry, entries after it are never readable, and their Appends fail
// (possibly after Close has reported).
type Writer interface {
	// ID returns the ledger id.
	ID() int64
	// Append adds payload as the next entry. The writer keeps payload until cb.
	Append(payload []byte, cb func(entryID int64, err error))
	// LAC returns the last add confirmed the writer knows, without I/O.
	LAC() int64
	// Close seals the ledger and reports its end. Close may be called again after an error.
	Close(cb func(LedgerEnd, error))
}

// LedgerConfig describes a ledger to create.
type LedgerConfig struct {
	Ensemble, WriteQuorum, AckQuorum int
	Password                         []byte
	// Purpose labels the ledger for logs: "data" or "cursor:<name>".
	Purpose string
}

// LedgerEnd is a sealed ledger's last entry (-1: empty) and payload bytes.
type LedgerEnd struct {
	LastEntry int64
	Size      int64
}

// MetaStore is the managed ledger's asynchronous view of the metadata store: the same
// operations and errors as metadata.Store (ErrNotFound, ErrBadVersion), reported through a
// callback exactly once, on any goroutine (possibly before the call returns). A failed Put or Delete may still have been
// applied (a timeout): the managed ledger re-reads before deciding. AsyncStore binds it to a
// metadata.Store.
type MetaStore interface {
	Get(key string, cb func(metadata.KV, error))
	Put(key string, value []byte, expected metadata.Version, cb func(metadata.Version, error))
	Delete(key string, expected metadata.Version, cb func(error))
	List(prefix string, cb func([]metadata.KV, error))
}

// Offloader is the managed ledger's port to an object store (tiered storage): it copies a
// closed ledger into objects, reads entries back from them and deletes them. An adapter over
// a blob store (data and index objects in Pulsar's block format) implements it; Config.Offloader
// nil turns offload off.
//
// Concurrency: implementations must be safe for concurrent use. The managed ledger never calls
// them on its owner goroutine: each call runs on a goroutine of its own (asyncOffloader), so a
// call may block for as long as its ctx allows. Per managed ledger, at most one Offload is in
// flight at a time; reads and deletes may run alongside it, and several managed ledgers share
// one Offloader.
//
// Attempts: every Offload is one attempt, named by a UUID that is never reused (the managed
// ledger records it before the call, so that a crash leaves a known orphan). All objects of an
// attempt live under its UUID and ledger id; an implementation never writes, overwrites or
// deletes objects of another attempt.
type Offloader interface {
	// Driver names the driver (Pulsar's managedLedgerOffloadDriver: "aws-s3", "S3",
	// "google-cloud-storage", "azureblob", "filesystem"). It is recorded in each ledger's
	// OffloadContext.
	Driver() string
	// Offload copies entries 0..req.Entries-1 of the closed ledger req.LedgerID, read through
	// r, into objects of attempt req.UUID. It returns nil only once the attempt is complete:
	// every data block AND the index object are durably written, so that ReadOffloaded can
	// serve any entry — the managed ledger then records the copy complete and, after the
	// deletion lag, deletes the bookie copy. It returns the driver metadata ReadOffloaded and
	// DeleteOffloaded need (may be nil).
	//
	// On an error, or once ctx is cancelled (the managed ledger closes, loses ownership, or
	// the ledger is trimmed), it stops writing for this attempt before it returns: whatever
	// it wrote stays until DeleteOffloaded(ledger, req.UUID), which the managed ledger calls
	// before it records a new attempt for the ledger.
	Offload(ctx context.Context, req OffloadRequest, r EntryReader) (driverMetadata map[string]string, err error)
	// ReadOffloaded returns the payloads of entries first..last (inclusive) of a complete
	// attempt, all of them or an error (a failure is reported to the reader as ErrOffloadRead,
	// which is retryable; an entry is never skipped).
	ReadOffloaded(ctx context.Context, l OffloadedLedger, first, last int64) ([][]byte, error)
	// DeleteOffloaded deletes every object of attempt l.UUID of ledger l.LedgerID (data and
	// index, complete or partial, a multipart upload left open). Deleting what does not exist
	// succeeds. On an error the managed ledger calls it again later.
	DeleteOffloaded(ctx context.Context, l OffloadedLedger) error
}

// OffloadRequest is one offload attempt of a closed ledger.
type OffloadRequest struct {
	ManagedLedger string
	LedgerID      int64
	UUID          string
	// Entries and Size are the ledger's entry count (> 0) and payload bytes, final.
	Entries, Size int64
}

// OffloadedLedger names one attempt's objects: what ReadOffloaded and DeleteOffloaded need.
type OffloadedLedger struct {
	ManagedLedger  string
	LedgerID       int64
	UUID           string
	DriverMetadata map[string]string
}

// EntryReader reads a closed ledger's entries from the bookies for Offload. ReadEntries
// returns the payloads of entries first..last (inclusive) or an error. It is safe for use
// from the Offload call's goroutine(s); it calls Ledgers.Read, which must therefore be safe
// for concurrent use (BookieLedgers is).
type EntryReader interface {
	ReadEntries(ctx context.Context, first, last int64) ([][]byte, error)
}

// offloadPort is the core's asynchronous view of an Offloader, in the style of Ledgers: each
// method returns promptly and calls cb exactly once, on any goroutine. asyncOffloader binds
// it to an Offloader; the simulation binds it to a seeded in-memory object store.
type offloadPort interface {
	driver() string
	// offload runs one attempt; read reads the ledger's entries. cancel asks the attempt to
	// stop (its cb still comes, with an error, once it has stopped writing).
	offload(req OffloadRequest, read func(first, last int64, cb func([][]byte, error)), cb func(map[string]string, error)) (cancel func())
	readOffloaded(l OffloadedLedger, first, last int64, cb func([][]byte, error))
	deleteOffloaded(l OffloadedLedger, cb func(error))
}

// env is how a core reaches its owner: post queues fn to run on the owner later (never
// inline; name labels it in traces), after does so after a delay unless cancelled first, now
// reads the clock. The owner goroutine (managed.go) and the simulator (tests) implement it.
type env interface {
	post(name string, fn func())
	after(d time.Duration, name string, fn func()) (cancel func())
	now() time.Time
}
