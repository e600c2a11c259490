package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/metadata"
)

// Local policies: the part of a namespace's policies that is one cluster's own (Pulsar's
// LocalPolicies, kept in the local store while the namespace's policies may be in a
// configuration store shared with other clusters). Magnetar keeps its bundles there: a
// namespace is created with its bundles in its policies, and a split (by an admin or the
// load manager) records the new boundaries in the local policies of the cluster that split,
// so that the other clusters' bundles, and their owners, do not change under them.

// localPolicies is the record at metadata.LocalPoliciesKey.
type localPolicies struct {
	// Bundles is Pulsar's BundlesData ({"boundaries": [...], "numBundles": n}).
	Bundles json.RawMessage `json:"bundles,omitempty"`
	// NamespaceCreated is the creation revision of the namespace record the bundles were
	// split from: a namespace deleted and created again (perhaps through another cluster)
	// starts from its own policies' bundles, not from an older namespace's split.
	NamespaceCreated int64 `json:"namespaceCreated"`
}

// bundlesOver returns p with the bundles of lp if lp belongs to namespace record nkv.
func bundlesOver(p api.NamespacePolicies, nkv metadata.KV, lp localPolicies) (api.NamespacePolicies, error) {
	if len(lp.Bundles) == 0 || lp.NamespaceCreated != nkv.Created {
		return p, nil
	}
	var bd any
	if err := json.Unmarshal(lp.Bundles, &bd); err != nil {
		return p, fmt.Errorf("local policies of %s: bundles: %w", nkv.Key, err)
	}
	p.Other = maps.Clone(p.Other)
	if p.Other == nil {
		p.Other = map[string]any{}
	}
	p.Other["bundles"] = bd
	return p, nil
}

// CachedBundlePolicies is CachedPolicies with the bundles in force in this cluster: those
// of the namespace's local policies if a split recorded some, else the policies' own. It
// reads the store only for what the watched caches have not listed yet.
func (r *Records) CachedBundlePolicies(ctx context.Context, tenant, ns string) (api.NamespacePolicies, error) {
	nkv, err := r.namespaces.Read(ctx, metadata.NamespaceKey(tenant, ns), StoreWait)
	p, err := decodePolicies(tenant, ns, nkv, err)
	if err != nil {
		return p, err
	}
	key := metadata.LocalPoliciesKey(tenant, ns)
	lkv, found, synced := r.localPolicies.Get(key)
	if !found && !synced {
		lkv, err = r.localPolicies.Read(ctx, key, StoreWait)
		if errors.Is(err, metadata.ErrNotFound) {
			return p, nil
		}
		if err != nil {
			return p, err
		}
		found = true
	}
	if !found {
		return p, nil
	}
	var lp localPolicies
	if err := json.Unmarshal(lkv.Value, &lp); err != nil {
		return p, fmt.Errorf("local policies of %s/%s: %w", tenant, ns, err)
	}
	return bundlesOver(p, nkv, lp)
}

// SetBundles records new bundles for namespace tenant/ns in this cluster: change gets the
// namespace's policies with the bundles now in force (as CachedBundlePolicies, read from
// the store) and returns the new BundlesData, which is written to the local policies by
// compare-and-swap (a concurrent change is retried a few times, then
// api.ErrServiceNotReady). It returns the local policies' new version (WaitBundles).
func (r *Records) SetBundles(ctx context.Context, tenant, ns string, change func(api.NamespacePolicies) (any, error)) (metadata.Version, error) {
	key := metadata.LocalPoliciesKey(tenant, ns)
	for attempt := 0; attempt < 5; attempt++ {
		nkv, err := r.store.Get(ctx, metadata.NamespaceKey(tenant, ns))
		p, err := decodePolicies(tenant, ns, nkv, err)
		if err != nil {
			return 0, err
		}
		var lp localPolicies
		expected := metadata.NotExists
		lkv, err := r.store.Get(ctx, key)
		switch {
		case errors.Is(err, metadata.ErrNotFound):
		case err != nil:
			return 0, err
		default:
			expected = lkv.Version
			if err := json.Unmarshal(lkv.Value, &lp); err != nil {
				return 0, fmt.Errorf("local policies of %s/%s: %w", tenant, ns, err)
			}
		}
		if p, err = bundlesOver(p, nkv, lp); err != nil {
			return 0, err
		}
		bd, err := change(p)
		if err != nil {
			return 0, err
		}
		if lp.Bundles, err = json.Marshal(bd); err != nil {
			return 0, err
		}
		lp.NamespaceCreated = nkv.Created
		b, err := json.Marshal(lp)
		if err != nil {
			return 0, err
		}
		v, err := r.store.Put(ctx, key, b, expected)
		if errors.Is(err, metadata.ErrBadVersion) {
			continue
		}
		return v, err
	}
	return 0, fmt.Errorf("%w: bundles of namespace %s/%s changed concurrently", api.ErrServiceNotReady, tenant, ns)
}

// WaitBundles waits until the watched cache holds namespace tenant/ns's local policies at
// version v or later (as SetBundles returned it).
func (r *Records) WaitBundles(ctx context.Context, tenant, ns string, v metadata.Version) error {
	return r.localPolicies.WaitVersion(ctx, metadata.LocalPoliciesKey(tenant, ns), v)
}
