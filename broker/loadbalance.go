package broker

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/magnetar-io/magnetar/broker/loadmgr"
	"github.com/magnetar-io/magnetar/broker/ownership"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// The load manager (package loadmgr), as Pulsar's modular load manager: the broker reports
// the load of its bundles, the elected leader assigns unowned bundles (lookups of one reaching
// another broker are redirected to it, package ownership) and moves and splits bundles through the
// admin API of their owners (UnloadBundle with a destination, SplitBundle).

// startLoadManager starts the load manager unless a BrokerSelector replaces it or it is
// disabled. The broker is registered already (loadmgr's first obligation).
func (s *Service) startLoadManager(ctx context.Context) error {
	lc := s.cfg.LoadManager
	if s.cfg.BrokerSelector != nil || lc.Disabled {
		return nil
	}
	lc.Store, lc.SessionTTL, lc.BundleStats = s.store, s.cfg.SessionTTL, s.bundleLoads
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

// bundleLoadWait bounds one gathering of the bundles' loads.
const bundleLoadWait = 5 * time.Second

// bundleLoads returns the load of every bundle this broker owns (loadmgr.Config.BundleStats),
// the sums over its loaded topics.
func (s *Service) bundleLoads() map[string]loadmgr.BundleLoad {
	ctx, cancel := context.WithTimeout(s.ctx, bundleLoadWait)
	defer cancel()
	owned := map[string][]Bundle{} // by namespace
	out := map[string]loadmgr.BundleLoad{}
	for _, b := range s.own.OwnedBundles() {
		owned[b.Namespace] = append(owned[b.Namespace], b)
		out[b.String()] = loadmgr.BundleLoad{}
	}
	for _, t := range s.LoadedTopics() {
		b, ok := bundleIn(owned, t.Name())
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
func bundleIn(bundles map[string][]Bundle, n topicname.Name) (Bundle, bool) {
	h := ownership.TopicHash(n)
	for _, b := range bundles[n.Tenant+"/"+n.Namespace] {
		if b.Contains(h) {
			return b, true
		}
	}
	return Bundle{}, false
}

// LoadReport returns this broker's last load report (GET /admin/v2/broker-stats/load-report);
// ErrServiceNotReady if the load manager is off or has not reported yet.
func (s *Service) LoadReport(ctx context.Context) (*loadmgr.Report, error) {
	if s.lm == nil {
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
	if s.lm == nil {
		return nil, errLoadManagerOff
	}
	return s.lm.Reports(ctx)
}

var (
	errLoadManagerOff = fmt.Errorf("%w: the load manager is disabled", ErrServiceNotReady)
	errNoLoadReport   = fmt.Errorf("%w: no load report written yet", ErrServiceNotReady)
)
