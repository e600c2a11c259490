package replhost

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/replication"
)

// ReplicatorStats is one remote cluster's entry of the replication section of the topic
// stats (topic.ReplicatorStats): the replicator fills the outbound side, the topic the
// inbound one (from the remote's replicator producer publishing here).
type ReplicatorStats = topic.ReplicatorStats

// rateSample is the counters at a time, to measure the rates between two stats calls.
type rateSample struct {
	at                   time.Time
	msgs, bytes, expired int64
	rateMsgs, rateBytes  float64
	rateExpired          float64
}

// replicatorStats measures r's rates since the last call (at least a second apart) and
// returns its stats entry.
func (r *replicator) replicatorStats(ctx context.Context) ReplicatorStats {
	st := r.stats(ctx)
	now := time.Now()
	r.mu.Lock()
	s := &r.mu.sample
	if el := now.Sub(s.at).Seconds(); s.at.IsZero() || el >= 1 {
		if !s.at.IsZero() {
			s.rateMsgs = float64(st.MsgsOut-s.msgs) / el
			s.rateBytes = float64(st.BytesOut-s.bytes) / el
			s.rateExpired = float64(st.Expired-s.expired) / el
		}
		s.at, s.msgs, s.bytes, s.expired = now, st.MsgsOut, st.BytesOut, st.Expired
	}
	out := ReplicatorStats{MsgRateOut: s.rateMsgs, MsgThroughputOut: s.rateBytes, MsgRateExpired: s.rateExpired,
		ReplicationBacklog: st.Backlog, Connected: st.Connected, ReplicationDelayInSeconds: st.DelayMs / 1000}
	r.mu.Unlock()
	if st.Connected {
		out.OutboundConnection = r.remote
		out.OutboundConnectedSince = st.ConnectedSince.UTC().Format(time.RFC3339Nano)
	}
	return out
}

// topicView is a topic's replicators as its statistics see them (topic.Replication).
type topicView struct {
	h *Host
	t *topic.Topic
}

func (v topicView) Stats(ctx context.Context) map[string]any { return v.h.topicStats(ctx, v.t) }

func (v topicView) Cursors(ctx context.Context) map[string]topic.CursorInfo {
	v.h.mu.Lock()
	reps := make([]*replicator, 0, len(v.h.mu.topics[v.t]))
	for _, r := range v.h.mu.topics[v.t] {
		reps = append(reps, r)
	}
	v.h.mu.Unlock()
	out := make(map[string]topic.CursorInfo, len(reps))
	for _, r := range reps {
		if !r.started.Load() {
			continue
		}
		if ci, err := r.cur.Info(ctx); err == nil {
			out[replication.CursorName(r.remote)] = ci
		}
	}
	return out
}

// topicStats returns the replication section of t's stats.
func (h *Host) topicStats(ctx context.Context, t *topic.Topic) map[string]any {
	h.mu.Lock()
	reps := make([]*replicator, 0, len(h.mu.topics[t]))
	for _, r := range h.mu.topics[t] {
		reps = append(reps, r)
	}
	h.mu.Unlock()
	out := make(map[string]any, len(reps))
	for _, r := range reps {
		out[r.remote] = r.replicatorStats(ctx)
	}
	return out
}

// Collector returns the replicated subscriptions' metric with Pulsar's name
// (pulsar_replicated_subscriptions_pending_snapshots). The pulsar_replication_* metrics are
// exported by package broker/pulsarmetrics from the topics' stats (their replication
// section, which Stats fills).
func (h *Host) Collector() prometheus.Collector { return collector{h} }

type collector struct{ h *Host }

// pendingSnapshotsDesc is Pulsar's gauge of the replicated subscriptions' snapshots in
// progress, summed over the loaded topics.
var pendingSnapshotsDesc = prometheus.NewDesc("pulsar_replicated_subscriptions_pending_snapshots",
	"Snapshots of replicated subscriptions in progress", []string{"cluster"}, nil)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingSnapshotsDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	if !c.h.cfg.ReplSubs.Enabled {
		return
	}
	c.h.mu.Lock()
	pending := int64(0)
	for _, s := range c.h.mu.subs {
		pending += s.pending.Load()
	}
	c.h.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(pendingSnapshotsDesc, prometheus.GaugeValue, float64(pending), c.h.cfg.LocalCluster)
}
