package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

// realBroker is an embedded etcd, one bookie and the broker, with the admin handler served
// on an httptest server (whose URL is the broker's HTTPURL).
type realBroker struct {
	svc    *broker.Service
	http   *httptest.Server
	client *pulsarclient.Client
}

func testLogger() *slog.Logger {
	if os.Getenv("MAGNETAR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func startRealBroker(t *testing.T) *realBroker {
	t.Helper()
	log := testLogger()
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bookie.Start(ctx, bookie.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Store: store, Logger: log,
		GCInterval: -1})
	if err != nil {
		t.Fatalf("bookie: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	rb := &realBroker{}
	var h http.Handler = http.NotFoundHandler()
	rb.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(rb.http.Close)
	svc, err := broker.Start(ctx, broker.Config{Store: store, Listen: "127.0.0.1:0", HTTPURL: rb.http.URL,
		Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, Logger: log})
	if err != nil {
		t.Fatalf("broker: %v", err)
	}
	t.Cleanup(func() { svc.Close() })
	rb.svc = svc
	h = Handler(svc, Options{Logger: log})
	rb.client, err = pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + svc.Addr().String(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rb.client.Close() })
	return rb
}

// get decodes a JSON answer of GET path into v, failing the test unless it is 200.
func (rb *realBroker) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(rb.http.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, b)
	}
}

