package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/itest"
	"github.com/magnetar-io/magnetar/pulsarclient"
	"github.com/magnetar-io/magnetar/tlsconf/tlstest"
)

// TestStandaloneAdvertisedAddress runs a standalone from a Pulsar-style standalone.conf
// binding every listener to 0.0.0.0 and advertising localhost: binary lookups (plain and
// TLS), HTTP lookups and the printed URLs name localhost, never the wildcard, and a TLS
// client checking the certificate's localhost name produces through the lookup.
func TestStandaloneAdvertisedAddress(t *testing.T) {
	dir := t.TempDir()
	ca, err := tlstest.NewCA("adv-ca")
	if err != nil {
		t.Fatal(err)
	}
	caFile, _ := ca.WriteCA(dir, "ca")
	srv, err := ca.IssueFiles(dir, "server", "localhost", []string{"localhost"}, tlstest.PKCS8)
	if err != nil {
		t.Fatal(err)
	}
	port := func() string { _, p, _ := net.SplitHostPort(itest.FreeAddr(t)); return p }
	pPlain, pTLS, pWeb := port(), port(), port()
	conf := filepath.Join(dir, "standalone.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf(`# Pulsar's standalone.conf keys
bindAddress=0.0.0.0
advertisedAddress=localhost
brokerServicePort=%s
brokerServicePortTls=%s
webServicePort=%s
tlsCertificateFilePath=%s
tlsKeyFilePath=%s
tlsTrustCertsFilePath=%s
clusterName=standalone
`, pPlain, pTLS, pWeb, srv.Cert, srv.Key, caFile)), 0o644)
	cmd := exec.Command(os.Args[0], "standalone", "--config", conf, "--data-dir", filepath.Join(dir, "data"),
		"--etcd-listen", itest.FreeAddr(t), "--bookie-listen", itest.FreeAddr(t), "--log-level", "warn")
	cmd.Env = append(os.Environ(), "MAGNETAR_CMD_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("standalone stderr:\n%s", stderr.String())
		}
	})
	// The standalone prints its URLs once it serves.
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "pulsar:"); ok {
				urls <- strings.TrimSpace(l)
			}
		}
		close(urls)
	}()
	select {
	case got, ok := <-urls:
		if want := "pulsar://localhost:" + pPlain + ", pulsar+ssl://localhost:" + pTLS; !ok || got != want {
			t.Fatalf("standalone prints %q, want %q", got, want)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("standalone did not come up in 90 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "persistent://public/default/advertised"

	// Binary lookup on the plain listener (reached through the loopback address).
	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://127.0.0.1:" + pPlain})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got, err := cl.Lookup(ctx, topic); err != nil || got != "localhost:"+pPlain {
		t.Errorf("binary lookup: %q, %v; want localhost:%s", got, err, pPlain)
	}

	// HTTP lookup.
	resp, err := http.Get("http://127.0.0.1:" + pWeb + "/lookup/v2/topic/persistent/public/default/advertised")
	if err != nil {
		t.Fatal(err)
	}
	var ld map[string]string
	err = json.NewDecoder(resp.Body).Decode(&ld)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"brokerUrl": "pulsar://localhost:" + pPlain, "brokerUrlTls": "pulsar+ssl://localhost:" + pTLS,
		"httpUrl": "http://localhost:" + pWeb, "nativeUrl": "pulsar://localhost:" + pPlain} {
		if ld[k] != want {
			t.Errorf("HTTP lookup %s = %q, want %q (answer %v)", k, ld[k], want, ld)
		}
	}

	// A TLS client that checks the certificate's name (localhost) looks up and produces.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	tcl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar+ssl://localhost:" + pTLS,
		TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	defer tcl.Close()
	if got, err := tcl.Lookup(ctx, topic); err != nil || got != "localhost:"+pTLS {
		t.Errorf("TLS lookup: %q, %v; want localhost:%s", got, err, pTLS)
	}
	p, err := tcl.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("TLS producer: %v", err)
	}
	defer p.Close(context.Background())
	if _, err := p.Send(ctx, &pulsarclient.ProducerMessage{Payload: []byte("over TLS to localhost")}); err != nil {
		t.Fatalf("TLS send: %v", err)
	}
}

// TestAdvertisedKeys: broker.conf's and standalone.conf's advertisedAddress,
// advertisedListeners and internalListenerName set the advertised-address flags of both
// commands, and what Pulsar's MultipleListenerValidator refuses exits 2 naming the key.
func TestAdvertisedKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	good := write("good.conf", "bindAddress=0.0.0.0\nadvertisedAddress=broker1.example\n")
	listeners := write("listeners.conf", "advertisedListeners=internal:pulsar://10.0.0.1:6650,external:pulsar+ssl://b.example:6651\n"+
		"internalListenerName=internal\n")
	both := write("both.conf", "advertisedAddress=x\nadvertisedListeners=internal:pulsar://10.0.0.1:6650\n")
	badScheme := write("bad.conf", "advertisedListeners=internal:kafka://10.0.0.1:9092\n")
	for _, role := range []string{"broker", "standalone"} {
		code, out, errOut := runChild(t, role, "--config", good, "--print-config")
		if code != 0 || !strings.Contains(out, "advertisedAddress=broker1.example\n") {
			t.Errorf("%s --config good: exit %d\n%s%s", role, code, out, errOut)
		}
		code, out, errOut = runChild(t, role, "--config", listeners, "--print-config")
		if code != 0 || !strings.Contains(out, "internalListenerName=internal\n") || !strings.Contains(out, "external:pulsar+ssl://b.example:6651") {
			t.Errorf("%s --config listeners: exit %d\n%s%s", role, code, out, errOut)
		}
		for conf, want := range map[string]string{both: "must not appear together", badScheme: "unknown scheme"} {
			extra := []string{"--metadata-url", "etcd://127.0.0.1:1"}
			if role == "standalone" {
				extra = []string{"--data-dir", filepath.Join(dir, "data")}
			}
			code, _, errOut := runChild(t, append([]string{role, "--config", conf}, extra...)...)
			if code != 2 || !strings.Contains(errOut, want) {
				t.Errorf("%s --config %s: exit %d, want 2 naming %q:\n%s", role, filepath.Base(conf), code, want, errOut)
			}
		}
	}
}
