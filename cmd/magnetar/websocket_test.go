package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
)

// TestWebSocketFlags: standalone, broker and proxy take the WebSocket API's flags, on by
// default only in standalone (as Pulsar's webSocketServiceEnabled), and the Pulsar key turns
// it off from a config file.
func TestWebSocketFlags(t *testing.T) {
	for name, tc := range map[string]struct {
		c  *cobra.Command
		on string
	}{
		"standalone": {newStandaloneCmd(), "true"}, "broker": {newBrokerCmd(), "false"}, "proxy": {newProxyCmd(), "false"},
	} {
		for _, f := range []string{"websocket", "no-websocket", "websocket-max-text-frame-size"} {
			if tc.c.Flags().Lookup(f) == nil {
				t.Fatalf("%s has no --%s", name, f)
			}
		}
		if got := tc.c.Flags().Lookup("websocket").DefValue; got != tc.on {
			t.Errorf("%s: --websocket defaults to %s, want %s", name, got, tc.on)
		}
	}
	c := newStandaloneCmd()
	path := filepath.Join(t.TempDir(), "standalone.conf")
	if err := os.WriteFile(path, []byte("webSocketServiceEnabled=false\nwebSocketMaxTextFrameSize=2048\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := applyConfig(c, path, websocketKeys); err != nil {
		t.Fatal(err)
	}
	if on, frame := c.Flags().Lookup("websocket").Value.String(), c.Flags().Lookup("websocket-max-text-frame-size").Value.String(); on != "false" || frame != "2048" {
		t.Fatalf("from the config file: --websocket=%s --websocket-max-text-frame-size=%s", on, frame)
	}
}

// TestWebSocketMount: when on, /ws/ is the WebSocket API (a bad path gets its 400); off
// (--no-websocket wins over --websocket), nothing is mounted.
func TestWebSocketMount(t *testing.T) {
	for _, tc := range []struct {
		w    websocketFlags
		want int
	}{
		{websocketFlags{enabled: true}, http.StatusBadRequest},
		{websocketFlags{enabled: true, disabled: true}, http.StatusNotFound},
		{websocketFlags{}, http.StatusNotFound},
	} {
		mux := http.NewServeMux()
		closeWS, err := tc.w.mount(mux, "pulsar://127.0.0.1:1", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/ws/v2/producer/durable/public/default/t", nil))
		closeWS()
		if rec.Code != tc.want {
			t.Errorf("%+v: %d, want %d", tc.w, rec.Code, tc.want)
		}
	}
}
