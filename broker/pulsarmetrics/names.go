package pulsarmetrics

import (
	"strings"
)

// brokerZeros are the names Pulsar writes with value 0 and the cluster label alone at the
// start of every scrape (NamespaceStatsAggregator.printDefaultBrokerStats), so a broker
// without topics still appears in the dashboards.
var brokerZeros = []string{
	"pulsar_topics_count", "pulsar_subscriptions_count", "pulsar_producers_count", "pulsar_consumers_count",
	"pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in", "pulsar_throughput_out",
	"pulsar_storage_size", "pulsar_storage_logical_size", "pulsar_storage_write_rate", "pulsar_storage_read_rate",
	"pulsar_msg_backlog",
}

// help is each name's help text: one per name, whatever its label set (a family has one).
var help = map[string]string{
	"pulsar_topics_count":                     "Topics loaded on this broker.",
	"pulsar_subscriptions_count":              "Subscriptions.",
	"pulsar_producers_count":                  "Producers connected.",
	"pulsar_consumers_count":                  "Consumers connected.",
	"pulsar_rate_in":                          "Messages published per second.",
	"pulsar_rate_out":                         "Messages dispatched per second.",
	"pulsar_throughput_in":                    "Bytes published per second.",
	"pulsar_throughput_out":                   "Bytes dispatched per second.",
	"pulsar_average_msg_size":                 "Average size of the messages published, in bytes.",
	"pulsar_storage_size":                     "Bytes of the topics' ledgers, replicas counted (times the write quorum).",
	"pulsar_storage_logical_size":             "Bytes of the topics' ledgers, one copy.",
	"pulsar_storage_backlog_size":             "Bytes not yet acknowledged by the slowest subscription (estimated).",
	"pulsar_storage_write_rate":               "Messages written to the managed ledger per second.",
	"pulsar_storage_read_rate":                "Messages read from the managed ledger per second.",
	"pulsar_storage_backlog_quota_limit":      "The destination_storage backlog quota in force, in bytes (-1: none).",
	"pulsar_storage_backlog_quota_limit_time": "The message_age backlog quota in force, in seconds (-1: none).",
	"pulsar_msg_backlog":                      "Entries not yet acknowledged, summed over the subscriptions.",
	"pulsar_publish_rate_limit_times":         "Times the publish rate started holding publishes.",
	"pulsar_in_bytes_total":                   "Bytes published since the topic was loaded.",
	"pulsar_in_messages_total":                "Messages published since the topic was loaded.",
	"pulsar_out_bytes_total":                  "Bytes dispatched since the subscription was loaded.",
	"pulsar_out_messages_total":               "Messages dispatched since the subscription was loaded.",
	"pulsar_consumer_msg_ack_rate":            "Acknowledgements per second.",

	"pulsar_subscription_back_log":                    "Entries of the subscription not yet acknowledged.",
	"pulsar_subscription_back_log_no_delayed":         "Backlog entries not held by delayed delivery.",
	"pulsar_subscription_delayed":                     "Messages held by delayed delivery.",
	"pulsar_subscription_msg_rate_redeliver":          "Messages redelivered per second.",
	"pulsar_subscription_unacked_messages":            "Messages dispatched and not yet acknowledged.",
	"pulsar_subscription_blocked_on_unacked_messages": "1 while the subscription is at its unacknowledged-message limit.",
	"pulsar_subscription_msg_rate_out":                "Messages dispatched per second.",
	"pulsar_subscription_msg_ack_rate":                "Acknowledgements per second.",
	"pulsar_subscription_msg_throughput_out":          "Bytes dispatched per second.",
	"pulsar_subscription_last_acked_timestamp":        "Last acknowledgement (Unix ms; 0: none).",
	"pulsar_subscription_last_consumed_timestamp":     "Last dispatch (Unix ms; 0: none).",
	"pulsar_subscription_msg_drop_rate":               "Messages dropped per second before this subscription read them (non-persistent topics).",
	"pulsar_subscription_consumers_count":             "Consumers of the subscription.",

	"pulsar_broker_topics_count":         "Topics loaded on this broker.",
	"pulsar_broker_subscriptions_count":  "Subscriptions of the broker's topics.",
	"pulsar_broker_producers_count":      "Producers connected to the broker's topics.",
	"pulsar_broker_consumers_count":      "Consumers connected to the broker's topics.",
	"pulsar_broker_rate_in":              "Messages published per second to the broker's topics.",
	"pulsar_broker_rate_out":             "Messages dispatched per second from the broker's topics.",
	"pulsar_broker_throughput_in":        "Bytes published per second to the broker's topics.",
	"pulsar_broker_throughput_out":       "Bytes dispatched per second from the broker's topics.",
	"pulsar_broker_storage_size":         "Bytes of the broker's topics' ledgers, replicas counted.",
	"pulsar_broker_storage_logical_size": "Bytes of the broker's topics' ledgers, one copy.",
	"pulsar_broker_storage_write_rate":   "Messages written to the managed ledgers per second.",
	"pulsar_broker_storage_read_rate":    "Messages read from the managed ledgers per second.",
	"pulsar_broker_msg_backlog":          "Entries not yet acknowledged, over the broker's subscriptions.",

	"pulsar_ml_count":                           "Managed ledgers open (persistent topics loaded).",
	"pulsar_ml_AddEntryBytesRate":               "Bytes added to the namespace's managed ledgers per second.",
	"pulsar_ml_AddEntryWithReplicasBytesRate":   "Bytes added per second, replicas counted.",
	"pulsar_ml_AddEntryMessagesRate":            "Messages added per second.",
	"pulsar_ml_ReadEntriesRate":                 "Messages read per second.",
	"pulsar_ml_ReadEntriesBytesRate":            "Bytes read per second.",
	"pulsar_ml_MarkDeleteRate":                  "Acknowledgements per second.",
	"pulsar_ml_NumberOfMessagesInBacklog":       "Entries not yet acknowledged, over every cursor.",
	"pulsar_ml_StoredMessagesSize":              "Bytes stored, replicas counted.",
	"pulsar_ml_AddEntryLatencyBuckets":          "Adds per second of the last stats period, by latency range in ms (quantile label; broker-wide).",
	"pulsar_ml_AddEntryLatencyBuckets_OVERFLOW": "Adds per second of the last stats period slower than 1 s (broker-wide).",

	"pulsar_replication_rate_in":            "Messages per second received from the remote cluster's replicator.",
	"pulsar_replication_rate_out":           "Messages per second replicated to the remote cluster.",
	"pulsar_replication_throughput_in":      "Bytes per second received from the remote cluster's replicator.",
	"pulsar_replication_throughput_out":     "Bytes per second replicated to the remote cluster.",
	"pulsar_replication_backlog":            "Entries of the replication cursors not yet replicated.",
	"pulsar_replication_connected_count":    "Replicators connected to the remote cluster.",
	"pulsar_replication_disconnected_count": "Replicators not connected to the remote cluster.",
	"pulsar_replication_rate_expired":       "Messages per second expired by the message TTL before replication.",
	"pulsar_replication_delay_in_seconds":   "Age in seconds of the oldest message read and not yet on the remote cluster (summed per namespace).",

	"pulsar_storage_write_latency_count":    "Entries written in the last stats period (broker-wide).",
	"pulsar_storage_write_latency_sum":      "Sum of their write latencies in microseconds (broker-wide).",
	"pulsar_storage_write_latency_overflow": "Entries of the last stats period written in more than 1 s (broker-wide).",
}

// helpOf returns name's help text.
func helpOf(name string) string {
	if h, ok := help[name]; ok {
		return h
	}
	if b, ok := strings.CutPrefix(name, "pulsar_storage_write_latency_le_"); ok {
		return "Entries of the last stats period written within " + strings.ReplaceAll(b, "_", ".") +
			" ms, above the next lower bound (broker-wide)."
	}
	return name
}

// isCounter reports whether name is exported as a counter (Pulsar's _total names); every
// other name is a gauge, as Pulsar declares them.
func isCounter(name string) bool { return strings.HasSuffix(name, "_total") }
