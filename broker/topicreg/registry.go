package topicreg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/compaction"
	"github.com/magnetar-io/magnetar/broker/loadmgr"
	"github.com/magnetar-io/magnetar/broker/nonpersistent"
	"github.com/magnetar-io/magnetar/broker/ownership"
	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
)

// Config configures a Registry. The broker's Config fields of the same names say what
// each means.
type Config struct {
	Cluster                        string
	MaxMessageSize                 int
	DisableDeduplication           bool
	DeduplicationSnapshotInterval  int
	MaxPendingPublishBytesPerTopic int64
	ManagedLedger                  mledger.Config
	NonPersistent                  nonpersistent.Config
	Policies                       policy.Defaults
	CompactionCheckInterval        time.Duration // < 0: no compaction monitor
	CompactionBeforeCommit         func(compaction.State) error
	// OpenLog, if set, replaces the managed ledgers of Factory (tests).
	OpenLog func(ctx context.Context, name string) (topic.Log, error)

	Factory  *mledger.Factory
	Store    metadata.Store // followed for policy changes (metadata.Follower); records go through Records
	Records  Records
	Owner    Owner
	Resolver *policy.Resolver
	// Txn returns the transaction configuration of a topic being opened (nil: off).
	Txn          func() *topic.TxnConfig
	TopicMetrics *topic.Metrics
	Registerer   prometheus.Registerer
	Logger       *slog.Logger
	// OnPolicies, if set, is called after a loaded topic got its policies: when it loads,
	// and on every change of its namespace's or its own policy record (the broker starts
	// and stops its geo-replicators there).
	OnPolicies func(ctx context.Context, t *topic.Topic, r policy.Resolved)
}

// Records is what the registry reads and writes of the broker's records (package
// broker/resources).
type Records interface {
	NamespacePolicies(ctx context.Context, tenant, ns string) (api.NamespacePolicies, error)
	CachedPolicies(ctx context.Context, tenant, ns string) (api.NamespacePolicies, error)
	CachedPartitions(ctx context.Context, n topicname.Name) (int, error)
	CheckNamespace(ctx context.Context, tenant, ns string) error
	SetNamespaceSeen(ctx context.Context, ns string, p api.NamespacePolicies) error
	DeleteNamespace(ctx context.Context, tenant, ns string) error
	Topics(ctx context.Context, ns string) ([]string, error)
	DomainTopics(ctx context.Context, tenant, ns, domain string) ([]string, error)
	PartitionedTopics(ctx context.Context, ns string) ([]string, error)
	TopicExists(ctx context.Context, n topicname.Name) (bool, error)
	CreateTopicRecord(ctx context.Context, n topicname.Name) error
	DeleteTopicRecord(ctx context.Context, n topicname.Name) error
	PartitionCount(ctx context.Context, n topicname.Name) (int, error)
	CreatePartitioned(ctx context.Context, topic string, n int) error
	DeletePartitioned(ctx context.Context, n topicname.Name) error
	TopicPolicies(ctx context.Context, n topicname.Name) (map[string]json.RawMessage, error)
	UpdateTopicPolicies(ctx context.Context, n topicname.Name, change func(map[string]json.RawMessage) error) error
}

// Owner is what the registry asks of bundle ownership (package broker/ownership).
type Owner interface {
	// AcquireTopic makes this broker the owner of n's bundle, or returns *api.NotOwnerError.
	AcquireTopic(ctx context.Context, n topicname.Name) (*ownership.OwnedBundle, error)
	// Serving reports whether ob is still owned under the broker's current session.
	Serving(ob *ownership.OwnedBundle) bool
	BundleOf(ctx context.Context, n topicname.Name) (ownership.Bundle, error)
	// BundleOwner returns *api.NotOwnerError if another broker owns b, nil if this one does.
	BundleOwner(ctx context.Context, b ownership.Bundle) error
}

