package bookie

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/magnetar-io/magnetar/bookie/storage"
)

// bkCollector exports the bookie's figures under BookKeeper's Prometheus names, the ones the
// BookKeeper and Pulsar dashboards query, computed at scrape time from the bookie's own
// metrics and its storage's statistics:
//
//	bookie_SERVER_STATUS          1 writable, 0 read-only (magnetar_bookie_read_only)
//	bookie_ledger_writable_dirs   the same: the bookie has one ledger directory
//	bookie_WRITE_BYTES            entry bytes acknowledged (magnetar_bookie_add_bytes_total)
//	bookie_READ_BYTES             entry bytes read (magnetar_bookie_read_bytes_total)
//	bookie_ledgers_count          ledgers in the storage
//	bookie_entries_count          entries indexed (those still in the write cache are not)
//	bookie_write_cache_size       bytes in the write cache
//	bookie_read_cache_size        0: the bookie has no read cache
//	bookie_DELETED_LEDGER_COUNT   ledgers garbage-collected since the start
//	bookie_journal_JOURNAL_SYNC, bookie_journal_JOURNAL_ADD_ENTRY,
//	bookkeeper_server_ADD_ENTRY, …_ADD_ENTRY_REQUEST, …_READ_ENTRY, …_READ_ENTRY_REQUEST
//	                              summaries in milliseconds labelled success (quantiles
//	                              0.5 … 1.0, _count, _sum), from the journal fsync, add and
//	                              read latency histograms
//
// The summaries' quantiles are estimated from the histograms' buckets (linear interpolation
// within a bucket) over everything since the start, where BookKeeper's cover a recent
// window. BookKeeper distinguishes a request's time in the queue (…_REQUEST) from its
// processing; Magnetar measures one time, from receiving the request to answering it, and
// exports it under both names. Not exported: the journal's queue sizes (not measured).
type bkCollector struct {
	m  *metrics
	st *storage.Storage
}

var bkDescs = struct {
	status, writableDirs, writeBytes, readBytes, ledgers, entries, writeCache, readCache, deleted *prometheus.Desc
	journalSync, journalAdd, add, addReq, read, readReq                                           *prometheus.Desc
}{
	status:       prometheus.NewDesc("bookie_SERVER_STATUS", "1 when the bookie is writable, 0 when read-only.", nil, nil),
	writableDirs: prometheus.NewDesc("bookie_ledger_writable_dirs", "Writable ledger directories.", nil, nil),
	writeBytes:   prometheus.NewDesc("bookie_WRITE_BYTES", "Entry bytes acknowledged.", nil, nil),
	readBytes:    prometheus.NewDesc("bookie_READ_BYTES", "Entry bytes read.", nil, nil),
	ledgers:      prometheus.NewDesc("bookie_ledgers_count", "Ledgers in the bookie's storage.", nil, nil),
	entries:      prometheus.NewDesc("bookie_entries_count", "Entries indexed in the bookie's storage.", nil, nil),
	writeCache:   prometheus.NewDesc("bookie_write_cache_size", "Bytes in the write cache.", nil, nil),
	readCache:    prometheus.NewDesc("bookie_read_cache_size", "Bytes in the read cache (the bookie has none).", nil, nil),
	deleted:      prometheus.NewDesc("bookie_DELETED_LEDGER_COUNT", "Ledgers garbage-collected since the start.", nil, nil),
	journalSync:  prometheus.NewDesc("bookie_journal_JOURNAL_SYNC", "Journal fsync latency (ms).", []string{"success"}, nil),
	journalAdd:   prometheus.NewDesc("bookie_journal_JOURNAL_ADD_ENTRY", "Add latency up to its journal fsync (ms).", []string{"success"}, nil),
	add:          prometheus.NewDesc("bookkeeper_server_ADD_ENTRY", "Add latency (ms).", []string{"success"}, nil),
	addReq:       prometheus.NewDesc("bookkeeper_server_ADD_ENTRY_REQUEST", "Add request latency (ms).", []string{"success"}, nil),
	read:         prometheus.NewDesc("bookkeeper_server_READ_ENTRY", "Read latency (ms).", []string{"success"}, nil),
	readReq:      prometheus.NewDesc("bookkeeper_server_READ_ENTRY_REQUEST", "Read request latency (ms).", []string{"success"}, nil),
}

// bkQuantiles are the quantiles BookKeeper's Prometheus provider reports.
var bkQuantiles = []float64{0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0}

