package broker

import (
	"context"

	"github.com/magnetar-io/magnetar/broker/resources"
	"github.com/magnetar-io/magnetar/metadata"
)

// SystemTenant and SystemNamespace are what Pulsar's initialize-cluster-metadata creates
// beside public/default.
const (
	SystemTenant    = resources.SystemTenant
	SystemNamespace = resources.SystemNamespace
)

// InitializeCluster does what `pulsar initialize-cluster-metadata` does (see
// resources.InitializeCluster); created reports whether the cluster record was new.
func InitializeCluster(ctx context.Context, store metadata.Store, cluster string, cd ClusterData) (created bool, err error) {
	return resources.InitializeCluster(ctx, store, cluster, cd)
}

// Cluster returns a cluster's record (ErrClusterNotFound if it has none).
func (s *Service) Cluster(ctx context.Context, name string) (ClusterData, error) {
	return s.res.Cluster(ctx, name)
}
