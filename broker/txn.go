package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/txn"
)

// The transaction coordinators' assignment topic: partition i is owned by the broker that
// serves coordinator i (clients find coordinators by looking its partitions up).
const (
	txnAssignTopic = "persistent://pulsar/system/transaction_coordinator_assign"
	systemTenant   = "pulsar"
	systemNS       = "system"
)

// errTxnDisabled answers every transaction command when transactions are off (Pulsar's
// message, which clients and tools match).
var errTxnDisabled = topic.ErrTxnDisabled

// txnService is the broker's transaction side: the coordinators it serves (started on
// first use, once it owns their assignment partition) and the tracker its participants
// learn outcomes from.
type txnService struct {
	s       *Service
	tracker *txn.Tracker
	m       *txn.Metrics
	// batcher group-commits the transaction metadata writes of the broker's coordinators
	// and participants: under load one store commit carries many transactions' writes.
	batcher *metadata.Batcher

	mu struct {
		sync.Mutex // leaf lock
		tcs        map[uint64]*tcEntry
		closed     bool
	}
}

type tcEntry struct {
	ready chan struct{}
	c     *txn.Coordinator
	err   error
}

// participantKey maps a topic name as a client sent it to its participant key.
func participantKey(name string) (string, error) {
	n, err := topicname.Parse(name)
	if err != nil {
		return "", err
	}
	return n.ManagedLedgerName(), nil
}

func (s *Service) startTxn(ctx context.Context) error {
	if !s.cfg.TransactionCoordinatorEnabled {
		return nil
	}
	if err := s.ensureTxnDefaults(ctx); err != nil {
		return fmt.Errorf("broker: transaction defaults: %w", err)
	}
	ts := &txnService{s: s, tracker: txn.NewTracker(s.store, s.log), m: txn.NewMetrics(s.reg),
		batcher: metadata.NewBatcher(s.store, 0, 10*time.Second)}
	ts.mu.tcs = map[uint64]*tcEntry{}
	ts.tracker.SetLocal(ts.settled)
	ts.tracker.OnEnded(ts.ended)
	s.reg.MustRegister(maxReadLagCollector{s})
	s.txn = ts
	s.closers = append(s.closers, ts.close)
	return nil
}

// coordinatorSweep is how often a broker loads the coordinators nobody serves.
const coordinatorSweep = 10 * time.Second

// keepCoordinators (started once the broker has its session) loads, at once and then every
// coordinatorSweep, each coordinator whose
// assignment partition no broker owns: a coordinator is otherwise loaded only when a client
// asks for it, and the open transactions of one whose broker died would never time out
// (their topics' readers stay pinned behind them) if no transactional client came back.
func (ts *txnService) keepCoordinators() {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ts.s.ctx.Done():
			return
		case <-t.C:
		}
		for tc := uint64(0); tc < uint64(ts.s.cfg.TransactionCoordinators); tc++ {
			ts.mu.Lock()
			loaded, closed := ts.mu.tcs[tc] != nil, ts.mu.closed
			ts.mu.Unlock()
			if closed {
				return
			}
			if loaded {
				continue
			}
			ctx, cancel := context.WithTimeout(ts.s.ctx, 30*time.Second)
			_, err := ts.coordinator(ctx, tc)
			cancel()
			if err != nil && !errors.Is(err, ErrNotOwner) && ts.s.ctx.Err() == nil {
				ts.s.log.Debug("transaction coordinator not loaded", "tc", tc, "err", err)
			}
		}
		t.Reset(coordinatorSweep)
	}
}

// ensureTxnDefaults creates tenant pulsar, namespace pulsar/system and the assignment topic
// with the configured number of coordinators, unless they exist.
func (s *Service) ensureTxnDefaults(ctx context.Context) error {
	ti, _ := json.Marshal(TenantInfo{AdminRoles: []string{}, AllowedClusters: []string{s.cfg.Cluster}})
	if _, err := s.store.Put(ctx, metadata.TenantKey(systemTenant), ti, metadata.NotExists); err != nil &&
		!errors.Is(err, metadata.ErrBadVersion) {
		return err
	}
	np, _ := json.Marshal(NamespacePolicies{})
	if _, err := s.store.Put(ctx, metadata.NamespaceKey(systemTenant, systemNS), np, metadata.NotExists); err != nil &&
		!errors.Is(err, metadata.ErrBadVersion) {
		return err
	}
	err := s.res.createPartitioned(ctx, txnAssignTopic, s.cfg.TransactionCoordinators)
	if errors.Is(err, ErrAlreadyExists) {
		return nil
	}
	return err
}

func (ts *txnService) close() {
	ts.mu.Lock()
	ts.mu.closed = true
	tcs := ts.mu.tcs
	ts.mu.tcs = map[uint64]*tcEntry{}
	ts.mu.Unlock()
	for _, e := range tcs {
		<-e.ready
		if e.c != nil {
			e.c.Close()
		}
	}
	ts.tracker.Close()
}

