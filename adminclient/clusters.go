package adminclient

import (
	"context"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// Cluster records and replication clusters (Pulsar's clusters resource, the namespaces'
// and topics' /replication).

func clusterPath(cluster string) (Path, error) {
	if err := topicname.CheckTenant(cluster); err != nil {
		return Path{}, nameError(err)
	}
	return ClusterPath(cluster), nil
}

// CreateCluster writes a cluster's record (superusers; 409 if it exists).
func (c *Client) CreateCluster(ctx context.Context, cluster string, cd api.ClusterData) error {
	p, err := clusterPath(cluster)
	if err != nil {
		return err
	}
	return c.Do(ctx, "PUT", p, cd, nil)
}

// UpdateCluster replaces a cluster's record (fields not given are cleared).
func (c *Client) UpdateCluster(ctx context.Context, cluster string, cd api.ClusterData) error {
	p, err := clusterPath(cluster)
	if err != nil {
		return err
	}
	return c.Do(ctx, "POST", p, cd, nil)
}

// DeleteCluster deletes a cluster's record (412 while a tenant or namespace uses it).
func (c *Client) DeleteCluster(ctx context.Context, cluster string) error {
	p, err := clusterPath(cluster)
	if err != nil {
		return err
	}
	return c.Do(ctx, "DELETE", p, nil, nil)
}

// PeerClusters returns a cluster's peer clusters.
func (c *Client) PeerClusters(ctx context.Context, cluster string) ([]string, error) {
	if _, err := clusterPath(cluster); err != nil {
		return nil, err
	}
	var l []string
	return l, c.Get(ctx, PeerClustersPath(cluster), &l)
}

// SetPeerClusters sets a cluster's peer clusters (each must have a record).
func (c *Client) SetPeerClusters(ctx context.Context, cluster string, peers []string) error {
	if _, err := clusterPath(cluster); err != nil {
		return err
	}
	return c.Do(ctx, "POST", PeerClustersPath(cluster), nonNilList(peers), nil)
}

// NamespaceReplicationClusters returns a namespace's replication clusters.
func (c *Client) NamespaceReplicationClusters(ctx context.Context, namespace string) ([]string, error) {
	p, err := NamespaceReplicationPath(namespace)
	if err != nil {
		return nil, err
	}
	var l []string
	return l, c.Get(ctx, p, &l)
}

// SetNamespaceReplicationClusters sets a namespace's replication clusters.
func (c *Client) SetNamespaceReplicationClusters(ctx context.Context, namespace string, clusters []string) error {
	p, err := NamespaceReplicationPath(namespace)
	if err != nil {
		return err
	}
	return c.Do(ctx, "POST", p, nonNilList(clusters), nil)
}

// TopicReplicationClusters returns a topic's own replication clusters (nil: none) or, if
// applied, the ones in force (its own, else its namespace's).
func (c *Client) TopicReplicationClusters(ctx context.Context, topic string, applied bool) ([]string, error) {
	p, err := TopicReplicationPath(topic)
	if err != nil {
		return nil, err
	}
	if applied {
		p = p.Query("applied", "true")
	}
	var l []string
	return l, c.Get(ctx, p, &l)
}

// SetTopicReplicationClusters sets a topic's own replication clusters.
func (c *Client) SetTopicReplicationClusters(ctx context.Context, topic string, clusters []string) error {
	p, err := TopicReplicationPath(topic)
	if err != nil {
		return err
	}
	return c.Do(ctx, "POST", p, nonNilList(clusters), nil)
}

// RemoveTopicReplicationClusters removes a topic's own replication clusters (its
// namespace's apply).
func (c *Client) RemoveTopicReplicationClusters(ctx context.Context, topic string) error {
	p, err := TopicReplicationPath(topic)
	if err != nil {
		return err
	}
	return c.Do(ctx, "DELETE", p, nil, nil)
}

// nonNilList sends a nil list as [] (the broker answers 412 for an empty one).
func nonNilList(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}
