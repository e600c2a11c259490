package broker

import (
	"context"
	"errors"
	"maps"
	"time"

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

// CreateNamespace creates namespace "tenant/ns" (the tenant must exist).
func (s *Service) CreateNamespace(ctx context.Context, ns string, p NamespacePolicies) error {
	p, err := ownership.WithBundles(p, s.cfg.DefaultNumberOfNamespaceBundles)
	if err != nil {
		return err
	}
	return s.res.CreateNamespace(ctx, ns, p)
}

// SetNamespacePolicies replaces the policies of namespace "tenant/ns".
func (s *Service) SetNamespacePolicies(ctx context.Context, ns string, p NamespacePolicies) error {
	if _, has := p.Other["bundles"]; !has { // the bundles are kept (split changes them)
		if old, err := s.res.Namespace(ctx, ns); err == nil && old.Other["bundles"] != nil {
			p.Other = maps.Clone(p.Other)
			if p.Other == nil {
				p.Other = map[string]any{}
			}
			p.Other["bundles"] = old.Other["bundles"]
		}
	}
	return s.setNamespaceSeen(ctx, ns, p)
}

// setNamespaceSeen sets namespace ns's record and waits (at most storeWait) until this
// broker's watched copy of it shows the change: what the admin API sets, the broker's next
// lookup or topic creation here reads (the writer reads its write).
func (s *Service) setNamespaceSeen(ctx context.Context, ns string, p NamespacePolicies) error {
	v, err := s.res.SetNamespace(ctx, ns, p)
	if err != nil || s.own == nil {
		return err
	}
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, storeWait)
	defer cancel()
	_ = s.res.WaitNamespace(wctx, t, n, v) // the change is stored either way
	return nil
}

// DeleteNamespace deletes namespace "tenant/ns". Without force it must have no topics
// (ErrNotEmpty); with force its topics are deleted first.
func (s *Service) DeleteNamespace(ctx context.Context, ns string, force bool) error {
	return s.deleteNamespace(ctx, ns, force)
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

// CreateTopic creates a non-partitioned topic (ErrAlreadyExists if it or a partitioned
// topic of that name exists).
func (s *Service) CreateTopic(ctx context.Context, topic string) error {
	return s.createTopic(ctx, topic)
}

// DeleteTopic deletes a topic or partition and its data. Without force it fails with
// ErrNotEmpty while producers or consumers are connected; with force they are disconnected.
func (s *Service) DeleteTopic(ctx context.Context, topic string, force bool) error {
	return s.deleteTopic(ctx, topic, force)
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

// DeletePartitionedTopic deletes a partitioned topic and all its partitions.
func (s *Service) DeletePartitionedTopic(ctx context.Context, topic string, force bool) error {
	return s.deletePartitioned(ctx, topic, force)
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
	n, err := s.partitions(ctx, topic)
	return PartitionedTopicMetadata{Partitions: n}, err
}

// Lookup returns the broker that serves topic, acquiring it for this broker if no broker
// does.
func (s *Service) Lookup(ctx context.Context, topic string) (LookupResult, error) {
	return s.lookup(ctx, topic)
}

// TopicStats returns a topic's (or one partition's) statistics, loading the topic if needed.
func (s *Service) TopicStats(ctx context.Context, topic string) (TopicStats, error) {
	t, err := s.adminTopic(ctx, topic)
	if err != nil {
		return TopicStats{}, err
	}
	return t.Stats(ctx)
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

// InternalStats returns a topic's managed-ledger statistics.
func (s *Service) InternalStats(ctx context.Context, topic string) (InternalStats, error) {
	t, err := s.adminTopic(ctx, topic)
	if err != nil {
		return InternalStats{}, err
	}
	return t.InternalStats(ctx)
}

// LastMessageID returns the id of a topic's last message (EntryID -1: empty topic).
func (s *Service) LastMessageID(ctx context.Context, topic string) (MessageID, error) {
	t, err := s.adminTopic(ctx, topic)
	if err != nil {
		return MessageID{}, err
	}
	id, err := t.LastMessageID(ctx)
	if err != nil {
		return MessageID{}, err
	}
	return fromTopicID(id, t.Name().Partition), nil
}

// Unload closes a topic on this broker (disconnecting its clients, who reconnect and load it
// again) and releases its ownership.
func (s *Service) Unload(ctx context.Context, topic string) error { return s.unload(ctx, topic) }

// Terminate terminates a topic: no more messages are accepted (producers get
// TopicTerminatedError) and the id of the last message is returned.
func (s *Service) Terminate(ctx context.Context, topic string) (MessageID, error) {
	t, err := s.adminTopic(ctx, topic)
	if err != nil {
		return MessageID{}, err
	}
	id, err := t.Terminate(ctx)
	if err != nil {
		return MessageID{}, err
	}
	return fromTopicID(id, t.Name().Partition), nil
}

// Subscriptions lists a topic's subscriptions (durable ones, and the readers' connected now).
func (s *Service) Subscriptions(ctx context.Context, topic string) ([]string, error) {
	t, err := s.adminTopic(ctx, topic)
	if err != nil {
		return nil, err
	}
	return t.Subscriptions(ctx)
}

// CreateSubscription creates a durable subscription at a message id (Earliest, Latest or an
// id); ErrAlreadyExists if it exists.
func (s *Service) CreateSubscription(ctx context.Context, topic, sub string, at MessageID) error {
	t, err := s.adminTopic(ctx, topic)
	if err != nil {
		return err
	}
	return t.CreateSubscription(ctx, sub, toTopicID(at))
}

// DeleteSubscription deletes a subscription. Without force it fails with ErrNotEmpty while
// consumers are connected; with force they are disconnected.
func (s *Service) DeleteSubscription(ctx context.Context, topic, sub string, force bool) error {
	t, err := s.adminTopic(ctx, topic)
	if err != nil {
		return err
	}
	return t.DeleteSubscription(ctx, sub, force)
}

// ResetCursor moves a subscription to a message id: messages after it are (re)delivered.
// Connected consumers are disconnected and reconnect.
func (s *Service) ResetCursor(ctx context.Context, topic, sub string, to MessageID) error {
	t, err := s.adminTopic(ctx, topic)
	if err != nil {
		return err
	}
	return t.ResetCursor(ctx, sub, toTopicID(to))
}

// ResetCursorToTime moves a subscription to the first message published at or after t.
func (s *Service) ResetCursorToTime(ctx context.Context, topic, sub string, at time.Time) error {
	t, err := s.adminTopic(ctx, topic)
	if err != nil {
		return err
	}
	return t.ResetCursorToTime(ctx, sub, at)
}

// SkipMessages acknowledges the next n entries of a subscription's backlog.
func (s *Service) SkipMessages(ctx context.Context, topic, sub string, n int) error {
	if n < 0 {
		return ErrInvalidArgument
	}
	t, err := s.adminTopic(ctx, topic)
	if err != nil {
		return err
	}
	return t.Skip(ctx, sub, n)
}

// ClearBacklog acknowledges a subscription's whole backlog.
func (s *Service) ClearBacklog(ctx context.Context, topic, sub string) error {
	t, err := s.adminTopic(ctx, topic)
	if err != nil {
		return err
	}
	return t.Skip(ctx, sub, -1)
}