// Registry is the broker's topic registry. Its exported methods are safe for concurrent
// use. Goroutines: one per topic being loaded, the policy and compaction monitors and the
// two policy watches (StartMonitors; they end with its context and WaitMonitors waits for them).
type Registry struct {
	cfg Config
	log *slog.Logger
	res Records
	own Owner
	pol *policy.Resolver
	m   metrics
	ctx context.Context // ends when the broker closes
	wg  sync.WaitGroup  // monitors and watches

	// compactors maps loaded persistent topics' names to their *compaction.Manager
	// (compaction.go).
	compactors sync.Map
	// applied maps loaded topics' names to the policies in force on them (resolved,
	// policyapply.go).
	applied sync.Map

	mu struct {
		sync.Mutex // guards the fields below
		topics     map[string]*topicEntry
		closed     bool
	}
}

// New returns a registry whose loads end with ctx; StartMonitors runs its monitors.
func New(ctx context.Context, cfg Config) *Registry {
	reg := &Registry{cfg: cfg, log: cfg.Logger, res: cfg.Records, own: cfg.Owner, pol: cfg.Resolver, ctx: ctx,
		m: newMetrics(cfg.Registerer)}
	reg.mu.topics = map[string]*topicEntry{}
	reg.registerOffloadMetrics(cfg.Registerer) // offload.go
	return reg
}

// StartMonitors runs the compaction and policy monitors until the registry's context ends.
func (reg *Registry) StartMonitors() {
	reg.wg.Add(2)
	go reg.compactionMonitor()
	go reg.policyMonitor()
}

// WaitMonitors waits for the goroutines StartMonitors started (after the registry's context ended).
func (reg *Registry) WaitMonitors() { reg.wg.Wait() }

// RefuseLoads makes every later load fail with api.ErrServiceNotReady (the broker is closing).
func (reg *Registry) RefuseLoads() {
	reg.mu.Lock()
	reg.mu.closed = true
	reg.mu.Unlock()
}

func (reg *Registry) txn() *topic.TxnConfig {
	if reg.cfg.Txn == nil {
		return nil
	}
	return reg.cfg.Txn()
}

// TopicRecord returns topic n's policy record (empty if none).
func (reg *Registry) TopicRecord(ctx context.Context, n topicname.Name) (policy.Record, error) {
	r, err := reg.res.TopicPolicies(ctx, n)
	return policy.Record(r), err
}

// UpdateTopicRecord changes topic n's policy record with a compare-and-swap.
func (reg *Registry) UpdateTopicRecord(ctx context.Context, n topicname.Name, change func(policy.Record) error) error {
	return reg.res.UpdateTopicPolicies(ctx, n, func(r map[string]json.RawMessage) error { return change(r) })
}

// topicEntry is a topic being loaded or loaded. ready closes when t or err is set.
type topicEntry struct {
	ready chan struct{}
	t     *topic.Topic
	err   error
}

func (reg *Registry) UnloadAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, t := range reg.LoadedTopics() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := t.Close(ctx); err != nil {
				reg.log.Warn("unload topic", "topic", t.Name().String(), "err", err)
			}
		}()
	}
	wg.Wait()
}

// topicFor returns the loaded topic name, loading it if needed. create allows creating a
// topic that does not exist (subject to the auto-creation policy unless force).
func (reg *Registry) Topic(ctx context.Context, name topicname.Name, create, force bool) (*topic.Topic, error) {
	key := name.String()
	for {
		reg.mu.Lock()
		if reg.mu.closed {
			reg.mu.Unlock()
			return nil, api.ErrServiceNotReady
		}
		e := reg.mu.topics[key]
		if e == nil {
			e = &topicEntry{ready: make(chan struct{})}
			reg.mu.topics[key] = e
			reg.mu.Unlock()
			go reg.loadTopic(name, e, create, force)
		} else {
			reg.mu.Unlock()
		}
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.err != nil {
			return nil, e.err
		}
		select {
		case <-e.t.Done(): // closed meanwhile: load again
			reg.forgetTopic(key, e)
			continue
		default:
		}
		return e.t, nil
	}
}

