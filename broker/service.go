package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	bkclient "github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/broker/compaction"
	"github.com/magnetar-io/magnetar/broker/loadmgr"
	"github.com/magnetar-io/magnetar/broker/nonpersistent"
	"github.com/magnetar-io/magnetar/broker/ownership"
	"github.com/magnetar-io/magnetar/broker/peer"
	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/resources"
	"github.com/magnetar-io/magnetar/broker/schemareg"
	"github.com/magnetar-io/magnetar/broker/server"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/broker/txnhost"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
)

// Service is a running broker. Its exported methods are safe for concurrent use.
type Service struct {
	cfg     Config
	log     *slog.Logger
	store   metadata.Store
	ln      net.Listener // plain listener; nil if off
	lnTLS   net.Listener // TLS listener; nil if off
	info    BrokerInfo
	reg     *prometheus.Registry
	m       *metrics
	tm      *topic.Metrics
	res     records          // the typed records and their watched caches (package resources)
	pol     *policy.Resolver // policy resolution: topic > namespace > broker default
	peer    *peer.Client     // calls to the other brokers, with this broker's credentials
	schemas *schemareg.Registry
	txn     *txnhost.Host      // transaction hosting (txn.go); nil: transactions are off
	own     *ownership.Manager // bundle ownership and its watched caches (package ownership, ownership.go)
	lm      *loadmgr.Manager   // the load manager (loadbalance.go); nil if off
	factory *mledger.Factory
	// compactors maps loaded persistent topics' names to their *compaction.Manager
	// (compaction.go).
	compactors sync.Map
	// applied maps loaded topics' names to the policies in force on them (resolved,
	// policyapply.go).
	applied sync.Map
	closers []func() // what Start created, closed in reverse order
	// scal runs the scalable topics' controllers (scalable.go).
	scal *scalableTopics

	ctx    context.Context // ends on Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // session keeper, monitors, watched caches
	bg     sync.WaitGroup // background metadata chores (goBackground)

	// srv serves the Pulsar protocol on ln and lnTLS (package broker/server, backend.go).
	srv *server.Server

	producerPrefix string
	producerSeq    atomic.Uint64

	mu struct {
		sync.Mutex // guards the fields below
		topics     map[string]*topicEntry
		session    metadata.Session
		closed     bool
		bgClosed   bool // no more goBackground
	}
}

// topicEntry is a topic being loaded or loaded. ready closes when t or err is set.
type topicEntry struct {
	ready chan struct{}
	t     *topic.Topic
	err   error
}

