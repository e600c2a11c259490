package replhost

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/internal/ratelog"
	"github.com/magnetar-io/magnetar/replication"
)

// Config configures a Host.
type Config struct {
	// LocalCluster is this broker's cluster.
	LocalCluster string
	// Remote returns the client of a remote cluster (built from its cluster record). A
	// replicator asks for it at each connect, so a changed record applies at the next
	// reconnect, and a missing or unusable one only fails connects (the backlog grows).
	Remote func(ctx context.Context, cluster string) (Remote, error)
	// Admin returns the admin API of a remote cluster (Remotes.Admin) and LocalPartitions
	// the local partition count of a topic (0: not partitioned): before a partition's
	// replicator connects, the remote's partitioned metadata is checked, and created if
	// missing (partitions.go). Either nil: no check.
	Admin           func(ctx context.Context, cluster string) (RemoteAdmin, error)
	LocalPartitions func(ctx context.Context, topic string) (int, error)
	// Core configures every replicator's core (window, read batch, rates); the clusters
	// are set per replicator.
	Core replication.Config
	// ReplSubs configures replicated subscriptions (off unless Enabled).
	ReplSubs ReplSubs
	Logger   *slog.Logger
}

// Settings are the policies a topic's replicators follow.
type Settings struct {
	// MessageTTLMs is the message TTL (ms, 0: none): an entry read past it is not
	// replicated (Pulsar's msgRateExpired).
	MessageTTLMs int64
	// RateMsgs and RateBytes are the replicator dispatch rate per second (0: off).
	RateMsgs, RateBytes int64
}

// Host runs the replicators of the loaded topics: one per (topic, remote cluster). Its
// methods are safe for concurrent use.
type Host struct {
	cfg Config
	log *slog.Logger
	// updates serializes Update: a cluster removed then added again by two quick policy
	// changes must not have the new replicator's cursor deleted by the old one's stop.
	// Lock order: updates, then mu.
	updates sync.Mutex

	mu struct {
		sync.Mutex // guards the fields below
		closed     bool
		topics     map[*topic.Topic]map[string]*replicator
		subs       map[*topic.Topic]*subsController // replicated subscriptions' controllers (ReplSubs.Enabled)
	}
}

// New returns a host with no replicator.
func New(cfg Config) *Host {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// Warnings are rate-limited per replicator (its logger's attributes): a cluster that
	// stays unreachable costs a line every ratelog.DefaultInterval, not one per connect.
	h := &Host{cfg: cfg, log: slog.New(ratelog.New(cfg.Logger.Handler(), ratelog.Options{})).With("part", "replication")}
	h.mu.topics = map[*topic.Topic]map[string]*replicator{}
	h.mu.subs = map[*topic.Topic]*subsController{}
	if cfg.ReplSubs.Enabled {
		h.cfg.Core.ReplicatedSubscriptions = true
	}
	return h
}

// Update makes the replicators of loaded persistent topic t those of clusters (the topic's
// replication clusters: topic-level if set, else the namespace's), the local cluster
// excepted: a new cluster's replicator is started (its cursor created at the earliest
// entry), a removed cluster's is stopped and its cursor deleted. The replicators stop
// with the topic (without deleting their cursors).
func (h *Host) Update(ctx context.Context, t *topic.Topic, clusters []string, set Settings) {
	name := t.Name()
	if !name.IsPersistent() {
		return
	}
	h.updates.Lock()
	defer h.updates.Unlock()
	h.mu.Lock()
	if h.mu.closed {
		h.mu.Unlock()
		return
	}
	reps, known := h.mu.topics[t]
	if !known && !hasRemote(clusters, h.cfg.LocalCluster) {
		// Not replicated: the topic costs the host nothing (no goroutine, no entry), but a
		// replication cursor left by a cluster removed meanwhile is dropped as it loads.
		h.mu.Unlock()
		h.dropOrphanCursors(ctx, t, clusters)
		return
	}
	if !known {
		reps = map[string]*replicator{}
		h.mu.topics[t] = reps
		t.SetReplication(topicView{h, t})
		// The replicators stop before the topic closes its managed ledger (their last
		// mark-delete write lands), and in any case when it is done.
		t.OnClose(func(done func()) {
			go func() {
				h.topicClosed(t)
				done()
			}()
		})
		go func() {
			<-t.Done()
			h.topicClosed(t)
		}()
		if h.cfg.ReplSubs.Enabled {
			h.mu.subs[t] = newSubsController(t, h.cfg.LocalCluster, h.cfg.ReplSubs, h.log)
		}
	}
	subs := h.mu.subs[t]
	if subs != nil {
		subs.setRemotes(clusters)
	}
	var stop []*replicator
	for c, r := range reps {
		if !slices.Contains(clusters, c) {
			delete(reps, c)
			stop = append(stop, r)
			continue
		}
		r.apply(set)
	}
	var start []*replicator
	for _, c := range clusters {
		if c == h.cfg.LocalCluster || c == "" || reps[c] != nil {
			continue
		}
		cluster := c
		rem := func(ctx context.Context) (Remote, error) { return h.cfg.Remote(ctx, cluster) }
		cfg := h.cfg.Core
		cfg.MessageTTLMs, cfg.RateMsgs, cfg.RateBytes = set.MessageTTLMs, set.RateMsgs, set.RateBytes
		r := newReplicator(h.cfg.LocalCluster, c, name.String(), t.Log(), rem, cfg, h.log)
		r.prepare = func(ctx context.Context) error { return h.prepareRemote(ctx, name, cluster) }
		r.subs = subs
		reps[c] = r
		start = append(start, r)
	}
	h.mu.Unlock()
	if !known {
		h.dropOrphanCursors(ctx, t, clusters)
	}
	for _, r := range stop {
		r.close(true)
	}
	for _, r := range start {
		if err := r.start(ctx); err != nil {
			h.log.Warn("start replicator", "topic", name, "remote", r.remote, "err", err)
			h.mu.Lock()
			if h.mu.topics[t] != nil && h.mu.topics[t][r.remote] == r {
				delete(h.mu.topics[t], r.remote)
			}
			h.mu.Unlock()
		}
	}
}

