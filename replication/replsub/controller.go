package replsub

import (
	"fmt"
	"maps"
	"slices"

	"github.com/magnetar-io/magnetar/replication"
)

// snapshot is a snapshot in progress (Pulsar's ReplicatedSubscriptionsSnapshotBuilder).
type snapshot struct {
	id      string
	state   snapState
	startMs int64
	// roundID is the id the current round's responses carry: id in the first round, a
	// fresh one in the second, so that a first-round response delivered again does not
	// count for the second round.
	roundID   string
	responses map[string]Position // the first response of each remote cluster
	missing   map[string]bool     // remote clusters whose response to this round has not arrived
	final     Snapshot            // snapWriting: the SNAPSHOT to store
	writeTag  uint64              // the SNAPSHOT write in flight (0: none; it failed and is retried at the next Tick)
}

// Controller runs the replicated subscriptions of one topic (one partition) in its local
// cluster, as Pulsar's ReplicatedSubscriptionsController: it takes snapshots of the
// topic's positions across its clusters by exchanging markers, and applies the subscription
// updates other clusters send. It is a pure, thread-unsafe state machine: inputs are method
// calls, outputs are collected in a Ready that the owner takes with Ready() and performs; it
// does no I/O, reads no clock and starts no goroutine.
//
// Invariants (checked by the simulation, sim_test.go; names as in doc.go):
//   - a SNAPSHOT is written only once every remote cluster answered (twice, with more than
//     one remote cluster: the second round under its own id), and its local position is
//     that of the last response to arrive (R3);
//   - an UPDATE is applied only at this cluster's own entry (R3);
//   - at most one SNAPSHOT write per snapshot is in flight; a snapshot older than TimeoutMs
//     is forgotten.
type Controller struct {
	cfg   Config
	mut   Mutation
	ready Ready
	now   int64

	remotes   []string        // the topic's remote clusters (those it replicates to), sorted
	connected map[string]bool // whose replicator is connected

	// lastDataMs is the publish time (Unix ms) of the last data message; lastCompletedStart
	// the start of the last completed snapshot: a new snapshot starts only if data came
	// after it.
	lastDataMs         int64
	lastCompletedStart int64
	haveCompleted      bool
	lastCompletedID    string

	pending map[string]*snapshot // by every id its rounds use
	nextAt  int64                // Unix ms: the next snapshot attempt (0: not started)
	started bool

	writeTag uint64
	writes   map[uint64]*snapshot // SNAPSHOT writes in flight, by tag
	stats    Stats
}

// NewController returns a stopped controller.
func NewController(cfg Config) *Controller {
	cfg = cfg.withDefaults()
	if cfg.NewID == nil {
		n := 0
		cfg.NewID = func() string { n++; return fmt.Sprintf("%s-%d", cfg.LocalCluster, n) }
	}
	return &Controller{cfg: cfg, mut: cfg.Mutation, connected: map[string]bool{},
		pending: map[string]*snapshot{}, writes: map[uint64]*snapshot{}}
}

// Ready returns what the owner must do now and resets it.
func (c *Controller) Ready() Ready {
	r := c.ready
	c.ready = Ready{}
	if c.started {
		r.TimerAt = c.nextAt
	}
	return r
}

// Stats returns the counters.
func (c *Controller) Stats() Stats { return c.stats }

// Pending returns how many snapshots are in progress (Pulsar's
// pulsar_replicated_subscriptions_pending_snapshots).
func (c *Controller) Pending() int {
	n := 0
	for id, s := range c.pending {
		if id == s.id {
			n++
		}
	}
	return n
}

// LastCompleted returns the id of the last snapshot completed ("": none).
func (c *Controller) LastCompleted() string { return c.lastCompletedID }

// Start starts the snapshot timer at now (Unix ms): the first attempt is at once.
func (c *Controller) Start(now int64) {
	c.now = max(c.now, now)
	if !c.started {
		c.started = true
		c.nextAt = c.now
	}
}

// SetRemotes sets the topic's remote clusters (the clusters it replicates to). A snapshot
// in progress keeps the clusters it started with.
func (c *Controller) SetRemotes(remotes []string) {
	rs := slices.Clone(remotes)
	rs = slices.DeleteFunc(rs, func(r string) bool { return r == c.cfg.LocalCluster || r == "" })
	slices.Sort(rs)
	c.remotes = slices.Compact(rs)
	for r := range c.connected {
		if !slices.Contains(c.remotes, r) {
			delete(c.connected, r)
		}
	}
}

