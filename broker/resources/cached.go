package resources

import (
	"context"
	"errors"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// StoreWait bounds a metadata read the broker's caches cannot answer: well inside the
// clients' operation timeout (30 s by default), so an unreachable store gives them a
// retryable error instead of a hang.
const StoreWait = 5 * time.Second

// StoreFirstWait bounds a read that prefers the store to the watched cache.
const StoreFirstWait = 2 * time.Second

// CachedPolicies returns namespace tenant/ns's policies from the watched cache (from the
// store, within StoreWait, if the cache does not hold them).
func (r *Records) CachedPolicies(ctx context.Context, tenant, ns string) (api.NamespacePolicies, error) {
	kv, err := r.namespaces.Read(ctx, metadata.NamespaceKey(tenant, ns), StoreWait)
	return decodePolicies(tenant, ns, kv, err)
}

// WaitNamespace waits until the watched cache holds namespace tenant/ns's record at
// version v or later (as SetNamespace returned it).
func (r *Records) WaitNamespace(ctx context.Context, tenant, ns string, v metadata.Version) error {
	return r.namespaces.WaitVersion(ctx, metadata.NamespaceKey(tenant, ns), v)
}

// decodePolicies decodes the namespace record kv read with err.
func decodePolicies(tenant, ns string, kv metadata.KV, err error) (api.NamespacePolicies, error) {
	return Decode[api.NamespacePolicies](kv, err, api.ErrNamespaceNotFound, "namespace "+tenant+"/"+ns)
}

// CachedPartitions returns the partition count of n's partitioned topic (0: not
// partitioned): from the store (partition counts grow, and a client must not see a stale
// one), or from the watched cache if the store does not answer within StoreFirstWait.
func (r *Records) CachedPartitions(ctx context.Context, n topicname.Name) (int, error) {
	key := partitionedKey(n.Base())
	rctx, cancel := context.WithTimeout(ctx, StoreFirstWait)
	kv, err := r.store.Get(rctx, key)
	cancel()
	if err != nil && !errors.Is(err, metadata.ErrNotFound) && ctx.Err() == nil {
		var found bool
		if kv, found, _ = r.partitioned.Get(key); !found {
			return 0, StoreUnreachable(key, err)
		}
		err = nil
	}
	return partitionsOf(n, kv, err)
}
