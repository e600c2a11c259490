package broker

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/magnetar-io/magnetar/broker/ownership"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// This file is the exported service API for the admin REST layer and the tools (see doc.go).
// Every method is safe for concurrent use.

// Tenants lists the tenants.
func (s *Service) Tenants(ctx context.Context) ([]string, error) { return s.res.Tenants(ctx) }

// Tenant returns a tenant's record.
func (s *Service) Tenant(ctx context.Context, name string) (TenantInfo, error) {
	return s.res.Tenant(ctx, name)
}

// CreateTenant creates a tenant (ErrAlreadyExists if it exists).
func (s *Service) CreateTenant(ctx context.Context, name string, info TenantInfo) error {
	return s.res.CreateTenant(ctx, name, info)
}

// UpdateTenant replaces a tenant's record (ErrTenantNotFound if it does not exist).
func (s *Service) UpdateTenant(ctx context.Context, name string, info TenantInfo) error {
	return s.res.UpdateTenant(ctx, name, info)
}

// DeleteTenant deletes a tenant without namespaces (ErrNotEmpty otherwise).
func (s *Service) DeleteTenant(ctx context.Context, name string) error {
	return s.res.DeleteTenant(ctx, name)
}

// Namespaces lists the namespaces of a tenant as "tenant/ns".
func (s *Service) Namespaces(ctx context.Context, tenant string) ([]string, error) {
	return s.res.Namespaces(ctx, tenant)
}

// Namespace returns the policies of namespace "tenant/ns".
func (s *Service) Namespace(ctx context.Context, ns string) (NamespacePolicies, error) {
	return s.res.Namespace(ctx, ns)
}

// CreateNamespace creates namespace "tenant/ns" (the tenant must exist); its replication
// clusters, if given, are checked, else they are this cluster.
func (s *Service) CreateNamespace(ctx context.Context, ns string, p NamespacePolicies) error {
	p, err := ownership.WithBundles(p, s.cfg.DefaultNumberOfNamespaceBundles)
	if err != nil {
		return err
	}
	if p, err = s.res.CheckNamespaceReplication(ctx, ns, p); err != nil {
		return err
	}
	return s.res.CreateNamespace(ctx, ns, p)
}

// SetNamespacePolicies replaces the policies of namespace "tenant/ns". Its bundles and,
// if p has none, its replication clusters are kept; replication clusters p changes are
// checked as SetNamespaceReplicationClusters checks them.
func (s *Service) SetNamespacePolicies(ctx context.Context, ns string, p NamespacePolicies) error {
	old, oldErr := s.res.Namespace(ctx, ns)
	if _, has := p.Other["bundles"]; !has { // the bundles are kept (split changes them)
		if oldErr == nil && old.Other["bundles"] != nil {
			p.Other = maps.Clone(p.Other)
			if p.Other == nil {
				p.Other = map[string]any{}
			}
			p.Other["bundles"] = old.Other["bundles"]
		}
	}
	switch {
	case p.ReplicationClusters == nil && oldErr == nil:
		p.ReplicationClusters = old.ReplicationClusters
	case p.ReplicationClusters != nil && (oldErr != nil || !slices.Equal(p.ReplicationClusters, old.ReplicationClusters)):
		var err error
		if p, err = s.res.CheckNamespaceReplication(ctx, ns, p); err != nil {
			return err
		}
	}
	return s.res.SetNamespaceSeen(ctx, ns, p)
}

// Topics lists the persistent topics of namespace "tenant/ns" by full name, partitions
// included (as GetTopicsOfNamespace answers clients).
func (s *Service) Topics(ctx context.Context, ns string) ([]string, error) {
	return s.res.Topics(ctx, ns)
}

// NonPersistentTopics lists the non-persistent topics of namespace "tenant/ns" by full
// name, partitions included (Topics lists the persistent ones; PartitionedTopics both).
func (s *Service) NonPersistentTopics(ctx context.Context, ns string) ([]string, error) {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return nil, err
	}
	if err := s.res.CheckNamespace(ctx, t, n); err != nil {
		return nil, err
	}
	return s.res.DomainTopics(ctx, t, n, topicname.NonPersistent)
}

// PartitionedTopics lists the partitioned topics of namespace "tenant/ns" by full name.
func (s *Service) PartitionedTopics(ctx context.Context, ns string) ([]string, error) {
	return s.res.PartitionedTopics(ctx, ns)
}

// CreatePartitionedTopic creates a partitioned topic of n >= 1 partitions.
func (s *Service) CreatePartitionedTopic(ctx context.Context, topic string, n int) error {
	return s.res.CreatePartitioned(ctx, topic, n)
}

// UpdatePartitionedTopic grows a partitioned topic to n partitions (ErrInvalidArgument if n
// is not larger).
func (s *Service) UpdatePartitionedTopic(ctx context.Context, topic string, n int) error {
	return s.res.UpdatePartitioned(ctx, topic, n)
}

// PartitionedTopicMetadata returns the partition count of a topic (0: not partitioned, or
// unknown).
func (s *Service) PartitionedTopicMetadata(ctx context.Context, topic string) (PartitionedTopicMetadata, error) {
	tn, err := topicname.Parse(topic)
	if err != nil {
		return PartitionedTopicMetadata{}, err
	}
	if _, err := s.cachedPolicies(ctx, tn.Tenant, tn.Namespace); err != nil {
		return PartitionedTopicMetadata{}, err
	}
	n, err := s.Partitions(ctx, topic)
	return PartitionedTopicMetadata{Partitions: n}, err
}

// Lookup returns the broker that serves topic, acquiring it for this broker if no broker
// does.
func (s *Service) Lookup(ctx context.Context, topic string) (LookupResult, error) {
	return s.lookup(ctx, topic)
}

// PartitionStats returns one partition's stats for a partitioned topic's aggregate
// (partitioned-stats, and stats of a partitioned topic). As Pulsar does on the broker asked,
// a partition another broker serves is fetched from that broker with this broker's
// credentials (package broker/peer) rather than answered with a redirect: a client
// following the redirects of every partition's owner would go round in a cycle.
func (s *Service) PartitionStats(ctx context.Context, topic string) (TopicStats, error) {
	st, err := s.TopicStats(ctx, topic)
	var no *NotOwnerError
	if !errors.As(err, &no) {
		return st, err
	}
	owner := no.Owner.HTTPURL
	if owner == "" {
		owner = no.Owner.HTTPURLTLS
	}
	return s.peer.TopicStats(ctx, owner, topic)
}
