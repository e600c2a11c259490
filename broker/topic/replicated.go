package topic

import (
	"context"
	"strings"

	"github.com/magnetar-io/magnetar/replication"
)

// The receiving side of geo-replication. Another cluster's replicator publishes here with a
// producer named "pulsar.repl.<cluster>--><this cluster>" (package replication,
// ProducerName). The topic honours the contract package replication's doc.go states for
// such a producer:
//
//  1. Deduplication keys its messages on their original producer name and sequence ids,
//     which the message metadata carries (Origin), not on the replicator's own name and
//     SEND sequence ids, as Pulsar's MessageDeduplication does for replicator producers
//     (isDuplicateNormal with useOriginalProducerName, recordMessagePersistedNormal with
//     the original name and ids). A re-send after the replicator rewinds is then dropped,
//     and a reload replays the same keys (the stored metadata names the original
//     producer). Markers are not deduplicated.
//  2. The producer's session ends at the first SEND the topic refuses: the refusal is
//     answered, then the producer is closed (CLOSE_PRODUCER), so no later SEND of that
//     session is stored ahead of the refused one (apache/pulsar#26113).
//  3. A second producer of the same name while one is open is refused with ProducerBusy
//     (topicCore.addProducer, as for every named producer).
//
// Replicator producers are not counted against max producers per topic (as in Pulsar).

// replPrefix starts the name of every replicator producer.
const replPrefix = replication.Prefix + "."

// isReplicator reports whether a producer name is a replicator's.
func isReplicator(name string) bool { return strings.HasPrefix(name, replPrefix) }

// IsReplicationCursor reports whether a durable cursor of the topic is a geo-replicator's
// (pulsar.repl.<remote cluster>, package replication): it is not a subscription, so the
// topic's subscription list and statistics leave it out.
func IsReplicationCursor(name string) bool { return strings.HasPrefix(name, replPrefix) }

// Origin is the original identity of a message a replicator producer publishes.
type Origin struct {
	// ProducerName is the original producer's name ("": not known; deduplication then keys
	// on the replicator's own name and SEND sequence ids).
	ProducerName string
	// SequenceID and HighestSequenceID are the original producer's: the first and the
	// highest of the entry (equal for a single message).
	SequenceID, HighestSequenceID uint64
	// Marker: the message is a marker (marker_type is set); it is not deduplicated.
	Marker bool
}

// OriginOf decodes the original identity of an entry (headersAndPayload) from its message
// metadata; the zero Origin if it cannot be decoded.
func OriginOf(data []byte) Origin {
	m, err := parseMeta(data)
	if err != nil {
		return Origin{}
	}
	seq := m.GetSequenceId()
	return Origin{ProducerName: m.GetProducerName(), SequenceID: seq, HighestSequenceID: max(seq, m.GetHighestSequenceId()),
		Marker: m.MarkerType != nil}
}

// dedupID returns what deduplication keys m of p on, and false if m is not deduplicated (a
// replicator's marker).
func (c *topicCore) dedupID(p *Producer, m Message) (dedupID, bool) {
	if isMarkerProducer(p) {
		return dedupID{}, false // the topic's own markers (replsub.go)
	}
	if isReplicator(p.Name) && !c.mut.replDedupByProducer {
		switch o := m.Origin; {
		case o.Marker:
			return dedupID{}, false
		case o.ProducerName != "":
			return dedupID{name: o.ProducerName, seq: o.SequenceID, hi: max(o.SequenceID, o.HighestSequenceID)}, true
		}
	}
	return dedupID{name: p.Name, seq: m.SequenceID, hi: m.HighestSequenceID}, true
}

// refused ends the session of a replicator producer whose SEND the topic refused (the
// refusal is already emitted): it is closed, so that none of its later SENDs is stored.
func (c *topicCore) refused(p *Producer) {
	if isReplicator(p.Name) && !c.mut.replSessionKept && p.state == producerReady {
		c.removeProducer(p, true)
	}
}

// Refused tells the topic that the connection refused a SEND of p before it reached the
// topic (a checksum error, metadata without a producer name): a replicator producer's
// session ends there (see above); for other producers it does nothing. Safe for concurrent
// use; the connection calls it before it reads the producer's next SEND.
func (p *Producer) Refused() {
	if !isReplicator(p.Name) {
		return
	}
	p.topic.in.Push(func() { p.topic.core.refused(p) })
}

// OnClose registers fn to run when the topic starts closing (an unload, a delete, the
// broker closing): the topic closes its managed ledger only after fn called done, so the
// geo-replicators persist their cursors first. fn runs on the topic goroutine and must not
// block (it starts its work and calls done from any goroutine, exactly once). If the topic
// is closing or closed already, fn runs at once. Safe for concurrent use.
func (t *Topic) OnClose(fn func(done func())) {
	if !t.post(func() {
		switch t.core.state {
		case StateClosing, StateClosed:
			fn(func() {})
		default:
			t.closeHooks = append(t.closeHooks, fn)
		}
	}) {
		fn(func() {})
	}
}

// ReplicatorStats is one remote cluster's entry of the replication section of the topic
// stats, with Pulsar's JSON names (ReplicatorStatsImpl). The geo-replicator fills the
// outbound side (package broker/replhost); Stats fills the inbound side from the remote
// cluster's replicator producer publishing here (pulsar.repl.<remote>--><this cluster>).
type ReplicatorStats struct {
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

// addInbound adds to st's replication section what the remote clusters' replicator
// producers publish here (msgRateIn, msgThroughputIn, the inbound connection).
func addInbound(st *Stats) {
	for _, p := range st.Publishers {
		if !isReplicator(p.ProducerName) {
			continue
		}
		from, _, ok := strings.Cut(strings.TrimPrefix(p.ProducerName, replPrefix), "-->")
		if !ok {
			continue
		}
		rs, _ := st.Replication[from].(ReplicatorStats)
		rs.MsgRateIn += p.MsgRateIn
		rs.MsgThroughputIn += p.MsgThroughputIn
		rs.InboundConnection, rs.InboundConnectedSince = p.Address, p.ConnectedSince
		st.Replication[from] = rs
	}
}

// Replication is what the topic's statistics show of its geo-replicators (package
// broker/replhost implements it).
type Replication interface {
	// Stats returns the replication section of the stats, by remote cluster.
	Stats(ctx context.Context) map[string]any
	// Cursors returns the replication cursors' state, by cursor name (internal stats).
	Cursors(ctx context.Context) map[string]CursorInfo
}

// SetReplication sets the topic's geo-replicators' view for its statistics. Safe for
// concurrent use.
func (t *Topic) SetReplication(r Replication) { t.repl.Store(&r) }

// cursorStats is the internal stats' view of a cursor.
func cursorStats(ci CursorInfo, durable bool) CursorStats {
	props := ci.Properties
	if props == nil {
		props = map[string]int64{}
	}
	cs := CursorStats{
		MarkDeletePosition: ci.MarkDelete.String(), ReadPosition: ci.ReadPosition.String(),
		WaitingReadOp: ci.ReadWaiting, CursorLedger: ci.Ledger, IndividuallyDeletedMessages: ci.Acked,
		State: ci.State, NumberOfEntriesSinceFirstNotAckedMessage: ci.Backlog,
		TotalNonContiguousDeletedMessagesRange: ci.AckedRanges, Properties: props,
		MarkDeleteHeld: ci.MarkDeleteHeld,
	}
	if durable {
		cs.PersistentMarkDeletePosition = ci.PersistedMarkDelete.String()
	}
	return cs
}