// Describe implements prometheus.Collector.
func (c bkCollector) Describe(ch chan<- *prometheus.Desc) {
	d := bkDescs
	for _, x := range []*prometheus.Desc{d.status, d.writableDirs, d.writeBytes, d.readBytes, d.ledgers, d.entries, d.writeCache,
		d.readCache, d.deleted, d.journalSync, d.journalAdd, d.add, d.addReq, d.read, d.readReq} {
		ch <- x
	}
}

// Collect implements prometheus.Collector.
func (c bkCollector) Collect(ch chan<- prometheus.Metric) {
	d := bkDescs
	g := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
	}
	writable := 1 - metricValue(c.m.readOnly)
	g(d.status, writable)
	g(d.writableDirs, writable)
	ch <- prometheus.MustNewConstMetric(d.writeBytes, prometheus.CounterValue, metricValue(c.m.bytesAdded))
	ch <- prometheus.MustNewConstMetric(d.readBytes, prometheus.CounterValue, metricValue(c.m.readBytes))
	g(d.deleted, metricValue(c.m.gcDeleted))
	g(d.readCache, 0)
	if st := c.st.Stats(); st.State != storage.StateClosed {
		g(d.writeCache, float64(st.CacheBytes))
		g(d.entries, float64(st.LiveEntries))
		if ls, err := c.st.Ledgers(); err == nil {
			g(d.ledgers, float64(len(ls)))
		}
	}
	rejected := 0.0
	if mfs, err := gatherOne(c.m.addsRejected); err == nil {
		for _, m := range mfs {
			rejected += m.GetCounter().GetValue()
		}
	}
	adds, reads := histogramOf(c.m.addLatency), histogramOf(c.m.readLatency)
	ch <- adds.summary(d.journalAdd, "true")
	ch <- histogramOf(c.m.fsyncLatency).summary(d.journalSync, "true")
	for _, x := range []*prometheus.Desc{d.add, d.addReq} {
		ch <- adds.summary(x, "true")
		ch <- prometheus.MustNewConstSummary(x, uint64(rejected), 0, nil, "false")
	}
	for _, x := range []*prometheus.Desc{d.read, d.readReq} {
		ch <- reads.summary(x, "true")
	}
}

// metricValue returns a counter's or gauge's value.
func metricValue(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		return 0
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// gatherOne collects c's metrics.
func gatherOne(c prometheus.Collector) ([]*dto.Metric, error) {
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	var out []*dto.Metric
	var err error
	for m := range ch {
		var d dto.Metric
		if e := m.Write(&d); e != nil {
			err = e
			continue
		}
		out = append(out, &d)
	}
	return out, err
}

// latencyHist is a histogram's cumulative buckets (upper bounds in seconds).
type latencyHist struct {
	bounds []float64
	cum    []uint64
	count  uint64
	sum    float64
}

func histogramOf(h prometheus.Histogram) latencyHist {
	var d dto.Metric
	if err := h.Write(&d); err != nil || d.Histogram == nil {
		return latencyHist{}
	}
	out := latencyHist{count: d.Histogram.GetSampleCount(), sum: d.Histogram.GetSampleSum()}
	for _, b := range d.Histogram.GetBucket() {
		if !math.IsInf(b.GetUpperBound(), +1) {
			out.bounds = append(out.bounds, b.GetUpperBound())
			out.cum = append(out.cum, b.GetCumulativeCount())
		}
	}
	return out
}

// quantile estimates the q-quantile in seconds, interpolating linearly within the bucket
// the rank falls in (beyond the last finite bound: that bound), as PromQL's
// histogram_quantile does.
func (h latencyHist) quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	rank := q * float64(h.count)
	lo, loC := 0.0, 0.0
	for i, b := range h.bounds {
		c := float64(h.cum[i])
		if c >= rank {
			if c == loC {
				return b
			}
			return lo + (b-lo)*(rank-loC)/(c-loC)
		}
		lo, loC = b, c
	}
	return lo
}

// summary is h as BookKeeper's summary of desc, in milliseconds.
func (h latencyHist) summary(desc *prometheus.Desc, success string) prometheus.Metric {
	qs := make(map[float64]float64, len(bkQuantiles))
	for _, q := range bkQuantiles {
		qs[q] = h.quantile(q) * 1000
	}
	return prometheus.MustNewConstSummary(desc, h.count, h.sum*1000, qs, success)
}
