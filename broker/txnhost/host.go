package txnhost

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
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/txn"
)

// AssignTopic is the transaction coordinators' assignment topic: partition i is owned by
// the broker that serves coordinator i.
const AssignTopic = "persistent://pulsar/system/transaction_coordinator_assign"

const (
	systemTenant = "pulsar"
	systemNS     = "system"
	// sweepInterval is how often a broker loads the coordinators nobody serves.
	sweepInterval = 10 * time.Second
	// loadTimeout bounds one coordinator load (and each of the sweep's attempts).
	loadTimeout = 30 * time.Second
)

// ErrNoCoordinator: the coordinator asked for does not exist or is not served by this
// broker (another broker owns its assignment partition).
var ErrNoCoordinator = errors.New("transaction coordinator not found")

// Broker is what the host needs of the broker that runs it. Implemented by the broker
// root; safe for concurrent use.
type Broker interface {
	// ID is this broker's id, recorded as the owner of the coordinators it loads.
	ID() string
	// Acquire makes this broker the owner of topic n's bundle: nil once it serves it,
	// *api.NotOwnerError if another broker does.
	Acquire(ctx context.Context, n topicname.Name) error
	// CreatePartitioned creates partitioned topic topic with n partitions
	// (api.ErrAlreadyExists if it exists).
	CreatePartitioned(ctx context.Context, topic string, n int) error
	// LoadedTopic returns the topic named name if it is loaded here, else nil; it never
	// loads one.
	LoadedTopic(name string) Topic
	// LoadedTopics returns the topics loaded here now.
	LoadedTopics() []Topic
	// AdminTopic returns topic name for an admin call, loading it if this broker serves
	// it: *api.NotOwnerError if another broker does, api.ErrTopicNotFound if it does not
	// exist.
	AdminTopic(ctx context.Context, name string) (Topic, error)
}

// Topic is a loaded topic's transaction side (*topic.Topic).
type Topic interface {
	Name() topicname.Name
	// TxnEnded tells the topic (sub "") or its subscription sub that transaction id ended.
	TxnEnded(id txn.ID, sub string)
	TxnInBuffer(ctx context.Context, id txn.ID) (start *topic.Position, aborted bool, err error)
	TxnBufferStats(ctx context.Context) (topic.TxnBufferStats, error)
	PendingAckStats(ctx context.Context, sub string) (topic.PendingAckStats, error)
}

var _ Topic = (*topic.Topic)(nil)

// Config configures a Host.
type Config struct {
	Store    metadata.Store        // transaction headers, coordinator records, system records
	Registry prometheus.Registerer // the transaction metrics go here
	Logger   *slog.Logger
	Cluster  string // allowed cluster of the system tenant
	// Coordinators is the number of coordinators (partitions of AssignTopic).
	Coordinators int
	// MaxActivePerCoordinator bounds the open transactions of one coordinator (0: no bound).
	MaxActivePerCoordinator int
}

// Host is a broker's transaction side. Its methods are safe for concurrent use; a nil
// *Host is transactions off (see the package documentation).
type Host struct {
	cfg     Config
	b       Broker
	log     *slog.Logger
	life    context.Context // the loads and the sweep end with it
	tracker *txn.Tracker
	m       *txn.Metrics
	// batcher group-commits the transaction metadata writes of the broker's coordinators
	// and participants.
	batcher *metadata.Batcher
	// start loads coordinator tc (txn.StartCoordinator; tests replace it).
	start func(ctx context.Context, tc uint64) (*txn.Coordinator, error)
	sweep sync.WaitGroup
	stop  chan struct{} // closed by Close: the sweep ends

	mu struct {
		sync.Mutex // leaf lock; guards the fields below
		tcs        map[uint64]*tcEntry
		started    bool
		closed     bool
	}
}

// tcEntry is a coordinator being loaded or loaded; ready closes once c or err is set.
type tcEntry struct {
	ready chan struct{}
	c     *txn.Coordinator
	err   error
}

