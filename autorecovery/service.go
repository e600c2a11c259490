package autorecovery

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/metadata"
)

// Config configures a Service. Zero values take the documented defaults.
type Config struct {
	// Store is the metadata store. Required.
	Store metadata.Store
	// Pool dials bookies. Default: a pool of the service's own, closed by Close.
	Pool *client.Pool
	// ID names this process in the election key, locks and worker registration (e.g. the
	// bookie id, or host:pid). Required.
	ID string
	// RunAuditor and RunWorker choose the roles.
	RunAuditor, RunWorker bool
	// Auditor and Worker tune the roles (their ID, Metrics and Logger are set by Start).
	Auditor AuditorConfig
	Worker  WorkerConfig
	// SessionTTL bounds how long the election key and the locks outlive a dead process.
	// Default 10s.
	SessionTTL time.Duration
	// RequestTimeout bounds one metadata call or bookie request. Default 10s.
	RequestTimeout time.Duration
	// Registerer receives the metrics. Default: a registry of the service's own (see
	// MetricsHandler).
	Registerer prometheus.Registerer
	// Logger receives logs. Default slog.Default().
	Logger *slog.Logger
}

// Service runs an auditor and/or a replication worker in this process, on one owner
// goroutine (an Env of the real kind). Close stops it.
type Service struct {
	l       *loop
	aud     *Auditor
	wrk     *Worker
	reg     *prometheus.Registry
	ownPool *client.Pool
	metrics *Metrics
}

// Start starts the configured roles.
func Start(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.ID == "" {
		return nil, errors.New("autorecovery: config: store and id required")
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 10 * time.Second
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Service{}
	if cfg.Registerer == nil {
		s.reg = prometheus.NewRegistry()
		cfg.Registerer = s.reg
	}
	s.metrics = NewMetrics(cfg.Registerer)
	if cfg.Pool == nil {
		s.ownPool = client.NewPool(client.Options{Logger: cfg.Logger})
		cfg.Pool = s.ownPool
	}
	s.l = newLoop(cfg.Store, cfg.Pool, cfg.SessionTTL, cfg.RequestTimeout)
	s.l.do(func() {
		if cfg.RunAuditor {
			ac := cfg.Auditor
			ac.ID, ac.Metrics, ac.Logger = cfg.ID, s.metrics, cfg.Logger
			s.aud = NewAuditor(s.l, ac)
			s.aud.Start()
		}
		if cfg.RunWorker {
			wc := cfg.Worker
			wc.ID, wc.Metrics, wc.Logger = cfg.ID, s.metrics, cfg.Logger
			s.wrk = NewWorker(s.l, wc)
			s.wrk.Start()
		}
	})
	return s, nil
}

// MetricsHandler serves the service's metrics when it has its own registry (nil otherwise).
func (s *Service) MetricsHandler() http.Handler {
	if s.reg == nil {
		return nil
	}
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
}

// Close stops the roles, revokes the session (releasing the election key and any lock) and
// waits for the goroutines. Idempotent.
func (s *Service) Close() error {
	s.l.do(func() {
		if s.aud != nil {
			s.aud.Stop()
		}
		if s.wrk != nil {
			s.wrk.Stop()
		}
	})
	s.l.close()
	if s.ownPool != nil {
		s.ownPool.Close()
	}
	return nil
}

// RunDecommission retires a stopped bookie (see Decommission) and returns when no ledger
// references it any more and its cookie is deleted, or ctx ends. progress sees every round.
func RunDecommission(ctx context.Context, store metadata.Store, bookieID string, interval time.Duration, progress func(DecommissionProgress)) error {
	pool := client.NewPool(client.Options{})
	defer pool.Close()
	l := newLoop(store, pool, 10*time.Second, 10*time.Second)
	defer l.close()
	done := make(chan error, 1)
	var d *Decommission
	l.do(func() {
		d = NewDecommission(l, DecommissionConfig{Bookie: bookieID, Interval: interval, Progress: progress,
			Done: func(err error) { done <- err }})
		d.Start()
	})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		l.do(d.Stop)
		return ctx.Err()
	}
}