// Start starts a broker: it creates the default tenant and namespace (public/default) at
// first start, registers the broker, and serves the Pulsar protocol on cfg.Listen.
func Start(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: Config.Store is required", ErrInvalidArgument)
	}
	cfg = cfg.withDefaults()
	s := &Service{cfg: cfg, log: cfg.Logger.With("component", "broker"), store: cfg.Store, reg: prometheus.NewRegistry()}
	s.mu.topics = map[string]*topicEntry{}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.m = newMetrics(s.reg)
	s.tm = topic.NewMetrics(s.reg)
	s.srv = s.newServer() // backend.go
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ok := false
	defer func() {
		if !ok {
			s.cancel()
			s.runClosers()
		}
	}()

	bk := cfg.Ledgers
	if bk == nil {
		pool := bkclient.NewPool(bkclient.Options{Logger: s.log, Dial: cfg.BookieDial})
		lc := ledger.NewClient(cfg.Store, pool, ledger.Options{Logger: s.log})
		bl := mledger.NewBookieLedgers(lc, 0)
		bk = bl
		s.closers = append(s.closers, func() { pool.Close() }, func() { lc.Close() }, func() { bl.Close() })
	}
	as := mledger.NewAsyncStore(cfg.Store, 0)
	s.closers = append(s.closers, func() { as.Close() })
	s.factory = mledger.NewFactory(bk, as, mledger.FactoryOptions{Logger: s.log})
	s.res = records{resources.New(cfg.Store, cfg.Cluster, s.log)}
	s.peer = peer.New(cfg.PeerHTTP)
	s.pol = &policy.Resolver{Defaults: cfg.Policies, Cluster: cfg.Cluster, MaxMessageSize: cfg.MaxMessageSize,
		ManagedLedger: cfg.ManagedLedger, DisableDeduplication: cfg.DisableDeduplication,
		DisableAutoTopicCreation: cfg.DisableAutoTopicCreation}
	s.own = newOwnership(s)
	s.own.Start(s.ctx, &s.wg)
	s.startCaches()
	s.schemas = newSchemaRegistry(s)

	if err := s.res.EnsureDefaults(ctx); err != nil {
		return nil, fmt.Errorf("broker: create public/default: %w", err)
	}
	if err := s.startTxn(ctx); err != nil {
		return nil, err
	}
	id, err := cfg.Store.NextID(ctx, "broker-incarnation")
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s.producerPrefix = cfg.Cluster + "-" + strconv.FormatInt(id, 10) + "-"

	adv, err := s.listen() // listen.go
	if err != nil {
		return nil, err
	}
	bid := cfg.ID
	if bid == "" {
		bid = adv
	}
	s.info.ID, s.info.Cluster, s.info.StartedAt = bid, cfg.Cluster, time.Now().UnixMilli()
	s.own.StartTransfers(s.ctx, &s.wg)
	sess, err := s.newSession(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.session = sess
	if err := s.startLoadManager(ctx); err != nil {
		return nil, err
	}

	s.wg.Add(3) // keepSession, compactionMonitor, policyMonitor
	for _, l := range s.listeners() {
		s.srv.Serve(l)
	}
	go s.keepSession()
	s.txn.Start() // nil: transactions off, nothing to start
	go s.compactionMonitor()
	go s.policyMonitor()
	s.scal = startScalable(s)
	ok = true
	s.log.Info("broker started", "listen", s.Addr().String(), "serviceUrl", s.info.ServiceURL,
		"serviceUrlTls", s.info.ServiceURLTLS, "id", bid)
	return s, nil
}

// goBackground runs fn on its own goroutine with a context that ends on Close (or after
// d); Close waits for it. Nothing runs once Close got that far.
func (s *Service) goBackground(d time.Duration, fn func(ctx context.Context)) {
	s.mu.Lock()
	if s.mu.bgClosed {
		s.mu.Unlock()
		return
	}
	s.bg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, d)
		defer cancel()
		fn(ctx)
	}()
}

func (s *Service) runClosers() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// newSession opens a metadata session and registers the broker under it.
func (s *Service) newSession(ctx context.Context) (metadata.Session, error) {
	sess, err := s.store.NewSession(ctx, s.cfg.SessionTTL)
	if err != nil {
		return nil, fmt.Errorf("broker: metadata session: %w", err)
	}
	b, _ := json.Marshal(s.info)
	key := metadata.BrokerKey(s.info.ID)
	if _, err := sess.Put(ctx, key, b, metadata.AnyVersion); err != nil {
		sess.Close()
		return nil, fmt.Errorf("broker: register: %w", err)
	}
	return sess, nil
}

// keepSession replaces the metadata session if it expires or is not renewed in time (e.g.
// after a partition from etcd): the broker's bundles were lost with it, so every topic is
// unloaded.
func (s *Service) keepSession() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		sess := s.mu.session
		s.mu.Unlock()
		if !s.waitSessionLost(sess) {
			return
		}
		s.log.Warn("metadata session lost: unloading every bundle")
		s.dropAll()
		for {
			ns, err := s.newSession(s.ctx)
			if err == nil {
				s.mu.Lock()
				s.mu.session = ns
				s.mu.Unlock()
				break
			}
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(time.Second): // retry interval of session creation
			}
		}
	}
}

func (s *Service) session() metadata.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.session
}

// Info returns the broker's record (id, service URL, HTTP URL).
func (s *Service) Info() BrokerInfo { return s.info }

// Registry returns the broker's Prometheus registry (the admin layer may add its metrics).
func (s *Service) Registry() *prometheus.Registry { return s.reg }

// MetricsHandler serves the broker's metrics in the Prometheus text format.
func (s *Service) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
}

