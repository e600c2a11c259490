package main

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/config"
	"github.com/magnetar-io/magnetar/websocket"
)

// websocketFlags are the settings of Pulsar's WebSocket API (package websocket) on the
// broker's, standalone's and proxy's HTTP ports.
type websocketFlags struct {
	enabled, disabled bool
	maxFrame          int64
}

// add registers the flags; on is the command's default (Pulsar: off on brokers and proxies,
// on in standalone).
func (w *websocketFlags) add(f *pflag.FlagSet, on bool) {
	f.BoolVar(&w.enabled, "websocket", on, "serve Pulsar's WebSocket API under /ws/ on the HTTP ports (webSocketServiceEnabled)")
	f.BoolVar(&w.disabled, "no-websocket", false, "do not serve the WebSocket API (overrides --websocket and webSocketServiceEnabled)")
	f.Int64Var(&w.maxFrame, "websocket-max-text-frame-size", 1<<20, "largest WebSocket message accepted, bytes (webSocketMaxTextFrameSize)")
}

// websocketKeys are the Pulsar keys of websocketFlags.
var websocketKeys = []config.Key{
	{Name: "webSocketServiceEnabled", Flag: "websocket"},
	{Name: "webSocketMaxTextFrameSize", Flag: "websocket-max-text-frame-size"},
}

// mount serves the WebSocket API on mux's /ws/ when it is on, as a client of the Pulsar
// listener at serviceURL (the broker's own, or the proxy's) authenticating its clients with
// authn; its metrics go to reg (nil: none). The returned function closes it: call it before
// the broker or proxy closes.
func (w *websocketFlags) mount(mux *http.ServeMux, serviceURL string, authn *auth.Service, reg prometheus.Registerer) (func(), error) {
	if !w.enabled || w.disabled {
		return func() {}, nil
	}
	if serviceURL == "" {
		slog.Warn("websocket: not served: it needs a plain pulsar:// listener to connect to")
		return func() {}, nil
	}
	svc, err := websocket.New(websocket.Config{ServiceURL: serviceURL, Auth: authn, MaxTextFrameSize: w.maxFrame,
		Logger: slog.Default(), Registerer: reg})
	if err != nil {
		return nil, err
	}
	mux.Handle("/ws/", svc)
	return func() { svc.Close() }, nil
}