// SetConnected tells whether the replicator to remote is connected: a snapshot starts only
// when every one is.
func (c *Controller) SetConnected(remote string, ok bool) {
	if ok {
		c.connected[remote] = true
	} else {
		delete(c.connected, remote)
	}
}

// DataPublished tells the controller that a data message (not a marker) was published at
// publishMs (Unix ms).
func (c *Controller) DataPublished(publishMs int64) { c.lastDataMs = max(c.lastDataMs, publishMs) }

// Tick is the timer (Ready.TimerAt) firing at now (Unix ms): snapshots older than the
// timeout are forgotten, and a new one starts if data was published since the start of the
// last completed one and every replicator is connected.
func (c *Controller) Tick(now int64) {
	c.now = max(c.now, now)
	if !c.started || c.now < c.nextAt {
		return
	}
	c.nextAt = c.now + c.cfg.FrequencyMs
	// In id order: the retried writes come out in the same order for the same inputs.
	for _, id := range slices.Sorted(maps.Keys(c.pending)) {
		s := c.pending[id]
		switch {
		case s.startMs+c.cfg.TimeoutMs < c.now:
			delete(c.pending, id)
			if id == s.id {
				c.stats.TimedOut++
				if s.state == snapWriting {
					delete(c.writes, s.writeTag)
				}
			}
		case id == s.id && s.state == snapWriting && s.writeTag == 0:
			c.writeSnapshot(s)
		}
	}
	if len(c.remotes) == 0 {
		return
	}
	if c.haveCompleted && c.lastDataMs < c.lastCompletedStart {
		c.stats.Skipped++
		return
	}
	for _, r := range c.remotes {
		if !c.connected[r] {
			c.stats.Skipped++
			return
		}
	}
	s := &snapshot{id: c.cfg.NewID(), state: snapRound1, startMs: c.now, responses: map[string]Position{},
		missing: map[string]bool{}}
	s.roundID = s.id
	for _, r := range c.remotes {
		s.missing[r] = true
	}
	c.pending[s.id] = s
	c.stats.Started++
	c.write(replication.MarkerSnapshotRequest, EncodeRequest(s.roundID, c.cfg.LocalCluster), nil)
}

func (c *Controller) become(s *snapshot, to snapState) {
	s.state = snapEdges.Must(ErrIllegalTransition, "snapshot "+s.id, s.state, to)
}

func (c *Controller) write(typ int32, payload []byte, replicateTo []string) uint64 {
	c.writeTag++
	c.ready.Writes = append(c.ready.Writes, MarkerWrite{Tag: c.writeTag, Type: typ, Payload: payload, ReplicateTo: replicateTo})
	return c.writeTag
}

// MarkerRead hands the controller a replicated subscriptions' marker that cluster from
// published and that was replicated here (replicated_from = from), stored at pos in the
// local topic, whose last entry is now last (at or after pos). The owner calls it for every
// such marker its replicator to from reads (again after a restart: markers are processed at
// least once). A malformed marker is counted and ignored.
func (c *Controller) MarkerRead(from string, pos Position, typ int32, payload []byte, last Position) {
	var err error
	switch typ {
	case replication.MarkerSnapshotRequest:
		var req Request
		if req, err = DecodeRequest(payload); err == nil {
			c.answer(req, last)
		}
	case replication.MarkerSnapshotResponse:
		var resp Response
		if resp, err = DecodeResponse(payload); err == nil {
			c.response(pos, resp)
		}
	case replication.MarkerUpdate:
		var u Update
		if u, err = DecodeUpdate(payload); err == nil {
			c.update(u)
		}
	}
	if err != nil {
		c.stats.Malformed++
	}
}

// answer writes the response to a snapshot request: this cluster's last position, to be
// replicated to the requesting cluster only. Everything up to last was here before the
// response, so the requesting cluster has, before the response, every entry published here
// up to last (replication keeps the log's order).
func (c *Controller) answer(req Request, last Position) {
	c.stats.RequestsAnswered++
	c.write(replication.MarkerSnapshotResponse, EncodeResponse(req.ID, c.cfg.LocalCluster, last), []string{req.Source})
}

