package loadmgr

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the load manager's Prometheus metrics. Safe for concurrent use.
type Metrics struct {
	leader      prometheus.Gauge
	reports     *prometheus.CounterVec
	assignments *prometheus.CounterVec
	sheddings   prometheus.Counter
	unloads     *prometheus.CounterVec
	splits      *prometheus.CounterVec
	maxToMean   prometheus.Gauge
}

// NewMetrics creates the metrics and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "magnetar_loadbalance_leader",
			Help: "1 while this broker is the load balance leader."}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_loadbalance_reports_total",
			Help: "Load reports of this broker, by outcome (written, unchanged, failed)."}, []string{"outcome"}),
		assignments: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_loadbalance_assignments_total",
			Help: "Unowned bundles this broker assigned (SelectBroker), by outcome (assigned, no_broker)."}, []string{"outcome"}),
		sheddings: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_loadbalance_shedding_runs_total",
			Help: "Shedding and split decisions run by the leader."}),
		unloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_loadbalance_unloads_total",
			Help: "Bundles the leader moved to a less loaded broker, by outcome (done, failed)."}, []string{"outcome"}),
		splits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_loadbalance_splits_total",
			Help: "Bundles the leader split, by outcome (done, failed)."}, []string{"outcome"}),
		maxToMean: prometheus.NewGauge(prometheus.GaugeOpts{Name: "magnetar_loadbalance_max_to_mean_msg_rate",
			Help: "The leader's last view: the busiest broker's message rate over the mean (1 = balanced)."}),
	}
	if reg != nil {
		reg.MustRegister(m.leader, m.reports, m.assignments, m.sheddings, m.unloads, m.splits, m.maxToMean)
	}
	return m
}
