package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topicreg"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/offload"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

var _ OffloadService = (*broker.Service)(nil)

// startOffloadBroker is startRealBroker with an in-memory object store behind the broker's
// offloader and ledgers of 5 entries.
func startOffloadBroker(t *testing.T) *realBroker {
	t.Helper()
	log := testLogger()
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bookie.Start(ctx, bookie.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Store: store, Logger: log, GCInterval: -1})
	if err != nil {
		t.Fatalf("bookie: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	off, err := offload.New(memblob.OpenBucket(nil), offload.Options{MaxBlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { off.Close() })
	rb := &realBroker{}
	var h http.Handler = http.NotFoundHandler()
	rb.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(rb.http.Close)
	pol := mledger.DefaultOffloadPolicy() // offload on request; bookie copies kept 4 h
	svc, err := broker.Start(ctx, broker.Config{Store: store, Listen: "127.0.0.1:0", HTTPURL: rb.http.URL,
		Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, Logger: log,
		ManagedLedger: mledger.Config{MaxEntriesPerLedger: 5, RetentionTime: -1, RetentionSize: -1, Offload: &pol},
		Offloader:     offload.NewManagedLedgerPort(off, offload.DriverFilesystem)})
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

// TestOffloadPolicyPaths: the namespace and topic offload policies under Pulsar's paths, with
// Pulsar's defaults for unset values and 400 for what it refuses.
func TestOffloadPolicyPaths(t *testing.T) {
	rb := startRealBroker(t)
	const ns = "/admin/v2/namespaces/public/default"
	const tp = "/admin/v2/persistent/public/default/x"
	runSteps(t, rb.http.URL, []step{
		{"GET", ns + "/offloadThreshold", "", 200, "-1"},
		{"PUT", ns + "/offloadThreshold", "-2", 400, "offloadThreshold"},
		{"PUT", ns + "/offloadThreshold", "1048576", 204, ""},
		{"GET", ns + "/offloadThreshold", "", 200, "1048576"},
		{"GET", ns + "/offloadThresholdInSeconds", "", 200, "-1"},
		{"PUT", ns + "/offloadThresholdInSeconds", "-60", 400, "Invalid value for offloadThresholdInSecond"},
		{"PUT", ns + "/offloadThresholdInSeconds", "0", 204, ""},
		{"GET", ns + "/offloadThresholdInSeconds", "", 200, "0"},
		{"GET", ns + "/offloadDeletionLagMs", "", 204, ""},
		{"PUT", ns + "/offloadDeletionLagMs", "1000", 204, ""},
		{"GET", ns + "/offloadDeletionLagMs", "", 200, "1000"},
		{"DELETE", ns + "/offloadDeletionLagMs", "", 204, ""},
		{"GET", ns + "/offloadDeletionLagMs", "", 204, ""},
		{"GET", ns + "/offloadPolicies", "", 204, ""},
		{"POST", ns + "/offloadPolicies", `{"managedLedgerOffloadDriver":"aws-s3","managedLedgerOffloadThresholdInBytes":77}`, 204, ""},
		{"GET", ns + "/offloadPolicies", "", 200, `"managedLedgerOffloadDriver":"aws-s3"`},
		{"POST", ns + "/offloadPolicies", `{"managedLedgerOffloadedReadPriority":"sideways"}`, 400, "managedLedgerOffloadedReadPriority"},
		{"DELETE", ns + "/removeOffloadPolicies", "", 204, ""},
		{"GET", ns + "/offloadPolicies", "", 204, ""},
		{"PUT", tp, "", 204, ""},
		{"GET", tp + "/offloadPolicies", "", 204, ""},
		{"POST", tp + "/offloadPolicies", `{"managedLedgerOffloadDeletionLagInMillis":0}`, 204, ""},
		{"GET", tp + "/offloadPolicies", "", 200, `"managedLedgerOffloadDeletionLagInMillis":0`},
		// Applied: merged with the namespace's threshold (1048576) and the broker's read priority.
		{"GET", tp + "/offloadPolicies?applied=true", "", 200, `"managedLedgerOffloadThresholdInBytes":1048576`},
		{"DELETE", tp + "/offloadPolicies", "", 204, ""},
		{"GET", tp + "/offloadPolicies", "", 204, ""},
		// Without an offloader the trigger is refused; the status is NOT_RUN.
		{"GET", tp + "/offload", "", 200, `"status":"NOT_RUN"`},
		{"PUT", tp + "/offload", `{"ledgerId":1,"entryId":0}`, 412, "managedLedgerOffloadDriver"},
		{"PUT", tp + "/offload", ``, 400, "MessageId"},
	})
}

// TestOffloadTriggerAndStatus: PUT …/offload up to the last message offloads every closed
// ledger before it; GET …/offload follows it to SUCCESS; internal stats show the offloaded
// ledgers; every message still reads back, in order.
func TestOffloadTriggerAndStatus(t *testing.T) {
	rb := startOffloadBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "persistent://public/default/tiered"
	const tp = "/admin/v2/persistent/public/default/tiered"
	prod, err := rb.client.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 23
	var last pulsarclient.MessageID
	for i := range n {
		if last, err = prod.Send(ctx, &pulsarclient.ProducerMessage{Payload: fmt.Appendf(nil, "m-%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var st topicreg.OffloadProcessStatus
	rb.get(t, tp+"/offload", &st)
	if st.Status != "NOT_RUN" {
		t.Fatalf("before: %+v", st)
	}
	body, _ := json.Marshal(map[string]int64{"ledgerId": last.LedgerID, "entryId": last.EntryID})
	runSteps(t, rb.http.URL, []step{{"PUT", tp + "/offload", string(body), 204, ""}})
	deadline := time.Now().Add(30 * time.Second)
	for st.Status != "SUCCESS" {
		if time.Now().After(deadline) || st.Status == "ERROR" {
			t.Fatalf("offload did not succeed: %+v", st)
		}
		rb.get(t, tp+"/offload", &st)
	}
	if st.FirstUnoffloadedMessage.LedgerID != last.LedgerID {
		t.Fatalf("first unoffloaded %+v, want ledger %d (the last message's)", st.FirstUnoffloadedMessage, last.LedgerID)
	}
	var is broker.InternalStats
	rb.get(t, tp+"/internalStats", &is)
	offloaded := 0
	for _, l := range is.Ledgers {
		if l.Offloaded {
			offloaded++
			if l.LedgerID >= last.LedgerID {
				t.Fatalf("ledger %d at or after the trigger's is offloaded", l.LedgerID)
			}
		}
	}
	if offloaded < 4 { // 23 entries in ledgers of 5: at least 4 closed before the last one
		t.Fatalf("%d ledgers offloaded: %+v", offloaded, is.Ledgers)
	}
	var info topicreg.ManagedLedgerInfo
	rb.get(t, tp+"/internal-info", &info)
	uuids := map[string]bool{}
	for _, l := range info.Ledgers {
		if l.IsOffloaded != (l.LedgerID < last.LedgerID) || l.IsOffloaded != (l.OffloadedContextUUID != "") {
			t.Fatalf("internal-info ledger %+v (trigger at ledger %d)", l, last.LedgerID)
		}
		if l.IsOffloaded {
			uuids[l.OffloadedContextUUID] = true
		}
	}
	if len(uuids) != offloaded {
		t.Fatalf("%d distinct offload uuids for %d offloaded ledgers", len(uuids), offloaded)
	}
	// Metrics: the offloaded bytes per topic (Pulsar's name) and the counters.
	rec := httptest.NewRecorder()
	rb.svc.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, prefix := range []string{`pulsar_storage_offloaded_size{namespace="public/default",topic="` + topic + `"} `,
		`magnetar_ledgeroffloader_offloaded_bytes_total{namespace="public/default",topic="` + topic + `"} `} {
		i := strings.Index(rec.Body.String(), prefix)
		if i < 0 {
			t.Fatalf("no %s in the metrics", prefix)
		}
		var v float64
		if _, err := fmt.Sscan(rec.Body.String()[i+len(prefix):], &v); err != nil || v <= 0 {
			t.Fatalf("%s%v (%v): want the offloaded bytes", prefix, v, err)
		}
	}
	cons, err := rb.client.Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "all",
		InitialPosition: pulsarclient.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("m-%02d", i); string(m.Payload) != want {
			t.Fatalf("message %d: %q, want %q", i, m.Payload, want)
		}
	}
}

// TestOffloadPolicyAppliedLive: a namespace's offloadThreshold set while its topic is loaded
// reaches the topic's managed ledger at once (no reload): with 0, every closed ledger is
// offloaded by policy, without a trigger; a topic-level policy of -1 turns it off again for
// that topic only.
func TestOffloadPolicyAppliedLive(t *testing.T) {
	rb := startOffloadBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	send := func(topic string, n int) {
		prod, err := rb.client.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close(ctx)
		for i := range n {
			if _, err := prod.Send(ctx, &pulsarclient.ProducerMessage{Payload: fmt.Appendf(nil, "m-%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	const a, b = "/admin/v2/persistent/public/default/live-a", "/admin/v2/persistent/public/default/live-b"
	send("persistent://public/default/live-a", 12)
	send("persistent://public/default/live-b", 12)
	offloaded := func(path string) int {
		var is broker.InternalStats
		rb.get(t, path+"/internalStats", &is)
		n := 0
		for _, l := range is.Ledgers {
			if l.Offloaded {
				n++
			}
		}
		return n
	}
	if offloaded(a) != 0 || offloaded(b) != 0 {
		t.Fatal("offloaded before any policy asked for it")
	}
	runSteps(t, rb.http.URL, []step{
		{"POST", b + "/offloadPolicies", `{"managedLedgerOffloadThresholdInBytes":-1}`, 204, ""},
		{"PUT", "/admin/v2/namespaces/public/default/offloadThreshold", "0", 204, ""},
	})
	deadline := time.Now().Add(30 * time.Second)
	for offloaded(a) < 2 { // 12 entries in ledgers of 5: two closed ledgers
		if time.Now().After(deadline) {
			t.Fatal("the namespace's threshold did not offload the loaded topic's closed ledgers")
		}
	}
	if n := offloaded(b); n != 0 {
		t.Fatalf("%d ledgers of the topic whose own policy is off were offloaded", n)
	}
}
