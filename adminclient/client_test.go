package adminclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
)

// request is one request a test server saw.
type request struct {
	Method, URI, Body, Auth string
}

// recorder is an httptest server that records requests and answers with status and body.
type recorder struct {
	mu     sync.Mutex
	reqs   []request
	status int
	body   string
}

func newRecorder(t *testing.T) (*recorder, *httptest.Server) {
	r := &recorder{status: 200}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, request{req.Method, req.URL.RequestURI(), string(b), req.Header.Get("Authorization")})
		status, body := r.status, r.body
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return r, srv
}

func (r *recorder) last(t *testing.T) request {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reqs) == 0 {
		t.Fatal("no request")
	}
	return r.reqs[len(r.reqs)-1]
}

func newClient(t *testing.T, url string, auth Auth) *Client {
	t.Helper()
	c, err := New(Options{URLs: []string{url}, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestOperations: each operation sends its method, path (escaped, with its query) and body.
func TestOperations(t *testing.T) {
	rec, srv := newRecorder(t)
	c := newClient(t, srv.URL, nil)
	ctx := context.Background()
	batch := int32(2)
	at := time.UnixMilli(1700000000123)
	for _, tc := range []struct {
		name     string
		call     func() error
		method   string
		uri      string
		body     string // "" : none
		response string
	}{
		{"tenants", func() error { _, err := c.Tenants(ctx); return err }, "GET", "/admin/v2/tenants", "", `["a"]`},
		{"create tenant", func() error { return c.CreateTenant(ctx, "t1", api.TenantInfo{AdminRoles: []string{"r"}}) },
			"PUT", "/admin/v2/tenants/t1", `{"adminRoles":["r"],"allowedClusters":[]}`, ""},
		{"update tenant", func() error { return c.UpdateTenant(ctx, "t1", api.TenantInfo{}) },
			"POST", "/admin/v2/tenants/t1", `{"adminRoles":[],"allowedClusters":[]}`, ""},
		{"delete tenant", func() error { return c.DeleteTenant(ctx, "t1") }, "DELETE", "/admin/v2/tenants/t1", "", ""},
		{"namespaces", func() error { _, err := c.Namespaces(ctx, "t1"); return err }, "GET", "/admin/v2/namespaces/t1", "", `[]`},
		{"create namespace", func() error { return c.CreateNamespace(ctx, "t1/ns", 8) },
			"PUT", "/admin/v2/namespaces/t1/ns", `{"bundles":{"numBundles":8}}`, ""},
		{"create namespace default bundles", func() error { return c.CreateNamespace(ctx, "t1/ns", 0) },
			"PUT", "/admin/v2/namespaces/t1/ns", "", ""},
		{"delete namespace", func() error { return c.DeleteNamespace(ctx, "t1/ns", true) },
			"DELETE", "/admin/v2/namespaces/t1/ns?force=true", "", ""},
		{"unload bundle", func() error { return c.UnloadBundle(ctx, "t1/ns", "0x00000000_0x40000000", "b:8080") },
			"PUT", "/admin/v2/namespaces/t1/ns/0x00000000_0x40000000/unload?destinationBroker=b%3A8080", "", ""},
		{"split bundle", func() error { return c.SplitBundle(ctx, "t1/ns", "0x0_0x1", true, "range_equally_divide") },
			"PUT", "/admin/v2/namespaces/t1/ns/0x0_0x1/split?splitAlgorithmName=range_equally_divide&unload=true", "", ""},
		{"grant topic", func() error {
			return c.GrantTopicPermission(ctx, "t1/ns/x", "app", []auth.Action{auth.ActionProduce})
		}, "POST", "/admin/v2/persistent/t1/ns/x/permissions/app", `["produce"]`, ""},
		{"revoke namespace", func() error { return c.RevokeNamespacePermission(ctx, "t1/ns", "a b") },
			"DELETE", "/admin/v2/namespaces/t1/ns/permissions/a%20b", "", ""},
		{"set topic policy", func() error {
			return c.SetPolicy(ctx, PolicyTarget{Topic: "non-persistent://t1/ns/x"}, "backlogQuota",
				map[string][]string{"backlogQuotaType": {"message_age"}}, map[string]int{"limitTime": 60})
		}, "POST", "/admin/v2/non-persistent/t1/ns/x/backlogQuota?backlogQuotaType=message_age", `{"limitTime":60}`, ""},
		{"get applied policy", func() error {
			var v any
			return c.GetPolicy(ctx, PolicyTarget{Topic: "t1/ns/x"}, "retention", true, &v)
		}, "GET", "/admin/v2/persistent/t1/ns/x/retention?applied=true", "", `{}`},
		{"remove namespace policy", func() error { return c.RemovePolicy(ctx, PolicyTarget{Namespace: "t1/ns"}, "retention", nil) },
			"DELETE", "/admin/v2/namespaces/t1/ns/retention", "", ""},
		{"topics", func() error { _, err := c.Topics(ctx, "t1/ns"); return err }, "GET", "/admin/v2/persistent/t1/ns", "", `[]`},
		{"partitioned topics", func() error { _, err := c.PartitionedTopics(ctx, "t1/ns"); return err },
			"GET", "/admin/v2/persistent/t1/ns/partitioned", "", `[]`},
		{"create partitioned", func() error { return c.CreatePartitionedTopic(ctx, "persistent://t1/ns/p", 4) },
			"PUT", "/admin/v2/persistent/t1/ns/p/partitions", `4`, ""},
		{"delete partitioned", func() error { return c.DeletePartitionedTopic(ctx, "t1/ns/p", false) },
			"DELETE", "/admin/v2/persistent/t1/ns/p/partitions?force=false", "", ""},
		{"partitioned stats", func() error { var v any; return c.PartitionedTopicStats(ctx, "t1/ns/p", true, &v) },
			"GET", "/admin/v2/persistent/t1/ns/p/partitioned-stats?perPartition=true", "", `{}`},
		{"lookup", func() error { var v any; return c.Lookup(ctx, "t1/ns/x", &v) }, "GET", "/lookup/v2/topic/persistent/t1/ns/x", "", `{}`},
		{"terminate", func() error { var v api.MessageID; return c.TerminateTopic(ctx, "t1/ns/x", &v) },
			"POST", "/admin/v2/persistent/t1/ns/x/terminate", "", `{"ledgerId":1,"entryId":2}`},
		{"message id by time", func() error { var v any; return c.MessageIDByTime(ctx, "t1/ns/x", at, &v) },
			"GET", "/admin/v2/persistent/t1/ns/x/messageid/1700000000123", "", `{}`},
		{"examine", func() error { _, err := c.ExamineMessage(ctx, "t1/ns/x", "earliest", 3); return err },
			"GET", "/admin/v2/persistent/t1/ns/x/examinemessage?initialPosition=earliest&messagePosition=3", "", ""},
		{"peek", func() error { _, err := c.PeekMessage(ctx, "t1/ns/x", "s/1", 2); return err },
			"GET", "/admin/v2/persistent/t1/ns/x/subscription/s%2F1/position/2", "", ""},
		{"create subscription earliest", func() error { return c.CreateSubscription(ctx, "t1/ns/x", "s", Earliest) },
			"PUT", "/admin/v2/persistent/t1/ns/x/subscription/s", `{"ledgerId":-1,"entryId":-1,"partitionIndex":-1}`, ""},
		{"reset cursor to id", func() error {
			return c.ResetCursor(ctx, "t1/ns/x", "s", Position{LedgerID: 5, EntryID: 6, Partition: -1, BatchIndex: &batch})
		}, "POST", "/admin/v2/persistent/t1/ns/x/subscription/s/resetcursor", `{"ledgerId":5,"entryId":6,"partitionIndex":-1,"batchIndex":2}`, ""},
		{"reset cursor to time", func() error { return c.ResetCursorToTime(ctx, "t1/ns/x", "s", at) },
			"POST", "/admin/v2/persistent/t1/ns/x/subscription/s/resetcursor/1700000000123", "", ""},
		{"skip", func() error { return c.Skip(ctx, "t1/ns/x", "s", 7) }, "POST", "/admin/v2/persistent/t1/ns/x/subscription/s/skip/7", "", ""},
		{"clear backlog", func() error { return c.ClearBacklog(ctx, "t1/ns/x", "s") },
			"POST", "/admin/v2/persistent/t1/ns/x/subscription/s/skip_all", "", ""},
		{"expire", func() error { return c.ExpireMessages(ctx, "t1/ns/x", "s", 90*time.Second) },
			"POST", "/admin/v2/persistent/t1/ns/x/subscription/s/expireMessages/90", "", ""},
		{"expire all", func() error { return c.ExpireMessagesAllSubscriptions(ctx, "t1/ns/x", time.Minute) },
			"POST", "/admin/v2/persistent/t1/ns/x/all_subscription/expireMessages/60", "", ""},
		{"schema version", func() error { var v any; return c.Schema(ctx, "persistent://t1/ns/x", 3, &v) },
			"GET", "/admin/v2/schemas/t1/ns/x/schema/3", "", `{}`},
		{"delete schema", func() error { return c.DeleteSchema(ctx, "t1/ns/x", true, nil) },
			"DELETE", "/admin/v2/schemas/t1/ns/x/schema?force=true", "", ""},
		{"set strategy", func() error { return c.SetSchemaCompatibilityStrategy(ctx, PolicyTarget{Namespace: "t1/ns"}, "FULL") },
			"PUT", "/admin/v2/namespaces/t1/ns/schemaCompatibilityStrategy", `"FULL"`, ""},
		{"brokers of a cluster", func() error { var v any; return c.Brokers(ctx, "c1", &v) }, "GET", "/admin/v2/brokers/c1", "", `[]`},
		{"owned namespaces", func() error { var v any; return c.OwnedNamespaces(ctx, "c1", "b:8080", &v) },
			"GET", "/admin/v2/brokers/c1/b:8080/ownedNamespaces", "", `{}`},
		{"health", func() error { return c.Health(ctx) }, "GET", "/admin/v2/brokers/health", "", "ok"},
		{"cluster", func() error { var v api.ClusterData; return c.Cluster(ctx, "c1", &v) }, "GET", "/admin/v2/clusters/c1", "", `{}`},
		{"create cluster", func() error {
			return c.CreateCluster(ctx, "c2", api.ClusterData{ServiceURL: "http://c2:8080", BrokerServiceURL: "pulsar://c2:6650"})
		}, "PUT", "/admin/v2/clusters/c2",
			`{"serviceUrl":"http://c2:8080","brokerServiceUrl":"pulsar://c2:6650","brokerClientTlsEnabled":false,` +
				`"tlsAllowInsecureConnection":false,"brokerClientTlsEnabledWithKeyStore":false}`, ""},
		{"update cluster", func() error { return c.UpdateCluster(ctx, "c2", api.ClusterData{BrokerClientTLSEnabled: true}) },
			"POST", "/admin/v2/clusters/c2",
			`{"brokerClientTlsEnabled":true,"tlsAllowInsecureConnection":false,"brokerClientTlsEnabledWithKeyStore":false}`, ""},
		{"delete cluster", func() error { return c.DeleteCluster(ctx, "c2") }, "DELETE", "/admin/v2/clusters/c2", "", ""},
		{"peer clusters", func() error { _, err := c.PeerClusters(ctx, "c2"); return err }, "GET", "/admin/v2/clusters/c2/peers", "", `[]`},
		{"set peer clusters", func() error { return c.SetPeerClusters(ctx, "c2", []string{"c3"}) },
			"POST", "/admin/v2/clusters/c2/peers", `["c3"]`, ""},
		{"namespace replication", func() error { _, err := c.NamespaceReplicationClusters(ctx, "t1/ns"); return err },
			"GET", "/admin/v2/namespaces/t1/ns/replication", "", `["c1"]`},
		{"set namespace replication", func() error { return c.SetNamespaceReplicationClusters(ctx, "t1/ns", []string{"c1", "c2"}) },
			"POST", "/admin/v2/namespaces/t1/ns/replication", `["c1","c2"]`, ""},
		{"topic replication applied", func() error { _, err := c.TopicReplicationClusters(ctx, "t1/ns/x", true); return err },
			"GET", "/admin/v2/persistent/t1/ns/x/replication?applied=true", "", `null`},
		{"set topic replication", func() error { return c.SetTopicReplicationClusters(ctx, "t1/ns/x", []string{"c1"}) },
			"POST", "/admin/v2/persistent/t1/ns/x/replication", `["c1"]`, ""},
		{"remove topic replication", func() error { return c.RemoveTopicReplicationClusters(ctx, "t1/ns/x") },
			"DELETE", "/admin/v2/persistent/t1/ns/x/replication", "", ""},
		{"coordinator stats", func() error { var v any; return c.CoordinatorStats(ctx, 3, &v) },
			"GET", "/admin/v3/transactions/coordinatorStats?coordinatorId=3", "", `{}`},
		{"txn metadata", func() error { var v any; return c.TransactionMetadata(ctx, TxnID{1, 2}, &v) },
			"GET", "/admin/v3/transactions/transactionMetadata/1/2", "", `{}`},
		{"pending ack of a non-persistent topic", func() error { var v any; return c.PendingAckStats(ctx, "non-persistent://t1/ns/x", "s", &v) },
			"GET", "/admin/v3/transactions/pendingAckStats/non-persistent/t1/ns/x/s", "", `{}`},
		{"buffer stats", func() error { var v any; return c.TransactionBufferStats(ctx, "t1/ns/x", &v) },
			"GET", "/admin/v3/transactions/transactionBufferStats/t1/ns/x", "", `{}`},
		{"create scalable", func() error { return c.CreateScalableTopic(ctx, "topic://t1/ns/s", 4) },
			"PUT", "/admin/v2/scalable/t1/ns/s?segments=4", "", ""},
		{"split segment", func() error { return c.SplitSegment(ctx, "topic://t1/ns/s", 3, "8000") },
			"POST", "/admin/v2/scalable/t1/ns/s/split/3?at=8000", "", ""},
		{"merge", func() error { return c.MergeSegments(ctx, "topic://t1/ns/s", 1, 2) },
			"POST", "/admin/v2/scalable/t1/ns/s/merge/1/2", "", ""},
		{"seek earliest", func() error { return c.SeekScalableSubscription(ctx, "topic://t1/ns/s", "sub", 4, nil) },
			"POST", "/admin/v2/scalable/t1/ns/s/subscription/sub/seek?earliest=&segment=4", "", ""},
		{"seek position", func() error {
			return c.SeekScalableSubscription(ctx, "topic://t1/ns/s", "sub", 4, &Position{LedgerID: 9, EntryID: 1})
		}, "POST", "/admin/v2/scalable/t1/ns/s/subscription/sub/seek?entry=1&ledger=9&segment=4", "", ""},
		{"scalable topics", func() error { _, err := c.ScalableTopics(ctx, "t1/ns"); return err }, "GET", "/admin/v2/scalable/t1/ns", "", `[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec.mu.Lock()
			rec.body = tc.response
			rec.mu.Unlock()
			if err := tc.call(); err != nil {
				t.Fatal(err)
			}
			got := rec.last(t)
			if got.Method != tc.method || got.URI != tc.uri || got.Body != tc.body {
				t.Fatalf("sent %s %s %s\nwant %s %s %s", got.Method, got.URI, got.Body, tc.method, tc.uri, tc.body)
			}
		})
	}
}

// TestDecode: answers decode into the api types.
func TestDecode(t *testing.T) {
	rec, srv := newRecorder(t)
	c := newClient(t, srv.URL, nil)
	rec.body = `{"ledgerId":7,"entryId":8,"partitionIndex":-1,"batchIndex":-1}`
	var id api.MessageID
	if err := c.LastMessageID(context.Background(), "t/ns/x", &id); err != nil {
		t.Fatal(err)
	}
	if id != (api.MessageID{LedgerID: 7, EntryID: 8, Partition: -1, BatchIndex: -1}) {
		t.Fatalf("%+v", id)
	}
	rec.body = `["persistent://t/ns/a","persistent://t/ns/b"]`
	ts, err := c.Topics(context.Background(), "t/ns")
	if err != nil || len(ts) != 2 || ts[1] != "persistent://t/ns/b" {
		t.Fatalf("%v %v", ts, err)
	}
	rec.body = `not json`
	if err := c.LastMessageID(context.Background(), "t/ns/x", &id); err == nil || StatusOf(err) != 0 {
		t.Fatalf("undecodable answer: %v", err)
	}
}

// TestErrors: a non-2xx answer is an *Error with the status and Pulsar's reason (or the
// body's text); invalid names fail before any request.
func TestErrors(t *testing.T) {
	rec, srv := newRecorder(t)
	c := newClient(t, srv.URL, nil)
	rec.status, rec.body = 409, `{"reason":"Tenant already exists"}`
	err := c.CreateTenant(context.Background(), "t1", api.TenantInfo{})
	var e *Error
	if !errors.As(err, &e) || e.Status != 409 || e.Reason != "Tenant already exists" || e.Method != "PUT" || e.Path != "/admin/v2/tenants/t1" {
		t.Fatalf("%#v", err)
	}
	if err.Error() != "409 Conflict: Tenant already exists" {
		t.Fatalf("message %q", err)
	}
	rec.status, rec.body = 404, "no such topic\n"
	err = c.Health(context.Background())
	if !IsNotFound(err) || err.Error() != "404 Not Found: no such topic" {
		t.Fatalf("%v", err)
	}
	n := len(rec.reqs)
	for _, call := range []func() error{
		func() error { return c.DeleteTenant(context.Background(), "bad/tenant") },
		func() error { return c.DeleteNamespace(context.Background(), "no-slash", false) },
		func() error { return c.CreateTopic(context.Background(), "a/b/c/d/e") },
		func() error { return c.DeleteScalableTopic(context.Background(), "persistent://t/ns/x") },
		func() error { return c.CreateCluster(context.Background(), "bad/cluster", api.ClusterData{}) },
		func() error {
			return c.SetNamespaceReplicationClusters(context.Background(), "no-slash", []string{"a"})
		},
	} {
		if err := call(); !errors.Is(err, ErrInvalidName) {
			t.Errorf("invalid name: %v", err)
		}
	}
	if len(rec.reqs) != n {
		t.Fatal("a request was sent for an invalid name")
	}
}

// TestAuthHeader: the credentials go on every request: a token re-read each time, basic.
func TestAuthHeader(t *testing.T) {
	rec, srv := newRecorder(t)
	tok := "t1"
	c := newClient(t, srv.URL, TokenAuth(func() ([]byte, error) { return []byte(tok), nil }))
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rec.last(t).Auth; got != "Bearer t1" {
		t.Fatalf("Authorization %q", got)
	}
	tok = "t2"
	c.Health(context.Background())
	if got := rec.last(t).Auth; got != "Bearer t2" {
		t.Fatalf("Authorization %q after the token changed", got)
	}
	c = newClient(t, srv.URL, BasicAuth("u", "p:w"))
	c.Health(context.Background())
	if got := rec.last(t).Auth; got != "Basic dTpwOnc=" {
		t.Fatalf("Authorization %q", got)
	}
	c = newClient(t, srv.URL, TokenAuth(func() ([]byte, error) { return nil, errors.New("no file") }))
	if err := c.Health(context.Background()); err == nil || !strings.Contains(err.Error(), "credentials: no file") {
		t.Fatalf("unreadable token: %v", err)
	}
}

// TestRedirectKeepsCredentials: a 307 to another host (another broker) is followed with the
// method, the body and the Authorization header.
func TestRedirectKeepsCredentials(t *testing.T) {
	owner, ownerSrv := newRecorder(t)
	// A different host name than the owner's 127.0.0.1: net/http would drop the header.
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, strings.Replace(ownerSrv.URL, "127.0.0.1", "localhost", 1)+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)
	c := newClient(t, redirector.URL, TokenAuth(func() ([]byte, error) { return []byte("jwt"), nil }))
	if err := c.CreatePartitionedTopic(context.Background(), "t/ns/x", 3); err != nil {
		t.Fatal(err)
	}
	got := owner.last(t)
	if got.Method != "PUT" || got.URI != "/admin/v2/persistent/t/ns/x/partitions" || got.Body != "3" || got.Auth != "Bearer jwt" {
		t.Fatalf("the owner got %+v", got)
	}
}

// TestFailover: a broker that cannot be reached is skipped for the next URL.
func TestFailover(t *testing.T) {
	rec, srv := newRecorder(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	c, err := New(Options{URLs: []string{deadURL, srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(rec.reqs) != 1 {
		t.Fatalf("%d requests reached the live broker", len(rec.reqs))
	}
	if _, err := New(Options{URLs: []string{"ftp://x"}}); err == nil {
		t.Fatal("an ftp URL was accepted")
	}
}

// TestPath: segments are escaped, queries encoded, and a Path is not changed by derivations.
func TestPath(t *testing.T) {
	p, err := TopicPath("persistent://t/ns/a b")
	if err != nil {
		t.Fatal(err)
	}
	q := p.Query("force", "true")
	sub := q.Sub("subscription", "x/y")
	if p.String() != "/admin/v2/persistent/t/ns/a%20b" || q.String() != "/admin/v2/persistent/t/ns/a%20b?force=true" ||
		sub.String() != "/admin/v2/persistent/t/ns/a%20b/subscription/x%2Fy?force=true" {
		t.Fatalf("%s | %s | %s", p, q, sub)
	}
	b, _ := json.Marshal(Latest)
	if string(b) != `{"ledgerId":9223372036854775807,"entryId":9223372036854775807,"partitionIndex":-1}` {
		t.Fatalf("Latest %s", b)
	}
}