func (reg *Registry) forgetTopic(key string, e *topicEntry) {
	reg.mu.Lock()
	if reg.mu.topics[key] == e {
		delete(reg.mu.topics, key)
	}
	reg.mu.Unlock()
}

func (reg *Registry) loadTopic(name topicname.Name, e *topicEntry, create, force bool) {
	ctx, cancel := context.WithTimeout(reg.ctx, time.Minute)
	defer cancel()
	start := time.Now()
	t, err := reg.openTopic(ctx, name, create, force, e)
	if err != nil {
		reg.forgetTopic(name.String(), e)
		e.err = err
		close(e.ready)
		if !errors.Is(err, api.ErrTopicNotFound) && !errors.Is(err, api.ErrNotOwner) {
			reg.log.Warn("load topic", "topic", name.String(), "err", err)
		}
		return
	}
	e.t = t
	close(e.ready)
	reg.m.topicLoads.Inc()
	reg.log.Info("topic loaded", "topic", name.String(), "took", time.Since(start).Round(time.Millisecond))
}

func (reg *Registry) openTopic(ctx context.Context, name topicname.Name, create, force bool, e *topicEntry) (*topic.Topic, error) {
	pol, err := reg.res.NamespacePolicies(ctx, name.Tenant, name.Namespace)
	if err != nil {
		return nil, err
	}
	pols, err := reg.resolve(ctx, name) // policies in force (policyapply.go)
	if err != nil {
		return nil, err
	}
	exists, err := reg.res.TopicExists(ctx, name)
	if err != nil {
		return nil, err
	}
	if !exists {
		if !create || (!reg.pol.AutoCreateAllowed(pol, pols) && !force) || (name.IsSegment() && !force) { // segments: only their controller creates them
			return nil, fmt.Errorf("%w: %s", api.ErrTopicNotFound, name)
		}
		if !name.IsPartition() {
			if n, err := reg.res.PartitionCount(ctx, name); err != nil {
				return nil, err
			} else if n > 0 {
				return nil, fmt.Errorf("%w: %s is a partitioned topic: use its partitions", api.ErrNotAllowed, name)
			}
		}
	}
	ob, err := reg.own.AcquireTopic(ctx, name)
	if err != nil {
		return nil, err
	}
	release := true
	if !exists {
		if err := reg.checkTopicCount(ctx, name, pols); err != nil {
			return nil, err
		}
		if err := reg.res.CreateTopicRecord(ctx, name); err != nil && !errors.Is(err, api.ErrAlreadyExists) {
			return nil, err
		}
	}
	var log topic.Log
	if !name.IsPersistent() {
		log = nonpersistent.New(reg.cfg.NonPersistent) // nothing stored: see package nonpersistent
	} else if reg.cfg.OpenLog != nil {
		log, err = reg.cfg.OpenLog(ctx, name.ManagedLedgerName())
	} else {
		var ml *mledger.ManagedLedger
		if ml, err = reg.cfg.Factory.Open(ctx, name.ManagedLedgerName(), reg.managedLedgerConfig(pols)); err == nil {
			log = newMLog(ml)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open managed ledger of %s: %w", name, err)
	}
	dedup := !reg.cfg.DisableDeduplication
	if pols.Dedup != nil {
		dedup = *pols.Dedup
	}
	dedup = dedup && name.IsPersistent()
	tcfg := topic.Config{
		Name: name, Log: log, Dedup: dedup, DedupSnapshotEvery: reg.cfg.DeduplicationSnapshotInterval,
		MaxPendingBytes: reg.cfg.MaxPendingPublishBytesPerTopic, Logger: reg.log, Metrics: reg.cfg.TopicMetrics, Txn: reg.txn(),
		OnClosed: func(t *topic.Topic) {
			reg.forgetTopic(name.String(), e)
		},
	}
	if name.IsPersistent() {
		cm := reg.newCompactor(name, log)
		tcfg.ReadCompacted, tcfg.OnClosed = cm.WrapCursor, func(t *topic.Topic) {
			reg.dropCompactor(name, cm)
			reg.forgetTopic(name.String(), e)
		}
		defer func() {
			if release { // not opened
				reg.dropCompactor(name, cm)
			}
		}()
	}
	t, err := topic.Open(ctx, tcfg)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		log.Close(cctx) //nolint:errcheck // best effort
		cancel()
		return nil, err
	}
	reg.applyPolicies(ctx, t, pols)
	release = false
	if !reg.own.Serving(ob) { // the bundle was released meanwhile
		t.Close(ctx) //nolint:errcheck // closing; the caller retries
		return nil, fmt.Errorf("%w: bundle %s is being unloaded", api.ErrServiceNotReady, ob.Bundle())
	}
	return t, nil
}

