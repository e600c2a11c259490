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

// Replication clusters: the namespace's (Pulsar's Policies replication_clusters) and a
// topic's own (TopicPolicies replicationClusters, in the topic policy record), checked as
// Pulsar's NamespacesBase and PersistentTopicsBase check them.

// TopicReplicationKey is the topic policy record's key of a topic's replication clusters
// (Pulsar's TopicPolicies field).
const TopicReplicationKey = "replicationClusters"

// NamespaceReplicationClusters returns namespace "tenant/ns"'s replication clusters; a
// namespace that never set them lives in the local cluster only.
func (r *Records) NamespaceReplicationClusters(ctx context.Context, ns string) ([]string, error) {
	p, err := r.Namespace(ctx, ns)
	if err != nil {
		return nil, err
	}
	return r.ReplicationOf(p), nil
}

// ReplicationOf is a namespace's replication clusters from its record (unset: the local
// cluster only).
func (r *Records) ReplicationOf(p api.NamespacePolicies) []string {
	if len(p.ReplicationClusters) == 0 {
		return []string{r.cluster}
	}
	return slices.Clone(p.ReplicationClusters)
}

// SetNamespaceReplicationClusters checks clusters (checkReplication) and makes them
// namespace ns's replication clusters (compare-and-swap on the record); it returns when
// the broker's watched copy shows the change (at most StoreWait). A refused list changes
// nothing.
func (r *Records) SetNamespaceReplicationClusters(ctx context.Context, ns string, clusters []string) error {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return err
	}
	key := metadata.NamespaceKey(t, n)
	for attempt := 0; attempt < 10; attempt++ {
		kv, err := r.store.Get(ctx, key)
		p, err := decodePolicies(t, n, kv, err)
		if err != nil {
			return err
		}
		list, err := r.checkReplication(ctx, t, ns, p, clusters)
		if err != nil {
			return err
		}
		p.ReplicationClusters = list
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		v, err := r.store.Put(ctx, key, b, kv.Version)
		if errors.Is(err, metadata.ErrBadVersion) {
			continue
		}
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, StoreWait)
		defer cancel()
		_ = r.WaitNamespace(wctx, t, n, v)
		return nil
	}
	return fmt.Errorf("%w: namespace %s keeps changing", api.ErrServiceNotReady, ns)
}

// TopicReplicationClusters returns topic n's own replication clusters (nil: none set) or,
// if applied, the ones in force: its own, else its namespace's.
func (r *Records) TopicReplicationClusters(ctx context.Context, n topicname.Name, applied bool) ([]string, error) {
	p, err := r.NamespacePolicies(ctx, n.Tenant, n.Namespace)
	if err != nil {
		return nil, err
	}
	rec, err := r.TopicPolicies(ctx, n)
	if err != nil {
		return nil, err
	}
	var own []string
	if b := rec[TopicReplicationKey]; len(b) > 0 {
		if err := json.Unmarshal(b, &own); err != nil {
			return nil, fmt.Errorf("topic policies of %s: %s: %w", n, TopicReplicationKey, err)
		}
	}
	if own == nil && applied {
		return r.ReplicationOf(p), nil
	}
	return own, nil
}

// SetTopicReplicationClusters checks clusters (checkReplication, against the topic's
// namespace and tenant) and makes them topic n's own replication clusters; a refused list
// changes nothing.
func (r *Records) SetTopicReplicationClusters(ctx context.Context, n topicname.Name, clusters []string) error {
	p, err := r.NamespacePolicies(ctx, n.Tenant, n.Namespace)
	if err != nil {
		return err
	}
	list, err := r.checkReplication(ctx, n.Tenant, n.NamespaceName(), p, clusters)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(list)
	return r.UpdateTopicPolicies(ctx, n, func(rec map[string]json.RawMessage) error {
		rec[TopicReplicationKey] = b
		return nil
	})
}

// RemoveTopicReplicationClusters removes topic n's own replication clusters: its
// namespace's apply.
func (r *Records) RemoveTopicReplicationClusters(ctx context.Context, n topicname.Name) error {
	if err := r.CheckNamespace(ctx, n.Tenant, n.Namespace); err != nil {
		return err
	}
	return r.UpdateTopicPolicies(ctx, n, func(rec map[string]json.RawMessage) error {
		delete(rec, TopicReplicationKey)
		return nil
	})
}

