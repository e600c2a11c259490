package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestAdminRequests: the admin verbs send Pulsar's REST requests (method, path, query and
// body) with the credentials, and print what the broker answered.
func TestAdminRequests(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+strings.TrimSpace(string(b))+" | "+r.Header.Get("Authorization"))
		mu.Unlock()
		switch {
		case r.Method != "GET":
			w.WriteHeader(http.StatusNoContent)
		case strings.HasSuffix(r.URL.Path, "/bundle"):
			io.WriteString(w, "0x00000000_0x40000000")
		case strings.HasSuffix(r.URL.Path, "/replication"), strings.HasSuffix(r.URL.Path, "/peers"):
			io.WriteString(w, `["a","b"]`)
		default:
			io.WriteString(w, `{"b":1,"a":[2]}`)
		}
	}))
	defer srv.Close()
	auth := " | Basic dTpw" // u:p
	for _, tc := range []struct {
		args []string
		want string
		out  string // a line of the output ("" : not checked)
	}{
		{[]string{"tenants", "create", "acme", "--admin-roles", "ops"}, `PUT /admin/v2/tenants/acme {"adminRoles":["ops"],"allowedClusters":[]}`, "created tenant acme"},
		{[]string{"tenants", "update", "acme", "-r", "ops,dev", "-c", "west"}, `POST /admin/v2/tenants/acme {"adminRoles":["ops","dev"],"allowedClusters":["west"]}`, "updated tenant acme"},
		{[]string{"tenants", "get", "acme"}, `GET /admin/v2/tenants/acme `, `  "a": [`},
		{[]string{"namespaces", "create", "acme/ns", "--bundles", "8"}, `PUT /admin/v2/namespaces/acme/ns {"bundles":{"numBundles":8}}`, ""},
		{[]string{"namespaces", "delete", "acme/ns", "--force"}, `DELETE /admin/v2/namespaces/acme/ns?force=true `, ""},
		{[]string{"namespaces", "unload", "acme/ns", "--bundle", "0x0_0x1", "--destination-broker", "b:1"},
			`PUT /admin/v2/namespaces/acme/ns/0x0_0x1/unload?destinationBroker=b%3A1 `, ""},
		{[]string{"namespaces", "split-bundle", "acme/ns", "--bundle", "0x0_0x1", "--unload"},
			`PUT /admin/v2/namespaces/acme/ns/0x0_0x1/split?unload=true `, ""},
		{[]string{"namespaces", "grant-permission", "acme/ns", "--role", "app", "--actions", "produce,consume"},
			`POST /admin/v2/namespaces/acme/ns/permissions/app ["consume","produce"]`, ""},
		{[]string{"topics", "create-partitioned-topic", "persistent://acme/ns/t", "-p", "3"}, `PUT /admin/v2/persistent/acme/ns/t/partitions 3`, ""},
		{[]string{"topics", "stats", "non-persistent://acme/ns/t"}, `GET /admin/v2/non-persistent/acme/ns/t/stats `, ""},
		{[]string{"topics", "partitioned-stats", "acme/ns/t", "--per-partition"}, `GET /admin/v2/persistent/acme/ns/t/partitioned-stats?perPartition=true `, ""},
		{[]string{"topics", "lookup", "acme/ns/t"}, `GET /lookup/v2/topic/persistent/acme/ns/t `, ""},
		{[]string{"topics", "bundle", "acme/ns/t"}, `GET /lookup/v2/topic/persistent/acme/ns/t/bundle `, ""},
		{[]string{"topics", "revoke-permission", "acme/ns/t", "--role", "app"}, `DELETE /admin/v2/persistent/acme/ns/t/permissions/app `, ""},
		{[]string{"topics", "expire-messages", "acme/ns/t", "-s", "s1", "-t", "10m"}, `POST /admin/v2/persistent/acme/ns/t/subscription/s1/expireMessages/600 `, ""},
		{[]string{"topics", "get-message-by-id", "acme/ns/t", "-l", "3", "-e", "4"}, `GET /admin/v2/persistent/acme/ns/t/ledger/3/entry/4 `, ""},
		{[]string{"subscriptions", "create", "acme/ns/t", "-s", "s1", "-m", "earliest"},
			`PUT /admin/v2/persistent/acme/ns/t/subscription/s1 {"ledgerId":-1,"entryId":-1,"partitionIndex":-1}`, ""},
		{[]string{"subscriptions", "reset-cursor", "acme/ns/t", "-s", "s1", "-m", "5:6"},
			`POST /admin/v2/persistent/acme/ns/t/subscription/s1/resetcursor {"ledgerId":5,"entryId":6,"partitionIndex":-1,"batchIndex":-1}`, ""},
		{[]string{"subscriptions", "skip", "acme/ns/t", "-s", "s1", "-n", "2"}, `POST /admin/v2/persistent/acme/ns/t/subscription/s1/skip/2 `, ""},
		{[]string{"schemas", "get", "acme/ns/t", "--version", "2"}, `GET /admin/v2/schemas/acme/ns/t/schema/2 `, ""},
		{[]string{"schemas", "set-strategy", "acme/ns/t", "undefined"}, `DELETE /admin/v2/persistent/acme/ns/t/schemaCompatibilityStrategy `, ""},
		{[]string{"schemas", "set-strategy", "acme/ns", "full"}, `PUT /admin/v2/namespaces/acme/ns/schemaCompatibilityStrategy "FULL"`, ""},
		{[]string{"transactions", "pending-ack-stats", "-t", "acme/ns/t", "-s", "s1"}, `GET /admin/v3/transactions/pendingAckStats/acme/ns/t/s1 `, ""},
		{[]string{"transactions", "coordinator-stats", "-c", "2"}, `GET /admin/v3/transactions/coordinatorStats?coordinatorId=2 `, ""},
		{[]string{"brokers", "owned-namespaces", "c1", "b:8080"}, `GET /admin/v2/brokers/c1/b:8080/ownedNamespaces `, ""},
		{[]string{"clusters", "get", "c1"}, `GET /admin/v2/clusters/c1 `, ""},
		{[]string{"clusters", "delete", "c1"}, `DELETE /admin/v2/clusters/c1 `, "deleted cluster c1"},
		{[]string{"clusters", "update-peer-clusters", "c1", "--peer-clusters", "c2,c3"}, `POST /admin/v2/clusters/c1/peers ["c2","c3"]`, ""},
		{[]string{"clusters", "get-peer-clusters", "c1"}, `GET /admin/v2/clusters/c1/peers `, "a"},
		{[]string{"namespaces", "set-clusters", "acme/ns", "--clusters", "a,b"}, `POST /admin/v2/namespaces/acme/ns/replication ["a","b"]`, ""},
		{[]string{"namespaces", "get-clusters", "acme/ns"}, `GET /admin/v2/namespaces/acme/ns/replication `, "b"},
		{[]string{"topics", "set-replication-clusters", "acme/ns/t", "-c", "a"}, `POST /admin/v2/persistent/acme/ns/t/replication ["a"]`, ""},
		{[]string{"topics", "get-replication-clusters", "acme/ns/t", "--applied"}, `GET /admin/v2/persistent/acme/ns/t/replication?applied=true `, ""},
		{[]string{"topics", "remove-replication-clusters", "acme/ns/t"}, `DELETE /admin/v2/persistent/acme/ns/t/replication `, ""},
	} {
		mu.Lock()
		got = nil
		mu.Unlock()
		var code int
		out := captureStdout(t, func() {
			code = run(append([]string{"admin", "--url", srv.URL, "--auth-plugin", "basic", "--auth-params", "u:p"}, tc.args...))
		})
		mu.Lock()
		if code != 0 || len(got) != 1 || got[0] != tc.want+auth {
			t.Errorf("%v: exit %d, sent %q\nwant %q", tc.args, code, got, tc.want+auth)
		}
		mu.Unlock()
		if tc.out != "" && !strings.Contains(out, tc.out+"\n") {
			t.Errorf("%v: output %q, want a line %q", tc.args, out, tc.out)
		}
	}
}
