package replsub

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/magnetar-io/magnetar/internal/fsm"
	"github.com/magnetar-io/magnetar/replication"
)

// Position is an entry's address in one cluster's copy of the topic (replication.Position).
type Position = replication.Position

// CursorProperty is the cursor property that marks a replicated subscription (Pulsar's
// pulsar.replicated.subscription, value 1).
const CursorProperty = "pulsar.replicated.subscription"

// MarkerProducer is the producer name of the marker messages (Pulsar's Markers).
const MarkerProducer = "pulsar.marker"

// Defaults of the broker configuration (Pulsar's names and defaults).
const (
	DefaultFrequencyMs = 1000   // replicatedSubscriptionsSnapshotFrequencyMillis
	DefaultTimeoutMs   = 30_000 // replicatedSubscriptionsSnapshotTimeoutSeconds × 1000
	DefaultMaxCached   = 10     // replicatedSubscriptionsSnapshotMaxCachedPerSubscription
)

// Errors.
var (
	// ErrMalformed: a marker's payload could not be decoded.
	ErrMalformed = errors.New("replsub: malformed marker")
	// ErrIllegalTransition is the category of the controller's impossible states.
	ErrIllegalTransition = errors.New("replsub: illegal transition")
)

// ClusterPos is a cluster's position: an entry of that cluster's copy of the topic.
type ClusterPos struct {
	Cluster string
	Pos     Position
}

// Snapshot is a completed snapshot of one topic across its clusters: when a replicated
// subscription's mark-delete position in the local cluster reaches Local, every entry of
// cluster c's copy up to Clusters[c] has a counterpart at or before Local here (it was
// published here, or replicated here, before Local), so moving that subscription in c to
// Clusters[c] skips nothing the local subscription has not acknowledged.
type Snapshot struct {
	ID       string
	Local    Position
	Clusters []ClusterPos // sorted by cluster name
}

// Of returns the position of cluster c in s.
func (s Snapshot) Of(c string) (Position, bool) {
	for _, cp := range s.Clusters {
		if cp.Cluster == c {
			return cp.Pos, true
		}
	}
	return Position{}, false
}

func (s Snapshot) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s@%v{", s.ID, s.Local)
	for i, cp := range s.Clusters {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%v", cp.Cluster, cp.Pos)
	}
	b.WriteByte('}')
	return b.String()
}

func sortClusters(cs []ClusterPos) {
	slices.SortFunc(cs, func(a, b ClusterPos) int { return strings.Compare(a.Cluster, b.Cluster) })
}

// snapState is the state of a snapshot in progress.
type snapState uint8

const (
	// snapRound1: the request is written (or being written); the first responses arrive.
	snapRound1 snapState = iota + 1
	// snapRound2: with more than one remote cluster, a second request (under its own id)
	// waits for every cluster's second response.
	snapRound2
	// snapWriting: every response arrived; the SNAPSHOT marker is being written.
	snapWriting
	// snapDone: the SNAPSHOT marker is stored; the snapshot is forgotten.
	snapDone
)

var snapNames = []string{"0", "round-1", "round-2", "writing", "done"}

func (s snapState) String() string { return fsm.Name(snapNames, s, "snapState") }

var snapEdges = fsm.Edges[snapState]{
	snapRound1:  {snapRound2, snapWriting},
	snapRound2:  {snapWriting},
	snapWriting: {snapDone},
}

// Config configures a Controller.
type Config struct {
	// LocalCluster is this cluster's name.
	LocalCluster string
	// FrequencyMs is the interval between snapshot attempts
	// (replicatedSubscriptionsSnapshotFrequencyMillis; 0: 1000).
	FrequencyMs int64
	// TimeoutMs abandons a snapshot that has not completed
	// (replicatedSubscriptionsSnapshotTimeoutSeconds; 0: 30 s).
	TimeoutMs int64
	// NewID returns a new snapshot id, unique across restarts (the broker: a random UUID;
	// simulations: seeded). Required.
	NewID func() string
	// Mutation deliberately breaks the controller (tests only: the simulation must catch it).
	Mutation Mutation
}

func (c Config) withDefaults() Config {
	if c.FrequencyMs <= 0 {
		c.FrequencyMs = DefaultFrequencyMs
	}
	if c.TimeoutMs <= 0 {
		c.TimeoutMs = DefaultTimeoutMs
	}
	return c
}

// Mutation lists deliberate bugs the simulation (sim_test.go) must catch. The zero value is
// the correct controller.
type Mutation struct {
	// OneRound: with more than one remote cluster the SNAPSHOT is written once the first
	// round's responses are in, before the second round's.
	OneRound bool
	// WrongClusterEntry: an UPDATE is applied at the position of the first cluster it
	// names, not at this cluster's own entry.
	WrongClusterEntry bool
	// UpdateUncovered: a subscription's UPDATE is taken from the newest cached snapshot
	// whenever its mark-delete position moves, even one whose local position it has not
	// reached (an incomplete snapshot for that subscription).
	UpdateUncovered bool
}

// MarkerWrite asks the owner to publish a marker in the local topic: an entry whose
// metadata has producer_name MarkerProducer, marker_type Type and replicate_to ReplicateTo
// (nil: every cluster), with Payload as its payload; answer Written with Tag.
type MarkerWrite struct {
	Tag         uint64
	Type        int32
	Payload     []byte
	ReplicateTo []string
}

// SubscriptionAck asks the owner to acknowledge cumulatively up to Pos on the local
// subscription Subscription, as a replicated one (creating it at the earliest position,
// with the cursor property CursorProperty, if it does not exist). A position at or before
// the subscription's mark-delete position changes nothing.
type SubscriptionAck struct {
	Subscription string
	Pos          Position
}

// Ready is what the owner must do after an input: the marker writes, in order, on the
// topic's publish path; the subscription acknowledgements; a timer for TimerAt (Unix ms, 0:
// none) that calls Tick.
type Ready struct {
	Writes  []MarkerWrite
	Acks    []SubscriptionAck
	TimerAt int64
}

// Stats are the controller's counters.
type Stats struct {
	Started, Completed, TimedOut, Skipped           int64
	RequestsAnswered, ResponsesLate, UpdatesWritten int64
	UpdatesApplied, UpdatesForOthers, WriteFailures int64
	Malformed                                       int64
}
