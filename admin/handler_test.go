package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type step struct {
	method, path, body string
	status             int
	want               string // a substring of the response body
}

func runSteps(t *testing.T, base string, steps []step) {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for i, s := range steps {
		req, err := http.NewRequest(s.method, base+s.path, strings.NewReader(s.body))
		if err != nil {
			t.Fatal(err)
		}
		if s.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != s.status || !strings.Contains(string(b), s.want) {
			t.Fatalf("step %d: %s %s %s: %d %s; want %d containing %q", i, s.method, s.path, s.body,
				resp.StatusCode, b, s.status, s.want)
		}
		if resp.StatusCode >= 400 && resp.StatusCode != http.StatusMethodNotAllowed && !strings.Contains(string(b), `"reason"`) {
			t.Fatalf("step %d: error without a reason: %s", i, b)
		}
	}
}

// TestHandlerScenario walks the admin API over a fake service: every resource's happy path,
// and Pulsar's statuses and reasons for the failures.
func TestHandlerScenario(t *testing.T) {
	svc := newFakeService()
	srv := httptest.NewServer(Handler(svc, Options{}))
	defer srv.Close()
	const p = "/admin/v2/persistent/acme/ns1"
	runSteps(t, srv.URL, []step{
		{"GET", "/admin/v2/clusters", "", 200, `["standalone"]`},
		{"GET", "/admin/v2/brokers/health", "", 200, "ok"},
		{"GET", "/admin/v2/tenants", "", 200, `["public"]`},
		{"PUT", "/admin/v2/tenants/acme", `{"adminRoles":[],"allowedClusters":["standalone"]}`, 204, ""},
		{"PUT", "/admin/v2/tenants/acme", "", 409, "Tenant already exists"},
		{"PUT", "/admin/v2/tenants/bad%20name", "", 412, "Tenant name is not valid"},
		{"PUT", "/admin/v2/tenants/broken", "{", 400, "invalid JSON"},
		{"GET", "/admin/v2/tenants/broken", "", 404, "Tenant does not exist"},
		{"GET", "/admin/v2/tenants/acme", "", 200, `"allowedClusters":["standalone"]`},
		{"POST", "/admin/v2/tenants/acme", `{"adminRoles":["r"]}`, 204, ""},
		{"GET", "/admin/v2/tenants/acme", "", 200, `"adminRoles":["r"]`},
		{"PUT", "/admin/v2/namespaces/acme/ns1", "", 204, ""},
		{"PUT", "/admin/v2/namespaces/acme/ns1", "", 409, "Namespace already exists"},
		{"PUT", "/admin/v2/namespaces/nope/ns", "", 404, "Tenant does not exist"},
		{"GET", "/admin/v2/namespaces/acme/nope", "", 404, "Namespace does not exist"},
		{"GET", "/admin/v2/namespaces/acme", "", 200, `["acme/ns1"]`},
		{"GET", "/admin/v2/namespaces/acme/ns1", "", 200, "{}"},
		{"POST", "/admin/v2/namespaces/acme/ns1", `{"deduplicationEnabled":false}`, 204, ""},
		{"GET", "/admin/v2/namespaces/acme/ns1", "", 200, `"deduplicationEnabled":false`},
		{"DELETE", "/admin/v2/tenants/acme", "", 409, "The tenant still has active namespaces"},

		{"PUT", p + "/t1", "", 204, ""},
		{"PUT", p + "/t1", "", 409, "This topic already exists"},
		{"PUT", "/admin/v2/persistent/acme/nope/t1", "", 404, "Namespace does not exist"},
		{"GET", p, "", 200, `"persistent://acme/ns1/t1"`},
		{"GET", "/admin/v2/namespaces/acme/ns1/topics", "", 200, `"persistent://acme/ns1/t1"`},
		{"PUT", p + "/p/partitions", "3", 204, ""},
		{"PUT", p + "/p2/partitions", `{"partitions":2,"properties":{}}`, 204, ""},
		{"PUT", p + "/p3/partitions", "0", 406, "Number of partitions should be more than 0"},
		{"PUT", p + "/p3/partitions", `"x"`, 400, "invalid number of partitions"},
		{"PUT", p + "/x-partition-1/partitions", "2", 412, "should not contain '-partition-'"},
		{"PUT", p + "/p/partitions", "3", 409, "This topic already exists"},
		{"GET", p + "/p/partitions", "", 200, `{"partitions":3}`},
		{"GET", p + "/t1/partitions", "", 200, `{"partitions":0}`},
		{"POST", p + "/p/partitions", "2", 422, "not more than 3"},
		{"POST", p + "/p/partitions", "4", 204, ""},
		{"GET", p + "/partitioned", "", 200, `"persistent://acme/ns1/p","persistent://acme/ns1/p2"`},
		{"GET", "/admin/v2/non-persistent/acme/ns1", "", 200, "[]"},
		{"GET", "/admin/v2/non-persistent/acme/ns1/partitioned", "", 200, "[]"},
		{"GET", "/admin/v2/non-persistent/acme/nope", "", 404, "Namespace does not exist"},

		{"GET", p + "/t1/stats", "", 200, `"msgInCounter":10`},
		{"GET", p + "/nope/stats", "", 404, "Topic persistent://acme/ns1/nope not found"},
		{"GET", p + "/bad%2Fname/stats", "", 412, "Topic name is not valid"},
		{"GET", p + "/p/partitioned-stats", "", 200, `"metadata":{"partitions":4}`},
		{"GET", p + "/p/partitioned-stats", "", 200, `"persistent://acme/ns1/p-partition-3":{`},
		{"GET", p + "/p/partitioned-stats?perPartition=false", "", 200, `"msgInCounter":40`},
		{"GET", p + "/t1/partitioned-stats", "", 404, "Partitioned Topic persistent://acme/ns1/t1 not found"},
		{"GET", p + "/p/stats", "", 200, `"msgInCounter":40`},
		{"GET", p + "/t1/internalStats", "", 200, `"numberOfEntries":3`},
		{"GET", p + "/p/partitioned-internalStats", "", 200, `"persistent://acme/ns1/p-partition-0":{`},
		{"GET", p + "/elsewhere/stats", "", 307, ""},

		{"PUT", p + "/t1/subscription/s1", "", 204, ""},
		{"PUT", p + "/t1/subscription/s1", "", 409, "Subscription already exists for topic"},
		{"PUT", p + "/t1/subscription/s2", `{"ledgerId":-1,"entryId":-1}`, 204, ""},
		{"PUT", p + "/t1/subscription/s3", `{"ledgerId":1}`, 400, "needs ledgerId and entryId"},
		{"PUT", p + "/nope/subscription/s1", "", 404, "Topic persistent://acme/ns1/nope not found"},
		{"GET", p + "/t1/subscriptions", "", 200, `["s1","s2"]`},
		{"GET", p + "/t1/stats", "", 200, `"s1":{`},
		{"POST", p + "/t1/subscription/s1/resetcursor/1700000000000", "", 204, ""},
		{"POST", p + "/t1/subscription/s1/resetcursor/abc", "", 400, "invalid timestamp"},
		{"POST", p + "/t1/subscription/s1/resetcursor", `{"ledgerId":1,"entryId":5,"isExcluded":true}`, 204, ""},
		{"POST", p + "/t1/subscription/s1/resetcursor", "", 400, "a message id body is required"},
		{"POST", p + "/t1/subscription/nope/skip/3", "", 404, "Subscription nope not found for topic persistent://acme/ns1/t1"},
		{"POST", p + "/t1/subscription/s1/skip/3", "", 204, ""},
		{"POST", p + "/t1/subscription/s1/skip/-1", "", 400, "invalid number of messages"},
		{"POST", p + "/t1/subscription/s1/skip_all", "", 204, ""},
		{"DELETE", p + "/t1/subscription/s2", "", 204, ""},
		{"DELETE", p + "/t1/subscription/s2", "", 404, "Subscription s2 not found"},
		{"PUT", p + "/p/subscription/ps", "", 204, ""},
		{"GET", p + "/p/subscriptions", "", 200, `["ps"]`},
		{"POST", p + "/p/subscription/ps/resetcursor/5", "", 204, ""},
		{"POST", p + "/p/subscription/ps/skip/1", "", 405, "Skip messages on a partitioned topic is not allowed"},
		{"POST", p + "/p/terminate", "", 405, "Termination on a partitioned topic is not allowed"},
		{"POST", p + "/p/terminate/partitions", "", 200, `"3":{"ledgerId":1`},
		{"POST", p + "/t1/terminate", "", 200, `{"ledgerId":1,"entryId":2,"partitionIndex":-1,"batchIndex":-1}`},
		{"GET", p + "/t1/lastMessageId", "", 200, `"entryId":2`},
		{"GET", p + "/p/lastMessageId", "", 405, "not allowed"},
		{"PUT", p + "/p/unload", "", 204, ""},
		{"PUT", p + "/t1/unload", "", 204, ""},
		{"GET", "/lookup/v2/topic/persistent/acme/ns1/t1", "", 200, `"brokerUrl":"pulsar://127.0.0.1:6650"`},
		{"GET", p + "/nope/partitions?checkAllowAutoCreation=true", "", 200, `{"partitions":0}`},

		{"DELETE", p + "/t1?force=maybe", "", 400, "invalid value"},
		{"DELETE", p + "/t1", "", 204, ""},
		{"DELETE", p + "/t1", "", 404, "Topic persistent://acme/ns1/t1 not found"},
		{"DELETE", p + "/p/partitions", "", 204, ""},
		{"DELETE", p + "/p/partitions", "", 404, "Partitioned Topic persistent://acme/ns1/p not found"},
		{"DELETE", "/admin/v2/namespaces/acme/ns1", "", 409, "Cannot delete non empty namespace"},
		{"DELETE", "/admin/v2/namespaces/acme/ns1?force=true", "", 204, ""},
		{"DELETE", "/admin/v2/tenants/acme", "", 204, ""},

		{"GET", "/admin/v2/bogus", "", 404, "Not Found"},
		{"PATCH", "/admin/v2/tenants", "", 405, ""},
	})
	want := []string{
		"CreateSubscription persistent://acme/ns1/t1 s1 9223372036854775807:9223372036854775807:-1",
		"CreateSubscription persistent://acme/ns1/t1 s2 -1:-1:-1",
		"ResetCursorToTime persistent://acme/ns1/t1 s1 1700000000000",
		"ResetCursor persistent://acme/ns1/t1 s1 1:6:-1",
		"Skip persistent://acme/ns1/t1 s1 3",
		"ClearBacklog persistent://acme/ns1/t1 s1",
	}
	got := strings.Join(svc.calls, "\n")
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("service calls lack %q:\n%s", w, got)
		}
	}
	if n := strings.Count(got, "CreateSubscription persistent://acme/ns1/p-partition-"); n != 4 {
		t.Errorf("partitioned subscription created on %d partitions, want 4:\n%s", n, got)
	}
	if n := strings.Count(got, "Unload persistent://acme/ns1/p-partition-"); n != 4 {
		t.Errorf("partitioned topic unloaded on %d partitions, want 4", n)
	}
	if _, ok := svc.tenants["broken"]; ok {
		t.Error("a request with a malformed body created its tenant")
	}
}

// TestRedirectToOwner: a topic served by another broker answers 307 to its HTTP URL with
// the same path and query.
func TestRedirectToOwner(t *testing.T) {
	srv := httptest.NewServer(Handler(newFakeService(), Options{}))
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(srv.URL + "/admin/v2/persistent/public/default/elsewhere/stats?x=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != 307 ||
		loc != "http://other:8080/admin/v2/persistent/public/default/elsewhere/stats?x=1" {
		t.Fatalf("%d Location %q", resp.StatusCode, loc)
	}
}
