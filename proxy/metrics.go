package proxy

import "github.com/prometheus/client_golang/prometheus"

// metrics are the proxy's metrics, named as Pulsar's proxy names them where it has them.
type metrics struct {
	active   prometheus.Gauge
	newConns prometheus.Counter
	rejected prometheus.Counter
	direct   prometheus.Gauge
	bytes    *prometheus.CounterVec // direction: to_broker, to_client
	ops      *prometheus.CounterVec // type: the command the proxy answered
	failures *prometheus.CounterVec // type: as ops
	dialFail prometheus.Counter
	bad      *prometheus.CounterVec // reason
	authFail prometheus.Counter
	httpReqs *prometheus.CounterVec // code
}

const (
	toBroker = "to_broker"
	toClient = "to_client"
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pulsar_proxy_active_connections",
			Help: "Client connections open on the proxy (lookup and proxied)."}),
		newConns: prometheus.NewCounter(prometheus.CounterOpts{Name: "pulsar_proxy_new_connections",
			Help: "Client connections accepted."}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{Name: "pulsar_proxy_rejected_connections",
			Help: "Client connections refused (proxy closing or at its connection limit)."}),
		direct: prometheus.NewGauge(prometheus.GaugeOpts{Name: "magnetar_proxy_broker_connections",
			Help: "Client connections spliced to a broker."}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pulsar_proxy_binary_bytes",
			Help: "Bytes forwarded on spliced connections, by direction."}, []string{"direction"}),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_proxy_lookup_requests_total",
			Help: "Lookup and metadata requests answered by the proxy, by command."}, []string{"type"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_proxy_lookup_failures_total",
			Help: "Lookup and metadata requests the proxy answered with an error of its own (no broker answered), by command."},
			[]string{"type"}),
		dialFail: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_proxy_broker_connect_failures_total",
			Help: "Connections to brokers that failed (TCP or handshake)."}),
		bad: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_proxy_bad_frames_total",
			Help: "Client connections closed because of a malformed, oversized or unexpected frame, by reason."}, []string{"reason"}),
		authFail: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_proxy_authentication_failures_total",
			Help: "Client connections refused because their credentials did not verify."}),
		httpReqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_proxy_http_requests_total",
			Help: "Admin and lookup REST requests forwarded, by the status answered."}, []string{"code"}),
	}
	reg.MustRegister(m.active, m.newConns, m.rejected, m.direct, m.bytes, m.ops, m.failures, m.dialFail, m.bad, m.authFail, m.httpReqs)
	return m
}
