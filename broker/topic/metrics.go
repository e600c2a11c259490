package topic

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the topics' Prometheus metrics (aggregated over all topics of a broker).
type Metrics struct {
	topics           prometheus.Gauge
	producers        prometheus.Gauge
	waitingProducers prometheus.Gauge
	subscriptions    prometheus.Gauge
	consumers        prometheus.Gauge
	pendingAdds      prometheus.Gauge
	msgsIn           prometheus.Counter
	bytesIn          prometheus.Counter
	msgsOut          prometheus.Counter
	bytesOut         prometheus.Counter
	redelivered      prometheus.Counter
	acks             prometheus.Counter
	duplicates       prometheus.Counter
	addErrors        prometheus.Counter
	readErrors       prometheus.Counter
	publishLatency   prometheus.Histogram
	abortedSkipped   prometheus.Counter
	txnBufferOpen    prometheus.Gauge
	// Policies (policy.go).
	publishRateLimited prometheus.Counter
	quotaBlocks        prometheus.Counter
	expired            prometheus.Counter
	// subscribeRateLimited counts the subscribes refused by the subscribe rate.
	subscribeRateLimited prometheus.Counter
}

// NewMetrics creates the metrics and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "magnetar_broker_" + name, Help: help})
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_" + name, Help: help})
	}
	m := &Metrics{
		topics:               g("topics", "Topics loaded."),
		producers:            g("producers", "Producers connected."),
		waitingProducers:     g("producers_waiting", "WaitForExclusive producers queued."),
		subscriptions:        g("subscriptions", "Subscriptions open."),
		consumers:            g("consumers", "Consumers connected."),
		pendingAdds:          g("pending_adds", "Publishes handed to the managed ledger and not completed."),
		msgsIn:               c("messages_in_total", "Messages stored."),
		bytesIn:              c("bytes_in_total", "Entry bytes stored."),
		msgsOut:              c("messages_out_total", "Messages dispatched to consumers."),
		bytesOut:             c("bytes_out_total", "Entry bytes dispatched to consumers."),
		redelivered:          c("messages_redelivered_total", "Messages dispatched again (redelivery count > 0)."),
		acks:                 c("acks_total", "Entries acknowledged."),
		duplicates:           c("duplicates_total", "Publishes recognised as duplicates and not stored again."),
		addErrors:            c("add_errors_total", "Publishes the managed ledger failed."),
		readErrors:           c("read_errors_total", "Cursor reads that failed."),
		abortedSkipped:       c("txn_aborted_entries_skipped_total", "Entries of aborted transactions filtered from reads (and acknowledged)."),
		txnBufferOpen:        g("txn_buffer_open", "Transactions not yet applied, over the topics' transaction buffers."),
		publishRateLimited:   c("publish_rate_limited_total", "Times a topic's publish rate started holding SENDs."),
		quotaBlocks:          c("backlog_quota_producer_blocks_total", "Times a backlog quota started refusing a topic's producers."),
		expired:              c("messages_expired_total", "Expiries (message TTL, message_age eviction, expire-messages) that moved a cursor."),
		subscribeRateLimited: c("subscribe_rate_limited_total", "Subscribes refused by a subscribe rate per consumer."),
		publishLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "magnetar_broker_publish_latency_seconds",
			Help:    "Time from handing a publish to the managed ledger to its completion.",
			Buckets: prometheus.ExponentialBuckets(100e-6, math.Sqrt2, 32)}), // 100µs .. ~4.6s, half-octaves
	}
	if reg != nil {
		reg.MustRegister(m.topics, m.producers, m.waitingProducers, m.subscriptions, m.consumers, m.pendingAdds,
			m.msgsIn, m.bytesIn, m.msgsOut, m.bytesOut, m.redelivered, m.acks, m.duplicates, m.addErrors,
			m.readErrors, m.publishLatency, m.abortedSkipped, m.txnBufferOpen, m.publishRateLimited, m.quotaBlocks,
			m.expired, m.subscribeRateLimited)
	}
	return m
}
