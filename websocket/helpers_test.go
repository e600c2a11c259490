package websocket_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	mws "github.com/magnetar-io/magnetar/websocket"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// etcd's client and embedded server keep a few process-wide goroutines.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
	)
}

// world is a broker (embedded etcd, in-memory logs) with the WebSocket service on an HTTP
// server in front of it.
type world struct {
	t      *testing.T
	broker *broker.Service
	ws     *mws.Service
	reg    *prometheus.Registry
	base   string // ws://host:port
}

// newWorld starts the broker (tweak may change its configuration) and the service (wsTweak
// may change its).
func newWorld(t *testing.T, tweak func(*broker.Config), wsTweak func(*mws.Config)) *world {
	t.Helper()
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	mem := topictest.NewStore()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := broker.Config{Store: store, Listen: "127.0.0.1:0", ID: "ws-broker", HTTPURL: "http://ws-broker", Logger: log,
		OpenLog: func(_ context.Context, name string) (topic.Log, error) { return mem.Open(name), nil }}
	if tweak != nil {
		tweak(&cfg)
	}
	svc, err := broker.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	w := &world{t: t, broker: svc, reg: prometheus.NewRegistry()}
	wc := mws.Config{ServiceURL: svc.Info().ServiceURL, Logger: log, Registerer: w.reg, OperationTimeout: 10 * time.Second}
	if wsTweak != nil {
		wsTweak(&wc)
	}
	w.ws, err = mws.New(wc)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.ws)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { w.ws.Close() }) // before srv.Close: it ends the sessions srv waits for
	w.base = "ws" + strings.TrimPrefix(srv.URL, "http")
	return w
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// dial opens a socket on path (with its query), failing the test on a refusal.
func (w *world) dial(ctx context.Context, path string, hdr http.Header) *websocket.Conn {
	w.t.Helper()
	c, resp, err := websocket.Dial(ctx, w.base+path, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		w.t.Fatalf("dial %s: %d %v", path, status, err)
	}
	c.SetReadLimit(8 << 20)
	w.t.Cleanup(func() { c.CloseNow() })
	return c
}

// refused dials path expecting a refused upgrade and returns its HTTP status.
func (w *world) refused(ctx context.Context, path string, hdr http.Header) int {
	w.t.Helper()
	c, resp, err := websocket.Dial(ctx, w.base+path, &websocket.DialOptions{HTTPHeader: hdr})
	if err == nil {
		c.CloseNow()
		w.t.Fatalf("dial %s: upgraded, want a refusal", path)
	}
	if resp == nil {
		w.t.Fatalf("dial %s: %v (no HTTP answer)", path, err)
	}
	return resp.StatusCode
}

func writeJSON(t *testing.T, ctx context.Context, c *websocket.Conn, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
}

func writeText(t *testing.T, ctx context.Context, c *websocket.Conn, s string) {
	t.Helper()
	if err := c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		t.Fatal(err)
	}
}

// readJSON reads the next frame into a generic map.
func readJSON(t *testing.T, ctx context.Context, c *websocket.Conn) map[string]any {
	t.Helper()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("frame %q: %v", b, err)
	}
	return m
}

// message is a frame pushed to a consumer or reader.
type message struct {
	MessageID       string            `json:"messageId"`
	Payload         string            `json:"payload"`
	Properties      map[string]string `json:"properties"`
	PublishTime     string            `json:"publishTime"`
	RedeliveryCount int               `json:"redeliveryCount"`
	Key             string            `json:"key"`
	EndOfTopic      *bool             `json:"endOfTopic"`
}

func readMessage(t *testing.T, ctx context.Context, c *websocket.Conn) message {
	t.Helper()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var m message
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("frame %q: %v", b, err)
	}
	return m
}

// ack is a producer's answer.
type ack struct {
	Result    string `json:"result"`
	ErrorMsg  string `json:"errorMsg"`
	MessageID string `json:"messageId"`
	Context   string `json:"context"`
}

func readAck(t *testing.T, ctx context.Context, c *websocket.Conn) ack {
	t.Helper()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var a ack
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("frame %q: %v", b, err)
	}
	return a
}

// produce publishes payloads through a producer socket and returns their message ids.
func (w *world) produce(ctx context.Context, path string, payloads ...string) []string {
	w.t.Helper()
	p := w.dial(ctx, path, nil)
	defer p.Close(websocket.StatusNormalClosure, "")
	ids := make([]string, len(payloads))
	for i, pl := range payloads {
		writeJSON(w.t, ctx, p, map[string]any{"payload": b64(pl), "context": pl})
		a := readAck(w.t, ctx, p)
		if a.Result != "ok" || a.Context != pl || a.MessageID == "" {
			w.t.Fatalf("produce %q: %+v", pl, a)
		}
		ids[i] = a.MessageID
	}
	return ids
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func unb64(t *testing.T, s string) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("payload %q: %v", s, err)
	}
	return string(b)
}

// counter reads a metric of the service's registry (the sum over series with the labels).
func (w *world) counter(name string, labels map[string]string) float64 {
	w.t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			if m.Counter != nil {
				sum += m.GetCounter().GetValue()
			}
			if m.Gauge != nil {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// waitFor polls cond until it holds (a deadline, no sleep as synchronisation).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, with a deadline
	}
}
