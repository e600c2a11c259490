package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// SystemTenant and SystemNamespace are what Pulsar's initialize-cluster-metadata creates
// beside public/default.
const (
	SystemTenant    = "pulsar"
	SystemNamespace = "system"
)

// InitializeCluster does what `pulsar initialize-cluster-metadata` does: it writes cluster's
// record with its service URLs and creates the tenants public and pulsar (allowed on
// cluster) and the namespaces public/default and pulsar/system. Records that exist are kept,
// so it may run on every start; created reports whether the cluster record was new. As
// Pulsar's, it adds cluster to the allowed clusters of an existing public or pulsar tenant,
// and to the replication clusters of an existing public/default or pulsar/system that lists
// some (one that lists none lives in each cluster apart): so the second cluster initialized
// on a shared configuration store may use them too. store is the cluster's store
// (metadata.Split with a configuration store apart: these records all live there).
func InitializeCluster(ctx context.Context, store metadata.Store, cluster string, cd api.ClusterData) (created bool, err error) {
	if err := topicname.CheckTenant(cluster); err != nil {
		return false, fmt.Errorf("%w: cluster name: %v", api.ErrInvalidName, err)
	}
	b, _ := json.Marshal(cd)
	created, err = putIfAbsent(ctx, store, metadata.ClusterKey(cluster), b)
	if err != nil {
		return false, err
	}
	ti, _ := json.Marshal(api.TenantInfo{AdminRoles: []string{}, AllowedClusters: []string{cluster}})
	np, _ := json.Marshal(api.NamespacePolicies{})
	for _, tn := range [][2]string{{topicname.DefaultTenant, topicname.DefaultNamespace}, {SystemTenant, SystemNamespace}} {
		if err := putOrAdd(ctx, store, metadata.TenantKey(tn[0]), ti, func(rec *api.TenantInfo) bool {
			if slices.Contains(rec.AllowedClusters, cluster) {
				return false
			}
			rec.AllowedClusters = append(rec.AllowedClusters, cluster)
			return true
		}); err != nil {
			return false, err
		}
		if err := putOrAdd(ctx, store, metadata.NamespaceKey(tn[0], tn[1]), np, func(p *api.NamespacePolicies) bool {
			if len(p.ReplicationClusters) == 0 || slices.Contains(p.ReplicationClusters, cluster) {
				return false
			}
			p.ReplicationClusters = append(p.ReplicationClusters, cluster)
			return true
		}); err != nil {
			return false, err
		}
	}
	return created, nil
}

// putOrAdd creates key with value v if it does not exist; otherwise it applies add to the
// record and writes it back (compare-and-swap, retried) if add says it changed it.
func putOrAdd[T any](ctx context.Context, store metadata.Store, key string, v []byte, add func(*T) bool) error {
	for attempt := 0; ; attempt++ {
		created, err := putIfAbsent(ctx, store, key, v)
		if err != nil || created {
			return err
		}
		kv, err := store.Get(ctx, key)
		if errors.Is(err, metadata.ErrNotFound) {
			continue // deleted since: create it
		}
		if err != nil {
			return err
		}
		var rec T
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if !add(&rec) {
			return nil
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		_, err = store.Put(ctx, key, b, kv.Version)
		if !errors.Is(err, metadata.ErrBadVersion) || attempt >= 9 {
			return err
		}
	}
}

func putIfAbsent(ctx context.Context, store metadata.Store, key string, v []byte) (bool, error) {
	_, err := store.Put(ctx, key, v, metadata.NotExists)
	if errors.Is(err, metadata.ErrBadVersion) {
		return false, nil
	}
	return err == nil, err
}

// Cluster returns a cluster's record (api.ErrClusterNotFound if it has none).
func (r *Records) Cluster(ctx context.Context, name string) (api.ClusterData, error) {
	kv, err := r.store.Get(ctx, metadata.ClusterKey(name))
	return Decode[api.ClusterData](kv, err, api.ErrClusterNotFound, "cluster "+name)
}