// settled answers a header from a loaded coordinator of this broker (never loads one).
func (ts *txnService) settled(ctx context.Context, id txn.ID) (txn.Header, bool) {
	ts.mu.Lock()
	e := ts.mu.tcs[id.Most]
	ts.mu.Unlock()
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

// coordinator returns coordinator tc, loading it if this broker owns its assignment
// partition.
func (ts *txnService) coordinator(ctx context.Context, tc uint64) (*txn.Coordinator, error) {
	if tc >= uint64(ts.s.cfg.TransactionCoordinators) {
		return nil, fmt.Errorf("%w: %d", errNoCoordinator, tc)
	}
	ts.mu.Lock()
	if ts.mu.closed {
		ts.mu.Unlock()
		return nil, ErrServiceNotReady
	}
	e := ts.mu.tcs[tc]
	if e == nil {
		e = &tcEntry{ready: make(chan struct{})}
		ts.mu.tcs[tc] = e
		go ts.load(tc, e)
	}
	ts.mu.Unlock()
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if e.err != nil {
		ts.mu.Lock()
		if ts.mu.tcs[tc] == e {
			delete(ts.mu.tcs, tc)
		}
		ts.mu.Unlock()
		return nil, e.err
	}
	return e.c, nil
}

func (ts *txnService) load(tc uint64, e *tcEntry) {
	defer close(e.ready)
	s := ts.s
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	n, err := topicname.Parse(txnAssignTopic)
	if err == nil {
		err = s.acquire(ctx, n.PartitionName(int(tc)))
	}
	if err != nil {
		e.err = fmt.Errorf("%w: coordinator %d: %v", errNoCoordinator, tc, err)
		return
	}
	e.c, e.err = txn.StartCoordinator(ctx, txn.CoordinatorConfig{
		CoreConfig: txn.CoreConfig{TC: tc, MaxActive: s.cfg.MaxActiveTransactionsPerCoordinator, Owner: s.info.ID},
		Store:      s.store, Logger: s.log, Canon: participantKey, Metrics: ts.m, Batcher: ts.batcher,
		OnDecided: ts.tracker.Decided,
	})
}

var errNoCoordinator = errors.New("transaction coordinator not found")

// ended tells this broker's loaded participants of a transaction that it ended, so those
// that never registered it drop the record its coordinator created for them.
func (ts *txnService) ended(id txn.ID, h txn.Header) {
	for _, p := range h.Partitions {
		if t := ts.s.loadedTopic(p); t != nil {
			t.TxnEnded(id, "")
		}
	}
	for _, sub := range h.Subscriptions {
		if t := ts.s.loadedTopic(sub.Topic); t != nil {
			t.TxnEnded(id, sub.Subscription)
		}
	}
}

// loadedTopic returns the topic named name if this broker has it loaded, nil otherwise.
func (s *Service) loadedTopic(name string) *topic.Topic {
	n, err := topicname.Parse(name)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	e := s.mu.topics[n.String()]
	s.mu.Unlock()
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

// topicTxn is the transaction configuration of the broker's topics (nil: off).
func (s *Service) topicTxn() *topic.TxnConfig {
	if s.txn == nil {
		return nil
	}
	return &topic.TxnConfig{Store: s.store, Tracker: s.txn.tracker, Canon: participantKey, OpenLog: s.openLog,
		Batcher: s.txn.batcher}
}

// openLog opens a managed ledger for a topic's transaction side (pending-ack logs).
func (s *Service) openLog(ctx context.Context, name string, create bool) (topic.Log, error) {
	if s.cfg.OpenLog != nil {
		return s.cfg.OpenLog(ctx, name)
	}
	cfg := s.cfg.ManagedLedger
	cfg.MustExist = !create
	ml, err := s.factory.Open(ctx, name, cfg)
	if err != nil {
		return nil, err
	}
	return newMLog(ml), nil
}

// txnError maps a coordinator error to the protocol's error code.
func txnError(err error) pb.ServerError {
	switch {
	case errors.Is(err, errTxnDisabled):
		return pb.ServerError_NotAllowedError
	case errors.Is(err, txn.ErrNotFound):
		return pb.ServerError_TransactionNotFound
	case errors.Is(err, txn.ErrInvalidStatus):
		return pb.ServerError_InvalidTxnStatus
	case errors.Is(err, errNoCoordinator):
		return pb.ServerError_TransactionCoordinatorNotFound
	case errors.Is(err, txn.ErrTooMany):
		return pb.ServerError_NotAllowedError
	}
	return pb.ServerError_ServiceNotReady
}

// maxReadLagCollector reports, at each scrape, every loaded topic's max read position lag:
// the stored entries its readers may not read yet (topics with nothing held back are left
// out).
type maxReadLagCollector struct{ s *Service }

var maxReadLagDesc = prometheus.NewDesc("magnetar_txn_buffer_max_read_lag_entries",
	"Entries stored after a topic's max read position (held back by an open transaction).", []string{"topic"}, nil)

func (c maxReadLagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- maxReadLagDesc }

func (c maxReadLagCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	names := make([]string, 0, len(c.s.mu.topics))
	for name := range c.s.mu.topics {
		names = append(names, name)
	}
	c.s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, name := range names {
		t := c.s.loadedTopic(name)
		if t == nil {
			continue
		}
		if st, err := t.TxnBufferStats(ctx); err == nil && st.MaxReadLag > 0 {
			ch <- prometheus.MustNewConstMetric(maxReadLagDesc, prometheus.GaugeValue, float64(st.MaxReadLag), name)
		}
	}
}
