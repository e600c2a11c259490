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

// Collector returns the replication metrics with Pulsar's names (pulsar_replication_*),
// labelled cluster, namespace, topic and remote_cluster.
func (h *Host) Collector() prometheus.Collector { return collector{h} }

type collector struct{ h *Host }

var metricDescs = func() map[string]*prometheus.Desc {
	labels := []string{"cluster", "namespace", "topic", "remote_cluster"}
	m := map[string]*prometheus.Desc{}
	for name, help := range map[string]string{
		"pulsar_replication_rate_in":          "Messages per second received from the remote cluster",
		"pulsar_replication_rate_out":         "Messages per second replicated to the remote cluster",
		"pulsar_replication_throughput_in":    "Bytes per second received from the remote cluster",
		"pulsar_replication_throughput_out":   "Bytes per second replicated to the remote cluster",
		"pulsar_replication_backlog":          "Entries of the replication cursor not yet replicated",
		"pulsar_replication_connected_count":  "1 if the replicator's producer is connected to the remote cluster",
		"pulsar_replication_rate_expired":     "Messages per second expired by the message TTL before replication",
		"pulsar_replication_delay_in_seconds": "Age of the oldest message read and not yet on the remote cluster",
	} {
		m[name] = prometheus.NewDesc(name, help, labels, nil)
	}
	return m
}()

// pendingSnapshotsDesc is Pulsar's gauge of the replicated subscriptions' snapshots in
// progress, summed over the loaded topics.
var pendingSnapshotsDesc = prometheus.NewDesc("pulsar_replicated_subscriptions_pending_snapshots",
	"Snapshots of replicated subscriptions in progress", []string{"cluster"}, nil)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range metricDescs {
		ch <- d
	}
	ch <- pendingSnapshotsDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c.h.cfg.ReplSubs.Enabled {
		c.h.mu.Lock()
		pending := int64(0)
		for _, s := range c.h.mu.subs {
			pending += s.pending.Load()
		}
		c.h.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(pendingSnapshotsDesc, prometheus.GaugeValue, float64(pending), c.h.cfg.LocalCluster)
	}
	c.h.Topics(func(t *topic.Topic) {
		n := t.Name()
		for remote, v := range c.h.topicStats(ctx, t) {
			st := v.(ReplicatorStats)
			lv := []string{c.h.cfg.LocalCluster, n.NamespaceName(), n.String(), remote}
			conn := 0.0
			if st.Connected {
				conn = 1
			}
			for name, val := range map[string]float64{
				"pulsar_replication_rate_in": st.MsgRateIn, "pulsar_replication_rate_out": st.MsgRateOut,
				"pulsar_replication_throughput_in": st.MsgThroughputIn, "pulsar_replication_throughput_out": st.MsgThroughputOut,
				"pulsar_replication_backlog": float64(st.ReplicationBacklog), "pulsar_replication_connected_count": conn,
				"pulsar_replication_rate_expired":     st.MsgRateExpired,
				"pulsar_replication_delay_in_seconds": float64(st.ReplicationDelayInSeconds),
			} {
				ch <- prometheus.MustNewConstMetric(metricDescs[name], prometheus.GaugeValue, val, lv...)
			}
		}
	})
}
