package admin

import (
	"encoding/json"
	"testing"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
)

// TestPartitionedStatsReplication: the partitioned stats' replication section sums the
// partitions' rates and backlogs per remote cluster, is connected only if every
// partition's replicator is, and has the largest delay, as Pulsar's ReplicatorStatsImpl.add;
// a partition whose stats came from another broker (JSON objects) counts the same.
func TestPartitionedStatsReplication(t *testing.T) {
	type rs = topic.ReplicatorStats
	fromPeer := func(v rs) any {
		b, _ := json.Marshal(v)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return m
	}
	parts := []api.TopicStats{
		{Replication: map[string]any{
			"west":  rs{MsgRateOut: 10, MsgThroughputOut: 100, MsgRateIn: 1, ReplicationBacklog: 5, Connected: true, ReplicationDelayInSeconds: 3, OutboundConnection: "west"},
			"south": rs{MsgRateOut: 1, Connected: true},
		}},
		{Replication: map[string]any{
			"west":  fromPeer(rs{MsgRateOut: 2.5, MsgThroughputOut: 20, MsgRateIn: 2, ReplicationBacklog: 7, Connected: true, ReplicationDelayInSeconds: 9}),
			"south": fromPeer(rs{MsgRateOut: 2, ReplicationBacklog: 40, Connected: false}),
		}},
		{Replication: map[string]any{"west": &rs{MsgRateExpired: 0.5, Connected: true}}},
	}
	ps := &PartitionedTopicStats{}
	ps.Subscriptions = map[string]api.SubscriptionStats{}
	ps.Replication = map[string]any{}
	for _, p := range parts {
		ps.aggregate(p)
	}
	b, err := json.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Replication map[string]rs `json:"replication"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]rs{
		"west": {MsgRateOut: 12.5, MsgThroughputOut: 120, MsgRateIn: 3, MsgRateExpired: 0.5, ReplicationBacklog: 12,
			Connected: true, ReplicationDelayInSeconds: 9, OutboundConnection: "west"},
		"south": {MsgRateOut: 3, ReplicationBacklog: 40, Connected: false},
	}
	if len(got.Replication) != len(want) {
		t.Fatalf("replication section %+v, want %+v", got.Replication, want)
	}
	for k, w := range want {
		if got.Replication[k] != w {
			t.Fatalf("replication to %s: %+v, want %+v", k, got.Replication[k], w)
		}
	}
}
