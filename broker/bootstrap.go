package broker

import (
	"context"

	"github.com/magnetar-io/magnetar/broker/resources"
	"github.com/magnetar-io/magnetar/broker/topicname"
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

// Clusters lists the known clusters: the cluster records and this broker's own cluster.
func (s *Service) Clusters(ctx context.Context) ([]string, error) { return s.res.KnownClusters(ctx) }

// CreateCluster writes a cluster's record (resources.Records.CreateCluster).
func (s *Service) CreateCluster(ctx context.Context, name string, cd ClusterData) error {
	return s.res.CreateCluster(ctx, name, cd)
}

// UpdateCluster replaces a cluster's record (resources.Records.UpdateCluster).
func (s *Service) UpdateCluster(ctx context.Context, name string, cd ClusterData) error {
	return s.res.UpdateCluster(ctx, name, cd)
}

// DeleteCluster deletes a cluster's record no tenant or namespace uses
// (resources.Records.DeleteCluster).
func (s *Service) DeleteCluster(ctx context.Context, name string) error {
	return s.res.DeleteCluster(ctx, name)
}

// NamespaceReplicationClusters returns namespace "tenant/ns"'s replication clusters.
func (s *Service) NamespaceReplicationClusters(ctx context.Context, ns string) ([]string, error) {
	return s.res.NamespaceReplicationClusters(ctx, ns)
}

// SetNamespaceReplicationClusters checks and sets namespace "tenant/ns"'s replication
// clusters (resources.Records.SetNamespaceReplicationClusters).
func (s *Service) SetNamespaceReplicationClusters(ctx context.Context, ns string, clusters []string) error {
	return s.res.SetNamespaceReplicationClusters(ctx, ns, clusters)
}

// TopicReplicationClusters returns a topic's own replication clusters (nil: none) or, if
// applied, the ones in force.
func (s *Service) TopicReplicationClusters(ctx context.Context, topic string, applied bool) ([]string, error) {
	n, err := topicname.Parse(topic)
	if err != nil {
		return nil, err
	}
	return s.res.TopicReplicationClusters(ctx, n, applied)
}

// SetTopicReplicationClusters checks and sets a topic's own replication clusters.
func (s *Service) SetTopicReplicationClusters(ctx context.Context, topic string, clusters []string) error {
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	return s.res.SetTopicReplicationClusters(ctx, n, clusters)
}

// RemoveTopicReplicationClusters removes a topic's own replication clusters.
func (s *Service) RemoveTopicReplicationClusters(ctx context.Context, topic string) error {
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	return s.res.RemoveTopicReplicationClusters(ctx, n)
}

// SetPeerClusters sets a cluster's peer clusters (resources.Records.SetPeerClusters).
func (s *Service) SetPeerClusters(ctx context.Context, name string, peers []string) error {
	return s.res.SetPeerClusters(ctx, name, peers)
}