// TestAdminOnRealBroker drives the admin API of a real broker (etcd, bookie, managed ledgers)
// while a client publishes and consumes: resources, stats that count what was published,
// backlog that follows skip and reset, terminate seen by the producer, deletes.
func TestAdminOnRealBroker(t *testing.T) {
	rb := startRealBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const p = "/admin/v2/persistent/acme/app"
	const topic = "persistent://acme/app/orders"
	runSteps(t, rb.http.URL, []step{
		{"GET", "/admin/v2/tenants", "", 200, `"public"`},
		{"GET", "/admin/v2/namespaces/public", "", 200, `"public/default"`},
		{"PUT", "/admin/v2/tenants/acme", `{"adminRoles":[],"allowedClusters":["standalone"]}`, 204, ""},
		{"PUT", "/admin/v2/tenants/acme", "", 409, "Tenant already exists"},
		{"PUT", "/admin/v2/namespaces/acme/app", "", 204, ""},
		{"PUT", "/admin/v2/namespaces/nope/app", "", 404, "Tenant does not exist"},
		{"PUT", p + "/orders", "", 204, ""},
		{"PUT", p + "/orders", "", 409, "This topic already exists"},
		{"GET", p, "", 200, `"` + topic + `"`},
		{"GET", p + "/nope/stats", "", 404, "Topic persistent://acme/app/nope not found"},
		{"PUT", p + "/orders/subscription/audit", `{"ledgerId":-1,"entryId":-1}`, 204, ""},
		{"PUT", p + "/orders/subscription/audit", "", 409, "Subscription already exists for topic"},
		{"GET", p + "/orders/subscriptions", "", 200, `["audit"]`},
	})

	prod, err := rb.client.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]pulsarclient.MessageID, 10)
	for i := range 10 {
		if ids[i], err = prod.Send(ctx, &pulsarclient.ProducerMessage{Payload: fmt.Appendf(nil, "order-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var st broker.TopicStats
	rb.get(t, p+"/orders/stats", &st)
	if st.MsgInCounter != 10 || len(st.Publishers) != 1 || st.Subscriptions["audit"].MsgBacklog != 10 {
		t.Fatalf("stats after 10 sends: in %d, publishers %d, backlog %d", st.MsgInCounter, len(st.Publishers),
			st.Subscriptions["audit"].MsgBacklog)
	}
	runSteps(t, rb.http.URL, []step{
		{"POST", p + "/orders/subscription/audit/skip/3", "", 204, ""},
	})
	rb.get(t, p+"/orders/stats", &st)
	if b := st.Subscriptions["audit"].MsgBacklog; b != 7 {
		t.Fatalf("backlog after skipping 3: %d", b)
	}
	runSteps(t, rb.http.URL, []step{
		{"POST", p + "/orders/subscription/audit/resetcursor/0", "", 204, ""},
	})
	rb.get(t, p+"/orders/stats", &st)
	if b := st.Subscriptions["audit"].MsgBacklog; b != 10 {
		t.Fatalf("backlog after reset to time 0: %d", b)
	}
	cons, err := rb.client.Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("order-%d", i); string(m.Payload) != want {
			t.Fatalf("message %d: %q", i, m.Payload)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	// Close first: it sends the grouped acknowledgements, which must not land after the reset.
	if err := cons.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Reset to a message id is inclusive; with isExcluded delivery starts after the message.
	expect := func(from, to int) {
		t.Helper()
		c, err := rb.client.Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "audit"})
		if err != nil {
			t.Fatal(err)
		}
		for i := from; i <= to; i++ {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("order-%d", i); string(m.Payload) != want {
				t.Fatalf("after reset: %q, want %q", m.Payload, want)
			}
			c.Ack(m)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	runSteps(t, rb.http.URL, []step{{"POST", p + "/orders/subscription/audit/resetcursor",
		fmt.Sprintf(`{"ledgerId":%d,"entryId":%d}`, ids[7].LedgerID, ids[7].EntryID), 204, ""}})
	expect(7, 9)
	runSteps(t, rb.http.URL, []step{{"POST", p + "/orders/subscription/audit/resetcursor",
		fmt.Sprintf(`{"ledgerId":%d,"entryId":%d,"isExcluded":true}`, ids[3].LedgerID, ids[3].EntryID), 204, ""}})
	expect(4, 9)
	var is broker.InternalStats
	rb.get(t, p+"/orders/internalStats", &is)
	if is.EntriesAddedCounter != 10 && is.NumberOfEntries != 10 {
		t.Fatalf("internal stats: %+v", is)
	}
	var last broker.MessageID
	rb.get(t, p+"/orders/lastMessageId", &last)
	var term broker.MessageID
	resp, err := http.Post(rb.http.URL+p+"/orders/terminate", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&term)
	resp.Body.Close()
	if resp.StatusCode != 200 || term.LedgerID != last.LedgerID || term.EntryID != last.EntryID {
		t.Fatalf("terminate: %d %+v, last message %+v", resp.StatusCode, term, last)
	}
	if _, err := prod.Send(ctx, &pulsarclient.ProducerMessage{Payload: []byte("late")}); err == nil ||
		!strings.Contains(err.Error(), "TopicTerminatedError") {
		t.Fatalf("send after terminate: %v", err)
	}
	prod.Close(ctx)

	runSteps(t, rb.http.URL, []step{
		{"DELETE", p + "/orders/subscription/audit", "", 204, ""},
		{"DELETE", p + "/orders/subscription/audit", "", 404, "Subscription audit not found"},
		{"PUT", p + "/parts/partitions", "3", 204, ""},
		{"GET", p + "/parts/partitions", "", 200, `{"partitions":3}`},
		{"GET", p + "/partitioned", "", 200, `"persistent://acme/app/parts"`},
	})
	pp, err := rb.client.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: "persistent://acme/app/parts", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		if _, err := pp.Send(ctx, &pulsarclient.ProducerMessage{Payload: []byte("x"), Key: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	pp.Close(ctx)
	var ps PartitionedTopicStats
	rb.get(t, p+"/parts/partitioned-stats?perPartition=true", &ps)
	if ps.MsgInCounter != 9 || ps.Metadata.Partitions != 3 || len(ps.Partitions) != 3 {
		t.Fatalf("partitioned stats: in %d, metadata %+v, %d partitions", ps.MsgInCounter, ps.Metadata, len(ps.Partitions))
	}
	runSteps(t, rb.http.URL, []step{
		{"POST", p + "/parts/partitions", "2", 422, ""},
		{"POST", p + "/parts/partitions", "4", 204, ""},
		{"DELETE", "/admin/v2/namespaces/acme/app", "", 409, "Cannot delete non empty namespace"},
		{"DELETE", p + "/parts/partitions?force=true", "", 204, ""},
		{"DELETE", p + "/orders?force=true", "", 204, ""},
		{"DELETE", p + "/orders", "", 404, "not found"},
		{"DELETE", "/admin/v2/namespaces/acme/app", "", 204, ""},
		{"DELETE", "/admin/v2/tenants/acme", "", 204, ""},
		{"GET", "/lookup/v2/topic/persistent/public/default/x", "", 200, `"brokerUrl":"pulsar://`},
		{"PUT", "/admin/v2/persistent/public/default/unload-me", "", 204, ""},
		{"PUT", "/admin/v2/persistent/public/default/unload-me/unload", "", 204, ""},
	})
}

// TestUnloadThenAdminCall: a request right after an unload (or a delete) answers from a
// freshly loaded topic, never with the closing one's "topic closed" 503: Unload and Delete return
// only once the topic goroutine has stopped and forgotten its entry.
func TestUnloadThenAdminCall(t *testing.T) {
	rb := startRealBroker(t)
	p := "/admin/v2/persistent/public/default/reload"
	runSteps(t, rb.http.URL, []step{{"PUT", p, "", 204, ""}})
	for i := range 20 {
		sub := fmt.Sprintf("s%d", i)
		runSteps(t, rb.http.URL, []step{
			{"PUT", p + "/subscription/" + sub, "", 204, ""},
			{"PUT", p + "/unload", "", 204, ""},
			{"DELETE", p + "/subscription/" + sub, "", 204, ""},
			{"PUT", p + "/unload", "", 204, ""},
			{"GET", p + "/subscriptions", "", 200, "[]"},
		})
	}
}

// The broker's Service implements every role interface of the admin layer.
var (
	_ Authorizer            = (*broker.Service)(nil)
	_ BrokersService        = (*broker.Service)(nil)
	_ LoadReporter          = (*broker.Service)(nil)
	_ CompactionService     = (*broker.Service)(nil)
	_ InspectService        = (*broker.Service)(nil)
	_ NonPersistentService  = (*broker.Service)(nil)
	_ PermissionService     = (*broker.Service)(nil)
	_ ClusterService        = (*broker.Service)(nil)
	_ ClusterAdminService   = (*broker.Service)(nil)
	_ ReplicationService    = (*broker.Service)(nil)
	_ PolicyService         = (*broker.Service)(nil)
	_ ScalableService       = (*broker.Service)(nil)
	_ SchemaService         = (*broker.Service)(nil)
	_ Service               = (*broker.Service)(nil)
	_ TxnService            = (*broker.Service)(nil)
	_ PartitionStatsService = (*broker.Service)(nil)
)
