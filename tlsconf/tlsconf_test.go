package tlsconf_test

import (
	"crypto/tls"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/tlsconf"
	"github.com/magnetar-io/magnetar/tlsconf/tlstest"
)

type pki struct {
	dir    string
	ca     *tlstest.CA
	caFile string
	server tlstest.Files
}

func newPKI(t *testing.T, form tlstest.KeyForm) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	var err error
	if p.ca, err = tlstest.NewCA("test-ca"); err != nil {
		t.Fatal(err)
	}
	if p.caFile, err = p.ca.WriteCA(p.dir, "ca"); err != nil {
		t.Fatal(err)
	}
	if p.server, err = p.ca.IssueFiles(p.dir, "server", "broker", []string{"localhost", "127.0.0.1"}, form); err != nil {
		t.Fatal(err)
	}
	return p
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// serve accepts TLS connections with cfg and answers each with the client's CN ("-" for
// none).
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if tc.Handshake() != nil {
					return
				}
				cn := "-"
				if pc := tc.ConnectionState().PeerCertificates; len(pc) > 0 {
					cn = pc[0].Subject.CommonName
				}
				io.WriteString(c, cn)
			}()
		}
	}()
	return ln.Addr().String()
}

// dial connects with cfg; it returns what the server answered and the server's
// certificate serial.
func dial(addr string, cfg *tls.Config) (string, string, error) {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	if err != nil {
		return "", "", err
	}
	return string(b), c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func client(t *testing.T, o tlsconf.ClientOptions) *tls.Config {
	t.Helper()
	c, err := tlsconf.Client(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestServerClientCerts: client certificates are optional and verified when presented by
// default, required when configured; the server's certificate is checked against the CA
// and the dialled name (PKCS#8 and PKCS#1 keys).
func TestServerClientCerts(t *testing.T) {
	for _, form := range []tlstest.KeyForm{tlstest.PKCS8, tlstest.PKCS1} {
		p := newPKI(t, form)
		alice, err := p.ca.IssueFiles(p.dir, "alice", "alice", nil, tlstest.PKCS8)
		if err != nil {
			t.Fatal(err)
		}
		other, _ := tlstest.NewCA("other-ca")
		mallory, _ := other.IssueFiles(p.dir, "mallory", "mallory", nil, tlstest.PKCS8)
		noName, _ := p.ca.IssueFiles(p.dir, "noname", "broker", []string{"elsewhere.example"}, form)

		opt, err := tlsconf.NewServer(tlsconf.ServerOptions{CertFile: p.server.Cert, KeyFile: p.server.Key, TrustCertsFile: p.caFile}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		addr := serve(t, opt.Config())
		if cn, _, err := dial(addr, client(t, tlsconf.ClientOptions{TrustCertsFile: p.caFile})); err != nil || cn != "-" {
			t.Errorf("no client cert: %q %v", cn, err)
		}
		if cn, _, err := dial(addr, client(t, tlsconf.ClientOptions{TrustCertsFile: p.caFile, CertFile: alice.Cert, KeyFile: alice.Key})); err != nil || cn != "alice" {
			t.Errorf("alice: %q %v", cn, err)
		}
		// A certificate of another CA, presented anyway (Go's client would not offer it).
		mc := client(t, tlsconf.ClientOptions{TrustCertsFile: p.caFile, CertFile: mallory.Cert, KeyFile: mallory.Key})
		forced := mc.Certificates[0]
		mc.Certificates = nil
		mc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &forced, nil }
		if cn, _, err := dial(addr, mc); err == nil {
			t.Errorf("untrusted client cert accepted: %q", cn)
		}
		// The client checks the server: unknown CA, and a certificate without the dialled name.
		if _, _, err := dial(addr, client(t, tlsconf.ClientOptions{})); err == nil {
			t.Error("server cert of an unknown CA accepted")
		}
		req, err := tlsconf.NewServer(tlsconf.ServerOptions{CertFile: noName.Cert, KeyFile: noName.Key, TrustCertsFile: p.caFile,
			RequireClientCert: true, MinVersion: "TLSv1.3"}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		raddr := serve(t, req.Config())
		_, _, err = dial(raddr, client(t, tlsconf.ClientOptions{TrustCertsFile: p.caFile, CertFile: alice.Cert, KeyFile: alice.Key}))
		if err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("hostname check: %v", err)
		}
		if cn, _, err := dial(raddr, client(t, tlsconf.ClientOptions{TrustCertsFile: p.caFile, SkipHostnameVerification: true,
			CertFile: alice.Cert, KeyFile: alice.Key})); err != nil || cn != "alice" {
			t.Errorf("hostname check off: %q %v", cn, err)
		}
		if cn, _, err := dial(raddr, client(t, tlsconf.ClientOptions{TrustCertsFile: p.caFile, SkipHostnameVerification: true})); err == nil {
			t.Errorf("client without a cert accepted where required: %q", cn)
		}
		tls12 := client(t, tlsconf.ClientOptions{TrustCertsFile: p.caFile, AllowInsecure: true, CertFile: alice.Cert, KeyFile: alice.Key})
		tls12.MaxVersion = tls.VersionTLS12
		if _, _, err := dial(raddr, tls12); err == nil {
			t.Error("TLS 1.2 accepted with MinVersion TLSv1.3")
		}
	}
}

// TestServerReload: a new certificate written over the files is served to new connections
// once the refresh interval passed; files that do not load keep the previous certificate.
func TestServerReload(t *testing.T) {
	p := newPKI(t, tlstest.PKCS8)
	now := time.Unix(1000, 0)
	s, err := tlsconf.NewServer(tlsconf.ServerOptions{CertFile: p.server.Cert, KeyFile: p.server.Key,
		RefreshInterval: time.Minute, Now: func() time.Time { return now }}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Config())
	cc := client(t, tlsconf.ClientOptions{TrustCertsFile: p.caFile})
	_, first, err := dial(addr, cc)
	if err != nil {
		t.Fatal(err)
	}
	c2, k2, err := p.ca.Issue("broker", []string{"127.0.0.1"}, tlstest.PKCS1)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p.server.Cert, c2, 0o644)
	os.WriteFile(p.server.Key, k2, 0o600)
	if _, got, _ := dial(addr, cc); got != first {
		t.Fatalf("reloaded before the refresh interval: %s -> %s", first, got)
	}
	now = now.Add(time.Minute)
	_, second, err := dial(addr, cc)
	if err != nil || second == first {
		t.Fatalf("not reloaded: %s -> %s (%v)", first, second, err)
	}
	os.WriteFile(p.server.Key, []byte("garbage"), 0o600)
	now = now.Add(time.Minute)
	if _, got, err := dial(addr, cc); err != nil || got != second {
		t.Fatalf("bad files replaced the certificate: %s -> %s (%v)", second, got, err)
	}
}

func TestOptionErrors(t *testing.T) {
	p := newPKI(t, tlstest.PKCS8)
	for _, o := range []tlsconf.ServerOptions{
		{},
		{CertFile: p.server.Cert, KeyFile: "/nonexistent"},
		{CertFile: p.server.Cert, KeyFile: p.server.Key, RequireClientCert: true},
		{CertFile: p.server.Cert, KeyFile: p.server.Key, MinVersion: "SSLv3"},
		{CertFile: p.server.Cert, KeyFile: p.server.Key, Ciphers: []string{"TLS_RSA_WITH_RC4_128_SHA"}},
		{CertFile: p.server.Cert, KeyFile: p.server.Key, TrustCertsFile: p.server.Key},
	} {
		if _, err := tlsconf.NewServer(o, quiet); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := tlsconf.NewServer(tlsconf.ServerOptions{CertFile: p.server.Cert, KeyFile: p.server.Key,
		Ciphers: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}}, quiet); err != nil {
		t.Error(err)
	}
}