// prepareRemote checks, before the replicator of partition n to cluster connects, that the
// remote cluster has the partitioned topic with the local partition count, creating it
// there if it has none (partitions.go).
func (h *Host) prepareRemote(ctx context.Context, n topicname.Name, cluster string) error {
	if !n.IsPartition() || h.cfg.Admin == nil || h.cfg.LocalPartitions == nil {
		return nil
	}
	local, err := h.cfg.LocalPartitions(ctx, n.Base().String())
	if err != nil {
		return fmt.Errorf("partitioned metadata of %s: %w", n.Base(), err)
	}
	if n.Partition >= local {
		return nil // a topic whose name looks like a partition's, not one of a partitioned topic
	}
	admin, err := h.cfg.Admin(ctx, cluster)
	if err != nil {
		return err
	}
	return checkRemotePartitions(ctx, n, local, admin)
}

// hasRemote reports whether clusters names a cluster other than local.
func hasRemote(clusters []string, local string) bool {
	for _, c := range clusters {
		if c != "" && c != local {
			return true
		}
	}
	return false
}

// dropOrphanCursors deletes the replication cursors of topic t (just loaded) whose
// cluster is no longer one of its replication clusters: removed while the topic was not
// loaded here, they would hold its backlog for ever (as Pulsar does when a topic loads).
func (h *Host) dropOrphanCursors(ctx context.Context, t *topic.Topic, clusters []string) {
	names, err := t.Log().Cursors(ctx)
	if err != nil {
		return
	}
	for _, n := range names {
		if !topic.IsReplicationCursor(n) {
			continue
		}
		c := strings.TrimPrefix(n, replication.Prefix+".")
		if c == h.cfg.LocalCluster || slices.Contains(clusters, c) {
			continue
		}
		if err := t.Log().DeleteCursor(ctx, n); err != nil {
			h.log.Warn("delete the cursor of a cluster no longer replicated to", "topic", t.Name(), "cursor", n, "err", err)
		} else {
			h.log.Info("deleted the cursor of a cluster no longer replicated to", "topic", t.Name(), "cursor", n)
		}
	}
}

// topicClosed stops the replicators of t.
func (h *Host) topicClosed(t *topic.Topic) {
	h.mu.Lock()
	reps := h.mu.topics[t]
	delete(h.mu.topics, t)
	subs := h.mu.subs[t]
	delete(h.mu.subs, t)
	h.mu.Unlock()
	for _, r := range reps {
		r.close(false)
	}
	if subs != nil {
		subs.close()
	}
}

// Topics calls fn for each topic with replicators.
func (h *Host) Topics(fn func(t *topic.Topic)) {
	h.mu.Lock()
	ts := make([]*topic.Topic, 0, len(h.mu.topics))
	for t := range h.mu.topics {
		ts = append(ts, t)
	}
	h.mu.Unlock()
	for _, t := range ts {
		fn(t)
	}
}

// Close stops every replicator (their cursors stay) and refuses later updates.
func (h *Host) Close() {
	h.mu.Lock()
	h.mu.closed = true
	all := h.mu.topics
	h.mu.topics = map[*topic.Topic]map[string]*replicator{}
	subs := h.mu.subs
	h.mu.subs = map[*topic.Topic]*subsController{}
	h.mu.Unlock()
	for _, reps := range all {
		for _, r := range reps {
			r.close(false)
		}
	}
	for _, c := range subs {
		c.close()
	}
}
