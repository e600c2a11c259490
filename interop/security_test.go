package interop

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/golang-jwt/jwt/v5"
	dto "github.com/prometheus/client_model/go"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/bookie"
	bkclient "github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/tlsconf"
	"github.com/magnetar-io/magnetar/tlsconf/tlstest"
)

var secKey = []byte("interop secret key of 32 bytes!!")

func secToken(t *testing.T, sub string, ttl time.Duration) string {
	t.Helper()
	var exp time.Time
	if ttl != 0 {
		exp = time.Now().Add(ttl)
	}
	s, err := auth.CreateToken(jwt.SigningMethodHS256, secKey, sub, exp, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// secCluster is a broker (in-memory logs) whose clients must authenticate.
func secCluster(t *testing.T, ac auth.Config, tweak func(*broker.Config)) *cluster {
	t.Helper()
	ac.Enabled = true
	if ac.Token.SecretKey == "" && ac.Token.PublicKey == "" {
		ac.Token.SecretKey = "data:;base64," + base64.StdEncoding.EncodeToString(secKey)
	}
	a, err := auth.New(ac)
	if err != nil {
		t.Fatal(err)
	}
	return newCluster(t, clusterOpts{memLog: true, tweak: func(c *broker.Config) {
		c.Auth = a
		if tweak != nil {
			tweak(c)
		}
	}})
}

func clientWith(t *testing.T, o pulsar.ClientOptions) pulsar.Client {
	t.Helper()
	o.OperationTimeout, o.ConnectionTimeout, o.Logger = 5*time.Second, 5*time.Second, clientLogger()
	cl, err := pulsar.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// roundTripOne produces one message and consumes it.
func roundTripOne(t *testing.T, cl pulsar.Client) error {
	t.Helper()
	topic := topicName(t)
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		return err
	}
	defer cons.Close()
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		return err
	}
	defer p.Close()
	if _, err := p.Send(ctxT(t, 30*time.Second), &pulsar.ProducerMessage{Payload: []byte("hello")}); err != nil {
		return err
	}
	m, err := cons.Receive(ctxT(t, 30*time.Second))
	if err != nil {
		return err
	}
	if string(m.Payload()) != "hello" {
		t.Fatalf("got %q", m.Payload())
	}
	return cons.Ack(m)
}

func counter(t *testing.T, svc *broker.Service, name string) float64 {
	t.Helper()
	mfs, err := svc.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += (*dto.Metric).GetCounter(m).GetValue()
			}
			return sum
		}
	}
	return 0
}