// Close stops accepting connections, unloads every topic (clients are disconnected and
// reconnect elsewhere or later), closes the connections and releases the broker's
// registrations. Idempotent.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	s.mu.Unlock()
	s.srv.Refuse() // connections accepted from now on are closed at once
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.scal.close()         // resign the scalable topics' leaderships first
	s.own.HandOverAll(ctx) // package ownership
	if s.lm != nil {
		s.lm.Close() // its report and leadership go at once
	}
	for _, l := range s.listeners() {
		l.Close()
	}
	s.unloadAll(ctx)
	s.mu.Lock()
	sess := s.mu.session
	s.mu.Unlock()
	s.srv.CloseConns("broker shutting down")
	s.cancel()
	s.wg.Wait()
	s.srv.Wait()
	s.mu.Lock()
	s.mu.bgClosed = true
	s.mu.Unlock()
	s.bg.Wait()
	if err := s.factory.Close(ctx); err != nil {
		s.log.Warn("close managed ledgers", "err", err)
	}
	if sess != nil {
		sess.Close()
	}
	s.runClosers()
	s.log.Info("broker stopped")
	return nil
}

func (s *Service) unloadAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, t := range s.loadedTopics() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := t.Close(ctx); err != nil {
				s.log.Warn("unload topic", "topic", t.Name().String(), "err", err)
			}
		}()
	}
	wg.Wait()
}

// Topics.

// topicFor returns the loaded topic name, loading it if needed. create allows creating a
// topic that does not exist (subject to the auto-creation policy unless force).
func (s *Service) topicFor(ctx context.Context, name topicname.Name, create, force bool) (*topic.Topic, error) {
	key := name.String()
	for {
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			return nil, ErrServiceNotReady
		}
		e := s.mu.topics[key]
		if e == nil {
			e = &topicEntry{ready: make(chan struct{})}
			s.mu.topics[key] = e
			s.mu.Unlock()
			go s.loadTopic(name, e, create, force)
		} else {
			s.mu.Unlock()
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
			s.forgetTopic(key, e)
			continue
		default:
		}
		return e.t, nil
	}
}

func (s *Service) forgetTopic(key string, e *topicEntry) {
	s.mu.Lock()
	if s.mu.topics[key] == e {
		delete(s.mu.topics, key)
	}
	s.mu.Unlock()
}

func (s *Service) loadTopic(name topicname.Name, e *topicEntry, create, force bool) {
	ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	start := time.Now()
	t, err := s.openTopic(ctx, name, create, force, e)
	if err != nil {
		s.forgetTopic(name.String(), e)
		e.err = err
		close(e.ready)
		if !errors.Is(err, ErrTopicNotFound) && !errors.Is(err, ErrNotOwner) {
			s.log.Warn("load topic", "topic", name.String(), "err", err)
		}
		return
	}
	e.t = t
	close(e.ready)
	s.m.topicLoads.Inc()
	s.log.Info("topic loaded", "topic", name.String(), "took", time.Since(start).Round(time.Millisecond))
}

