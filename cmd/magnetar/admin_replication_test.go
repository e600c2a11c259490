package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestAdminClusterCreateFlags: clusters create|update take pulsar-admin's flags (--url is
// the cluster's service URL, --auth-plugin its plugin), so the broker asked is --admin-url
// and the admin client's credentials come from --config; every flag reaches its
// ClusterData field.
func TestAdminClusterCreateFlags(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+strings.TrimSpace(string(b))+" | "+r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	conf := filepath.Join(t.TempDir(), "client.conf")
	if err := os.WriteFile(conf, []byte("webServiceUrl=http://127.0.0.1:1\nauthPlugin=basic\nauthParams=u:p\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "west", "--url", "http://west:8080", "--url-secure", "https://west:8443", "--broker-url", "pulsar://west:6650",
			"--broker-url-secure", "pulsar+ssl://west:6651", "--auth-plugin", "token", "--auth-parameters", "token:x", "--tls-enable",
			"--tls-allow-insecure", "--tls-trust-certs-filepath", "/ca.pem", "--listener-name", "internal", "--proxy-url", "pulsar://p:4080",
			"--proxy-protocol", "SNI"},
			`PUT /admin/v2/clusters/west {"serviceUrl":"http://west:8080","serviceUrlTls":"https://west:8443",` +
				`"brokerServiceUrl":"pulsar://west:6650","brokerServiceUrlTls":"pulsar+ssl://west:6651","proxyServiceUrl":"pulsar://p:4080",` +
				`"proxyProtocol":"SNI","authenticationPlugin":"token","authenticationParameters":"token:x","brokerClientTlsEnabled":true,` +
				`"tlsAllowInsecureConnection":true,"brokerClientTlsEnabledWithKeyStore":false,"brokerClientTrustCertsFilePath":"/ca.pem",` +
				`"listenerName":"internal"}`},
		{[]string{"update", "west", "--url", "http://west2:8080"},
			`POST /admin/v2/clusters/west {"serviceUrl":"http://west2:8080","brokerClientTlsEnabled":false,` +
				`"tlsAllowInsecureConnection":false,"brokerClientTlsEnabledWithKeyStore":false}`},
	} {
		mu.Lock()
		got = nil
		mu.Unlock()
		code := -1
		out := captureStdout(t, func() {
			code = run(append([]string{"admin", "--admin-url", srv.URL, "--config", conf, "clusters"}, tc.args...))
		})
		mu.Lock()
		if code != 0 || len(got) != 1 || got[0] != tc.want+" | Basic dTpw" {
			t.Errorf("%v: exit %d, output %q, sent %q\nwant %q", tc.args, code, out, got, tc.want+" | Basic dTpw")
		}
		mu.Unlock()
	}
	// A bad cluster name is a usage error; nothing is sent.
	mu.Lock()
	got = nil
	mu.Unlock()
	if code := run([]string{"admin", "--admin-url", srv.URL, "clusters", "create", "bad/name", "--url", "http://x:8080"}); code != 2 {
		t.Errorf("bad name: exit %d, want 2", code)
	}
	if code := run([]string{"admin", "--admin-url", srv.URL, "namespaces", "set-clusters", "acme/ns"}); code != 2 {
		t.Errorf("set-clusters without --clusters: exit %d, want 2", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 0 {
		t.Errorf("refused commands sent %q", got)
	}
}
