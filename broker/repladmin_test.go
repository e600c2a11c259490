package broker_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestReplicationBadInput: through east's admin API, a cluster record with a malformed
// URL, replication to a cluster the tenant does not allow (namespace and topic level), and
// a namespace replication list without the local cluster get 4xx with Pulsar's reasons,
// and change nothing.
func TestReplicationBadInput(t *testing.T) {
	g := newGeoClusters(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	do := func(method, path, body string, status int, want string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, g.eastHTTP.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != status || !strings.Contains(string(b), want) {
			t.Fatalf("%s %s %s: %d %s, want %d with %q", method, path, body, resp.StatusCode, b, status, want)
		}
	}
	const c, ns, tp = "/admin/v2/clusters", "/admin/v2/namespaces/geo/ns", "/admin/v2/persistent/geo/ns/orders"
	do("PUT", c+"/south", `{"serviceUrl":"http//south:8080"}`, 400, "Illegal service url")
	do("PUT", c+"/south", `{"serviceUrl":"http://south:8080","brokerServiceUrl":"south:6650"}`, 400, "Illegal broker service url")
	do("GET", c+"/south", "", 404, "Cluster does not exist")
	do("PUT", c+"/south", `{"serviceUrl":"http://south:8080","brokerServiceUrl":"pulsar://south:6650"}`, 204, "")

	// Tenant geo allows east and west only.
	do("POST", ns+"/replication", `["east","west","south"]`, 403, "Cluster [south] is not in the list of allowed clusters list for tenant [geo]")
	do("POST", tp+"/replication", `["east","south"]`, 403, "Cluster [south] is not in the list of allowed clusters list")
	do("POST", ns+"/replication", `["west"]`, 412, "Namespace missing local cluster name in clusters list")
	do("GET", ns+"/replication", "", 200, `["east","west"]`)
	do("GET", tp+"/replication", "", 200, "null")
}
