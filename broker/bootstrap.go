package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
func InitializeCluster(ctx context.Context, store metadata.Store, cluster string, cd ClusterData) (created bool, err error) {
	if err := topicname.CheckTenant(cluster); err != nil {
		return false, fmt.Errorf("%w: cluster name: %v", ErrInvalidName, err)
	}
	b, _ := json.Marshal(cd)
	created, err = putIfAbsent(ctx, store, metadata.ClusterKey(cluster), b)
	if err != nil {
		return false, err
	}
	ti, _ := json.Marshal(TenantInfo{AdminRoles: []string{}, AllowedClusters: []string{cluster}})
	np, _ := json.Marshal(NamespacePolicies{})
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

// Cluster returns a cluster's record (ErrClusterNotFound if it has none).
func (s *Service) Cluster(ctx context.Context, name string) (ClusterData, error) {
	kv, err := s.store.Get(ctx, metadata.ClusterKey(name))
	if errors.Is(err, metadata.ErrNotFound) {
		return ClusterData{}, fmt.Errorf("%w: cluster %s", ErrClusterNotFound, name)
	}
	if err != nil {
		return ClusterData{}, err
	}
	var cd ClusterData
	if err := json.Unmarshal(kv.Value, &cd); err != nil {
		return ClusterData{}, fmt.Errorf("cluster %s record: %w", name, err)
	}
	return cd, nil
}