func (s *Service) openTopic(ctx context.Context, name topicname.Name, create, force bool, e *topicEntry) (*topic.Topic, error) {
	pol, err := s.res.NamespacePolicies(ctx, name.Tenant, name.Namespace)
	if err != nil {
		return nil, err
	}
	pols, err := s.resolve(ctx, name) // policies in force (policyapply.go)
	if err != nil {
		return nil, err
	}
	exists, err := s.res.TopicExists(ctx, name)
	if err != nil {
		return nil, err
	}
	if !exists {
		if !create || (!s.pol.AutoCreateAllowed(pol, pols) && !force) || (name.IsSegment() && !force) { // segments: only their controller creates them
			return nil, fmt.Errorf("%w: %s", ErrTopicNotFound, name)
		}
		if !name.IsPartition() {
			if n, err := s.res.PartitionCount(ctx, name); err != nil {
				return nil, err
			} else if n > 0 {
				return nil, fmt.Errorf("%w: %s is a partitioned topic: use its partitions", ErrNotAllowed, name)
			}
		}
	}
	ob, err := s.own.AcquireTopic(ctx, name)
	if err != nil {
		return nil, err
	}
	release := true
	if !exists {
		if err := s.checkTopicCount(ctx, name, pols); err != nil {
			return nil, err
		}
		if err := s.res.CreateTopicRecord(ctx, name); err != nil && !errors.Is(err, ErrAlreadyExists) {
			return nil, err
		}
	}
	var log topic.Log
	if !name.IsPersistent() {
		log = nonpersistent.New(s.cfg.NonPersistent) // nothing stored: see package nonpersistent
	} else if s.cfg.OpenLog != nil {
		log, err = s.cfg.OpenLog(ctx, name.ManagedLedgerName())
	} else {
		var ml *mledger.ManagedLedger
		if ml, err = s.factory.Open(ctx, name.ManagedLedgerName(), s.managedLedgerConfig(pols)); err == nil {
			log = newMLog(ml)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open managed ledger of %s: %w", name, err)
	}
	dedup := !s.cfg.DisableDeduplication
	if pols.Dedup != nil {
		dedup = *pols.Dedup
	}
	dedup = dedup && name.IsPersistent()
	tcfg := topic.Config{
		Name: name, Log: log, Dedup: dedup, DedupSnapshotEvery: s.cfg.DeduplicationSnapshotInterval,
		MaxPendingBytes: s.cfg.MaxPendingPublishBytesPerTopic, Logger: s.log, Metrics: s.tm, Txn: s.topicTxn(),
		OnClosed: func(t *topic.Topic) {
			s.forgetTopic(name.String(), e)
		},
	}
	if name.IsPersistent() {
		cm := s.newCompactor(name, log)
		tcfg.ReadCompacted, tcfg.OnClosed = cm.WrapCursor, func(t *topic.Topic) {
			s.dropCompactor(name, cm)
			s.forgetTopic(name.String(), e)
		}
		defer func() {
			if release { // not opened
				s.dropCompactor(name, cm)
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
	s.applyPolicies(ctx, t, pols)
	release = false
	if !s.own.Serving(ob) { // the bundle was released meanwhile
		t.Close(ctx) //nolint:errcheck // closing; the caller retries
		return nil, fmt.Errorf("%w: bundle %s is being unloaded", ErrServiceNotReady, ob.Bundle())
	}
	return t, nil
}

// adminTopic returns a topic for an admin call: loaded here, or ErrNotOwner if another
// broker serves it, or ErrTopicNotFound.
func (s *Service) adminTopic(ctx context.Context, topicName string) (*topic.Topic, error) {
	name, err := topicname.Parse(topicName)
	if err != nil {
		return nil, err
	}
	return s.topicFor(ctx, name, false, false)
}

func (s *Service) createTopic(ctx context.Context, topicName string) error {
	name, err := topicname.Parse(topicName)
	if err != nil {
		return err
	}
	if err := s.res.CheckNamespace(ctx, name.Tenant, name.Namespace); err != nil {
		return err
	}
	if exists, err := s.res.TopicExists(ctx, name); err != nil {
		return err
	} else if exists {
		return fmt.Errorf("%w: topic %s", ErrAlreadyExists, name)
	}
	if n, err := s.res.PartitionCount(ctx, name.Base()); err != nil {
		return err
	} else if n > 0 && !name.IsPartition() {
		return fmt.Errorf("%w: partitioned topic %s", ErrAlreadyExists, name)
	}
	_, err = s.topicFor(ctx, name, true, true)
	return err
}

func (s *Service) deleteTopic(ctx context.Context, topicName string, force bool) error {
	name, err := topicname.Parse(topicName)
	if err != nil {
		return err
	}
	if !name.IsPartition() {
		if n, err := s.res.PartitionCount(ctx, name); err != nil {
			return err
		} else if n > 0 {
			return fmt.Errorf("%w: %s is partitioned: delete the partitioned topic", ErrNotAllowed, name)
		}
	}
	t, err := s.topicFor(ctx, name, false, false)
	if err != nil {
		return err
	}
	var gen int64 // the compacted log goes with the topic (best effort)
	cm, compacted := s.compactors.Load(name.String())
	if compacted {
		gen, _ = cm.(*compaction.Manager).Generation(ctx)
	}
	if err := t.Delete(ctx, force); err != nil {
		return err
	}
	if compacted {
		if err := cm.(*compaction.Manager).DeleteGeneration(ctx, gen); err != nil {
			s.log.Warn("delete the compacted log", "topic", name.String(), "err", err)
		}
	}
	if err := waitStopped(ctx, t); err != nil {
		return err
	}
	return s.res.DeleteTopicRecord(ctx, name)
}

func (s *Service) deletePartitioned(ctx context.Context, topicName string, force bool) error {
	name, err := topicname.Parse(topicName)
	if err != nil {
		return err
	}
	name = name.Base()
	n, err := s.res.PartitionCount(ctx, name)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: partitioned topic %s", ErrTopicNotFound, name)
	}
	for i := 0; i < n; i++ {
		p := name.PartitionName(i)
		exists, err := s.res.TopicExists(ctx, p)
		if err != nil {
			return err
		}
		if !exists {
			continue
		}
		if err := s.deleteTopic(ctx, p.String(), force); err != nil && !errors.Is(err, ErrTopicNotFound) {
			return fmt.Errorf("partition %d: %w", i, err)
		}
	}
	return s.res.DeletePartitioned(ctx, name)
}

func (s *Service) deleteNamespace(ctx context.Context, ns string, force bool) error {
	tenant, nsName, err := topicname.ParseNamespace(ns)
	if err != nil {
		return err
	}
	if err := s.res.CheckNamespace(ctx, tenant, nsName); err != nil {
		return err
	}
	topics, err := s.res.Topics(ctx, ns)
	if err != nil {
		return err
	}
	parts, err := s.res.PartitionedTopics(ctx, ns)
	if err != nil {
		return err
	}
	if (len(topics) > 0 || len(parts) > 0) && !force {
		return fmt.Errorf("%w: namespace %s has %d topics", ErrNotEmpty, ns, len(topics)+len(parts))
	}
	for _, p := range parts {
		if err := s.deletePartitioned(ctx, p, true); err != nil && !errors.Is(err, ErrTopicNotFound) {
			return err
		}
	}
	for _, t := range topics {
		if err := s.deleteTopic(ctx, t, true); err != nil && !errors.Is(err, ErrTopicNotFound) {
			return err
		}
	}
	return s.res.DeleteNamespace(ctx, tenant, nsName)
}

func (s *Service) unload(ctx context.Context, topicName string) error {
	name, err := topicname.Parse(topicName)
	if err != nil {
		return err
	}
	s.mu.Lock()
	e := s.mu.topics[name.String()]
	s.mu.Unlock()
	if e == nil {
		if b, err := s.bundleOf(ctx, name); err == nil {
			if o, _, err := s.own.OwnerOf(ctx, b); err == nil && o != nil && o.ID != s.info.ID {
				return &NotOwnerError{Topic: name.String(), Owner: o.BrokerInfo}
			}
		}
		return nil // not loaded anywhere: nothing to do
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
// instead of finding the closing one (and failing with ErrClosed).
func waitStopped(ctx context.Context, t *topic.Topic) error {
	select {
	case <-t.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newProducerName returns a broker-assigned producer name, unique across restarts.
func (s *Service) newProducerName() string {
	return s.producerPrefix + strconv.FormatUint(s.producerSeq.Add(1)-1, 10)
}

func fromTopicID(id topic.MessageID, partition int) MessageID {
	return MessageID{LedgerID: id.LedgerID, EntryID: id.EntryID, BatchIndex: id.BatchIndex, Partition: int32(partition)}
}

func toTopicID(m MessageID) topic.MessageID {
	switch {
	case m.LedgerID < 0 || (m.LedgerID == Earliest.LedgerID && m.EntryID == Earliest.EntryID):
		return topic.MessageID{LedgerID: mledger.Earliest.LedgerID, EntryID: mledger.Earliest.EntryID, BatchIndex: -1}
	case m.LedgerID == Latest.LedgerID:
		return topic.MessageID{LedgerID: mledger.Latest.LedgerID, EntryID: mledger.Latest.EntryID, BatchIndex: -1}
	}
	return topic.MessageID{LedgerID: m.LedgerID, EntryID: m.EntryID, BatchIndex: m.BatchIndex}
}
