package loadmgr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
)

// Errors. Callers test them with errors.Is.
var (
	// ErrStopped is returned by calls on a closed Manager.
	ErrStopped = errors.New("loadmgr: stopped")
	// ErrNoBroker is returned by SelectBroker when no broker is registered.
	ErrNoBroker = errors.New("loadmgr: no live broker")
)

// Broker is a broker's identity and URLs: the value of metadata.BrokerKey records (the JSON
// of broker.BrokerInfo, whose fields it reads) and of the leader key.
type Broker struct {
	ID               string `json:"id"`
	ServiceURL       string `json:"serviceUrl"`
	WebServiceURL    string `json:"webServiceUrl"`
	ServiceURLTLS    string `json:"serviceUrlTls,omitempty"`
	WebServiceURLTLS string `json:"webServiceUrlTls,omitempty"`
}

// adminURL is the URL the leader sends the broker's admin requests to.
func (b Broker) adminURL() string {
	if b.WebServiceURL != "" {
		return b.WebServiceURL
	}
	return b.WebServiceURLTLS
}

// Config configures a Manager. Zero values take the documented defaults (Pulsar's).
type Config struct {
	// Store is the metadata store. Required.
	Store metadata.Store
	// Self is this broker. Its ID is required and must be the ID it registers under
	// metadata.BrokerKey.
	Self Broker
	// SessionTTL is the TTL of the manager's metadata session, which holds its load report
	// and, on the leader, the leader key. Default 10s.
	SessionTTL time.Duration
	// Disabled turns reporting and the leader's decisions off (loadBalancerEnabled=false);
	// SelectBroker still picks among the registered brokers, and the manager still takes
	// part in the leader election (Pulsar elects a leader broker whatever
	// loadBalancerEnabled says; GET /admin/v2/brokers/leaderBroker names it).
	Disabled bool
	// Thresholds are the decision parameters. The zero value means DefaultThresholds().
	Thresholds Thresholds
	// ReportInterval is how often the reporter looks at the load
	// (loadBalancerReportUpdateMinIntervalMillis). Default 5s.
	ReportInterval time.Duration
	// ReportMaxInterval is the longest time between two written reports
	// (loadBalancerReportUpdateMaxIntervalMinutes). Default 15 min.
	ReportMaxInterval time.Duration
	// ReportThresholdPercent is the change, in percent, that makes the reporter write before
	// ReportMaxInterval (loadBalancerReportUpdateThresholdPercentage). Default 10.
	ReportThresholdPercent float64
	// SheddingInterval is how often the leader decides (loadBalancerSheddingIntervalMinutes).
	// Default 1 min.
	SheddingInterval time.Duration
	// NICSpeedGbps is the network's speed (loadBalancerOverrideBrokerNicSpeedGbps); 0 leaves
	// bandwidth out of the brokers' usage.
	NICSpeedGbps float64
	// BundleStats returns the load of every bundle this broker owns (with a zero load for an
	// owned bundle with no topic loaded). It is called every ReportInterval from a helper
	// goroutine, never twice at once. Nil: no bundles.
	BundleStats func() map[string]BundleLoad
	// Resources returns the process's CPU and memory usage; called like BundleStats. Nil: a
	// ProcUsage.
	Resources func(now time.Time) Resources
	// Executor carries out the leader's actions. Nil: &Executor{}.
	Executor *Executor
	// Placement picks brokers. Nil: LeastLongTermMessageRate.
	Placement Placement
	// Metrics receives the metrics (nil: none).
	Metrics *Metrics
	// Logger receives logs (nil: discard).
	Logger *slog.Logger

	// changed, if set, gets a token (never blocking) after every role change, report tick,
	// report or broker observed and executed plan (tests wait on it).
	changed chan struct{}
}