// checkReplication checks a replication list for a namespace ns of tenant (p: the
// namespace's record) as Pulsar does, and returns it without repeats, in the order given:
//
//   - an empty list: "ClusterIds should not be null or empty" (api.ErrPreconditionFailed);
//   - "global" in it: "Cannot specify global in the list of replication clusters" (412);
//   - a cluster not known (KnownClusters): "Invalid cluster id: c" (api.ErrClusterNotAllowed,
//     403);
//   - a cluster with a peer in the list (PIP-8): api.ErrClusterConflict (409);
//   - a cluster outside the namespace's allowed_clusters, or, if it has none, the tenant's
//     allowed clusters: "Cluster [c] is not in the list of allowed clusters list for
//     tenant [t]" (403);
//   - a list without the local cluster: "Namespace missing local cluster name in clusters
//     list" (412). Pulsar accepts such a list and then refuses to serve the namespace in
//     this cluster (redirecting to a listed one); here it is refused when set, so that a
//     namespace is never left unserved by mistake.
func (r *Records) checkReplication(ctx context.Context, tenant, ns string, p api.NamespacePolicies, clusters []string) ([]string, error) {
	if len(clusters) == 0 {
		return nil, fmt.Errorf("%w: ClusterIds should not be null or empty", api.ErrPreconditionFailed)
	}
	var list []string
	for _, c := range clusters {
		if c == api.GlobalCluster {
			return nil, fmt.Errorf("%w: Cannot specify global in the list of replication clusters", api.ErrPreconditionFailed)
		}
		if !slices.Contains(list, c) {
			list = append(list, c)
		}
	}
	known, err := r.KnownClusters(ctx)
	if err != nil {
		return nil, err
	}
	ti, err := r.Tenant(ctx, tenant)
	if err != nil {
		return nil, err
	}
	for _, c := range list {
		if !slices.Contains(known, c) {
			return nil, fmt.Errorf("%w: Invalid cluster id: %s", api.ErrClusterNotAllowed, c)
		}
		cd, err := r.Cluster(ctx, c)
		switch {
		case errors.Is(err, api.ErrClusterNotFound): // the local cluster without a record
		case err != nil:
			return nil, err
		default:
			var conflict []string
			for _, peer := range cd.PeerClusterNames {
				if slices.Contains(list, peer) {
					conflict = append(conflict, peer)
				}
			}
			if len(conflict) > 0 {
				return nil, fmt.Errorf("%w: %s's peer-clusters %v can't be part of replication-clusters %v",
					api.ErrClusterConflict, c, conflict, list)
			}
		}
		if len(p.AllowedClusters) > 0 {
			if !slices.Contains(p.AllowedClusters, c) {
				return nil, fmt.Errorf("%w: Cluster [%s] is not in the list of allowed clusters list for namespace [%s]",
					api.ErrClusterNotAllowed, c, ns)
			}
		} else if !slices.Contains(ti.AllowedClusters, c) {
			return nil, fmt.Errorf("%w: Cluster [%s] is not in the list of allowed clusters list for tenant [%s]",
				api.ErrClusterNotAllowed, c, tenant)
		}
	}
	if !slices.Contains(list, r.cluster) {
		return nil, fmt.Errorf("%w: Namespace missing local cluster name in clusters list: local_cluster=%s ns=%s clusters=%v",
			api.ErrPreconditionFailed, r.cluster, ns, list)
	}
	return list, nil
}

// CheckNamespaceReplication checks the replication clusters a new namespace's record p
// brings (none: nothing to check) and returns p with them (as Pulsar's createNamespace
// does, the local cluster if none).
func (r *Records) CheckNamespaceReplication(ctx context.Context, ns string, p api.NamespacePolicies) (api.NamespacePolicies, error) {
	t, _, err := topicname.ParseNamespace(ns)
	if err != nil {
		return p, err
	}
	if len(p.ReplicationClusters) == 0 {
		p.ReplicationClusters = []string{r.cluster}
		return p, nil
	}
	list, err := r.checkReplication(ctx, t, ns, p, p.ReplicationClusters)
	if err != nil {
		return p, err
	}
	p.ReplicationClusters = list
	return p, nil
}
