package admin

import "encoding/json"

// replicatorStats is one remote cluster's entry of a topic's replication section, Pulsar's
// ReplicatorStats JSON (the broker's values are its replicator stats structs, or JSON
// objects when a partition's stats came from another broker).
type replicatorStats struct {
	MsgRateIn                 float64 `json:"msgRateIn"`
	MsgThroughputIn           float64 `json:"msgThroughputIn"`
	MsgRateOut                float64 `json:"msgRateOut"`
	MsgThroughputOut          float64 `json:"msgThroughputOut"`
	MsgRateExpired            float64 `json:"msgRateExpired"`
	ReplicationBacklog        int64   `json:"replicationBacklog"`
	Connected                 bool    `json:"connected"`
	ReplicationDelayInSeconds int64   `json:"replicationDelayInSeconds"`
	InboundConnection         string  `json:"inboundConnection,omitempty"`
	InboundConnectedSince     string  `json:"inboundConnectedSince,omitempty"`
	OutboundConnection        string  `json:"outboundConnection,omitempty"`
	OutboundConnectedSince    string  `json:"outboundConnectedSince,omitempty"`
}

// aggregateReplication adds a partition's replication section (src) to the partitioned
// topic's (dst, whose values are *replicatorStats), as Pulsar's ReplicatorStatsImpl.add:
// rates and backlogs summed, connected only while every partition's replicator is, the
// delay the largest; the connection descriptions are the first partition's that has one.
func aggregateReplication(dst, src map[string]any) {
	for remote, v := range src {
		b, err := json.Marshal(v)
		if err != nil {
			continue
		}
		var s replicatorStats
		if json.Unmarshal(b, &s) != nil {
			continue
		}
		a, ok := dst[remote].(*replicatorStats)
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
