package admin

import (
	"encoding/json"

	"github.com/magnetar-io/magnetar/broker/topic"
)

// aggregateReplication adds a partition's replication section (src) to the partitioned
// topic's (dst, whose values are *topic.ReplicatorStats), as Pulsar's ReplicatorStatsImpl.add:
// rates and backlogs summed, connected only while every partition's replicator is, the
// delay the largest; the connection descriptions are the first partition's that has one.
func aggregateReplication(dst, src map[string]any) {
	for remote, v := range src {
		b, err := json.Marshal(v)
		if err != nil {
			continue
		}
		var s topic.ReplicatorStats
		if json.Unmarshal(b, &s) != nil {
			continue
		}
		a, ok := dst[remote].(*topic.ReplicatorStats)
		if !ok {
			dst[remote] = &s
			continue
		}
		a.MsgRateIn += s.MsgRateIn
		a.MsgThroughputIn += s.MsgThroughputIn
		a.MsgRateOut += s.MsgRateOut
		a.MsgThroughputOut += s.MsgThroughputOut
		a.MsgRateExpired += s.MsgRateExpired
		a.ReplicationBacklog += s.ReplicationBacklog
		a.Connected = a.Connected && s.Connected
		a.ReplicationDelayInSeconds = max(a.ReplicationDelayInSeconds, s.ReplicationDelayInSeconds)
		if a.InboundConnection == "" {
			a.InboundConnection, a.InboundConnectedSince = s.InboundConnection, s.InboundConnectedSince
		}
		if a.OutboundConnection == "" {
			a.OutboundConnection, a.OutboundConnectedSince = s.OutboundConnection, s.OutboundConnectedSince
		}
	}
}
