package broker

import "github.com/prometheus/client_golang/prometheus"

// metrics are the broker's connection-level metrics; topic metrics live in broker/topic.
type metrics struct {
	connections prometheus.Gauge
	malformed   *prometheus.CounterVec
	commands    *prometheus.CounterVec
	lookups     prometheus.Counter
	topicLoads  prometheus.Counter
	throttled   prometheus.Counter

	authFailures  prometheus.Counter
	authRefreshes prometheus.Counter

	backlogEvictions     prometheus.Counter // policyapply.go
	inactiveDeleted      prometheus.Counter
	subscriptionsExpired prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Name: "magnetar_broker_connections",
			Help: "Open client connections."}),
		malformed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_broker_bad_frames_total",
			Help: "Connections closed because of a malformed, oversized or unexpected frame, by reason."}, []string{"reason"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_broker_commands_total",
			Help: "Commands received, by type."}, []string{"type"}),
		lookups: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_lookups_total",
			Help: "Topic lookups answered."}),
		topicLoads: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_topic_loads_total",
			Help: "Topics loaded."}),
		throttled: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_publish_throttled_total",
			Help: "Times a connection stopped reading because of its pending-publish limit."}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_authentication_failures_total",
			Help: "Connections refused because their credentials did not verify (on CONNECT or refresh)."}),
		authRefreshes: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_authentication_refreshes_total",
			Help: "Expired credentials refreshed on a live connection (AUTH_CHALLENGE answered)."}),
	}
	m.backlogEvictions = prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_backlog_quota_evictions_total",
		Help: "Times consumer_backlog_eviction moved a subscription's cursor."})
	m.inactiveDeleted = prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_inactive_topics_deleted_total",
		Help: "Topics deleted by their inactive-topic policy."})
	m.subscriptionsExpired = prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_subscriptions_expired_total",
		Help: "Subscriptions deleted by their subscription expiration time."})
	reg.MustRegister(m.connections, m.malformed, m.commands, m.lookups, m.topicLoads, m.throttled, m.authFailures, m.authRefreshes,
		m.backlogEvictions, m.inactiveDeleted, m.subscriptionsExpired)
	return m
}
