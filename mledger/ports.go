package mledger

import (
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

// env is how a core reaches its owner: post queues fn to run on the owner later (never
// inline; name labels it in traces), after does so after a delay unless cancelled first, now
// reads the clock. The owner goroutine (managed.go) and the simulator (tests) implement it.
type env interface {
	post(name string, fn func())
	after(d time.Duration, name string, fn func()) (cancel func())
	now() time.Time
}
