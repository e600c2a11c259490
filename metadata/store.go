package metadata

import (
	"context"
	"errors"
	"time"
)

// Version is a key's modification revision in the store. A key that does not exist has
// version 0. Versions only grow.
type Version int64

// Expected versions for Put and Delete besides an exact version.
const (
	// AnyVersion makes Put/Delete unconditional.
	AnyVersion Version = -1
	// NotExists makes Put succeed only if the key does not exist.
	NotExists Version = 0
)

// KV is one key with its value and version.
type KV struct {
	Key     string
	Value   []byte
	Version Version // modification revision
	// Created is the revision that created the key (stable across updates).
	Created int64
	// Lease is the session id that owns an ephemeral key, 0 for persistent keys.
	Lease int64
}

// EventType tells a watch event apart.
type EventType uint8

// Event types.
const (
	EventPut EventType = iota + 1
	EventDelete
)

// Event is one change seen by a watch.
type Event struct {
	Type EventType
	KV   KV // for EventDelete: Key and Version (the deletion revision) only
}

// Errors. Callers test them with errors.Is.
var (
	// ErrNotFound is returned by Get for a key that does not exist.
	ErrNotFound = errors.New("metadata: key not found")
	// ErrBadVersion is returned by a conditional Put/Delete whose expected version does not
	// match (including "must not exist" on an existing key).
	ErrBadVersion = errors.New("metadata: bad version")
	// ErrSessionExpired is returned by operations on a session whose lease is gone.
	ErrSessionExpired = errors.New("metadata: session expired")
	// ErrClosed is returned after the store is closed.
	ErrClosed = errors.New("metadata: store closed")
	// ErrCompacted is returned by a watch asked to resume from a revision the store compacted.
	ErrCompacted = errors.New("metadata: revision compacted")
)

// Store is the metadata store every component uses. Implementations are safe for concurrent
// use by many goroutines.
type Store interface {
	// Get returns the key or ErrNotFound.
	Get(ctx context.Context, key string) (KV, error)
	// Put writes value if the key's version equals expected (AnyVersion: always; NotExists: only
	// if absent) and returns the new version; otherwise ErrBadVersion.
	Put(ctx context.Context, key string, value []byte, expected Version) (Version, error)
	// Delete removes the key if its version equals expected (AnyVersion: always). Deleting a
	// missing key with AnyVersion is not an error; with any other expected it is ErrBadVersion.
	Delete(ctx context.Context, key string, expected Version) error
	// List returns every key with the prefix in key order, and the store revision it read at
	// (pass rev+1 to Watch to see every later change).
	List(ctx context.Context, prefix string) (kvs []KV, rev int64, err error)
	// Range returns up to limit keys in [start, end) in key order (limit <= 0: all).
	Range(ctx context.Context, start, end string, limit int) ([]KV, error)
	// Watch streams every change under prefix from revision fromRev (0: from now). The channel
	// closes when ctx ends or the watch fails; Err on the returned Watch tells why.
	Watch(ctx context.Context, prefix string, fromRev int64) *Watch
	// NewSession starts a session: a lease kept alive in the background. Ephemeral keys put
	// through it vanish when the process dies (after at most ttl) or the session closes.
	NewSession(ctx context.Context, ttl time.Duration) (Session, error)
	// Commit applies ops atomically: all of them, or none if any op's expected version does
	// not hold (ErrBadVersion). It returns the new version of each put (0 for deletes). A key
	// appears at most once in ops; etcd takes at most 128 guarded ops and 128 writes.
	Commit(ctx context.Context, ops []Op) ([]Version, error)
	// NextID returns the next value of the named monotonic counter (first value 1). Values are
	// unique and increasing across all clients.
	NextID(ctx context.Context, counter string) (int64, error)
	// Close releases the store's connections. Idempotent.
	Close() error
}

// Op is one write of Store.Commit: a put of Value (Delete false) or a delete, guarded by
// Expected as Store.Put and Store.Delete are (a delete of a missing key with AnyVersion
// succeeds). With Check, the op writes nothing: it only requires Expected to hold (a
// fence: the commit fails if the key changed).
type Op struct {
	Key      string
	Value    []byte
	Expected Version
	Delete   bool
	Check    bool
}

// Watch is a running watch. Events arrive in revision order with no gaps; Rev of the last
// delivered batch lets a caller resume with Watch(prefix, Rev+1).
type Watch struct {
	// C delivers batches of events in revision order. It closes when the watch ends.
	C <-chan WatchBatch
	// Err returns why the watch ended (nil while running; context error or ErrCompacted).
	Err func() error
}

// WatchBatch is the events of one revision or a run of revisions.
type WatchBatch struct {
	Rev    int64 // the store revision the batch brings the watcher up to
	Events []Event
}

// Renewer is implemented by sessions that know when the store last renewed their lease:
// the lease lasts its ttl from the renewal (which came a response's delay before Renewed),
// so a holder that counts a deadline well inside the ttl from Renewed stops using what the
// session guards before anyone else can take it over.
type Renewer interface {
	Renewed() time.Time
}

// Session is a lease with keep-alive. Safe for concurrent use.
type Session interface {
	// ID is the lease id.
	ID() int64
	// Put writes an ephemeral key bound to the session, guarded by expected like Store.Put.
	Put(ctx context.Context, key string, value []byte, expected Version) (Version, error)
	// Done is closed when the session has expired or was closed.
	Done() <-chan struct{}
	// Close revokes the lease, deleting the session's keys. Idempotent.
	Close() error
}
