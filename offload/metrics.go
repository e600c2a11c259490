package offload

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Offloader's Prometheus collectors, one set per Offloader (that is, per
// broker). Names follow Pulsar's offloader metrics (pulsar_ledgeroffloader_*) where Pulsar
// has one for the same thing, and are magnetar_offload_* otherwise. The offload and read
// error counts are magnetar_offload_errors_total and _read_errors_total: the broker serves
// Pulsar's pulsar_ledgeroffloader_offload_error and _read_offload_error per topic (labels
// namespace and topic), and one registry cannot hold a name with two label sets.
type metrics struct {
	offloadBytes      prometheus.Counter   // payload bytes of ledgers whose offload completed
	writeBytes        prometheus.Counter   // bytes written to the object store (blocks + index)
	offloadErrors     prometheus.Counter   // offloads that failed
	writeStorageError prometheus.Counter   // object-store write failures
	offloadLatency    prometheus.Histogram // duration of a whole ledger's offload
	offloadedLedgers  prometheus.Counter

	readEntries  prometheus.Counter   // entries returned by ReadHandle.Read
	readBytes    prometheus.Counter   // payload bytes returned by ReadHandle.Read
	readErrors   prometheus.Counter   // ReadHandle.Read (and OpenLedger) failures
	readLatency  prometheus.Histogram // duration of ReadHandle.Read
	blockGets    prometheus.Counter   // ranged GETs of data blocks (including read-ahead)
	getBytes     prometheus.Counter   // bytes fetched by those GETs
	cacheHits    prometheus.Counter   // blocks a read found in the cache (or already in flight)
	cacheMisses  prometheus.Counter   // blocks a read had to fetch
	cacheBytes   prometheus.Gauge     // bytes held by the block cache
	deleteErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	latency := []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	m := &metrics{
		offloadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulsar_ledgeroffloader_offload_rate",
			Help: "Payload bytes of ledgers offloaded to object storage (offloads that completed).",
		}),
		writeBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulsar_ledgeroffloader_writeRate",
			Help: "Bytes written to object storage by offloads: data blocks with headers and padding, and indexes.",
		}),
		offloadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_offload_errors_total",
			Help: "Ledger offloads that failed.",
		}),
		writeStorageError: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulsar_ledgeroffloader_write_storage_error",
			Help: "Object-store write failures during offloads.",
		}),
		offloadLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "magnetar_offload_latency_seconds",
			Help:    "Duration of a ledger's offload, from its first block to its index, for offloads that completed.",
			Buckets: latency,
		}),
		offloadedLedgers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_offload_ledgers_total",
			Help: "Ledgers whose offload completed.",
		}),
		readEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_offload_read_entries_total",
			Help: "Entries served from object storage.",
		}),
		readBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_offload_read_bytes_total",
			Help: "Payload bytes served from object storage.",
		}),
		readErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_offload_read_errors_total",
			Help: "Reads of offloaded ledgers that failed (opening the index or reading entries).",
		}),
		readLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "magnetar_offload_read_latency_seconds",
			Help:    "Duration of reads of entries from offloaded ledgers, cache hits included.",
			Buckets: latency,
		}),
		blockGets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_offload_block_gets_total",
			Help: "Ranged GETs of data blocks from object storage, read-ahead included.",
		}),
		getBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_offload_block_get_bytes_total",
			Help: "Bytes fetched from object storage by ranged GETs of data blocks.",
		}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_offload_cache_hits_total",
			Help: "Data blocks a read found in the block cache or already being fetched.",
		}),
		cacheMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_offload_cache_misses_total",
			Help: "Data blocks a read had to fetch from object storage.",
		}),
		cacheBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "magnetar_offload_cache_bytes",
			Help: "Bytes of data blocks held by the read cache.",
		}),
		deleteErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_offload_delete_errors_total",
			Help: "Deletions of offloaded ledgers that failed.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) all() []prometheus.Collector {
	return []prometheus.Collector{
		m.offloadBytes, m.writeBytes, m.offloadErrors, m.writeStorageError, m.offloadLatency,
		m.offloadedLedgers, m.readEntries, m.readBytes, m.readErrors, m.readLatency, m.blockGets,
		m.getBytes, m.cacheHits, m.cacheMisses, m.cacheBytes, m.deleteErrors,
	}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all() {
		c.Collect(ch)
	}
}

// Collector returns the Offloader's metrics as one prometheus.Collector, for a registry that
// exists only after the Offloader (the broker's): register it there once, and pass no
// Options.Registerer (or Open registerer) beside it.
func (o *Offloader) Collector() prometheus.Collector { return o.m }
