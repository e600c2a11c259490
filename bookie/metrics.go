package bookie

import (
	"math"

	"github.com/magnetar-io/magnetar/bookie/storage"
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
	readBytes     prometheus.Counter
	entriesAdded  prometheus.Counter
	addsRejected  *prometheus.CounterVec
	fences        prometheus.Counter
	fencedLedgers prometheus.Gauge
	readOnly      prometheus.Gauge
	connections   prometheus.Gauge
	malformed     prometheus.Counter
	gcDeleted     prometheus.Counter
	gcReclaimed   prometheus.Counter
	journalRolls  *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	// Half-octave buckets (×√2), 50µs .. ~2.3s: fine enough to read a p99 of a few ms.
	lat := prometheus.ExponentialBuckets(50e-6, math.Sqrt2, 32)
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
	m.readBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_bookie_read_bytes_total",
		Help: "Entry bytes read and sent (reads, fencing reads, long polls' piggybacked entries)."})
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
	m.journalRolls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_bookie_journal_rolls_total",
		Help: "Journal file rolls, by whether the new file was prepared (zero-filled ahead) or fallocated."}, []string{"prepared"})
	for _, c := range []prometheus.Collector{m.journalRolls, m.addLatency, m.readLatency, m.fsyncLatency, m.groupRecords,
		m.groupBytes, m.bytesAdded, m.readBytes, m.entriesAdded, m.addsRejected, m.fences, m.fencedLedgers, m.readOnly,
		m.connections, m.malformed, m.gcDeleted, m.gcReclaimed} {
		f(c)
	}
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// storageCollector exports the ledger storage's statistics (write cache, entry logs) at
// scrape time.
type storageCollector struct {
	stats                                   func() (storage.Stats, bool)
	cacheBytes, flushes, flushed, flushTime *prometheus.Desc
	blockedPuts, logBytes, liveBytes, nLogs *prometheus.Desc
}

func newStorageCollector(stats func() (storage.Stats, bool)) *storageCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &storageCollector{
		stats:       stats,
		cacheBytes:  d("magnetar_bookie_write_cache_bytes", "Entry bytes in the write cache (not yet in an entry log)."),
		flushes:     d("magnetar_bookie_write_cache_flushes_total", "Write-cache generations flushed to the entry log."),
		flushed:     d("magnetar_bookie_write_cache_flushed_entries_total", "Entries flushed from the write cache."),
		flushTime:   d("magnetar_bookie_write_cache_flush_seconds_total", "Time spent flushing the write cache (write, fdatasync, index)."),
		blockedPuts: d("magnetar_bookie_write_cache_blocked_puts_total", "Adds that waited for a write-cache flush (the cache was full)."),
		logBytes:    d("magnetar_bookie_entry_log_bytes", "Bytes in entry logs."),
		liveBytes:   d("magnetar_bookie_entry_log_live_bytes", "Bytes in entry logs still referenced by the index."),
		nLogs:       d("magnetar_bookie_entry_logs", "Entry log files."),
	}
}

func (c *storageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.cacheBytes, c.flushes, c.flushed, c.flushTime, c.blockedPuts,
		c.logBytes, c.liveBytes, c.nLogs} {
		ch <- d
	}
}

func (c *storageCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.stats()
	if !ok {
		return
	}
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	n := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	g(c.cacheBytes, float64(st.CacheBytes))
	n(c.flushes, float64(st.CacheFlushes))
	n(c.flushed, float64(st.CacheFlushed))
	n(c.flushTime, st.CacheFlushTime.Seconds())
	n(c.blockedPuts, float64(st.CacheBlockedPuts))
	g(c.logBytes, float64(st.TotalBytes))
	var live int64
	for _, l := range st.Logs {
		live += l.LiveBytes
	}
	g(c.liveBytes, float64(live))
	g(c.nLogs, float64(len(st.Logs)))
}
