package broker

import "github.com/prometheus/client_golang/prometheus"

// metrics are the broker's own metrics; the connections' live in broker/server
// (server.Metrics) and the topics' in broker/topic.
type metrics struct {
	topicLoads prometheus.Counter

	backlogEvictions     prometheus.Counter // policyapply.go
	inactiveDeleted      prometheus.Counter
	subscriptionsExpired prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		topicLoads: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_topic_loads_total",
			Help: "Topics loaded."}),
	}
	m.backlogEvictions = prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_backlog_quota_evictions_total",
		Help: "Times consumer_backlog_eviction moved a subscription's cursor."})
	m.inactiveDeleted = prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_inactive_topics_deleted_total",
		Help: "Topics deleted by their inactive-topic policy."})
	m.subscriptionsExpired = prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_subscriptions_expired_total",
		Help: "Subscriptions deleted by their subscription expiration time."})
	reg.MustRegister(m.topicLoads, m.backlogEvictions, m.inactiveDeleted, m.subscriptionsExpired)
	return m
}
