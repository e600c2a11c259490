package broker

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/magnetar-io/magnetar/broker/loadmgr"
)

// The load manager (package loadmgr), as Pulsar's modular load manager: the broker reports
// the load of its bundles, the elected leader assigns unowned bundles (lookups of one reaching
// another broker are redirected to it, package ownership) and moves and splits bundles through the
// admin API of their owners (UnloadBundle with a destination, SplitBundle).

// startLoadManager starts the load manager unless a BrokerSelector replaces it. Disabled
// (loadBalancerEnabled=false), it only takes part in the leader election, as Pulsar's
// leader election runs whatever the load balancer setting: it reports nothing, decides
// nothing and assigns no bundle (loadBalancing). The broker is registered already
// (loadmgr's first obligation).
func (s *Service) startLoadManager(ctx context.Context) error {
	lc := s.cfg.LoadManager
	if s.cfg.BrokerSelector != nil {
		return nil
	}
	lc.Store, lc.SessionTTL = s.store, s.cfg.SessionTTL
	lc.BundleStats = func() map[string]loadmgr.BundleLoad {
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second) // bounds one gathering of the loads
		defer cancel()
		return s.BundleLoads(ctx, s.own.OwnedBundles())
	}
	lc.Self = loadmgr.Broker{ID: s.info.ID, ServiceURL: s.info.ServiceURL, WebServiceURL: s.info.HTTPURL,
		ServiceURLTLS: s.info.ServiceURLTLS, WebServiceURLTLS: s.info.HTTPURLTLS}
	if lc.Metrics == nil {
		lc.Metrics = loadmgr.NewMetrics(s.reg)
	}
	if lc.Logger == nil {
		lc.Logger = s.log
	}
	if lc.Executor == nil {
		hc := s.cfg.PeerHTTP
		if hc == nil {
			hc = &http.Client{Timeout: time.Minute}
		}
		lc.Executor = &loadmgr.Executor{Client: hc}
	}
	lm, err := loadmgr.Start(ctx, lc)
	if err != nil {
		return err
	}
	s.lm = lm
	s.closers = append(s.closers, func() { lm.Close() })
	return nil
}

// LoadReport returns this broker's last load report (GET /admin/v2/broker-stats/load-report);
// ErrServiceNotReady if the load manager is off or has not reported yet.
func (s *Service) LoadReport(ctx context.Context) (*loadmgr.Report, error) {
	if !s.loadBalancing() {
		return nil, errLoadManagerOff
	}
	r, err := s.lm.LocalReport(ctx)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, errNoLoadReport
	}
	return r, nil
}

// LoadReports returns the load report of every broker as this broker's load manager sees
// them, by broker id.
func (s *Service) LoadReports(ctx context.Context) (map[string]*loadmgr.Report, error) {
	if !s.loadBalancing() {
		return nil, errLoadManagerOff
	}
	return s.lm.Reports(ctx)
}

// loadBalancing reports whether the load manager runs with load balancing on (it reports,
// assigns unowned bundles and sheds load), not only for the leader election.
func (s *Service) loadBalancing() bool { return s.lm != nil && !s.cfg.LoadManager.Disabled }

var (
	errLoadManagerOff = fmt.Errorf("%w: the load manager is disabled", ErrServiceNotReady)
	errNoLoadReport   = fmt.Errorf("%w: no load report written yet", ErrServiceNotReady)
)
