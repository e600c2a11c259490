package broker

import (
	"context"
	"encoding/json"
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
	"github.com/magnetar-io/magnetar/broker/access"
	"github.com/magnetar-io/magnetar/broker/dynconfig"
	"github.com/magnetar-io/magnetar/broker/loadmgr"
	"github.com/magnetar-io/magnetar/broker/ownership"
	"github.com/magnetar-io/magnetar/broker/peer"
	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/replhost"
	"github.com/magnetar-io/magnetar/broker/resources"
	"github.com/magnetar-io/magnetar/broker/schemareg"
	"github.com/magnetar-io/magnetar/broker/server"
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
	res     records          // the typed records and their watched caches (package resources)
	pol     *policy.Resolver // policy resolution: topic > namespace > broker default
	access  access.Checker   // who may do what (package broker/access)
	peer    *peer.Client     // calls to the other brokers, with this broker's credentials
	schemas *schemareg.Registry
	txn     *txnhost.Host      // transaction hosting (txn.go); nil: transactions are off
	own     *ownership.Manager // bundle ownership and its watched caches (package ownership, ownership.go)
	lm      *loadmgr.Manager   // the load manager (loadbalance.go); nil if off
	dyn     *dynconfig.Manager // the dynamic configuration (dynconfig.go)
	factory *mledger.Factory
	// topicRegistry loads, serves and unloads the topics, applies their policies and runs
	// their monitors (package broker/topicreg); its admin methods are the Service's.
	*topicRegistry
	// repl runs the geo-replicators of the loaded topics (package broker/replhost,
	// replication.go); remotes are the clients of the remote clusters.
	repl    *replhost.Host
	remotes *replhost.Remotes
	closers []func() // what Start created, closed in reverse order
	// scalableHost runs the scalable topics' controllers and their segments (package
	// broker/scalablehost, scalable.go); its scalable-topic API is the Service's.
	*scalableHost

	ctx    context.Context // ends on Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // session keeper, watched caches
	bg     sync.WaitGroup // background metadata chores (goBackground)

	// srv serves the Pulsar protocol on ln and lnTLS (package broker/server, backend.go).
	srv *server.Server

	producerPrefix string
	producerSeq    atomic.Uint64

	mu struct {
		sync.Mutex // guards the fields below
		session    metadata.Session
		closed     bool
		bgClosed   bool // no more goBackground
	}
}

// Start starts a broker: it creates the default tenant and namespace (public/default) at
// first start, registers the broker, and serves the Pulsar protocol on cfg.Listen.
func Start(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: Config.Store is required", ErrInvalidArgument)
	}
	cfg = cfg.withDefaults()
	// local is the cluster's own store; cfg.Store from here on also routes the records of
	// the configuration store (cluster records, tenants, namespaces, partitioned topics)
	// to it when the cluster has one apart (metadata.Split), for every part of the broker.
	local := cfg.Store
	cfg.Store = metadata.NewSplit(local, cfg.ConfigStore)
	s := &Service{cfg: cfg, log: cfg.Logger.With("component", "broker"), store: cfg.Store, reg: prometheus.NewRegistry()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
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
		lc := ledger.NewClient(local, pool, ledger.Options{Logger: s.log})
		bl := mledger.NewBookieLedgers(lc, 0)
		bk = bl
		s.closers = append(s.closers, func() { pool.Close() }, func() { lc.Close() }, func() { bl.Close() })
	}
	as := mledger.NewAsyncStore(local, 0)
	s.closers = append(s.closers, func() { as.Close() })
	s.factory = mledger.NewFactory(bk, as, mledger.FactoryOptions{Logger: s.log, Offloader: cfg.Offloader})
	s.res = records{resources.New(cfg.Store, cfg.Cluster, s.log)}
	s.peer = peer.New(cfg.PeerHTTP)
	s.access = access.Checker{Authz: cfg.Authz, Records: s.res}
	s.pol = &policy.Resolver{Defaults: cfg.Policies, Cluster: cfg.Cluster, MaxMessageSize: cfg.MaxMessageSize,
		ManagedLedger: cfg.ManagedLedger, DisableDeduplication: cfg.DisableDeduplication,
		DisableAutoTopicCreation: cfg.DisableAutoTopicCreation}
	s.own = newOwnership(s)
	s.own.Start(s.ctx, &s.wg)
	s.repl = s.newReplication()
	s.topicRegistry = newTopicRegistry(s)
	if err := s.startDynamicConfig(ctx); err != nil {
		return nil, err
	}
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

	s.scalableHost = newScalableHost(s) // before serving: connections attach to segments
	s.wg.Add(1)                         // keepSession
	for _, l := range s.listeners() {
		s.srv.Serve(l)
	}
	go s.keepSession()
	s.txn.Start() // nil: transactions off, nothing to start
	s.StartMonitors()
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
	s.RefuseLoads()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.repl.Close() // the replicators persist their cursors while their topics are still open
	defer s.remotes.Close()
	s.scalableHost.Close() // resign the scalable topics' leaderships first
	s.own.HandOverAll(ctx) // package ownership
	if s.lm != nil {
		s.lm.Close() // its report and leadership go at once
	}
	for _, l := range s.listeners() {
		l.Close()
	}
	s.UnloadAll(ctx)
	s.mu.Lock()
	sess := s.mu.session
	s.mu.Unlock()
	s.srv.CloseConns("broker shutting down")
	s.cancel()
	s.wg.Wait()
	s.WaitMonitors()
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

// Topics.

// newProducerName returns a broker-assigned producer name, unique across restarts.
func (s *Service) newProducerName() string {
	return s.producerPrefix + strconv.FormatUint(s.producerSeq.Add(1)-1, 10)
}
