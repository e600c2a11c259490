package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
// so it may run on every start; created reports whether the cluster record was new.
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
		if _, err := putIfAbsent(ctx, store, metadata.TenantKey(tn[0]), ti); err != nil {
			return false, err
		}
		if _, err := putIfAbsent(ctx, store, metadata.NamespaceKey(tn[0], tn[1]), np); err != nil {
			return false, err
		}
	}
	return created, nil
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
