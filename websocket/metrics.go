package websocket

import (
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the service's Prometheus metrics.
type metrics struct {
	// sessions: open sockets by kind (producer, consumer, reader, pingpong).
	sessions *prometheus.GaugeVec
	// messagesIn: messages received from producer sockets and published; messagesOut:
	// messages written to consumer and reader sockets.
	messagesIn, messagesOut *prometheus.CounterVec
	// errors: refused upgrades and socket errors by reason.
	errors *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "magnetar_websocket_sessions",
			Help: "Open WebSocket API sockets, by kind (producer, consumer, reader, pingpong)."}, []string{"kind"}),
		messagesIn: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_websocket_messages_in_total",
			Help: "Messages received from WebSocket producer sockets and acknowledged by the broker."}, []string{"kind"}),
		messagesOut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_websocket_messages_out_total",
			Help: "Messages written to WebSocket consumer and reader sockets."}, []string{"kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_websocket_errors_total",
			Help: "WebSocket API failures: refused upgrades (bad_request, authentication, authorization, create, closing), " +
				"bad frames (frame), failed sends (send) and failed handshakes (handshake)."}, []string{"reason"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.sessions, err = register(reg, m.sessions); err != nil {
		return nil, err
	}
	if m.messagesIn, err = register(reg, m.messagesIn); err != nil {
		return nil, err
	}
	if m.messagesOut, err = register(reg, m.messagesOut); err != nil {
		return nil, err
	}
	if m.errors, err = register(reg, m.errors); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector registered before it (several services
// on one registry share their metrics).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if old, ok := are.ExistingCollector.(C); ok {
			return old, nil
		}
	}
	return c, err
}

// readerSubscription names a reader's subscription as Pulsar's readers do (reader-<hex>).
func readerSubscription() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "reader-" + hex.EncodeToString(b[:])
}
