package replsub

import (
	"errors"
	"slices"
	"testing"

	"github.com/magnetar-io/magnetar/replication"
)

func p(e int64) Position { return Position{LedgerID: 3, EntryID: e} }

func TestMarkersRoundTrip(t *testing.T) {
	req, err := DecodeRequest(EncodeRequest("id-1", "east"))
	if err != nil || req != (Request{ID: "id-1", Source: "east"}) {
		t.Fatalf("request %+v %v", req, err)
	}
	resp, err := DecodeResponse(EncodeResponse("id-1", "west", p(7)))
	if err != nil || resp != (Response{ID: "id-1", Cluster: ClusterPos{"west", p(7)}}) {
		t.Fatalf("response %+v %v", resp, err)
	}
	snap := Snapshot{ID: "id-1", Local: p(9), Clusters: []ClusterPos{{"north", p(1)}, {"west", replication.Earliest}}}
	got, err := DecodeSnapshot(EncodeSnapshot(snap))
	if err != nil || got.String() != snap.String() {
		t.Fatalf("snapshot %v %v, want %v", got, err, snap)
	}
	u, err := DecodeUpdate(EncodeUpdate("sub", snap.Clusters))
	if err != nil || u.Subscription != "sub" || !slices.Equal(u.Clusters, snap.Clusters) {
		t.Fatalf("update %+v %v", u, err)
	}
	if _, err := DecodeResponse([]byte{0x0a, 0x01, 'x'}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a response without its cluster: %v", err)
	}
}

// TestTwoClusters walks one snapshot and one update between two controllers by hand.
func TestTwoClusters(t *testing.T) {
	east := NewController(Config{LocalCluster: "east", FrequencyMs: 100, TimeoutMs: 1000})
	west := NewController(Config{LocalCluster: "west", FrequencyMs: 100, TimeoutMs: 1000})
	east.SetRemotes([]string{"east", "west"})
	west.SetRemotes([]string{"east", "west"})
	east.Start(1000)
	r := east.Ready()
	if len(r.Writes) != 0 || r.TimerAt != 1000 {
		t.Fatalf("before connecting: %+v", r)
	}
	east.Tick(1000)
	if r = east.Ready(); len(r.Writes) != 0 || east.Stats().Skipped != 1 {
		t.Fatalf("a snapshot started with the replicator disconnected: %+v", r)
	}
	east.SetConnected("west", true)
	east.Tick(1100)
	r = east.Ready()
	if len(r.Writes) != 1 || r.Writes[0].Type != replication.MarkerSnapshotRequest || r.Writes[0].ReplicateTo != nil || r.TimerAt != 1200 {
		t.Fatalf("request: %+v", r)
	}
	reqPayload := r.Writes[0].Payload
	east.Written(r.Writes[0].Tag, p(10), nil)

	// West reads the request (replicated from east) and answers with its last position.
	west.MarkerRead("east", p(50), replication.MarkerSnapshotRequest, reqPayload, p(55))
	r = west.Ready()
	if len(r.Writes) != 1 || r.Writes[0].Type != replication.MarkerSnapshotResponse || !slices.Equal(r.Writes[0].ReplicateTo, []string{"east"}) {
		t.Fatalf("response: %+v", r)
	}
	resp := r.Writes[0].Payload

	// East reads the response at 12: the snapshot is complete (one remote cluster: one round).
	east.MarkerRead("west", p(12), replication.MarkerSnapshotResponse, resp, p(12))
	r = east.Ready()
	if len(r.Writes) != 1 || r.Writes[0].Type != replication.MarkerSnapshot || !slices.Equal(r.Writes[0].ReplicateTo, []string{"east"}) {
		t.Fatalf("snapshot: %+v", r)
	}
	snap, err := DecodeSnapshot(r.Writes[0].Payload)
	if err != nil || snap.Local != p(12) || len(snap.Clusters) != 1 || snap.Clusters[0] != (ClusterPos{"west", p(55)}) {
		t.Fatalf("snapshot %v %v", snap, err)
	}
	if east.Pending() != 1 {
		t.Fatalf("pending %d before the snapshot is stored", east.Pending())
	}
	east.Written(r.Writes[0].Tag, p(13), nil)
	if east.Pending() != 0 || east.LastCompleted() != snap.ID {
		t.Fatalf("pending %d, last completed %q", east.Pending(), east.LastCompleted())
	}
	// The response again (a replicator re-sent it): nothing happens.
	east.MarkerRead("west", p(14), replication.MarkerSnapshotResponse, resp, p(14))
	if r = east.Ready(); len(r.Writes) != 0 {
		t.Fatalf("a late response: %+v", r)
	}
	// No data since the snapshot started: the next tick skips.
	east.Tick(1200)
	if r = east.Ready(); len(r.Writes) != 0 {
		t.Fatalf("a snapshot without new data: %+v", r)
	}
	east.DataPublished(1150)
	east.Tick(1300)
	if r = east.Ready(); len(r.Writes) != 1 {
		t.Fatalf("no snapshot after new data: %+v", r)
	}

	// The subscription's cache: its mark-delete reaches the snapshot's local position.
	cache := NewCache(2, Mutation{})
	cache.Add(snap)
	if _, ok := cache.Advanced(p(11)); ok {
		t.Fatal("an update before the mark-delete reached the snapshot")
	}
	got, ok := cache.Advanced(p(12))
	if !ok || got.ID != snap.ID || cache.Len() != 0 {
		t.Fatalf("advanced: %v %v", got, ok)
	}
	east.SubscriptionAdvanced("sub", got)
	r = east.Ready()
	if len(r.Writes) != 1 || r.Writes[0].Type != replication.MarkerUpdate || r.Writes[0].ReplicateTo != nil {
		t.Fatalf("update: %+v", r)
	}
	west.MarkerRead("east", p(60), replication.MarkerUpdate, r.Writes[0].Payload, p(60))
	r = west.Ready()
	if len(r.Acks) != 1 || r.Acks[0] != (SubscriptionAck{Subscription: "sub", Pos: p(55)}) {
		t.Fatalf("west's ack: %+v", r)
	}
	// An update that does not name this cluster changes nothing.
	west.MarkerRead("north", p(61), replication.MarkerUpdate, EncodeUpdate("sub", []ClusterPos{{"east", p(1)}}), p(61))
	if r = west.Ready(); len(r.Acks) != 0 {
		t.Fatalf("an update for others applied: %+v", r)
	}
}

