package autorecovery

import (
	"math/rand/v2"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// Env is everything the auto-recovery components (Auditor, Worker, Decommission) do outside
// themselves: time, randomness, the metadata store and bookie requests. Every method returns
// at once; its callback runs later, exactly once, on the component's owner goroutine (the real
// driver, newLoop, runs one goroutine that executes every callback; the simulation runs them as
// events of its seeded loop). So a component is a single-owner state machine that never
// blocks and never needs a lock.
//
// Errors follow the metadata package: Get returns metadata.ErrNotFound for a missing key, Put
// and Delete return metadata.ErrBadVersion on a version mismatch.
type Env interface {
	// Now is the current time (wall clock, or the simulation's virtual clock).
	Now() time.Time
	// After runs fn on the owner after d.
	After(d time.Duration, fn func())
	// Rand is the component's only source of randomness (owner only).
	Rand() *rand.Rand
	// Get reads a key.
	Get(key string, cb func(metadata.KV, error))
	// Put writes a persistent key at the expected version.
	Put(key string, value []byte, expected metadata.Version, cb func(metadata.Version, error))
	// PutEphemeral writes a key bound to the component's session: it vanishes when the
	// process dies (after the session TTL).
	PutEphemeral(key string, value []byte, expected metadata.Version, cb func(metadata.Version, error))
	// Delete removes a key at the expected version (metadata.AnyVersion: always).
	Delete(key string, expected metadata.Version, cb func(error))
	// List returns the keys under prefix in key order.
	List(prefix string, cb func([]metadata.KV, error))
	// Bookie sends one request to the bookie at addr. A request that gets no answer in time
	// completes with an error.
	Bookie(addr string, req *bk.Request, cb func(bk.Response, error))
}