func (c Config) withDefaults() Config {
	if c.SessionTTL <= 0 {
		c.SessionTTL = 10 * time.Second
	}
	if c.Thresholds == (Thresholds{}) {
		c.Thresholds = DefaultThresholds()
	}
	if c.ReportInterval <= 0 {
		c.ReportInterval = 5 * time.Second
	}
	if c.ReportMaxInterval <= 0 {
		c.ReportMaxInterval = 15 * time.Minute
	}
	if c.ReportThresholdPercent <= 0 {
		c.ReportThresholdPercent = 10
	}
	if c.SheddingInterval <= 0 {
		c.SheddingInterval = time.Minute
	}
	if c.Executor == nil {
		c.Executor = &Executor{}
	}
	if c.Resources == nil {
		p := &ProcUsage{}
		c.Resources = p.Sample
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Role is a Manager's part in the election.
type Role int32

// Roles: Follower ⇄ Leader; any → Stopped (final).
const (
	// RoleFollower reports its load and waits for the leader key to be free.
	RoleFollower Role = iota + 1
	// RoleLeader holds metadata.LoadBalanceLeaderKey and decides every SheddingInterval.
	RoleLeader
	// RoleStopped: Close was called.
	RoleStopped
)

func (r Role) String() string {
	switch r {
	case RoleFollower:
		return "Follower"
	case RoleLeader:
		return "Leader"
	case RoleStopped:
		return "Stopped"
	}
	return fmt.Sprintf("Role(%d)", int32(r))
}

type selectReq struct {
	bundle string
	reply  chan string
}

// Manager is one broker's load manager: it reports the broker's load, takes part in the
// leader election, and on the leader runs the core (State) every SheddingInterval and
// executes its actions. Its methods are safe for concurrent use; one goroutine owns its state.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	ctx     context.Context // ends at Close: bounds every helper's I/O
	cancel  context.CancelFunc
	selectc chan selectReq
	fnc     chan func() // closures posted by helpers, run by run
	done    chan struct{}
	wg      sync.WaitGroup // run and helpers
	once    sync.Once
	role    atomic.Int32           // mirror of roleOwned for Role()
	leader  atomic.Pointer[Broker] // the holder of the leader key as last seen; nil: none

	// Owned by run.
	st         *State
	roleOwned  Role
	sess       metadata.Session // nil while a new one is being made
	brokers    map[string]Broker
	brUps      chan metadata.Update // the follower of metadata.PrefixBrokers
	lbUps      chan metadata.Update // the follower of metadata.PrefixLoadBalance
	lastReport *Report              // last written
	lastWrite  time.Time
	reporting  bool // a report write is in flight
	electing   bool // an election attempt is in flight
	executing  bool // a plan is being executed
}

// Start opens the manager's session, reads the brokers and the reports, and starts its
// goroutine. Close it before the store.
func Start(ctx context.Context, cfg Config) (*Manager, error) {
	cfg = cfg.withDefaults()
	if cfg.Store == nil || cfg.Self.ID == "" {
		return nil, errors.New("loadmgr: Config.Store and Config.Self.ID are required")
	}
	m := &Manager{cfg: cfg, log: cfg.Logger.With("loadmgr", cfg.Self.ID), selectc: make(chan selectReq),
		fnc: make(chan func()), done: make(chan struct{}), st: NewState(cfg.Thresholds, cfg.Placement),
		brokers: map[string]Broker{}, roleOwned: RoleFollower}
	m.role.Store(int32(RoleFollower))
	sess, err := cfg.Store.NewSession(ctx, cfg.SessionTTL)
	if err != nil {
		return nil, fmt.Errorf("loadmgr: session: %w", err)
	}
	m.sess = sess
	m.ctx, m.cancel = context.WithCancel(context.Background())
	brF := metadata.Follower{Store: cfg.Store, Prefix: metadata.PrefixBrokers, Log: m.log}
	lbF := metadata.Follower{Store: cfg.Store, Prefix: metadata.PrefixLoadBalance, Log: m.log}
	brs, brRev, err := brF.List(ctx)
	if err != nil {
		m.cancel()
		_ = sess.Close()
		return nil, fmt.Errorf("loadmgr: list brokers: %w", err)
	}
	lbs, lbRev, err := lbF.List(ctx)
	if err != nil {
		m.cancel()
		_ = sess.Close()
		return nil, fmt.Errorf("loadmgr: list load reports: %w", err)
	}
	m.listedBrokers(brs)
	m.listedLoadBalance(lbs)
	m.brUps, m.lbUps = make(chan metadata.Update), make(chan metadata.Update)
	m.wg.Add(3)
	go m.follow(brF, brRev, m.brUps)
	go m.follow(lbF, lbRev, m.lbUps)
	go m.run()
	return m, nil
}

// Role returns the manager's current role.
func (m *Manager) Role() Role { return Role(m.role.Load()) }

// Leader returns the load balance leader as this manager last saw the leader key (false if
// none holds it). While a leader is known, the broker sends the lookups of unowned bundles
// to it (Pulsar's centralized assignment), so that its placement sees every assignment.
func (m *Manager) Leader() (Broker, bool) {
	if m.Role() == RoleLeader {
		return m.cfg.Self, true
	}
	if b := m.leader.Load(); b != nil {
		return *b, true
	}
	return Broker{}, false
}

// LocalReport returns this broker's last written load report (nil before the first; for
// the admin API's broker-stats/load-report). It must not be modified.
func (m *Manager) LocalReport(ctx context.Context) (*Report, error) {
	var r *Report
	err := m.do(ctx, func() { r = m.lastReport })
	return r, err
}

// SelectBroker picks the broker for an unowned bundle ("tenant/ns/0x…_0x…"): the least
// loaded live broker as this broker sees the reports, counting the bundles it assigned
// recently. It implements broker.BrokerSelector.
func (m *Manager) SelectBroker(ctx context.Context, bundle string) (string, error) {
	if _, _, err := splitBundleName(bundle); err != nil {
		return "", err
	}
	req := selectReq{bundle: bundle, reply: make(chan string, 1)}
	select {
	case m.selectc <- req:
	case <-ctx.Done():
		return "", ctx.Err()
	case <-m.done:
		return "", ErrStopped
	}
	id := <-req.reply // run answers every request it takes at once
	if id == "" {
		m.cfg.Metrics.assignments.WithLabelValues("no_broker").Inc()
		return "", ErrNoBroker
	}
	m.cfg.Metrics.assignments.WithLabelValues("assigned").Inc()
	return id, nil
}

// Reports returns the last load report of every broker as this manager sees them (for the
// admin API's load reports), by broker id. The reports must not be modified.
func (m *Manager) Reports(ctx context.Context) (map[string]*Report, error) {
	out := map[string]*Report{}
	err := m.do(ctx, func() {
		for _, id := range m.st.reportIDs() {
			out[id] = m.st.Report(id)
		}
	})
	return out, err
}

// do runs f on the manager's goroutine and waits for it.
func (m *Manager) do(ctx context.Context, f func()) error {
	ran := make(chan struct{})
	select {
	case m.fnc <- func() { f(); close(ran) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-m.done:
		return ErrStopped
	}
	<-ran // run executes what it takes at once
	return nil
}

// Close stops the manager and revokes its session (its report and, on the leader, the
// leader key vanish at once, so another broker takes over). Idempotent.
func (m *Manager) Close() error {
	m.once.Do(func() {
		close(m.done)
		m.cancel()
		m.wg.Wait()
		m.become(RoleStopped)
		if m.sess != nil {
			_ = m.sess.Close()
		}
	})
	return nil
}

// run owns the manager's state.
func (m *Manager) run() {
	defer m.wg.Done()
	reportT := time.NewTicker(m.cfg.ReportInterval)
	defer reportT.Stop()
	shedT := time.NewTicker(m.cfg.SheddingInterval)
	defer shedT.Stop()
	m.report()
	m.elect()
	for {
		var sessDone <-chan struct{}
		if m.sess != nil {
			sessDone = m.sess.Done()
		}
		select {
		case <-m.done:
			return
		case f := <-m.fnc:
			f()
		case req := <-m.selectc:
			req.reply <- m.st.SelectBroker(req.bundle, time.Now())
		case u := <-m.lbUps:
			followed(u, m.listedLoadBalance, m.applyLoadBalance)
		case u := <-m.brUps:
			followed(u, m.listedBrokers, func(ev metadata.Event) {
				m.applyBroker(ev.KV.Key, ev.Type == metadata.EventPut, ev.KV.Value)
			})
		case <-sessDone:
			m.sessionLost()
		case <-reportT.C:
			m.report()
			m.elect()
		case <-shedT.C:
			m.decide()
		}
	}
}

// goIO runs io on a helper goroutine and posts the closure it returns to run.
func (m *Manager) goIO(io func(ctx context.Context) func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f := io(m.ctx)
		select {
		case m.fnc <- f:
		case <-m.done:
		}
	}()
}

func (m *Manager) become(r Role) {
	if m.roleOwned == RoleStopped || m.roleOwned == r {
		return
	}
	m.log.Info("load manager role", "from", m.roleOwned, "to", r)
	m.roleOwned = r
	m.role.Store(int32(r))
	if r == RoleLeader {
		m.cfg.Metrics.leader.Set(1)
	} else {
		m.cfg.Metrics.leader.Set(0)
	}
	m.signal()
}

// signal tells a waiting test that something changed.
func (m *Manager) signal() {
	select {
	case m.cfg.changed <- struct{}{}:
	default:
	}
}

// follow follows f from the listing Start made at rev, handing its updates to run (a new
// listing after a watch ended: compaction, store trouble; a failed listing is retried every
// second), until Close.
func (m *Manager) follow(f metadata.Follower, rev int64, ups chan<- metadata.Update) {
	defer m.wg.Done()
	f.Resume(m.ctx, rev, func(u metadata.Update) {
		select {
		case ups <- u:
		case <-m.done:
		}
	})
}

// followed applies a follower's update: a listing through listed, each change through apply.
func followed(u metadata.Update, listed func([]metadata.KV), apply func(metadata.Event)) {
	switch u.Kind {
	case metadata.Listed:
		listed(u.KVs)
	case metadata.Changed:
		for _, ev := range u.Events {
			apply(ev)
		}
	}
}

// listedBrokers replaces the brokers by a listing of metadata.PrefixBrokers.
func (m *Manager) listedBrokers(brs []metadata.KV) {
	seen := map[string]bool{}
	for _, kv := range brs {
		seen[strings.TrimPrefix(kv.Key, metadata.PrefixBrokers)] = true
		m.applyBroker(kv.Key, true, kv.Value)
	}
	for id := range m.brokers {
		if !seen[id] {
			m.applyBroker(metadata.BrokerKey(id), false, nil)
		}
	}
}

// listedLoadBalance replaces the reports and the leader by a listing of
// metadata.PrefixLoadBalance.
func (m *Manager) listedLoadBalance(lbs []metadata.KV) {
	reports, leader := map[string]bool{}, false
	for _, kv := range lbs {
		leader = leader || kv.Key == metadata.LoadBalanceLeaderKey
		if id, ok := strings.CutPrefix(kv.Key, metadata.PrefixLoadReports); ok {
			reports[id] = true
		}
		m.applyLoadBalance(metadata.Event{Type: metadata.EventPut, KV: kv})
	}
	for _, id := range m.st.reportIDs() {
		if !reports[id] {
			m.st.Observe(id, nil)
		}
	}
	if !leader {
		m.leader.Store(nil)
	}
}

func (m *Manager) applyBroker(key string, put bool, value []byte) {
	id := strings.TrimPrefix(key, metadata.PrefixBrokers)
	if !put {
		delete(m.brokers, id)
		m.st.SetLive(id, false)
		return
	}
	var b Broker
	if err := json.Unmarshal(value, &b); err != nil {
		m.log.Warn("unreadable broker record", "key", key, "err", err)
		return
	}
	b.ID = id
	m.brokers[id] = b
	m.st.SetLive(id, true)
	m.signal()
}

func (m *Manager) applyLoadBalance(ev metadata.Event) {
	key := ev.KV.Key
	if key == metadata.LoadBalanceLeaderKey {
		if ev.Type == metadata.EventPut {
			var b Broker
			if err := json.Unmarshal(ev.KV.Value, &b); err == nil && b.ID != "" {
				m.leader.Store(&b)
				m.signal()
			}
		}
		if ev.Type == metadata.EventDelete {
			m.leader.Store(nil)
			// A follower runs for the key; a leader checks it is still its own (the event may
			// be its predecessor's, delivered after this manager took the key).
			m.claim()
		}
		return
	}
	id, ok := strings.CutPrefix(key, metadata.PrefixLoadReports)
	if !ok {
		return
	}
	if ev.Type == metadata.EventDelete {
		m.st.Observe(id, nil)
		return
	}
	r := &Report{}
	if err := json.Unmarshal(ev.KV.Value, r); err != nil {
		m.log.Warn("unreadable load report", "key", key, "err", err)
		return
	}
	r.BrokerID = id
	m.st.Observe(id, r)
	m.signal()
}

// sessionLost gives up the leadership and makes a new session; the reporter then writes at
// once (its report went with the old session).
func (m *Manager) sessionLost() {
	m.log.Warn("load manager session expired")
	m.sess, m.lastReport = nil, nil
	m.become(RoleFollower)
	m.wg.Add(1)
	go func() { // like goIO, but a session made as the manager closes is closed here
		defer m.wg.Done()
		for {
			s, err := m.cfg.Store.NewSession(m.ctx, m.cfg.SessionTTL)
			if err == nil {
				select {
				case m.fnc <- func() { m.sess = s; m.report(); m.elect() }:
				case <-m.done:
					_ = s.Close()
				}
				return
			}
			select {
			case <-m.done:
				return
			case <-time.After(time.Second): // retry interval of session creation
			}
		}
	}()
}

// elect tries to take the leader key if this broker is a follower.
func (m *Manager) elect() {
	if m.roleOwned == RoleFollower {
		m.claim()
	}
}

// claim puts the leader key if it is free: the manager leads if the key is then its
// session's, and follows if another session holds it. Other errors (the store unreachable)
// leave the role as it is: a leader that cannot reach the store loses its session soon.
func (m *Manager) claim() {
	if m.roleOwned == RoleStopped || m.electing || m.sess == nil {
		return
	}
	sess := m.sess
	value, _ := json.Marshal(m.cfg.Self)
	m.electing = true
	m.goIO(func(ctx context.Context) func() {
		_, err := sess.Put(ctx, metadata.LoadBalanceLeaderKey, value, metadata.NotExists)
		held := errors.Is(err, metadata.ErrBadVersion)
		if held {
			// Ours already (we lead, or a retried put whose answer was lost)?
			if kv, gerr := m.cfg.Store.Get(ctx, metadata.LoadBalanceLeaderKey); gerr != nil {
				held = false // unknown: keep the role
			} else if kv.Lease == sess.ID() {
				err, held = nil, false
			}
		}
		return func() {
			m.electing = false
			switch {
			case m.sess != sess:
			case err == nil:
				m.become(RoleLeader)
			case held:
				m.become(RoleFollower)
			}
		}
	})
}

// makeReport builds this broker's report at now.
func (m *Manager) makeReport(now time.Time) *Report {
	self := m.cfg.Self
	r := &Report{BrokerID: self.ID, ServiceURL: self.ServiceURL, ServiceURLTLS: self.ServiceURLTLS,
		WebServiceURL: self.WebServiceURL, WebServiceURLTLS: self.WebServiceURLTLS, LastUpdate: now.UnixMilli(),
		Bundles: map[string]BundleLoad{}}
	if m.cfg.BundleStats != nil {
		for b, l := range m.cfg.BundleStats() {
			r.Bundles[b] = l
		}
	}
	r.fillTotals()
	res := m.cfg.Resources(now)
	r.CPU, r.Memory = res.CPU, res.Memory
	if m.cfg.NICSpeedGbps > 0 {
		kbps := m.cfg.NICSpeedGbps * 1e9 / 8 / 1024
		r.BandwidthIn = Usage{Usage: r.MsgThroughputIn / 1024, Limit: kbps}
		r.BandwidthOut = Usage{Usage: r.MsgThroughputOut / 1024, Limit: kbps}
	}
	return r
}

// report writes this broker's report if it changed enough or is due. A helper gathers the
// load (BundleStats and Resources run there, one report at a time) and writes it.
func (m *Manager) report() {
	if m.cfg.Disabled || m.reporting || m.sess == nil {
		return
	}
	sess, prev, prevAt := m.sess, m.lastReport, m.lastWrite
	m.reporting = true
	m.goIO(func(ctx context.Context) func() {
		now := time.Now()
		r := m.makeReport(now)
		if !reportChanged(prev, r, m.cfg.ReportThresholdPercent) && now.Sub(prevAt) < m.cfg.ReportMaxInterval {
			return func() {
				m.reporting = false
				m.cfg.Metrics.reports.WithLabelValues("unchanged").Inc()
				m.signal()
			}
		}
		value, err := json.Marshal(r)
		if err == nil {
			ctx, cancel := context.WithTimeout(ctx, m.cfg.SessionTTL)
			_, err = sess.Put(ctx, metadata.LoadReportKey(m.cfg.Self.ID), value, metadata.AnyVersion)
			cancel()
		}
		return func() {
			m.reporting = false
			if err != nil || m.sess != sess {
				m.cfg.Metrics.reports.WithLabelValues("failed").Inc()
				m.log.Warn("load report not written", "err", err)
				m.signal()
				return
			}
			m.lastReport, m.lastWrite = r, now
			m.cfg.Metrics.reports.WithLabelValues("written").Inc()
			m.signal()
		}
	})
}

// adminTimeout bounds one admin request of the executor.
const adminTimeout = 30 * time.Second

// maxParallelActions bounds the actions of a plan executed at once: each is a bundle's
// transfer or split on its owner, independent of the others.
const maxParallelActions = 4

// decide runs the core on the leader and executes its plan, up to maxParallelActions
// actions at once.
func (m *Manager) decide() {
	if m.cfg.Disabled || m.roleOwned != RoleLeader || m.executing {
		return
	}
	now := time.Now()
	acts := m.st.Plan(now)
	m.cfg.Metrics.sheddings.Inc()
	if mean, mx := meanAndMax(m.st.rates(now)); mean > 0 {
		m.cfg.Metrics.maxToMean.Set(mx / mean)
	}
	if len(acts) == 0 {
		return
	}
	urls := make([]string, len(acts))
	for i, a := range acts {
		urls[i] = m.brokers[a.From].adminURL()
		if r := m.st.Report(a.From); urls[i] == "" && r != nil {
			urls[i] = r.WebServiceURL
		}
		m.log.Info("load manager decision", "action", a.Kind, "bundle", a.Bundle, "from", a.From, "to", a.To,
			"msgRate", a.MsgRate)
	}
	m.executing = true
	exec := m.cfg.Executor
	m.goIO(func(ctx context.Context) func() {
		errs := make([]error, len(acts))
		sem := make(chan struct{}, maxParallelActions)
		var wg sync.WaitGroup
		for i, a := range acts {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				actx, cancel := context.WithTimeout(ctx, adminTimeout)
				errs[i] = exec.Execute(actx, urls[i], a)
				cancel()
			}()
		}
		wg.Wait()
		return func() {
			m.executing = false
			for i, a := range acts {
				outcome := "done"
				if errs[i] != nil {
					outcome = "failed"
					m.st.Failed(a)
					m.log.Warn("load manager action failed", "action", a.Kind, "bundle", a.Bundle, "err", errs[i])
				}
				if a.Kind == ActionSplit {
					m.cfg.Metrics.splits.WithLabelValues(outcome).Inc()
				} else {
					m.cfg.Metrics.unloads.WithLabelValues(outcome).Inc()
				}
			}
			m.signal()
		}
	})
}