// response takes a remote cluster's response, stored here at pos.
func (c *Controller) response(pos Position, r Response) {
	s := c.pending[r.ID]
	if s == nil || r.ID != s.roundID {
		c.stats.ResponsesLate++ // timed out, completed, or a first-round response again
		return
	}
	if s.state != snapRound1 && s.state != snapRound2 {
		return
	}
	cl := r.Cluster.Cluster
	if !s.missing[cl] {
		return // a response again, or from a cluster the snapshot does not ask
	}
	if s.state == snapRound1 {
		s.responses[cl] = r.Cluster.Pos
	}
	delete(s.missing, cl)
	if len(s.missing) > 0 {
		return
	}
	if s.state == snapRound1 && len(s.responses) > 1 && !c.mut.OneRound {
		// A cluster's answer may cover entries it had from a third cluster that have not
		// reached this one yet; a second round, asked once every first answer is here, makes
		// every cluster answer after those entries were replicated to it, so they are here
		// before the second round's last answer.
		c.become(s, snapRound2)
		s.roundID = c.cfg.NewID()
		c.pending[s.roundID] = s
		for cl := range s.responses {
			s.missing[cl] = true
		}
		c.write(replication.MarkerSnapshotRequest, EncodeRequest(s.roundID, c.cfg.LocalCluster), nil)
		return
	}
	c.become(s, snapWriting)
	s.final = Snapshot{ID: s.id, Local: pos}
	for cl, p := range s.responses {
		s.final.Clusters = append(s.final.Clusters, ClusterPos{Cluster: cl, Pos: p})
	}
	sortClusters(s.final.Clusters)
	c.writeSnapshot(s)
}

// writeSnapshot writes the SNAPSHOT marker of s, which never leaves this cluster.
func (c *Controller) writeSnapshot(s *snapshot) {
	s.writeTag = c.write(replication.MarkerSnapshot, EncodeSnapshot(s.final), []string{c.cfg.LocalCluster})
	c.writes[s.writeTag] = s
}

// Written completes the marker write of tag: stored at pos, or failed. A failed request,
// response or update is not retried (the snapshot times out and a later one starts; the
// subscription's next snapshot brings a later update); a failed SNAPSHOT write is retried
// at the next Tick until the snapshot times out.
func (c *Controller) Written(tag uint64, pos Position, err error) {
	_ = pos
	s := c.writes[tag]
	if err != nil {
		c.stats.WriteFailures++
	}
	if s == nil {
		return
	}
	delete(c.writes, tag)
	if err != nil {
		s.writeTag = 0
		return
	}
	c.become(s, snapDone)
	delete(c.pending, s.id)
	delete(c.pending, s.roundID)
	c.stats.Completed++
	c.haveCompleted = true
	c.lastCompletedStart = max(c.lastCompletedStart, s.startMs)
	c.lastCompletedID = s.id
}

// SubscriptionAdvanced writes the UPDATE of replicated subscription sub, whose mark-delete
// position reached the local position of snapshot s (Cache.Advanced): its position in
// every other cluster, to be replicated to every cluster.
func (c *Controller) SubscriptionAdvanced(sub string, s Snapshot) {
	c.stats.UpdatesWritten++
	c.write(replication.MarkerUpdate, EncodeUpdate(sub, s.Clusters), nil)
}

// update applies another cluster's UPDATE: the subscription is acknowledged here up to this
// cluster's entry.
func (c *Controller) update(u Update) {
	for _, cp := range u.Clusters {
		if cp.Cluster == c.cfg.LocalCluster || c.mut.WrongClusterEntry {
			c.stats.UpdatesApplied++
			c.ready.Acks = append(c.ready.Acks, SubscriptionAck{Subscription: u.Subscription, Pos: cp.Pos})
			return
		}
	}
	c.stats.UpdatesForOthers++
}

// invariantErr checks the controller's own invariants; the simulation calls it after every
// step of an unmutated controller.
func (c *Controller) invariantErr() error {
	for id, s := range c.pending {
		if id != s.id && id != s.roundID {
			return fmt.Errorf("snapshot %s is pending under %s", s.id, id)
		}
		if s.state == snapDone {
			return fmt.Errorf("snapshot %s is done but pending", s.id)
		}
		if s.state == snapWriting && s.writeTag != 0 && c.writes[s.writeTag] != s {
			return fmt.Errorf("snapshot %s is writing without its write", s.id)
		}
	}
	for tag, s := range c.writes {
		if s.state != snapWriting || s.writeTag != tag {
			return fmt.Errorf("write %d of snapshot %s in state %v", tag, s.id, s.state)
		}
	}
	return nil
}