// adminTopic returns a topic for an admin call: loaded here, or api.ErrNotOwner if another
// broker serves it, or api.ErrTopicNotFound.
func (reg *Registry) AdminTopic(ctx context.Context, topicName string) (*topic.Topic, error) {
	name, err := topicname.Parse(topicName)
	if err != nil {
		return nil, err
	}
	return reg.Topic(ctx, name, false, false)
}

// CreateTopic creates a non-partitioned topic (api.ErrAlreadyExists if it or a partitioned
// topic of that name exists).
func (reg *Registry) CreateTopic(ctx context.Context, topicName string) error {
	name, err := topicname.Parse(topicName)
	if err != nil {
		return err
	}
	if err := reg.res.CheckNamespace(ctx, name.Tenant, name.Namespace); err != nil {
		return err
	}
	if exists, err := reg.res.TopicExists(ctx, name); err != nil {
		return err
	} else if exists {
		return fmt.Errorf("%w: topic %s", api.ErrAlreadyExists, name)
	}
	if n, err := reg.res.PartitionCount(ctx, name.Base()); err != nil {
		return err
	} else if n > 0 && !name.IsPartition() {
		return fmt.Errorf("%w: partitioned topic %s", api.ErrAlreadyExists, name)
	}
	_, err = reg.Topic(ctx, name, true, true)
	return err
}

// DeleteTopic deletes a topic or partition and its data. Without force it fails with
// api.ErrNotEmpty while producers or consumers are connected; with force they are disconnected.
func (reg *Registry) DeleteTopic(ctx context.Context, topicName string, force bool) error {
	name, err := topicname.Parse(topicName)
	if err != nil {
		return err
	}
	if !name.IsPartition() {
		if n, err := reg.res.PartitionCount(ctx, name); err != nil {
			return err
		} else if n > 0 {
			return fmt.Errorf("%w: %s is partitioned: delete the partitioned topic", api.ErrNotAllowed, name)
		}
	}
	t, err := reg.Topic(ctx, name, false, false)
	if err != nil {
		return err
	}
	var gen int64 // the compacted log goes with the topic (best effort)
	cm, compacted := reg.compactors.Load(name.String())
	if compacted {
		gen, _ = cm.(*compaction.Manager).Generation(ctx)
	}
	if err := t.Delete(ctx, force); err != nil {
		return err
	}
	if compacted {
		if err := cm.(*compaction.Manager).DeleteGeneration(ctx, gen); err != nil {
			reg.log.Warn("delete the compacted log", "topic", name.String(), "err", err)
		}
	}
	if err := waitStopped(ctx, t); err != nil {
		return err
	}
	return reg.res.DeleteTopicRecord(ctx, name)
}

// DeletePartitionedTopic deletes a partitioned topic and all its partitions.
func (reg *Registry) DeletePartitionedTopic(ctx context.Context, topicName string, force bool) error {
	name, err := topicname.Parse(topicName)
	if err != nil {
		return err
	}
	name = name.Base()
	n, err := reg.res.PartitionCount(ctx, name)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: partitioned topic %s", api.ErrTopicNotFound, name)
	}
	for i := 0; i < n; i++ {
		p := name.PartitionName(i)
		exists, err := reg.res.TopicExists(ctx, p)
		if err != nil {
			return err
		}
		if !exists {
			continue
		}
		if err := reg.DeleteTopic(ctx, p.String(), force); err != nil && !errors.Is(err, api.ErrTopicNotFound) {
			return fmt.Errorf("partition %d: %w", i, err)
		}
	}
	return reg.res.DeletePartitioned(ctx, name)
}

