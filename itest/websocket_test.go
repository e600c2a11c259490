package itest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestWebSocketOnStandalone: the real `magnetar standalone` serves Pulsar's WebSocket API
// on its HTTP port by default: a consumer socket receives, in order, what a producer socket
// publishes, and the broker's /metrics counts the open sockets and the messages.
func TestWebSocketOnStandalone(t *testing.T) {
	etcd, bk, broker, web := FreeAddr(t), FreeAddr(t), FreeAddr(t), FreeAddr(t)
	proc := Start(t, "standalone", "standalone", "--data-dir", t.TempDir(),
		"--etcd-listen", etcd, "--bookie-listen", bk, "--broker-listen", broker, "--http", web)
	waitUp(t, proc, "magnetar standalone is up")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wsExchange(t, ctx, "ws://"+web, "ws-itest")
	wsMetrics(t, "http://"+web)
}

// TestWebSocketOnProxy: `magnetar proxy --websocket` serves the WebSocket API in front of a
// standalone: the sockets' producer and consumer reach the broker through the proxy's own
// listener, and the proxy's /metrics shows both its own metrics and the WebSocket API's.
func TestWebSocketOnProxy(t *testing.T) {
	etcd, bk, broker, web := FreeAddr(t), FreeAddr(t), FreeAddr(t), FreeAddr(t)
	sa := Start(t, "standalone", "standalone", "--data-dir", t.TempDir(), "--no-websocket",
		"--etcd-listen", etcd, "--bookie-listen", bk, "--broker-listen", broker, "--http", web)
	waitUp(t, sa, "magnetar standalone is up")
	plisten, pweb := FreeAddr(t), FreeAddr(t)
	px := Start(t, "proxy", "proxy", "--broker-service-url", "pulsar://"+broker, "--broker-web-service-url", "http://"+web,
		"--listen", plisten, "--http", pweb, "--websocket")
	waitUp(t, px, "proxy serving")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if c, resp, err := websocket.Dial(ctx, "ws://"+web+"/ws/v2/producer/persistent/public/default/t", nil); err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		if c != nil {
			c.CloseNow()
		}
		t.Fatalf("standalone --no-websocket: %v %v, want 404", resp, err)
	}
	wsExchange(t, ctx, "ws://"+pweb, "ws-proxy")
	if body := wsMetrics(t, "http://"+pweb); !strings.Contains(body, "pulsar_proxy_active_connections") {
		t.Error("the proxy's /metrics lacks its own metrics")
	}
}

// waitUp waits for the line a process prints once it serves (its HTTP port listens before
// the handlers are mounted).
func waitUp(t *testing.T, p *Proc, banner string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !p.LogContains(banner) {
		if time.Now().After(deadline) || p.Exited() {
			t.Fatalf("never printed %q", banner)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
}

// wsExchange publishes 20 messages through a producer socket at base and receives and
// acknowledges them, in order, through a consumer socket.
func wsExchange(t *testing.T, ctx context.Context, base, topic string) {
	t.Helper()
	dial := func(path string) *websocket.Conn {
		t.Helper()
		c, resp, err := websocket.Dial(ctx, base+path, nil)
		if err != nil {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			t.Fatalf("dial %s: %d %v", path, status, err)
		}
		t.Cleanup(func() { c.CloseNow() })
		return c
	}
	cons := dial("/ws/v2/consumer/persistent/public/default/" + topic + "/sub")
	prod := dial("/ws/v2/producer/persistent/public/default/" + topic)
	const n = 20
	for i := range n {
		b, _ := json.Marshal(map[string]any{"payload": base64.StdEncoding.EncodeToString([]byte(fmt.Sprint("m", i))),
			"context": fmt.Sprint(i)})
		if err := prod.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
		_, ack, err := prod.Read(ctx)
		if err != nil || !strings.Contains(string(ack), `"result":"ok"`) {
			t.Fatalf("receipt %d: %s %v", i, ack, err)
		}
	}
	for i := range n {
		_, b, err := cons.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ MessageID, Payload string }
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if p, _ := base64.StdEncoding.DecodeString(m.Payload); string(p) != fmt.Sprint("m", i) {
			t.Fatalf("message %d: %q", i, p)
		}
		ack, _ := json.Marshal(map[string]string{"messageId": m.MessageID})
		if err := cons.Write(ctx, websocket.MessageText, ack); err != nil {
			t.Fatal(err)
		}
	}
}

// wsMetrics checks the WebSocket API's metrics after wsExchange (both sockets still open)
// and returns the /metrics text.
func wsMetrics(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`magnetar_websocket_sessions{kind="consumer"} 1`, `magnetar_websocket_sessions{kind="producer"} 1`,
		`magnetar_websocket_messages_in_total{kind="producer"} 20`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	return string(body)
}
