package interop

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/itest"
)

// TestStandaloneSecureConfig: `magnetar standalone --config standalone.conf`, the file in
// Pulsar's keys with the plain listeners off, TLS listeners, token authentication and
// authorization on: pulsar-client-go gets in over pulsar+ssl:// with the superuser's token,
// the plain port is closed, and a role without a grant is refused.
func TestStandaloneSecureConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	p := newTLSPKI(t)
	keyFile := filepath.Join(p.dir, "secret.key")
	if err := os.WriteFile(keyFile, secKey, 0o600); err != nil {
		t.Fatal(err)
	}
	etcd, bk, tlsAddr, web := itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t)
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	conf := filepath.Join(p.dir, "standalone.conf")
	text := fmt.Sprintf(`# Pulsar standalone.conf keys
bindAddress=127.0.0.1
brokerServicePort=
brokerServicePortTls=%s
webServicePort=
webServicePortTls=%s
tlsCertificateFilePath=%s
tlsKeyFilePath=%s
tlsTrustCertsFilePath=%s
tlsProtocols=TLSv1.3,TLSv1.2
authenticationEnabled=true
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken
tokenSecretKey=file://%s
authorizationEnabled=true
superUserRoles=admin,proxy
clusterName=secure
managedLedgerDefaultEnsembleSize=1
numIOThreads=4
`, port(tlsAddr), port(web), p.server.Cert, p.server.Key, p.caFile, keyFile)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	proc := itest.Start(t, "standalone", "standalone", "--config", conf, "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--etcd-listen", etcd, "--bookie-listen", bk)
	itest.WaitTCP(t, tlsAddr, 60*time.Second)
	su := clientWith(t, pulsar.ClientOptions{URL: "pulsar+ssl://" + tlsAddr, TLSTrustCertsFilePath: p.caFile, TLSValidateHostname: true,
		Authentication: pulsar.NewAuthenticationToken(secToken(t, "admin", time.Hour))})
	if err := roundTripOne(t, su); err != nil {
		t.Fatalf("superuser over TLS: %v", err)
	}
	// The file turned the plain listeners off (brokerServicePort=, webServicePort=) and the
	// printed configuration masks the secret's location as a secret.
	out, err := exec.Command(itest.Binary(t), "standalone", "--config", conf, "--print-config").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nbroker-listen=\n", "\nhttp=\n", "\ntokenSecretKey=******\n", "\nauthorizationEnabled=true\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("print-config lacks %q:\n%s", want, out)
		}
	}
	other := clientWith(t, pulsar.ClientOptions{URL: "pulsar+ssl://" + tlsAddr, TLSTrustCertsFilePath: p.caFile,
		Authentication: pulsar.NewAuthenticationToken(secToken(t, "nobody", time.Hour))})
	if err := roundTripOne(t, other); err == nil || !strings.Contains(err.Error(), "AuthorizationError") {
		t.Errorf("role without a grant: %v", err)
	}
	if !proc.LogContains("ignoring keys Magnetar has no setting for") || !proc.LogContains("numIOThreads") {
		t.Error("the ignored key was not reported")
	}
	if proc.LogContains(string(secKey)) {
		t.Error("the secret key is in the log")
	}
}
