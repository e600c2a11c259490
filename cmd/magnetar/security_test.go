package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/magnetar-io/magnetar/admin"
	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/tlsconf"
	"github.com/magnetar-io/magnetar/tlsconf/tlstest"
)

// TestMain lets the tests run the command line in a child process (runChild): tests that
// keep etcd or a broker in process must not swap os.Stdout and os.Stderr under them.
func TestMain(m *testing.M) {
	if os.Getenv("MAGNETAR_CMD_CHILD") == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// runChild runs the command line in a child process and returns its exit code and output.
func runChild(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "MAGNETAR_CMD_CHILD=1")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// secureBroker is an in-process broker (in-memory topics) with a TLS protocol listener and
// an HTTPS admin API, token, basic and TLS authentication, and authorization with the
// superuser "admin".
type secureBroker struct {
	dir, caFile, secretURL string
	pulsarURL, httpsURL    string
	adminCert              tlstest.Files
	secret                 []byte
}

func startSecureBroker(t *testing.T) *secureBroker {
	t.Helper()
	sb := &secureBroker{dir: t.TempDir(), secret: []byte("cmd-test secret key of 32 bytes!")}
	ca, err := tlstest.NewCA("cmd-ca")
	if err != nil {
		t.Fatal(err)
	}
	sb.caFile, _ = ca.WriteCA(sb.dir, "ca")
	srv, err := ca.IssueFiles(sb.dir, "server", "broker", []string{"127.0.0.1"}, tlstest.PKCS1)
	if err != nil {
		t.Fatal(err)
	}
	sb.adminCert, _ = ca.IssueFiles(sb.dir, "admin-client", "admin", nil, tlstest.PKCS8)
	sb.secretURL = "data:;base64," + base64.StdEncoding.EncodeToString(sb.secret)
	htpasswd := filepath.Join(sb.dir, "htpasswd")
	os.WriteFile(htpasswd, []byte("admin:$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/\n"), 0o600) // admin:secret
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ts, err := tlsconf.NewServer(tlsconf.ServerOptions{CertFile: srv.Cert, KeyFile: srv.Key, TrustCertsFile: sb.caFile}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{Enabled: true, Providers: []string{"token", "basic", "tls"}, BasicFile: htpasswd,
		Token: auth.TokenConfig{SecretKey: sb.secretURL}})
	if err != nil {
		t.Fatal(err)
	}
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	mem := topictest.NewStore()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := broker.InitializeCluster(ctx, store, "standalone", broker.ClusterData{BrokerServiceURL: "pulsar://x"}); err != nil {
		t.Fatal(err)
	}
	svc, err := broker.Start(ctx, broker.Config{Store: store, DisablePlain: true, ListenTLS: "127.0.0.1:0", TLS: ts.Config(),
		Auth: a, Authz: auth.NewAuthorizer(true, []string{"admin"}), Logger: quiet,
		OpenLog: func(_ context.Context, name string) (topic.Log, error) { return mem.Open(name), nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: a.Middleware(admin.Handler(svc, admin.Options{Logger: quiet}))}
	go hs.Serve(tls.NewListener(ln, ts.Config()))
	t.Cleanup(func() { hs.Close() })
	sb.pulsarURL = "pulsar+ssl://" + svc.AddrTLS().String()
	sb.httpsURL = "https://" + ln.Addr().String()
	return sb
}

func (sb *secureBroker) token(t *testing.T, sub string) string {
	t.Helper()
	s, err := auth.CreateToken(jwt.SigningMethodHS256, sb.secret, sub, time.Now().Add(time.Hour), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestToolsWithCredentials: `magnetar admin` over https:// with a token, basic credentials,
// a client certificate, and a client.conf (token file with a trailing newline); without
// credentials it gets 401, without permission 403; `magnetar produce` over pulsar+ssl://
// with a token is refused without a grant and works with it.
func TestToolsWithCredentials(t *testing.T) {
	sb := startSecureBroker(t)
	base := []string{"admin", "--url", sb.httpsURL, "--tls-trust-certs-file", sb.caFile}
	for name, creds := range map[string][]string{
		"token": {"--auth-plugin", "token", "--auth-params", "token:" + sb.token(t, "admin")},
		"basic": {"--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationBasic", "--auth-params", `{"userId":"admin","password":"secret"}`},
		"tls":   {"--auth-plugin", "tls", "--auth-params", "tlsCertFile:" + sb.adminCert.Cert + ",tlsKeyFile:" + sb.adminCert.Key},
	} {
		code, out, errs := runChild(t, append(append(append([]string{}, base...), creds...), "tenants", "list")...)
		if code != 0 || !strings.Contains(out, "public\npulsar\n") {
			t.Errorf("%s: exit %d, %q %q", name, code, out, errs)
		}
	}
	if code, _, errs := runChild(t, append(base, "tenants", "list")...); code != 1 || !strings.Contains(errs, "401") {
		t.Errorf("anonymous: exit %d, %q", code, errs)
	}
	aliceTok := filepath.Join(sb.dir, "alice.token")
	os.WriteFile(aliceTok, []byte(sb.token(t, "alice")+"\n"), 0o600)
	if code, _, errs := runChild(t, append(base, "--auth-plugin", "token", "--auth-params", "file://"+aliceTok, "tenants", "list")...); code != 1 || !strings.Contains(errs, "403") {
		t.Errorf("alice: exit %d, %q", code, errs)
	}
	produce := []string{"produce", "--url", sb.pulsarURL, "--tls-trust-certs-file", sb.caFile, "--auth-plugin", "token",
		"--auth-params", "file://" + aliceTok, "-m", "hi", "persistent://public/default/cli"}
	if code, _, errs := runChild(t, produce...); code != 1 || !strings.Contains(errs, "AuthorizationError") {
		t.Errorf("produce without a grant: exit %d, %q", code, errs)
	}

	// The superuser grants alice, from a client.conf.
	adminTok := filepath.Join(sb.dir, "admin.token")
	os.WriteFile(adminTok, []byte(sb.token(t, "admin")+"\n"), 0o600)
	conf := writeConf(t, "webServiceUrl="+sb.httpsURL+"\nbrokerServiceUrl="+sb.pulsarURL+
		"\nauthPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\nauthParams=file://"+adminTok+
		"\ntlsTrustCertsFilePath="+sb.caFile+"\ntlsEnableHostnameVerification=true\ntlsAllowInsecureConnection=false\n")
	if code, _, errs := runChild(t, "admin", "--config", conf, "namespaces", "grant-permission", "public/default", "--role", "alice", "--actions", "produce"); code != 0 {
		t.Fatalf("grant: %d %q", code, errs)
	}
	if code, out, errs := runChild(t, "admin", "--config", conf, "namespaces", "permissions", "public/default"); code != 0 || !strings.Contains(out, `"produce"`) {
		t.Fatalf("permissions: %d %q %q", code, out, errs)
	}
	if code, out, errs := runChild(t, produce...); code != 0 {
		t.Fatalf("produce with the grant: exit %d, %q %q", code, out, errs)
	}
	// The Pulsar tools read client.conf too.
	if code, _, errs := runChild(t, "produce", "--config", conf, "-m", "from conf", "persistent://public/default/cli"); code != 0 {
		t.Fatalf("produce --config: %d %q", code, errs)
	}
	if code, out, _ := runChild(t, "produce", "--config", conf, "--print-config", "t"); code != 0 || !strings.Contains(out, "authParams=******") || strings.Contains(out, adminTok) {
		t.Errorf("print-config: %d %q", code, out)
	}
	if code, _, errs := runChild(t, "admin", "--config", conf, "topics", "revoke-permission", "public/default/cli"); code != 2 || !strings.Contains(errs, "--role is required") {
		t.Errorf("revoke without a role: %d %q", code, firstLine(errs))
	}
}

// TestInitializeClusterMetadata: the command writes the cluster record and the default
// tenants and namespaces, and a second run keeps them.
func TestInitializeClusterMetadata(t *testing.T) {
	eps := metadatatest.Embedded(t)
	url := "etcd://" + strings.TrimPrefix(eps[0], "http://")
	args := []string{"initialize-cluster-metadata", "--metadata-url", url, "--cluster", "c1",
		"--broker-service-url", "pulsar://b:6650", "--broker-service-url-tls", "pulsar+ssl://b:6651", "--web-service-url", "http://b:8080"}
	if code, out, errs := runChild(t, args...); code != 0 || !strings.Contains(out, "cluster c1 initialized") {
		t.Fatalf("%d %q %q", code, out, errs)
	}
	if code, out, _ := runChild(t, args...); code != 0 || !strings.Contains(out, "exists") {
		t.Fatalf("second run: %d %q", code, out)
	}
	store := metadatatest.OpenStore(t, eps, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svc, err := broker.Start(ctx, broker.Config{Store: store, Listen: "127.0.0.1:0", Cluster: "c1",
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		OpenLog: func(_ context.Context, name string) (topic.Log, error) { return topictest.NewStore().Open(name), nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	cd, err := svc.Cluster(ctx, "c1")
	if err != nil || cd.BrokerServiceURLTLS != "pulsar+ssl://b:6651" || cd.ServiceURL != "http://b:8080" {
		t.Fatalf("cluster record %+v %v", cd, err)
	}
	for _, ns := range []string{"public/default", "pulsar/system"} {
		if _, err := svc.Namespace(ctx, ns); err != nil {
			t.Errorf("%s: %v", ns, err)
		}
	}
	if code, _, errs := runChild(t, "initialize-cluster-metadata", "--metadata-url", url); code != 2 || !strings.Contains(errs, "--cluster is required") {
		t.Errorf("no cluster: %d %q", code, firstLine(errs))
	}
}
