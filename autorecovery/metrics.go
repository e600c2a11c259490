package autorecovery

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are auto-recovery's Prometheus metrics (progress of auditors and workers).
// Safe for concurrent use.
type Metrics struct {
	auditorLeader     prometheus.Gauge
	lostBookies       prometheus.Gauge
	underReplicated   prometheus.Gauge
	ledgersMarked     prometheus.Counter
	ledgersChecked    prometheus.Counter
	attempts          *prometheus.CounterVec
	ledgersReplicated prometheus.Counter
	ledgersRecovered  prometheus.Counter
	fragments         prometheus.Counter
	entries           prometheus.Counter
	bytes             prometheus.Counter
	attemptSeconds    prometheus.Histogram
}

// NewMetrics creates the metrics and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		auditorLeader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "magnetar_autorecovery_auditor_leader",
			Help: "1 while this process is the active auditor."}),
		lostBookies: prometheus.NewGauge(prometheus.GaugeOpts{Name: "magnetar_autorecovery_lost_bookies",
			Help: "Bookies known (cookie or ensembles) but not registered, as the active auditor sees them."}),
		underReplicated: prometheus.NewGauge(prometheus.GaugeOpts{Name: "magnetar_autorecovery_underreplicated_ledgers",
			Help: "Ledgers marked under-replicated (last listing)."}),
		ledgersMarked: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_autorecovery_ledgers_marked_total",
			Help: "Under-replication marks created or extended."}),
		ledgersChecked: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_autorecovery_ledgers_checked_total",
			Help: "Ledgers verified by the periodic full check."}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_autorecovery_attempts_total",
			Help: "Replication attempts, by outcome (replicated, deferred, failed)."}, []string{"outcome"}),
		ledgersReplicated: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_autorecovery_ledgers_replicated_total",
			Help: "Marks cleared: ledgers fully re-replicated."}),
		ledgersRecovered: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_autorecovery_ledgers_recovered_total",
			Help: "Open ledgers whose writer was gone, recovered (fenced and closed) before replication."}),
		fragments: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_autorecovery_fragments_replicated_total",
			Help: "Fragments whose lost bookie was replaced."}),
		entries: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_autorecovery_entries_copied_total",
			Help: "Entries copied to a new or repaired bookie."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_autorecovery_bytes_copied_total",
			Help: "Payload bytes copied to a new or repaired bookie."}),
		attemptSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "magnetar_autorecovery_attempt_seconds",
			Help: "Duration of one replication attempt of one ledger.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)}),
	}
	if reg != nil {
		reg.MustRegister(m.auditorLeader, m.lostBookies, m.underReplicated, m.ledgersMarked, m.ledgersChecked,
			m.attempts, m.ledgersReplicated, m.ledgersRecovered, m.fragments, m.entries, m.bytes, m.attemptSeconds)
	}
	return m
}

func (m *Metrics) observe(res Result, took time.Duration) {
	m.attempts.WithLabelValues(res.Outcome.String()).Inc()
	m.fragments.Add(float64(res.Fragments))
	m.entries.Add(float64(res.Entries))
	m.bytes.Add(float64(res.Bytes))
	if res.Recovered {
		m.ledgersRecovered.Inc()
	}
	m.attemptSeconds.Observe(took.Seconds())
}
