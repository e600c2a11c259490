package txn

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the transaction counters, shared by a broker's coordinators and participants.
type Metrics struct {
	created, committed, aborted, timedOut prometheus.Counter
	open                                  *prometheus.GaugeVec
	commitLatency                         prometheus.Histogram
}

// NewMetrics registers the transaction metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		created:   prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_txn_created_total", Help: "Transactions opened."}),
		committed: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_txn_committed_total", Help: "Transactions committed."}),
		aborted:   prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_txn_aborted_total", Help: "Transactions aborted by their client."}),
		timedOut:  prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_txn_timed_out_total", Help: "Transactions aborted by their timeout."}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "magnetar_txn_open", Help: "Open transactions per coordinator."},
			[]string{"coordinator"}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "magnetar_txn_commit_latency_seconds",
			Help: "Time from an END_TXN commit request to its answer.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
	}
	if reg != nil {
		reg.MustRegister(m.created, m.committed, m.aborted, m.timedOut, m.open, m.commitLatency)
	}
	return m
}
