package broker

import (
	"context"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicreg"
)

// The topic registry (loading, serving and unloading topics; policy application and
// monitors; compaction; inspection) is package broker/topicreg. Service embeds it under
// this name, so its admin methods are the Service's.
type topicRegistry = topicreg.Registry

func newTopicRegistry(s *Service) *topicRegistry {
	c := s.cfg
	return topicreg.New(s.ctx, topicreg.Config{Cluster: c.Cluster, MaxMessageSize: c.MaxMessageSize,
		DisableDeduplication: c.DisableDeduplication, DeduplicationSnapshotInterval: c.DeduplicationSnapshotInterval,
		MaxPendingPublishBytesPerTopic: c.MaxPendingPublishBytesPerTopic, ManagedLedger: c.ManagedLedger,
		NonPersistent: c.NonPersistent, Policies: c.Policies, CompactionCheckInterval: c.CompactionCheckInterval,
		CompactionBeforeCommit: c.CompactionBeforeCommit, OpenLog: c.OpenLog,
		Factory: s.factory, Store: s.store, Records: s.res.Records, Owner: s.own, Resolver: s.pol,
		Txn:          func() *topic.TxnConfig { return s.txn.TopicConfig(s.OpenLog) },
		TopicMetrics: topic.NewMetrics(s.reg), Registerer: s.reg, Logger: s.log})
}

// Names the scalable-topic hosting calls.

func (s *Service) adminTopic(ctx context.Context, name string) (*topic.Topic, error) {
	return s.AdminTopic(ctx, name)
}

func (s *Service) createTopic(ctx context.Context, name string) error {
	return s.CreateTopic(ctx, name)
}

func (s *Service) deleteTopic(ctx context.Context, name string, force bool) error {
	return s.DeleteTopic(ctx, name, force)
}
