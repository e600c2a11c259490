package interop

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/coder/websocket"

	mws "github.com/magnetar-io/magnetar/websocket"
)

// wsCluster is a one-broker cluster (in-memory logs) with Magnetar's WebSocket API served
// in front of it; base is its ws:// URL and http the server (whose mux tests may extend).
type wsCluster struct {
	*cluster
	ws   *mws.Service
	srv  *httptest.Server
	base string
}

func newWSCluster(t *testing.T, page http.Handler) *wsCluster {
	t.Helper()
	c := newCluster(t, clusterOpts{memLog: true})
	ws, err := mws.New(mws.Config{ServiceURL: c.url, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ws/", ws)
	if page != nil {
		mux.Handle("/", page)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { ws.Close() }) // first: it ends the sessions srv.Close waits for
	return &wsCluster{cluster: c, ws: ws, srv: srv, base: "ws" + strings.TrimPrefix(srv.URL, "http")}
}

// wsDial opens a WebSocket API socket.
func wsDial(t *testing.T, base, path string) *websocket.Conn {
	t.Helper()
	c, resp, err := websocket.Dial(ctxT(t, time.Minute), base+path, nil)
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

// TestWebSocketToGoClient: what a WebSocket producer publishes (payloads, properties, keys,
// event times) a pulsar-client-go consumer receives unchanged and in order, and the message
// ids the producer socket returns (base64 MessageIdData) deserialize with pulsar-client-go
// to the ids its consumer sees. The other way round, batches a pulsar-client-go producer
// publishes reach a WebSocket consumer message by message, and acknowledging each through
// the socket acknowledges the batches: a new consumer of the subscription gets nothing.
func TestWebSocketToGoClient(t *testing.T) {
	wc := newWSCluster(t, nil)
	ctx := ctxT(t, 2*time.Minute)
	cl := newClient(t, wc.url)
	const topic = "persistent://public/default/ws-interop"
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "go"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod := wsDial(t, wc.base, "/ws/v2/producer/persistent/public/default/ws-interop")
	const n = 500
	eventTime := time.UnixMilli(1700000000123)
	ids := make([]string, n)
	for i := range n {
		b, _ := json.Marshal(map[string]any{"payload": base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("ws-%d", i))),
			"properties": map[string]string{"n": fmt.Sprint(i)}, "key": fmt.Sprintf("key-%d", i%7),
			"eventTime": eventTime.Format("2006-01-02T15:04:05.000Z07:00"), "context": fmt.Sprint(i)})
		if err := prod.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
		_, ab, err := prod.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var a struct{ Result, MessageID, Context string }
		if err := json.Unmarshal(ab, &a); err != nil || a.Result != "ok" || a.Context != fmt.Sprint(i) {
			t.Fatalf("receipt %d: %s", i, ab)
		}
		ids[i] = a.MessageID
	}
	for i := range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload()) != fmt.Sprintf("ws-%d", i) || m.Properties()["n"] != fmt.Sprint(i) ||
			m.Key() != fmt.Sprintf("key-%d", i%7) || !m.EventTime().Equal(eventTime) {
			t.Fatalf("message %d: %q %v key %q event time %v", i, m.Payload(), m.Properties(), m.Key(), m.EventTime())
		}
		raw, err := base64.StdEncoding.DecodeString(ids[i])
		if err != nil {
			t.Fatal(err)
		}
		id, err := pulsar.DeserializeMessageID(raw)
		if err != nil {
			t.Fatalf("message id %d does not deserialize: %v", i, err)
		}
		// (The Go client numbers a non-partitioned topic's partition 0, Pulsar's ids -1.)
		if id.LedgerID() != m.ID().LedgerID() || id.EntryID() != m.ID().EntryID() {
			t.Fatalf("message %d: socket's id %v, Go client's %v", i, id, m.ID())
		}
		cons.Ack(m)
	}

	// pulsar-client-go batches → a WebSocket consumer.
	const batched = "persistent://public/default/ws-batches"
	wsCons := wsDial(t, wc.base, "/ws/v2/consumer/persistent/public/default/ws-batches/sub?subscriptionType=Shared")
	gp, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: batched, BatchingMaxMessages: 10,
		BatchingMaxPublishDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer gp.Close()
	done := make(chan error, n)
	for i := range n {
		gp.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("go-%d", i))},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { done <- err })
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	batchIndexes := 0
	for i := range n {
		_, b, err := wsCons.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ MessageID, Payload string }
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if p, _ := base64.StdEncoding.DecodeString(m.Payload); string(p) != fmt.Sprintf("go-%d", i) {
			t.Fatalf("batched message %d: %q", i, p)
		}
		raw, _ := base64.StdEncoding.DecodeString(m.MessageID)
		id, err := pulsar.DeserializeMessageID(raw)
		if err != nil {
			t.Fatal(err)
		}
		if id.BatchIdx() > 0 {
			batchIndexes++
		}
		ack, _ := json.Marshal(map[string]string{"messageId": m.MessageID})
		if err := wsCons.Write(ctx, websocket.MessageText, ack); err != nil {
			t.Fatal(err)
		}
	}
	if batchIndexes == 0 {
		t.Fatal("no message came in a batch: the test did not exercise batches")
	}
	wsCons.Close(websocket.StatusNormalClosure, "")
	// The acknowledgements reached the broker: another consumer of the (Shared) subscription
	// gets a later message first, not a redelivery (the socket's consumer flushes its
	// acknowledgements before it closes).
	again, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: batched, SubscriptionName: "sub", Type: pulsar.Shared})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if _, err := gp.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	m, err := again.Receive(ctx)
	if err != nil || string(m.Payload()) != "after" {
		t.Fatalf("after the socket's acknowledgements: %v %v", m, err)
	}
}
