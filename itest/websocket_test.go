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
	// The HTTP port listens before the handlers are mounted: wait for the banner that follows.
	deadline := time.Now().Add(90 * time.Second)
	for !proc.LogContains("magnetar standalone is up") {
		if time.Now().After(deadline) || proc.Exited() {
			t.Fatal("standalone did not come up")
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dial := func(path string) *websocket.Conn {
		t.Helper()
		c, resp, err := websocket.Dial(ctx, "ws://"+web+path, nil)
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
	cons := dial("/ws/v2/consumer/persistent/public/default/ws-itest/sub")
	prod := dial("/ws/v2/producer/persistent/public/default/ws-itest")
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
	resp, err := http.Get("http://" + web + "/metrics")
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
}