// DeleteNamespace deletes namespace "tenant/ns". Without force it must have no topics
// (api.ErrNotEmpty); with force its topics are deleted first.
func (reg *Registry) DeleteNamespace(ctx context.Context, ns string, force bool) error {
	tenant, nsName, err := topicname.ParseNamespace(ns)
	if err != nil {
		return err
	}
	if err := reg.res.CheckNamespace(ctx, tenant, nsName); err != nil {
		return err
	}
	topics, err := reg.res.Topics(ctx, ns)
	if err != nil {
		return err
	}
	parts, err := reg.res.PartitionedTopics(ctx, ns)
	if err != nil {
		return err
	}
	if (len(topics) > 0 || len(parts) > 0) && !force {
		return fmt.Errorf("%w: namespace %s has %d topics", api.ErrNotEmpty, ns, len(topics)+len(parts))
	}
	for _, p := range parts {
		if err := reg.DeletePartitionedTopic(ctx, p, true); err != nil && !errors.Is(err, api.ErrTopicNotFound) {
			return err
		}
	}
	for _, t := range topics {
		if err := reg.DeleteTopic(ctx, t, true); err != nil && !errors.Is(err, api.ErrTopicNotFound) {
			return err
		}
	}
	return reg.res.DeleteNamespace(ctx, tenant, nsName)
}

// Unload closes a topic on this broker (disconnecting its clients, who reconnect and load it
// again) and releases its ownership.
func (reg *Registry) Unload(ctx context.Context, topicName string) error {
	name, err := topicname.Parse(topicName)
	if err != nil {
		return err
	}
	reg.mu.Lock()
	e := reg.mu.topics[name.String()]
	reg.mu.Unlock()
	if e == nil {
		return reg.ownedElsewhere(ctx, name) // or not loaded anywhere: nothing to do
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	if e.t == nil {
		return nil
	}
	if err := e.t.Close(ctx); err != nil {
		return err
	}
	return waitStopped(ctx, e.t)
}

// waitStopped waits until t's goroutine has stopped, which is after the topic forgot its
// entry here: a request that comes after Unload or Delete returned loads the topic afresh
// instead of finding the closing one (and failing with api.ErrClosed).
func waitStopped(ctx context.Context, t *topic.Topic) error {
	select {
	case <-t.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// FromTopicID is the API message id of topic id id in partition partition (-1: none).
func FromTopicID(id topic.MessageID, partition int) api.MessageID {
	return api.MessageID{LedgerID: id.LedgerID, EntryID: id.EntryID, BatchIndex: id.BatchIndex, Partition: int32(partition)}
}

// ToTopicID is the topic message id of API id m (Earliest and Latest, and negative ledger
// ids as Earliest).
func ToTopicID(m api.MessageID) topic.MessageID {
	switch {
	case m.LedgerID < 0 || (m.LedgerID == api.Earliest.LedgerID && m.EntryID == api.Earliest.EntryID):
		return topic.MessageID{LedgerID: mledger.Earliest.LedgerID, EntryID: mledger.Earliest.EntryID, BatchIndex: -1}
	case m.LedgerID == api.Latest.LedgerID:
		return topic.MessageID{LedgerID: mledger.Latest.LedgerID, EntryID: mledger.Latest.EntryID, BatchIndex: -1}
	}
	return topic.MessageID{LedgerID: m.LedgerID, EntryID: m.EntryID, BatchIndex: m.BatchIndex}
}

// cachedPartitions returns a topic's partition count (0: not partitioned): from the store
// (partition counts grow, and a client must not see a stale one), or from the watched
// cache if the store does not answer within resources.StoreFirstWait.
func (reg *Registry) cachedPartitions(ctx context.Context, n topicname.Name) (int, error) {
	if reg.LoadedTopic(n.String()) != nil {
		return 0, nil // served here as a non-partitioned topic (a partitioned one is not loaded)
	}
	return reg.res.CachedPartitions(ctx, n)
}

// partitions answers partitioned metadata from the watched cache (0: not partitioned).
func (reg *Registry) Partitions(ctx context.Context, topic string) (int, error) {
	n, err := topicname.Parse(topic)
	if err != nil || n.IsPartition() {
		return 0, err
	}
	return reg.cachedPartitions(ctx, n)
}

// closeTopics closes the loaded topics that match, sending their clients to redirect (nil:
// they look the topics up again), and waits until they stopped. Topics being loaded are
// waited for first (a load checks ownership once more when it completes).
func (reg *Registry) CloseTopics(ctx context.Context, match func(topicname.Name) bool, redirect *topic.Redirect) {
	reg.mu.Lock()
	var es []*topicEntry
	for _, e := range reg.mu.topics {
		es = append(es, e)
	}
	reg.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-e.ready:
			case <-ctx.Done():
				return
			}
			if e.t == nil || !match(e.t.Name()) {
				return
			}
			var err error
			if redirect != nil {
				err = e.t.CloseTo(ctx, *redirect)
			} else {
				err = e.t.Close(ctx)
			}
			if err == nil {
				err = waitStopped(ctx, e.t)
			}
			if err != nil {
				reg.log.Warn("unload topic", "topic", e.t.Name().String(), "err", err)
			}
		}()
	}
	wg.Wait()
}

