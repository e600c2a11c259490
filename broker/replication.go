package broker

import (
	"context"

	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/replhost"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/replication"
)

// Geo-replication (package broker/replhost, over the core of package replication): every
// loaded persistent topic whose replication clusters (its own, else its namespace's) name
// other clusters has one replicator per remote cluster. The registry calls onPolicies
// when a topic loads and whenever its namespace's or its own policy record changes; the
// replicators stop with the topic. A remote cluster is reached with a client built from
// its cluster record (brokerServiceUrl, or brokerServiceUrlTls with
// brokerClientTlsEnabled; its authentication plugin and parameters; its trust
// certificates), made once per record version; a replicator asks for it at each connect,
// so an updated record applies at its next reconnect. A partition's replicator first
// checks the partitioned topic's metadata on the remote through its admin API (the
// record's serviceUrl), creating it there if missing.

func (s *Service) newReplication() *replhost.Host {
	s.remotes = replhost.NewRemotes(s.res, s.log)
	h := replhost.New(replhost.Config{LocalCluster: s.cfg.Cluster, Remote: s.remotes.Remote,
		Admin: s.remotes.Admin,
		// The registry is made after the host: resolved at each call.
		LocalPartitions: func(ctx context.Context, topic string) (int, error) { return s.Partitions(ctx, topic) },
		Core:            replication.Config{MaxPending: s.cfg.ReplicationProducerQueueSize},
		ReplSubs: replhost.ReplSubs{Enabled: !s.cfg.DisableReplicatedSubscriptions,
			FrequencyMs: s.cfg.ReplicatedSubscriptionsSnapshotFrequency.Milliseconds(),
			TimeoutMs:   s.cfg.ReplicatedSubscriptionsSnapshotTimeout.Milliseconds(),
			MaxCached:   s.cfg.ReplicatedSubscriptionsSnapshotMaxCached},
		Logger: s.log})
	s.reg.MustRegister(h.Collector())
	return h
}

// onPolicies starts and stops loaded topic t's replicators after its policies changed
// (r: the policies in force), and gives them the message TTL and the replicator dispatch
// rate.
func (s *Service) onPolicies(ctx context.Context, t *topic.Topic, r policy.Resolved) {
	if s.repl == nil || !t.Name().IsPersistent() {
		return
	}
	set := replhost.Settings{MessageTTLMs: r.TTL * 1000}
	set.RateMsgs, set.RateBytes = s.ReplicatorRate(ctx, t.Name())
	s.repl.Update(ctx, t, r.ReplicationClusters, set)
}
