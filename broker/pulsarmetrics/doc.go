// Package pulsarmetrics exports the broker's statistics under Apache Pulsar's Prometheus
// metric names and labels (pulsar_rate_in, pulsar_msg_backlog, pulsar_subscription_back_log,
// pulsar_storage_write_latency_le_*, pulsar_ml_*, …), beside Magnetar's own magnetar_*
// metrics, so the Grafana dashboards and alert rules made for Pulsar work unchanged.
//
// A Collector computes every sample when it is scraped, from the statistics the topic
// registry already keeps (api.TopicStats of each loaded topic, read through Source) and
// from the broker's publish-latency histogram (read through a Tap): nothing is counted on
// the data path for it.
//
// # Usage
//
//	tap := pulsarmetrics.NewTap(reg, pulsarmetrics.PublishLatencyName)
//	tm := topic.NewMetrics(tap) // registers on reg; the tap keeps the latency histogram
//	…
//	reg.MustRegister(pulsarmetrics.New(pulsarmetrics.Config{Cluster: "c1", Source: registry, Latency: tap}))
//
// Caller obligations:
//  1. Source must be safe for concurrent use: scrapes may overlap.
//  2. Register the Collector once per registry. It is an unchecked collector (Describe
//     sends nothing), because Pulsar emits one name with several label sets (a broker-wide
//     zero, then per topic or per namespace); no other collector of the registry may emit
//     the names it emits (pulsar_storage_offloaded_size and
//     pulsar_replicated_subscriptions_pending_snapshots are left to the parts that already
//     export them).
//
// # What is exported, and how it maps
//
// Labels follow Pulsar's NamespaceStatsAggregator: cluster everywhere; namespace
// ("tenant/ns") and topic (the full name, "persistent://tenant/ns/t") on topic metrics;
// subscription on subscription metrics. Every scrape first writes Pulsar's broker-wide
// zeros (labelled cluster only), so a broker without topics still shows in the dashboards.
//
// With Config.NamespaceLevel false (Pulsar's exposeTopicLevelMetricsInPrometheus=true, the
// default) each loaded topic has pulsar_{subscriptions,producers,consumers}_count,
// pulsar_rate_{in,out}, pulsar_throughput_{in,out}, pulsar_average_msg_size,
// pulsar_storage_{size,logical_size,backlog_size,write_rate,read_rate},
// pulsar_storage_backlog_quota_limit(_time), pulsar_msg_backlog,
// pulsar_publish_rate_limit_times, pulsar_in_{bytes,messages}_total, and per subscription
// pulsar_subscription_* and pulsar_out_{bytes,messages}_total; pulsar_topics_count is per
// namespace. With NamespaceLevel true the same names are summed per namespace (labels
// cluster and namespace; pulsar_msg_backlog also carries remote_cluster="local", and
// pulsar_out_*_total and pulsar_consumer_msg_ack_rate are per namespace), as Pulsar does
// when exposeTopicLevelMetricsInPrometheus=false.
//
// The replication metrics (replication.go) come from each topic's replication section, one
// label set per remote cluster (remote_cluster): pulsar_replication_{rate_in,rate_out,
// throughput_in,throughput_out,backlog,connected_count,disconnected_count,rate_expired,
// delay_in_seconds}, per topic, or with NamespaceLevel summed per namespace as Pulsar does
// (the connected and disconnected counts count replicators; the delay is summed too).
//
// The broker's sums, pulsar_broker_{topics,subscriptions,producers,consumers}_count,
// pulsar_broker_rate_{in,out}, pulsar_broker_throughput_{in,out},
// pulsar_broker_storage_{size,logical_size,write_rate,read_rate} and
// pulsar_broker_msg_backlog, are labelled cluster only, in both modes.
//
// The managed-ledger family pulsar_ml_* (AddEntryBytesRate, AddEntryWithReplicasBytesRate,
// AddEntryMessagesRate, ReadEntriesRate, ReadEntriesBytesRate, MarkDeleteRate,
// NumberOfMessagesInBacklog, StoredMessagesSize) is summed per managed-ledger namespace,
// which Pulsar names "tenant/ns/persistent"; pulsar_ml_count counts the persistent topics.
//
// Figures Magnetar measures differently from Pulsar:
//   - pulsar_storage_size and pulsar_ml_StoredMessagesSize count the replicas (the ledgers'
//     bytes times the topic's write quorum), pulsar_storage_logical_size does not, as in
//     Pulsar.
//   - The managed-ledger rates (pulsar_storage_write_rate, pulsar_storage_read_rate,
//     pulsar_ml_AddEntryMessagesRate, pulsar_ml_ReadEntriesRate) are the topic's message
//     rates in and out: Pulsar's count entries (batches), which equal messages without
//     batching. pulsar_ml_MarkDeleteRate is the subscriptions' acknowledgement rate.
//   - The latency distributions are broker-wide (label cluster only): Magnetar keeps one
//     publish-latency histogram (magnetar_broker_publish_latency_seconds, from handing an
//     entry to the managed ledger to its completion, which is what Pulsar's storage write
//     latency measures), not one per topic. pulsar_storage_write_latency_le_* (and
//     _overflow, _count, _sum in microseconds) and pulsar_ml_AddEntryLatencyBuckets
//     (quantile labels "0.0_0.5" … "200.0_1000.0", per second) are, as in Pulsar, the
//     entries of the last stats period (Config.StatsPeriod, Pulsar's
//     statsUpdateFrequencyInSecs, 60 s), counted between Pulsar's bounds (0.5, 1, 5, 10,
//     20, 50, 100, 200, 1000 ms). Those bounds fall inside the histogram's half-octave
//     buckets: the count at a bound is interpolated linearly within its bucket.
//   - Not exported: the entry size distribution (pulsar_entry_size_*) and the bookie-client
//     latency (pulsar_storage_ledger_write_latency_*), which Magnetar does not measure;
//     pulsar_ml_cache_* (the managed ledger's tail cache keeps no hit counters); consumer
//     and producer level metrics (off by default in Pulsar too); compaction and
//     transaction-buffer metrics.
//
// # Concurrency
//
// A Collector is safe for concurrent use. It starts no goroutine: Collect reads the topics'
// statistics on the scraping goroutine, bounded by Config.ScrapeTimeout. Reading a topic's
// statistics (topic.Topic.Stats, as the admin stats do) opens its durable subscriptions
// that are not open yet, so the first scrape after a topic loads opens all of them.
package pulsarmetrics
