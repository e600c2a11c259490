package pulsarmetrics_test

import (
	"testing"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/pulsarmetrics"
	"github.com/magnetar-io/magnetar/broker/topic"
)

// replSource has two topics of geo/ns replicating to west (one connected, one not, the
// second's section as JSON from another broker) and one to south.
func replSource() fakeSource {
	return fakeSource{
		{name: "persistent://geo/ns/a", wq: 1, st: api.TopicStats{Replication: map[string]any{
			"west": topic.ReplicatorStats{MsgRateIn: 1, MsgRateOut: 10, MsgThroughputIn: 100, MsgThroughputOut: 1000,
				ReplicationBacklog: 5, Connected: true, ReplicationDelayInSeconds: 2},
			"south": topic.ReplicatorStats{MsgRateOut: 3, Connected: true},
		}}},
		{name: "persistent://geo/ns/b", wq: 1, st: api.TopicStats{Replication: map[string]any{
			"west": map[string]any{"msgRateOut": 2.5, "replicationBacklog": 7, "connected": false,
				"replicationDelayInSeconds": 4, "msgRateExpired": 0.5},
		}}},
	}
}

// TestReplicationMetrics: the replication section of the topics' stats becomes Pulsar's
// pulsar_replication_* metrics labelled remote_cluster: per topic by default, and with
// topic-level metrics off summed per namespace as Pulsar's NamespaceStatsAggregator does
// (connected and disconnected counts count replicators, the delay is summed).
func TestReplicationMetrics(t *testing.T) {
	mfs := gather(t, pulsarmetrics.New(pulsarmetrics.Config{Cluster: "east", Source: replSource()}))
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"pulsar_replication_rate_out", []string{"cluster=east", "namespace=geo/ns", "remote_cluster=west", "topic=persistent://geo/ns/a"}, 10},
		{"pulsar_replication_rate_in", []string{"cluster=east", "namespace=geo/ns", "remote_cluster=west", "topic=persistent://geo/ns/a"}, 1},
		{"pulsar_replication_backlog", []string{"cluster=east", "namespace=geo/ns", "remote_cluster=west", "topic=persistent://geo/ns/b"}, 7},
		{"pulsar_replication_connected_count", []string{"cluster=east", "namespace=geo/ns", "remote_cluster=west", "topic=persistent://geo/ns/a"}, 1},
		{"pulsar_replication_connected_count", []string{"cluster=east", "namespace=geo/ns", "remote_cluster=west", "topic=persistent://geo/ns/b"}, 0},
		{"pulsar_replication_rate_expired", []string{"cluster=east", "namespace=geo/ns", "remote_cluster=west", "topic=persistent://geo/ns/b"}, 0.5},
		{"pulsar_replication_delay_in_seconds", []string{"cluster=east", "namespace=geo/ns", "remote_cluster=west", "topic=persistent://geo/ns/b"}, 4},
		{"pulsar_replication_rate_out", []string{"cluster=east", "namespace=geo/ns", "remote_cluster=south", "topic=persistent://geo/ns/a"}, 3},
	} {
		if got, ok := value(mfs, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("topic level %s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if _, ok := value(mfs, "pulsar_replication_rate_out", "cluster=east", "namespace=geo/ns", "remote_cluster=west"); ok {
		t.Error("topic level: a namespace-level replication sample")
	}

	mfs = gather(t, pulsarmetrics.New(pulsarmetrics.Config{Cluster: "east", NamespaceLevel: true, Source: replSource()}))
	west := []string{"cluster=east", "namespace=geo/ns", "remote_cluster=west"}
	for _, c := range []struct {
		name string
		want float64
	}{
		{"pulsar_replication_rate_out", 12.5},
		{"pulsar_replication_rate_in", 1},
		{"pulsar_replication_throughput_out", 1000},
		{"pulsar_replication_backlog", 12},
		{"pulsar_replication_connected_count", 1},
		{"pulsar_replication_disconnected_count", 1},
		{"pulsar_replication_rate_expired", 0.5},
		{"pulsar_replication_delay_in_seconds", 6},
	} {
		if got, ok := value(mfs, c.name, west...); !ok || got != c.want {
			t.Errorf("namespace level %s = %v (present %v), want %v", c.name, got, ok, c.want)
		}
	}
	if got, ok := value(mfs, "pulsar_replication_rate_out", "cluster=east", "namespace=geo/ns", "remote_cluster=south"); !ok || got != 3 {
		t.Errorf("namespace level rate out to south = %v (present %v)", got, ok)
	}
	if _, ok := value(mfs, "pulsar_replication_rate_out", "cluster=east", "namespace=geo/ns", "remote_cluster=west", "topic=persistent://geo/ns/a"); ok {
		t.Error("namespace level: a topic-level replication sample")
	}
}
