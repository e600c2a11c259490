package topicreg

import "github.com/prometheus/client_golang/prometheus"

// metrics are the registry's (the topics' own are topic.Metrics).
type metrics struct {
	topicLoads           prometheus.Counter
	backlogEvictions     prometheus.Counter // policyapply.go
	inactiveDeleted      prometheus.Counter
	subscriptionsExpired prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) metrics {
	c := func(name, help string) prometheus.Counter {
		ctr := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		reg.MustRegister(ctr)
		return ctr
	}
	return metrics{
		topicLoads:       c("magnetar_broker_topic_loads_total", "Topics loaded."),
		backlogEvictions: c("magnetar_broker_backlog_quota_evictions_total", "Times consumer_backlog_eviction moved a subscription's cursor."),
		inactiveDeleted:  c("magnetar_broker_inactive_topics_deleted_total", "Topics deleted by their inactive-topic policy."),
		subscriptionsExpired: c("magnetar_broker_subscriptions_expired_total",
			"Subscriptions deleted by their subscription expiration time."),
	}
}