// TestTokenAuth: pulsar-client-go authenticates with a token given as a string, by a
// supplier, and from a file ending in a newline; a client with a wrong token or none is
// refused.
func TestTokenAuth(t *testing.T) {
	c := secCluster(t, auth.Config{Providers: []string{"token"}}, nil)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(secToken(t, "file-user", time.Hour)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]pulsar.Authentication{
		"string":   pulsar.NewAuthenticationToken(secToken(t, "string-user", time.Hour)),
		"supplier": pulsar.NewAuthenticationTokenFromSupplier(func() (string, error) { return secToken(t, "supplied", time.Hour), nil }),
		"file":     pulsar.NewAuthenticationTokenFromFile(file),
	} {
		if err := roundTripOne(t, clientWith(t, pulsar.ClientOptions{URL: c.url, Authentication: a})); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	wrong, _ := auth.CreateToken(jwt.SigningMethodHS256, []byte("not the broker's key, 32 bytes.."), "x", time.Time{}, nil)
	before := counter(t, c.broker, "magnetar_broker_authentication_failures_total")
	for name, a := range map[string]pulsar.Authentication{
		"wrong key": pulsar.NewAuthenticationToken(wrong),
		"expired":   pulsar.NewAuthenticationToken(secToken(t, "x", -time.Minute)),
		"none":      nil,
	} {
		err := roundTripOne(t, clientWith(t, pulsar.ClientOptions{URL: c.url, Authentication: a}))
		if err == nil {
			t.Errorf("%s: served", name)
		}
	}
	if after := counter(t, c.broker, "magnetar_broker_authentication_failures_total"); after < before+3 {
		t.Errorf("authentication failures %v -> %v", before, after)
	}
}

// TestTokenRefresh: a token that expires on a live connection is refreshed: the broker
// challenges, pulsar-client-go answers with the supplier's fresh token, and the producer
// keeps working on the same connection.
func TestTokenRefresh(t *testing.T) {
	c := secCluster(t, auth.Config{Providers: []string{"token"}}, func(bc *broker.Config) { bc.AuthRefreshInterval = 50 * time.Millisecond })
	calls := make(chan struct{}, 100)
	var n atomic.Int32
	supplier := func() (string, error) {
		calls <- struct{}{}
		if n.Add(1) <= 2 { // Init (which only checks the supplier works) and CONNECT
			return secToken(t, "refresher", 2*time.Second), nil
		}
		return secToken(t, "refresher", time.Hour), nil
	}
	cl := clientWith(t, pulsar.ClientOptions{URL: c.url, Authentication: pulsar.NewAuthenticationTokenFromSupplier(supplier)})
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topicName(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := ctxT(t, 30*time.Second)
	for i := 0; i < 3; i++ { // Init's, the CONNECT's, then the AUTH_RESPONSE's
		select {
		case <-calls:
		case <-ctx.Done():
			t.Fatalf("supplier called %d times", i)
		}
	}
	// The client queues its AUTH_RESPONSE as soon as the supplier returns; two sends later
	// the broker has handled it (a connection's commands are handled in order).
	for i := 0; i < 2; i++ {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after refresh")}); err != nil {
			t.Fatal(err)
		}
	}
	if got := counter(t, c.broker, "magnetar_broker_authentication_refreshes_total"); got != 1 {
		t.Errorf("%v refreshes, want 1", got)
	}
	if got := counter(t, c.broker, "magnetar_broker_authentication_failures_total"); got != 0 {
		t.Errorf("%v authentication failures", got)
	}
	// The connection was not replaced: no CONNECT after the first.
	if len(calls) > 0 {
		t.Errorf("supplier called %d more times: the client reconnected", len(calls))
	}
}

// tlsPKI is a CA, a broker certificate for 127.0.0.1, one without that name, and client
// certificates.
type tlsPKI struct {
	dir, caFile    string
	ca             *tlstest.CA
	server, noName tlstest.Files
}

func newTLSPKI(t *testing.T) *tlsPKI {
	t.Helper()
	p := &tlsPKI{dir: t.TempDir()}
	var err error
	if p.ca, err = tlstest.NewCA("interop-ca"); err != nil {
		t.Fatal(err)
	}
	if p.caFile, err = p.ca.WriteCA(p.dir, "ca"); err != nil {
		t.Fatal(err)
	}
	if p.server, err = p.ca.IssueFiles(p.dir, "broker", "broker", []string{"127.0.0.1", "localhost"}, tlstest.PKCS1); err != nil {
		t.Fatal(err)
	}
	if p.noName, err = p.ca.IssueFiles(p.dir, "noname", "broker", []string{"elsewhere.example"}, tlstest.PKCS8); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *tlsPKI) client(t *testing.T, cn string) tlstest.Files {
	t.Helper()
	f, err := p.ca.IssueFiles(p.dir, "client-"+cn, cn, nil, tlstest.PKCS8)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// tlsCluster is a broker with a TLS listener (certificate files srv) and the given
// authentication; its plain listener is off.
func tlsCluster(t *testing.T, p *tlsPKI, srv tlstest.Files, ac *auth.Config) *cluster {
	t.Helper()
	ts, err := tlsconf.NewServer(tlsconf.ServerOptions{CertFile: srv.Cert, KeyFile: srv.Key, TrustCertsFile: p.caFile}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	var a *auth.Service
	if ac != nil {
		ac.Enabled = true
		if a, err = auth.New(*ac); err != nil {
			t.Fatal(err)
		}
	}
	c := newCluster(t, clusterOpts{memLog: true, tweak: func(bc *broker.Config) {
		bc.DisablePlain, bc.ListenTLS, bc.TLS, bc.Auth = true, "127.0.0.1:0", ts.Config(), a
	}})
	c.url = "pulsar+ssl://" + c.broker.AddrTLS().String()
	return c
}

// TestTLS: pulsar-client-go over pulsar+ssl:// verifies the broker's certificate against
// the CA, and its hostname check fails for a certificate without the dialled name.
func TestTLS(t *testing.T) {
	p := newTLSPKI(t)
	c := tlsCluster(t, p, p.server, nil)
	if err := roundTripOne(t, clientWith(t, pulsar.ClientOptions{URL: c.url, TLSTrustCertsFilePath: p.caFile,
		TLSValidateHostname: true})); err != nil {
		t.Fatalf("TLS with CA verification: %v", err)
	}
	other, _ := tlstest.NewCA("other")
	otherFile, _ := other.WriteCA(p.dir, "other")
	if err := roundTripOne(t, clientWith(t, pulsar.ClientOptions{URL: c.url, TLSTrustCertsFilePath: otherFile})); err == nil {
		t.Error("a broker certificate of another CA was accepted")
	}
	bad := tlsCluster(t, p, p.noName, nil)
	if err := roundTripOne(t, clientWith(t, pulsar.ClientOptions{URL: bad.url, TLSTrustCertsFilePath: p.caFile,
		TLSValidateHostname: true})); err == nil {
		t.Error("hostname check passed for a certificate without the dialled name")
	}
	// The same broker is reachable by a client that allows insecure connections.
	if err := roundTripOne(t, clientWith(t, pulsar.ClientOptions{URL: bad.url, TLSAllowInsecureConnection: true})); err != nil {
		t.Errorf("insecure connection: %v", err)
	}
}

// TestTLSAndBasicAuth: the TLS provider takes the client certificate's CN as the role; the
// basic provider checks htpasswd users; one broker serves both (and tokens).
func TestTLSAndBasicAuth(t *testing.T) {
	p := newTLSPKI(t)
	htpasswd := filepath.Join(p.dir, "htpasswd")
	// alice:secret in apr1 (openssl passwd -apr1 -salt abcdefgh secret).
	if err := os.WriteFile(htpasswd, []byte("alice:$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := tlsCluster(t, p, p.server, &auth.Config{Providers: []string{"tls", "basic", "token"}, BasicFile: htpasswd,
		Token: auth.TokenConfig{SecretKey: "data:;base64," + base64.StdEncoding.EncodeToString(secKey)}})
	cert := p.client(t, "app-1")
	base := pulsar.ClientOptions{URL: c.url, TLSTrustCertsFilePath: p.caFile, TLSValidateHostname: true}
	basic, err := pulsar.NewAuthenticationBasic("alice", "secret")
	if err != nil {
		t.Fatal(err)
	}
	wrongPw, _ := pulsar.NewAuthenticationBasic("alice", "nope")
	for name, tc := range map[string]struct {
		a  pulsar.Authentication
		ok bool
	}{
		"client cert":    {pulsar.NewAuthenticationTLS(cert.Cert, cert.Key), true},
		"basic":          {basic, true},
		"token over TLS": {pulsar.NewAuthenticationToken(secToken(t, "tok", time.Hour)), true},
		"wrong password": {wrongPw, false},
		"nothing":        {nil, false},
	} {
		o := base
		o.Authentication = tc.a
		err := roundTripOne(t, clientWith(t, o))
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestBookieTLS: a bookie whose listener is TLS-only and a broker that dials it over TLS
// (verifying its certificate against the CA, presenting a client certificate the bookie
// requires) store and serve messages end to end.
func TestBookieTLS(t *testing.T) {
	p := newTLSPKI(t)
	bts, err := tlsconf.NewServer(tlsconf.ServerOptions{CertFile: p.server.Cert, KeyFile: p.server.Key,
		TrustCertsFile: p.caFile, RequireClientCert: true}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	brokerCert := p.client(t, "broker")
	cc, err := tlsconf.Client(tlsconf.ClientOptions{TrustCertsFile: p.caFile, CertFile: brokerCert.Cert, KeyFile: brokerCert.Key})
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, clusterOpts{
		bookie: func(bc *bookie.Config) { bc.TLS = bts.Config() },
		tweak:  func(cfg *broker.Config) { cfg.BookieDial = bkclient.DialTLS(cc) },
	})
	ctx := ctxT(t, 30*time.Second)
	if err := roundTripOne(t, clientWith(t, pulsar.ClientOptions{URL: c.url})); err != nil {
		t.Fatalf("through a TLS bookie: %v", err)
	}
	// A plain client of the bookie gets no answer it can read: a TLS dial without a client
	// certificate is refused by the bookie.
	noCert, _ := tlsconf.Client(tlsconf.ClientOptions{TrustCertsFile: p.caFile})
	conn, err := bkclient.DialTLS(noCert)(ctx, c.bookie.Addr())
	if err == nil {
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil {
		t.Error("the bookie served a TLS client without a certificate")
	}
}
