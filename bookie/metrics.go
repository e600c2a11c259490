package bookie

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the bookie's Prometheus metrics, registered on its own registry so several
// bookies can live in one process (tests, standalone).
type metrics struct {
	reg           *prometheus.Registry
	addLatency    prometheus.Histogram
	readLatency   prometheus.Histogram
	fsyncLatency  prometheus.Histogram
	groupRecords  prometheus.Histogram
	groupBytes    prometheus.Histogram
	bytesAdded    prometheus.Counter
	entriesAdded  prometheus.Counter
	addsRejected  *prometheus.CounterVec
	fences        prometheus.Counter
	fencedLedgers prometheus.Gauge
	readOnly      prometheus.Gauge
	connections   prometheus.Gauge
	malformed     prometheus.Counter
	gcDeleted     prometheus.Counter
	gcReclaimed   prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	lat := prometheus.ExponentialBuckets(50e-6, 2, 16) // 50µs .. ~1.6s
	m.addLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "magnetar_bookie_add_latency_seconds",
		Help: "Time from receiving an add to acknowledging it (journal fsynced).", Buckets: lat})
	m.readLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "magnetar_bookie_read_latency_seconds",
		Help: "Time to serve a read entry request.", Buckets: lat})
	m.fsyncLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "magnetar_bookie_journal_fsync_seconds",
		Help: "Journal fdatasync latency per group.", Buckets: lat})
	m.groupRecords = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "magnetar_bookie_journal_group_records",
		Help: "Records per journal group commit (one fsync).", Buckets: prometheus.ExponentialBuckets(1, 2, 14)})
	m.groupBytes = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "magnetar_bookie_journal_group_bytes",
		Help: "Bytes per journal group commit.", Buckets: prometheus.ExponentialBuckets(512, 2, 16)})
	m.bytesAdded = prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_bookie_add_bytes_total",
		Help: "Entry bytes acknowledged."})
	m.entriesAdded = prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_bookie_add_entries_total",
		Help: "Entries acknowledged."})
	m.addsRejected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_bookie_add_rejected_total",
		Help: "Adds refused, by status."}, []string{"status"})
	m.fences = prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_bookie_fence_requests_total",
		Help: "Fencing reads served."})
	m.fencedLedgers = prometheus.NewGauge(prometheus.GaugeOpts{Name: "magnetar_bookie_fenced_ledgers",
		Help: "Ledgers fenced on this bookie since start (including replayed)."})
	m.readOnly = prometheus.NewGauge(prometheus.GaugeOpts{Name: "magnetar_bookie_read_only",
		Help: "1 when the bookie is read-only."})
	m.connections = prometheus.NewGauge(prometheus.GaugeOpts{Name: "magnetar_bookie_connections",
		Help: "Open client connections."})
	m.malformed = prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_bookie_malformed_frames_total",
		Help: "Connections closed because of a malformed or oversized frame."})
	m.gcDeleted = prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_bookie_gc_deleted_ledgers_total",
		Help: "Ledgers reclaimed because they no longer exist in metadata."})
	m.gcReclaimed = prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_bookie_gc_reclaimed_bytes_total",
		Help: "Entry-log bytes reclaimed by compaction."})
	for _, c := range []prometheus.Collector{m.addLatency, m.readLatency, m.fsyncLatency, m.groupRecords,
		m.groupBytes, m.bytesAdded, m.entriesAdded, m.addsRejected, m.fences, m.fencedLedgers, m.readOnly,
		m.connections, m.malformed, m.gcDeleted, m.gcReclaimed} {
		f(c)
	}
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
