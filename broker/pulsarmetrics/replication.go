package pulsarmetrics

import (
	"encoding/json"

	"github.com/magnetar-io/magnetar/broker/api"
)

// Replication metrics (Pulsar's TopicStats and NamespaceStatsAggregator): from the
// replication section of each topic's stats (api.TopicStats.Replication, one entry per
// remote cluster: the outbound replicator's figures and the inbound ones of the remote's
// replicator publishing here), labelled remote_cluster. Per topic (labels cluster,
// namespace, topic, remote_cluster), or, with Config.NamespaceLevel, summed per namespace
// (labels cluster, namespace, remote_cluster) as Pulsar sums them: the rates, the backlog,
// the delay (summed, not the largest), and pulsar_replication_connected_count and
// _disconnected_count counting the replicators.

var lTopicRemote = []string{"cluster", "namespace", "topic", "remote_cluster"}
var lNSRemote = []string{"cluster", "namespace", "remote_cluster"}

// replFigures is one remote cluster's entry of a topic's replication section (the JSON
// fields of Pulsar's ReplicatorStats), or their sums over a namespace.
type replFigures struct {
	MsgRateIn          float64 `json:"msgRateIn"`
	MsgThroughputIn    float64 `json:"msgThroughputIn"`
	MsgRateOut         float64 `json:"msgRateOut"`
	MsgThroughputOut   float64 `json:"msgThroughputOut"`
	MsgRateExpired     float64 `json:"msgRateExpired"`
	ReplicationBacklog int64   `json:"replicationBacklog"`
	Connected          bool    `json:"connected"`
	DelayInSeconds     int64   `json:"replicationDelayInSeconds"`

	connected, disconnected int // summed replicators
}

// replicationOf decodes a topic's replication section (its values are the broker's
// replicator stats structs, or JSON objects when the stats came from another broker).
func replicationOf(st api.TopicStats) map[string]*replFigures {
	if len(st.Replication) == 0 {
		return nil
	}
	out := make(map[string]*replFigures, len(st.Replication))
	for remote, v := range st.Replication {
		b, err := json.Marshal(v)
		if err != nil {
			continue
		}
		var f replFigures
		if json.Unmarshal(b, &f) != nil {
			continue
		}
		if f.Connected {
			f.connected = 1
		} else {
			f.disconnected = 1
		}
		out[remote] = &f
	}
	return out
}

// addRepl adds a topic's replication figures to a namespace's.
func addRepl(sum map[string]*replFigures, rs map[string]*replFigures) {
	for remote, f := range rs {
		a := sum[remote]
		if a == nil {
			a = &replFigures{}
			sum[remote] = a
		}
		a.MsgRateIn += f.MsgRateIn
		a.MsgThroughputIn += f.MsgThroughputIn
		a.MsgRateOut += f.MsgRateOut
		a.MsgThroughputOut += f.MsgThroughputOut
		a.MsgRateExpired += f.MsgRateExpired
		a.ReplicationBacklog += f.ReplicationBacklog
		a.DelayInSeconds += f.DelayInSeconds
		a.connected += f.connected
		a.disconnected += f.disconnected
	}
}

// replication emits rs, labelled labels with values (before remote_cluster).
func (e emitter) replication(labels []string, rs map[string]*replFigures, values ...string) {
	for _, remote := range sortedKeys(rs) {
		f := rs[remote]
		vs := append(append([]string(nil), values...), remote)
		g := func(name string, v float64) { e.emit(name, labels, v, vs...) }
		g("pulsar_replication_rate_in", f.MsgRateIn)
		g("pulsar_replication_rate_out", f.MsgRateOut)
		g("pulsar_replication_throughput_in", f.MsgThroughputIn)
		g("pulsar_replication_throughput_out", f.MsgThroughputOut)
		g("pulsar_replication_backlog", float64(f.ReplicationBacklog))
		g("pulsar_replication_connected_count", float64(f.connected))
		g("pulsar_replication_disconnected_count", float64(f.disconnected))
		g("pulsar_replication_rate_expired", f.MsgRateExpired)
		g("pulsar_replication_delay_in_seconds", float64(f.DelayInSeconds))
	}
}