// New returns the transaction host of broker b. It does no I/O; life bounds the
// coordinators' loads and the sweep.
func New(life context.Context, cfg Config, b Broker) *Host {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Host{cfg: cfg, b: b, log: cfg.Logger, life: life, tracker: txn.NewTracker(cfg.Store, cfg.Logger),
		m: txn.NewMetrics(cfg.Registry), batcher: metadata.NewBatcher(cfg.Store, 0, 10*time.Second)}
	h.start = h.startCoordinator
	h.stop = make(chan struct{})
	h.mu.tcs = map[uint64]*tcEntry{}
	h.tracker.SetLocal(h.settled)
	h.tracker.OnEnded(h.ended)
	cfg.Registry.MustRegister(maxReadLagCollector{h})
	return h
}

// EnsureDefaults creates tenant pulsar, namespace pulsar/system and AssignTopic with
// Config.Coordinators partitions, unless they exist.
func (h *Host) EnsureDefaults(ctx context.Context) error {
	ti, _ := json.Marshal(api.TenantInfo{AdminRoles: []string{}, AllowedClusters: []string{h.cfg.Cluster}})
	if _, err := h.cfg.Store.Put(ctx, metadata.TenantKey(systemTenant), ti, metadata.NotExists); err != nil &&
		!errors.Is(err, metadata.ErrBadVersion) {
		return err
	}
	np, _ := json.Marshal(api.NamespacePolicies{})
	if _, err := h.cfg.Store.Put(ctx, metadata.NamespaceKey(systemTenant, systemNS), np, metadata.NotExists); err != nil &&
		!errors.Is(err, metadata.ErrBadVersion) {
		return err
	}
	err := h.b.CreatePartitioned(ctx, AssignTopic, h.cfg.Coordinators)
	if errors.Is(err, api.ErrAlreadyExists) {
		return nil
	}
	return err
}

// Start starts the sweep (see the package documentation); call it once the broker has its
// metadata session. Only the first call starts it.
func (h *Host) Start() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.started || h.mu.closed {
		return
	}
	h.mu.started = true
	h.sweep.Add(1)
	go h.keepCoordinators()
}

// Close stops the sweep, waits for the loads running, closes the coordinators and the
// tracker. End the life context first, or Close waits for the loads running to finish.
// Idempotent.
func (h *Host) Close() {
	if h == nil {
		return
	}
	h.mu.Lock()
	if h.mu.closed {
		h.mu.Unlock()
		return
	}
	h.mu.closed = true
	tcs := h.mu.tcs
	h.mu.tcs = map[uint64]*tcEntry{}
	h.mu.Unlock()
	close(h.stop)
	h.sweep.Wait()
	for _, e := range tcs {
		<-e.ready
		if e.c != nil {
			e.c.Close()
		}
	}
	h.tracker.Close()
}

// TopicConfig is the transaction configuration of the broker's topics (nil: transactions
// off); openLog opens the managed ledgers of their pending-ack logs.
func (h *Host) TopicConfig(openLog func(ctx context.Context, name string, create bool) (topic.Log, error)) *topic.TxnConfig {
	if h == nil {
		return nil
	}
	return &topic.TxnConfig{Store: h.cfg.Store, Tracker: h.tracker, Canon: ParticipantKey, OpenLog: openLog,
		Batcher: h.batcher}
}

// ParticipantKey maps a topic name as a client sent it to its participant key.
func ParticipantKey(name string) (string, error) {
	n, err := topicname.Parse(name)
	if err != nil {
		return "", err
	}
	return n.ManagedLedgerName(), nil
}

// keepCoordinators is the sweep: at once and then every sweepInterval it loads each
// coordinator not loaded here (Coordinator acquires its partition, which fails with
// *api.NotOwnerError where another broker serves it).
func (h *Host) keepCoordinators() {
	defer h.sweep.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-h.life.Done():
			return
		case <-h.stop:
			return
		case <-t.C:
		}
		for tc := uint64(0); tc < uint64(h.cfg.Coordinators); tc++ {
			h.mu.Lock()
			loaded, closed := h.mu.tcs[tc] != nil, h.mu.closed
			h.mu.Unlock()
			if closed {
				return
			}
			if loaded {
				continue
			}
			ctx, cancel := context.WithTimeout(h.life, loadTimeout)
			_, err := h.Coordinator(ctx, tc)
			cancel()
			if err != nil && !errors.Is(err, api.ErrNotOwner) && h.life.Err() == nil {
				h.log.Debug("transaction coordinator not loaded", "tc", tc, "err", err)
			}
		}
		t.Reset(sweepInterval)
	}
}