// TestThreeClustersTwoRounds: with two remote clusters the snapshot needs a second round,
// under its own id; a first-round response delivered again does not count for it.
func TestThreeClustersTwoRounds(t *testing.T) {
	a := NewController(Config{LocalCluster: "a"})
	a.SetRemotes([]string{"b", "c"})
	a.SetConnected("b", true)
	a.SetConnected("c", true)
	a.Start(0)
	a.Tick(0)
	r := a.Ready()
	req1, _ := DecodeRequest(r.Writes[0].Payload)
	a.MarkerRead("b", p(5), replication.MarkerSnapshotResponse, EncodeResponse(req1.ID, "b", p(100)), p(5))
	respC1 := EncodeResponse(req1.ID, "c", p(200))
	a.MarkerRead("c", p(6), replication.MarkerSnapshotResponse, respC1, p(6))
	r = a.Ready()
	if len(r.Writes) != 1 || r.Writes[0].Type != replication.MarkerSnapshotRequest {
		t.Fatalf("second round: %+v", r)
	}
	req2, _ := DecodeRequest(r.Writes[0].Payload)
	if req2.ID == req1.ID {
		t.Fatalf("the second round reuses id %q", req2.ID)
	}
	a.MarkerRead("b", p(7), replication.MarkerSnapshotResponse, EncodeResponse(req2.ID, "b", p(110)), p(7))
	a.MarkerRead("c", p(8), replication.MarkerSnapshotResponse, respC1, p(8)) // c's first answer again
	if r = a.Ready(); len(r.Writes) != 0 {
		t.Fatalf("a first-round response completed the second round: %+v", r)
	}
	a.MarkerRead("c", p(9), replication.MarkerSnapshotResponse, EncodeResponse(req2.ID, "c", p(210)), p(9))
	r = a.Ready()
	if len(r.Writes) != 1 || r.Writes[0].Type != replication.MarkerSnapshot {
		t.Fatalf("snapshot: %+v", r)
	}
	snap, _ := DecodeSnapshot(r.Writes[0].Payload)
	want := Snapshot{ID: req1.ID, Local: p(9), Clusters: []ClusterPos{{"b", p(100)}, {"c", p(200)}}}
	if snap.String() != want.String() {
		t.Fatalf("snapshot %v, want %v (first-round positions, the last response's local position)", snap, want)
	}
}

func TestTimeoutAndFailedSnapshotWrite(t *testing.T) {
	a := NewController(Config{LocalCluster: "a", FrequencyMs: 10, TimeoutMs: 25})
	a.SetRemotes([]string{"b"})
	a.SetConnected("b", true)
	a.Start(0)
	a.Tick(0)
	r := a.Ready()
	req, _ := DecodeRequest(r.Writes[0].Payload)
	a.MarkerRead("b", p(5), replication.MarkerSnapshotResponse, EncodeResponse(req.ID, "b", p(1)), p(5))
	r = a.Ready()
	a.Written(r.Writes[0].Tag, Position{}, errors.New("write failed"))
	a.Tick(10) // retried
	r = a.Ready()
	var retried bool
	for _, w := range r.Writes {
		retried = retried || w.Type == replication.MarkerSnapshot
	}
	if !retried {
		t.Fatalf("the failed snapshot write was not retried: %+v", r)
	}
	a.Tick(40) // past the timeout: both snapshots are forgotten
	if a.Stats().TimedOut == 0 {
		t.Fatalf("no timeout: %+v", a.Stats())
	}
}

func TestCacheBounded(t *testing.T) {
	c := NewCache(2, Mutation{})
	for i := int64(1); i <= 4; i++ {
		c.Add(Snapshot{ID: string(rune('0' + i)), Local: p(i * 10)})
	}
	c.Add(Snapshot{ID: "old", Local: p(5)}) // read again after a restart: ignored
	if c.Len() != 2 {
		t.Fatalf("len %d", c.Len())
	}
	s, ok := c.Advanced(p(100))
	if !ok || s.ID != "4" || c.Len() != 0 {
		t.Fatalf("advanced %v %v len %d", s, ok, c.Len())
	}
}
