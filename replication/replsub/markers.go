package replsub

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/replication"
)

// The payloads of the replicated subscriptions' markers (proto/pulsar/markers.proto, Pulsar's
// PulsarMarkers.proto). Positions travel as unsigned integers; -1 (before the first entry)
// round-trips.

func msgID(p Position) *pb.MarkersMessageIdData {
	l, e := uint64(p.LedgerID), uint64(p.EntryID)
	return &pb.MarkersMessageIdData{LedgerId: &l, EntryId: &e}
}

func posOf(m *pb.MarkersMessageIdData) Position {
	return Position{LedgerID: int64(m.GetLedgerId()), EntryID: int64(m.GetEntryId())}
}

func clusterIDs(cs []ClusterPos) []*pb.ClusterMessageId {
	out := make([]*pb.ClusterMessageId, len(cs))
	for i, cp := range cs {
		out[i] = &pb.ClusterMessageId{Cluster: proto.String(cp.Cluster), MessageId: msgID(cp.Pos)}
	}
	return out
}

func clusterPositions(ms []*pb.ClusterMessageId) ([]ClusterPos, error) {
	out := make([]ClusterPos, 0, len(ms))
	for _, m := range ms {
		if m.Cluster == nil || m.MessageId == nil {
			return nil, fmt.Errorf("%w: cluster entry without cluster or message id", ErrMalformed)
		}
		out = append(out, ClusterPos{Cluster: m.GetCluster(), Pos: posOf(m.GetMessageId())})
	}
	sortClusters(out)
	return out, nil
}

func marshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		// Every field is set by this package: a failure is a bug.
		panic(fmt.Sprintf("replsub: marshal %T: %v", m, err))
	}
	return b
}

// EncodeRequest is a REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST's payload.
func EncodeRequest(id, source string) []byte {
	return marshal(&pb.ReplicatedSubscriptionsSnapshotRequest{SnapshotId: &id, SourceCluster: &source})
}

// EncodeResponse is a REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE's payload: cluster's last
// position last, for the snapshot id.
func EncodeResponse(id, cluster string, last Position) []byte {
	return marshal(&pb.ReplicatedSubscriptionsSnapshotResponse{SnapshotId: &id,
		Cluster: &pb.ClusterMessageId{Cluster: &cluster, MessageId: msgID(last)}})
}

// EncodeSnapshot is a REPLICATED_SUBSCRIPTION_SNAPSHOT's payload.
func EncodeSnapshot(s Snapshot) []byte {
	return marshal(&pb.ReplicatedSubscriptionsSnapshot{SnapshotId: &s.ID, LocalMessageId: msgID(s.Local),
		Clusters: clusterIDs(s.Clusters)})
}

// EncodeUpdate is a REPLICATED_SUBSCRIPTION_UPDATE's payload: subscription's positions in
// the clusters.
func EncodeUpdate(subscription string, clusters []ClusterPos) []byte {
	return marshal(&pb.ReplicatedSubscriptionsUpdate{SubscriptionName: &subscription, Clusters: clusterIDs(clusters)})
}

// Request is a decoded snapshot request.
type Request struct{ ID, Source string }

// Response is a decoded snapshot response.
type Response struct {
	ID      string
	Cluster ClusterPos
}

// Update is a decoded subscription update.
type Update struct {
	Subscription string
	Clusters     []ClusterPos
}

// DecodeRequest decodes a snapshot request's payload.
func DecodeRequest(b []byte) (Request, error) {
	var m pb.ReplicatedSubscriptionsSnapshotRequest
	if err := proto.Unmarshal(b, &m); err != nil {
		return Request{}, fmt.Errorf("%w: request: %v", ErrMalformed, err)
	}
	return Request{ID: m.GetSnapshotId(), Source: m.GetSourceCluster()}, nil
}

// DecodeResponse decodes a snapshot response's payload.
func DecodeResponse(b []byte) (Response, error) {
	var m pb.ReplicatedSubscriptionsSnapshotResponse
	if err := proto.Unmarshal(b, &m); err != nil {
		return Response{}, fmt.Errorf("%w: response: %v", ErrMalformed, err)
	}
	c := m.GetCluster()
	if c == nil || c.Cluster == nil || c.MessageId == nil {
		return Response{}, fmt.Errorf("%w: response without its cluster", ErrMalformed)
	}
	return Response{ID: m.GetSnapshotId(), Cluster: ClusterPos{Cluster: c.GetCluster(), Pos: posOf(c.GetMessageId())}}, nil
}

// DecodeSnapshot decodes a snapshot's payload.
func DecodeSnapshot(b []byte) (Snapshot, error) {
	var m pb.ReplicatedSubscriptionsSnapshot
	if err := proto.Unmarshal(b, &m); err != nil {
		return Snapshot{}, fmt.Errorf("%w: snapshot: %v", ErrMalformed, err)
	}
	if m.LocalMessageId == nil {
		return Snapshot{}, fmt.Errorf("%w: snapshot without its local position", ErrMalformed)
	}
	cs, err := clusterPositions(m.GetClusters())
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{ID: m.GetSnapshotId(), Local: posOf(m.GetLocalMessageId()), Clusters: cs}, nil
}

// DecodeUpdate decodes an update's payload.
func DecodeUpdate(b []byte) (Update, error) {
	var m pb.ReplicatedSubscriptionsUpdate
	if err := proto.Unmarshal(b, &m); err != nil {
		return Update{}, fmt.Errorf("%w: update: %v", ErrMalformed, err)
	}
	cs, err := clusterPositions(m.GetClusters())
	if err != nil {
		return Update{}, err
	}
	return Update{Subscription: m.GetSubscriptionName(), Clusters: cs}, nil
}

// Travels reports whether a marker of type t is one of the replicated subscriptions' that
// a replicator forwards (request, response, update; never a snapshot).
func Travels(t int32) bool {
	return t == replication.MarkerSnapshotRequest || t == replication.MarkerSnapshotResponse || t == replication.MarkerUpdate
}