// loadedTopic returns the topic named name if this broker has it loaded, nil otherwise.
func (reg *Registry) LoadedTopic(name string) *topic.Topic {
	n, err := topicname.Parse(name)
	if err != nil {
		return nil
	}
	reg.mu.Lock()
	e := reg.mu.topics[n.String()]
	reg.mu.Unlock()
	if e == nil {
		return nil
	}
	select {
	case <-e.ready:
		return e.t
	default:
		return nil
	}
}

// openLog opens a managed ledger for a topic's transaction side (pending-ack logs).
func (reg *Registry) OpenLog(ctx context.Context, name string, create bool) (topic.Log, error) {
	if reg.cfg.OpenLog != nil {
		return reg.cfg.OpenLog(ctx, name)
	}
	cfg := reg.cfg.ManagedLedger
	cfg.MustExist = !create
	ml, err := reg.cfg.Factory.Open(ctx, name, cfg)
	if err != nil {
		return nil, err
	}
	return newMLog(ml), nil
}

// BundleLoads returns the load of each of bundles (the ones this broker owns), the sums
// over their loaded topics, by bundle name (loadmgr.Config.BundleStats).
func (reg *Registry) BundleLoads(ctx context.Context, bundles []ownership.Bundle) map[string]loadmgr.BundleLoad {
	byNS := map[string][]ownership.Bundle{}
	out := map[string]loadmgr.BundleLoad{}
	for _, b := range bundles {
		byNS[b.Namespace] = append(byNS[b.Namespace], b)
		out[b.String()] = loadmgr.BundleLoad{}
	}
	for _, t := range reg.LoadedTopics() {
		b, ok := bundleIn(byNS, t.Name())
		if !ok {
			continue
		}
		l, err := t.Load(ctx)
		if err != nil {
			continue // closing
		}
		bl := out[b.String()]
		bl.MsgRateIn += l.MsgRateIn
		bl.MsgThroughputIn += l.MsgThroughputIn
		bl.MsgRateOut += l.MsgRateOut
		bl.MsgThroughputOut += l.MsgThroughputOut
		bl.Producers += l.Producers
		bl.Consumers += l.Consumers
		bl.Topics++
		out[b.String()] = bl
	}
	return out
}

// bundleIn returns the bundle of bundles (by namespace) that n belongs to.
func bundleIn(bundles map[string][]ownership.Bundle, n topicname.Name) (ownership.Bundle, bool) {
	h := ownership.TopicHash(n)
	for _, b := range bundles[n.Tenant+"/"+n.Namespace] {
		if b.Contains(h) {
			return b, true
		}
	}
	return ownership.Bundle{}, false
}