// Coordinator returns coordinator tc, loading it if this broker owns its assignment
// partition (else ErrNoCoordinator). Transactions off: topic.ErrTxnDisabled.
func (h *Host) Coordinator(ctx context.Context, tc uint64) (*txn.Coordinator, error) {
	if h == nil {
		return nil, topic.ErrTxnDisabled
	}
	if tc >= uint64(h.cfg.Coordinators) {
		return nil, fmt.Errorf("%w: %d", ErrNoCoordinator, tc)
	}
	h.mu.Lock()
	if h.mu.closed {
		h.mu.Unlock()
		return nil, api.ErrServiceNotReady
	}
	e := h.mu.tcs[tc]
	if e == nil {
		e = &tcEntry{ready: make(chan struct{})}
		h.mu.tcs[tc] = e
		go h.load(tc, e)
	}
	h.mu.Unlock()
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if e.err != nil {
		h.mu.Lock()
		if h.mu.tcs[tc] == e {
			delete(h.mu.tcs, tc)
		}
		h.mu.Unlock()
		return nil, e.err
	}
	return e.c, nil
}

func (h *Host) load(tc uint64, e *tcEntry) {
	defer close(e.ready)
	ctx, cancel := context.WithTimeout(h.life, loadTimeout)
	defer cancel()
	n, err := topicname.Parse(AssignTopic)
	if err == nil {
		err = h.b.Acquire(ctx, n.PartitionName(int(tc)))
	}
	if err != nil {
		e.err = fmt.Errorf("%w: coordinator %d: %v", ErrNoCoordinator, tc, err)
		return
	}
	e.c, e.err = h.start(ctx, tc)
}

func (h *Host) startCoordinator(ctx context.Context, tc uint64) (*txn.Coordinator, error) {
	return txn.StartCoordinator(ctx, txn.CoordinatorConfig{
		CoreConfig: txn.CoreConfig{TC: tc, MaxActive: h.cfg.MaxActivePerCoordinator, Owner: h.b.ID()},
		Store:      h.cfg.Store, Logger: h.log, Canon: ParticipantKey, Metrics: h.m, Batcher: h.batcher,
		OnDecided: h.tracker.Decided,
	})
}

// settled answers a header from a coordinator loaded here (never loads one).
func (h *Host) settled(ctx context.Context, id txn.ID) (txn.Header, bool) {
	h.mu.Lock()
	e := h.mu.tcs[id.Most]
	h.mu.Unlock()
	if e == nil {
		return txn.Header{}, false
	}
	select {
	case <-e.ready:
	default:
		return txn.Header{}, false
	}
	if e.c == nil {
		return txn.Header{}, false
	}
	return e.c.Settled(ctx, id)
}

// ended tells the loaded participants of a transaction that it ended, so those that never
// registered it drop the record its coordinator created for them.
func (h *Host) ended(id txn.ID, hd txn.Header) {
	for _, p := range hd.Partitions {
		if t := h.b.LoadedTopic(p); t != nil {
			t.TxnEnded(id, "")
		}
	}
	for _, sub := range hd.Subscriptions {
		if t := h.b.LoadedTopic(sub.Topic); t != nil {
			t.TxnEnded(id, sub.Subscription)
		}
	}
}

// maxReadLagCollector reports, at each scrape, every loaded topic's max read position lag:
// the stored entries its readers may not read yet (topics with nothing held back are left
// out).
type maxReadLagCollector struct{ h *Host }

var maxReadLagDesc = prometheus.NewDesc("magnetar_txn_buffer_max_read_lag_entries",
	"Entries stored after a topic's max read position (held back by an open transaction).", []string{"topic"}, nil)

func (c maxReadLagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- maxReadLagDesc }

func (c maxReadLagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, t := range c.h.b.LoadedTopics() {
		if st, err := t.TxnBufferStats(ctx); err == nil && st.MaxReadLag > 0 {
			ch <- prometheus.MustNewConstMetric(maxReadLagDesc, prometheus.GaugeValue, float64(st.MaxReadLag),
				t.Name().String())
		}
	}
}
