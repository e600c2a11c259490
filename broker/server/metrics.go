package server

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the connections' metrics.
type Metrics struct {
	Connections prometheus.Gauge
	// BadFrames counts connections closed because of what the client sent, by reason
	// (protocol, checksum, malformed, oversized).
	BadFrames *prometheus.CounterVec
	// Commands counts the commands received, by type.
	Commands  *prometheus.CounterVec
	Lookups   prometheus.Counter
	Throttled prometheus.Counter

	AuthFailures  prometheus.Counter
	AuthRefreshes prometheus.Counter
}

// NewMetrics returns the connections' metrics, registered with reg unless it is nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Connections: prometheus.NewGauge(prometheus.GaugeOpts{Name: "magnetar_broker_connections",
			Help: "Open client connections."}),
		BadFrames: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_broker_bad_frames_total",
			Help: "Connections closed because of a malformed, oversized or unexpected frame, by reason."}, []string{"reason"}),
		Commands: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_broker_commands_total",
			Help: "Commands received, by type."}, []string{"type"}),
		Lookups: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_lookups_total",
			Help: "Topic lookups answered."}),
		Throttled: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_publish_throttled_total",
			Help: "Times a connection's SENDs began to wait (parked) for its pending-publish limit."}),
		AuthFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_authentication_failures_total",
			Help: "Connections refused because their credentials did not verify (on CONNECT or refresh)."}),
		AuthRefreshes: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_authentication_refreshes_total",
			Help: "Expired credentials refreshed on a live connection (AUTH_CHALLENGE answered)."}),
	}
	if reg != nil {
		reg.MustRegister(m.Connections, m.BadFrames, m.Commands, m.Lookups, m.Throttled, m.AuthFailures, m.AuthRefreshes)
	}
	return m
}
