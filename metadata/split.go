package metadata

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrSpansStores is returned by a Split for a listing, watch, range or commit that would
// touch both its stores: none is atomic or ordered across two etcds.
var ErrSpansStores = errors.New("metadata: spans the local and the configuration store")

// Split is the Store of a cluster whose configuration store (Pulsar's
// configurationMetadataStoreUrl) is not its local store: the records under
// ConfigStorePrefixes (cluster records, tenants, namespace policies, partitioned-topic
// metadata, which every cluster sharing the configuration store sees) are read and
// written in Config, everything else (bookies, ledgers, managed ledgers and cursors,
// topics, schemas, bundle ownership, brokers, load reports, transactions, counters) in
// Local. Safe for concurrent use.
//
// A key goes to the store of its prefix; a listing, watch or range goes to the store of
// its prefix when that prefix lies inside one store, and fails with ErrSpansStores when it
// covers keys of both (e.g. "/admin/" or ""); a Commit must write to one store only.
// Versions and revisions are each store's own: a caller that lists a prefix and watches it
// from the listing's revision stays in one store, and so does a Follower (it lists its
// RevisionKey in the store of its Prefix). Sessions and NextID counters are the local
// store's: no configuration record is ephemeral.
type Split struct {
	// Local and Config are the two stores; Close closes neither (their opener does).
	Local, Config Store
}

var _ Store = (*Split)(nil)

// NewSplit returns the store of a cluster with local store local and configuration store
// config: local itself if config is nil or local (Pulsar's default: the configuration
// store is the local store), else a *Split.
func NewSplit(local, config Store) Store {
	if config == nil || config == local {
		return local
	}
	return &Split{Local: local, Config: config}
}

// IsConfigKey reports whether key lives in the configuration store (ConfigStorePrefixes).
func IsConfigKey(key string) bool {
	for _, p := range ConfigStorePrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// storeOf returns the store of one key.
func (s *Split) storeOf(key string) Store {
	if IsConfigKey(key) {
		return s.Config
	}
	return s.Local
}

// StoreFor returns the store that holds every key under prefix, or ErrSpansStores if
// keys under it live in both.
func (s *Split) StoreFor(prefix string) (Store, error) {
	if IsConfigKey(prefix) {
		return s.Config, nil
	}
	for _, p := range ConfigStorePrefixes {
		if strings.HasPrefix(p, prefix) {
			return nil, fmt.Errorf("prefix %q: %w", prefix, ErrSpansStores)
		}
	}
	return s.Local, nil
}

// Get reads key from its store.
func (s *Split) Get(ctx context.Context, key string) (KV, error) { return s.storeOf(key).Get(ctx, key) }

// Put writes key in its store.
func (s *Split) Put(ctx context.Context, key string, value []byte, expected Version) (Version, error) {
	return s.storeOf(key).Put(ctx, key, value, expected)
}

// Delete deletes key from its store.
func (s *Split) Delete(ctx context.Context, key string, expected Version) error {
	return s.storeOf(key).Delete(ctx, key, expected)
}

// List lists prefix in the store that holds it (ErrSpansStores if both do).
func (s *Split) List(ctx context.Context, prefix string) ([]KV, int64, error) {
	st, err := s.StoreFor(prefix)
	if err != nil {
		return nil, 0, err
	}
	return st.List(ctx, prefix)
}

// Range reads [start, end) from the store that holds it (ErrSpansStores if both do).
func (s *Split) Range(ctx context.Context, start, end string, limit int) ([]KV, error) {
	st := s.storeOf(start)
	for _, p := range ConfigStorePrefixes {
		pEnd := p[:len(p)-1] + string(p[len(p)-1]+1) // the first key after every key under p
		inside := strings.HasPrefix(start, p) && end != "" && end <= pEnd
		overlaps := start < pEnd && (end == "" || p < end)
		if overlaps && !inside {
			return nil, fmt.Errorf("range [%q, %q): %w", start, end, ErrSpansStores)
		}
	}
	return st.Range(ctx, start, end, limit)
}

// Watch watches prefix in the store that holds it; a prefix of both stores gives a watch
// that has ended with ErrSpansStores.
func (s *Split) Watch(ctx context.Context, prefix string, fromRev int64) *Watch {
	st, err := s.StoreFor(prefix)
	if err != nil {
		ch := make(chan WatchBatch)
		close(ch)
		return &Watch{C: ch, Err: func() error { return err }}
	}
	return st.Watch(ctx, prefix, fromRev)
}

// NewSession starts a session on the local store.
func (s *Split) NewSession(ctx context.Context, ttl time.Duration) (Session, error) {
	return s.Local.NewSession(ctx, ttl)
}

// Commit applies ops in their store; ops of both stores are refused with ErrSpansStores.
func (s *Split) Commit(ctx context.Context, ops []Op) ([]Version, error) {
	if len(ops) == 0 {
		return s.Local.Commit(ctx, ops)
	}
	st := s.storeOf(ops[0].Key)
	for _, o := range ops[1:] {
		if s.storeOf(o.Key) != st {
			return nil, fmt.Errorf("commit of %q and %q: %w", ops[0].Key, o.Key, ErrSpansStores)
		}
	}
	return st.Commit(ctx, ops)
}

// NextID draws from the local store's counter.
func (s *Split) NextID(ctx context.Context, counter string) (int64, error) {
	return s.Local.NextID(ctx, counter)
}

// Close does nothing: the two stores are closed by whoever opened them.
func (s *Split) Close() error { return nil }

// storeFor returns the store of st that holds prefix: st itself unless st is a Split.
func storeFor(st Store, prefix string) Store {
	if sp, ok := st.(*Split); ok {
		if one, err := sp.StoreFor(prefix); err == nil {
			return one
		}
	}
	return st
}
