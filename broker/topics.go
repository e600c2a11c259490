package broker

import (
	"github.com/magnetar-io/magnetar/broker/pulsarmetrics"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicreg"
)

// The topic registry (loading, serving and unloading topics; policy application and
// monitors; compaction; inspection) is package broker/topicreg. Service embeds it under
// this name, so its admin methods are the Service's.
type topicRegistry = topicreg.Registry

func newTopicRegistry(s *Service) *topicRegistry {
	c := s.cfg
	// Pulsar's metric names (package broker/pulsarmetrics) are read from the registry's
	// topics and from the publish-latency histogram of the topics' metrics, kept by the tap.
	tap := pulsarmetrics.NewTap(s.reg, pulsarmetrics.PublishLatencyName)
	r := topicreg.New(s.ctx, topicreg.Config{Cluster: c.Cluster, MaxMessageSize: c.MaxMessageSize,
		DisableDeduplication: c.DisableDeduplication, DeduplicationSnapshotInterval: c.DeduplicationSnapshotInterval,
		MaxPendingPublishBytesPerTopic: c.MaxPendingPublishBytesPerTopic, ManagedLedger: c.ManagedLedger,
		NonPersistent: c.NonPersistent, Policies: c.Policies, CompactionCheckInterval: c.CompactionCheckInterval,
		CompactionBeforeCommit: c.CompactionBeforeCommit, OpenLog: c.OpenLog,
		Factory: s.factory, Store: s.store, Records: s.res.Records, Owner: s.own, Resolver: s.pol,
		Txn:          func() *topic.TxnConfig { return s.txn.TopicConfig(s.OpenLog) },
		TopicMetrics: topic.NewMetrics(tap), Registerer: s.reg, Logger: s.log, OnPolicies: s.onPolicies})
	s.reg.MustRegister(pulsarmetrics.New(pulsarmetrics.Config{Cluster: c.Cluster,
		NamespaceLevel: c.NamespaceLevelMetrics, Source: r, Latency: tap}))
	return r
}
