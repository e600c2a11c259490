package resources

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/metadata"
)

// Cache mirrors every key under a prefix of the metadata store: one goroutine (Run) lists
// the prefix, then follows a watch from the listed revision (listing again if the watch
// fails), so the broker answers from it what it knew while the store is unreachable. Safe
// for concurrent use; Run owns the refresh.
type Cache struct {
	store  metadata.Store
	prefix string
	log    *slog.Logger

	mu struct {
		sync.Mutex // leaf; guards the fields below
		synced     bool
		kvs        map[string]metadata.KV
		changed    chan struct{} // closed and replaced on every change
	}
}

// NewCache returns the (empty, unsynced) cache of prefix; Run fills it.
func NewCache(store metadata.Store, prefix string, log *slog.Logger) *Cache {
	c := &Cache{store: store, prefix: prefix, log: log}
	c.mu.kvs = map[string]metadata.KV{}
	c.mu.changed = make(chan struct{})
	return c
}

// Run keeps the cache current until ctx ends (metadata.Follower: a failed listing is
// retried every 500ms, a watch that ends is followed by a new listing).
func (c *Cache) Run(ctx context.Context) {
	f := metadata.Follower{Store: c.store, Prefix: c.prefix, Log: c.log,
		Retry: backoff.Policy{Base: 500 * time.Millisecond, Max: 500 * time.Millisecond}}
	f.Run(ctx, func(u metadata.Update) {
		c.mu.Lock()
		defer c.mu.Unlock()
		switch u.Kind {
		case metadata.Listed:
			c.mu.kvs = make(map[string]metadata.KV, len(u.KVs))
			for _, kv := range u.KVs {
				c.mu.kvs[kv.Key] = kv
			}
			c.mu.synced = true
		case metadata.Changed:
			for _, ev := range u.Events {
				if ev.Type == metadata.EventDelete {
					delete(c.mu.kvs, ev.KV.Key)
				} else {
					c.mu.kvs[ev.KV.Key] = ev.KV
				}
			}
		default:
			return
		}
		c.notifyLocked()
	})
}

func (c *Cache) notifyLocked() {
	close(c.mu.changed)
	c.mu.changed = make(chan struct{})
}

// Get returns the cached key; synced is false until the first listing arrived.
func (c *Cache) Get(key string) (kv metadata.KV, found, synced bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kv, found = c.mu.kvs[key]
	return kv, found, c.mu.synced
}

// List returns the cached keys under prefix (which must be under the cache's prefix).
func (c *Cache) List(prefix string) []metadata.KV {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []metadata.KV
	for k, kv := range c.mu.kvs {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			out = append(out, kv)
		}
	}
	return out
}

// Changed returns a channel closed at the next change of the cache.
func (c *Cache) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.changed
}

// Read returns key from the cache if it holds it; otherwise (absent, or not synced yet) from
// the store, bounded by d so that an unreachable store fails fast with ErrServiceNotReady
// instead of holding the caller (api.ErrServiceNotReady). A key absent from the store is
// metadata.ErrNotFound.
func (c *Cache) Read(ctx context.Context, key string, d time.Duration) (metadata.KV, error) {
	if kv, found, _ := c.Get(key); found {
		return kv, nil
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	kv, err := c.store.Get(ctx, key)
	if err != nil && ctx.Err() != nil {
		return kv, StoreUnreachable(key, err)
	}
	return kv, err
}

// WaitVersion waits until the cache holds key at version v or later.
func (c *Cache) WaitVersion(ctx context.Context, key string, v metadata.Version) error {
	for {
		ch := c.Changed()
		if kv, found, _ := c.Get(key); found && kv.Version >= v {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// StoreUnreachable returns the error of a read of key that the store did not answer in time
// (err): api.ErrServiceNotReady, which clients retry.
func StoreUnreachable(key string, err error) error {
	return fmt.Errorf("%w: metadata store unreachable (reading %s): %v", api.ErrServiceNotReady, key, err)
}
