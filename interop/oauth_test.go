package interop

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/golang-jwt/jwt/v5"

	"github.com/magnetar-io/magnetar/admin"
	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/tlsconf"
)

// testIssuer is a local OAuth2 issuer: OpenID discovery and a client-credentials token
// endpoint that signs RS256 JWTs (sub = the client id, aud = the requested audience).
type testIssuer struct {
	*httptest.Server
	key    *rsa.PrivateKey
	issued atomic.Int32
}

func newTestIssuer(t *testing.T, clientID, secret string) *testIssuer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &testIssuer{key: k}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"issuer": is.URL, "token_endpoint": is.URL + "/oauth/token"})
	})
	mux.HandleFunc("POST /oauth/token", func(w http.ResponseWriter, r *http.Request) {
		if r.ParseForm() != nil || r.PostForm.Get("grant_type") != "client_credentials" ||
			r.PostForm.Get("client_id") != clientID || r.PostForm.Get("client_secret") != secret {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client"})
			return
		}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": clientID, "iss": is.URL,
			"aud": r.PostForm.Get("audience"), "exp": time.Now().Add(time.Hour).Unix()}).SignedString(is.key)
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		is.issued.Add(1)
		json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3600})
	})
	is.Server = httptest.NewServer(mux)
	t.Cleanup(is.Close)
	return is
}

// publicKey is the issuer's key as tokenPublicKey takes it (base64 DER).
func (is *testIssuer) publicKey(t *testing.T) string {
	der, err := x509.MarshalPKIXPublicKey(&is.key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(der)
}

// TestOAuth2ClientCredentials: pulsar-client-go fetches a JWT from a local issuer with the
// client-credentials flow and presents it as a token; the broker verifies its RS256
// signature with the issuer's public key and its audience.
func TestOAuth2ClientCredentials(t *testing.T) {
	is := newTestIssuer(t, "svc-client", "s3cret")
	const aud = "urn:magnetar:interop"
	c := secCluster(t, auth.Config{Providers: []string{"token"}, Token: auth.TokenConfig{PublicKey: is.publicKey(t), Audience: aud}}, nil)
	creds := func(secret string) string {
		p := filepath.Join(t.TempDir(), "creds.json")
		b, _ := json.Marshal(map[string]string{"type": "client_credentials", "client_id": "svc-client", "client_secret": secret, "issuer_url": is.URL})
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return "file://" + p
	}
	oauth := func(secret, audience string) pulsar.Authentication {
		return pulsar.NewAuthenticationOAuth2(map[string]string{"type": "client_credentials", "issuerUrl": is.URL,
			"audience": audience, "privateKey": creds(secret), "clientId": "svc-client"})
	}
	if err := roundTripOne(t, clientWith(t, pulsar.ClientOptions{URL: c.url, Authentication: oauth("s3cret", aud)})); err != nil {
		t.Fatalf("OAuth2 client credentials: %v", err)
	}
	if is.issued.Load() == 0 {
		t.Fatal("no token was issued")
	}
	// A token for another audience verifies its signature but is refused.
	if err := roundTripOne(t, clientWith(t, pulsar.ClientOptions{URL: c.url, Authentication: oauth("s3cret", "urn:other")})); err == nil {
		t.Error("a token for another audience was accepted")
	}
	// An HS256 token is refused by a broker that verifies RS256 with a public key.
	if err := roundTripOne(t, clientWith(t, pulsar.ClientOptions{URL: c.url, Authentication: pulsar.NewAuthenticationToken(secToken(t, "x", time.Hour))})); err == nil {
		t.Error("an HS256 token was accepted")
	}
}

// TestHTTPSServiceURL: pulsar-client-go with an https:// service URL looks topics up over
// the admin API's HTTPS listener (with its token) and then connects over pulsar+ssl://.
func TestHTTPSServiceURL(t *testing.T) {
	p := newTLSPKI(t)
	ac := &auth.Config{Providers: []string{"token"}, Token: auth.TokenConfig{SecretKey: "data:;base64," + base64.StdEncoding.EncodeToString(secKey)}}
	c := tlsCluster(t, p, p.server, ac)
	ts, err := tlsconf.NewServer(tlsconf.ServerOptions{CertFile: p.server.Cert, KeyFile: p.server.Key}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewUnstartedServer(c.cfg.Auth.Middleware(admin.Handler(c.broker, admin.Options{Logger: testLogger(t)})))
	web.TLS = ts.Config()
	web.StartTLS()
	t.Cleanup(web.Close)
	tok := pulsar.NewAuthenticationToken(secToken(t, "https-user", time.Hour))
	if err := roundTripOne(t, clientWith(t, pulsar.ClientOptions{URL: web.URL, TLSTrustCertsFilePath: p.caFile,
		TLSValidateHostname: true, Authentication: tok})); err != nil {
		t.Fatalf("https:// service URL: %v", err)
	}
	if err := roundTripOne(t, clientWith(t, pulsar.ClientOptions{URL: web.URL, TLSTrustCertsFilePath: p.caFile})); err == nil {
		t.Error("served without credentials")
	}
}
