package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/adminclient"
	"github.com/magnetar-io/magnetar/auth"
	bkclient "github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/broker/access"
	"github.com/magnetar-io/magnetar/config"
	"github.com/magnetar-io/magnetar/internal/ratelog"
	"github.com/magnetar-io/magnetar/tlsconf"
)

// authFlags are the authentication settings of the broker and standalone.
type authFlags struct {
	enabled              bool
	providers            []string
	anonymous, basicConf string
	token                auth.TokenConfig
	refresh              time.Duration
	authz                bool
	superUsers           []string
	proxyRoles           []string
}

func (a *authFlags) add(f *pflag.FlagSet) {
	f.BoolVar(&a.enabled, "authentication-enabled", false, "authenticate clients (binary CONNECT and HTTP)")
	f.StringSliceVar(&a.providers, "authentication-providers", nil,
		"authentication providers: token, tls, basic (or Pulsar's AuthenticationProvider{Token,Tls,Basic} class names)")
	f.StringVar(&a.anonymous, "anonymous-user-role", "", "role of clients without credentials (empty: refuse them)")
	f.StringVar(&a.token.SecretKey, "token-secret-key", "", "HS256 token key: file:///path, data:;base64,... or base64")
	f.StringVar(&a.token.PublicKey, "token-public-key", "", "RS256/ES256 token public key: file:///path, data:;base64,... or base64")
	f.StringVar(&a.token.AuthClaim, "token-auth-claim", "sub", "token claim holding the role")
	f.StringVar(&a.token.AudienceClaim, "token-audience-claim", "aud", "token claim holding the audience")
	f.StringVar(&a.token.Audience, "token-audience", "", "audience a token must name (empty: not checked)")
	f.DurationVar(&a.token.ClockSkew, "token-allowed-clock-skew", 0, "leeway on token expiry and not-before")
	f.StringVar(&a.basicConf, "basic-auth-conf", "", "htpasswd file of basic authentication (path, file:///path or data:;base64,...)")
	f.DurationVar(&a.refresh, "authentication-refresh-check", time.Minute, "how often connections' credentials are checked for expiry")
	f.BoolVar(&a.authz, "authorization-enabled", false, "authorize lookups, producers, consumers and admin requests by role (needs authentication)")
	f.StringSliceVar(&a.superUsers, "superuser-roles", nil, "roles allowed everything")
	f.StringSliceVar(&a.proxyRoles, "proxy-roles", nil, "roles of proxies, which may forward their clients' roles (original principal)")
}

// authKeys are the Pulsar keys of authFlags.
var authKeys = []config.Key{
	{Name: "authenticationEnabled", Flag: "authentication-enabled"},
	{Name: "authenticationProviders", Flag: "authentication-providers"},
	{Name: "anonymousUserRole", Flag: "anonymous-user-role"},
	{Name: "tokenSecretKey", Flag: "token-secret-key", Secret: true},
	{Name: "tokenPublicKey", Flag: "token-public-key"},
	{Name: "tokenPublicAlg", Map: only("RS256", "Magnetar takes the algorithm family from the key; RS256 and ES256 tokens are accepted")},
	{Name: "tokenAuthClaim", Flag: "token-auth-claim"},
	{Name: "tokenAudienceClaim", Flag: "token-audience-claim"},
	{Name: "tokenAudience", Flag: "token-audience"},
	{Name: "tokenAllowedClockSkewSeconds", Flag: "token-allowed-clock-skew", Map: config.Seconds},
	{Name: "basicAuthConf", Flag: "basic-auth-conf", Secret: true},
	{Name: "authenticationRefreshCheckSeconds", Flag: "authentication-refresh-check", Map: config.Seconds},
	{Name: "authorizationEnabled", Flag: "authorization-enabled"},
	{Name: "superUserRoles", Flag: "superuser-roles"},
	{Name: "proxyRoles", Flag: "proxy-roles"},
}

// authSecretFlags are masked by --print-config.
var authSecretFlags = []string{"token-secret-key", "basic-auth-conf"}

// service builds the authentication service (nil when off). A provider that cannot start
// (a key that does not read) is a usage error.
func (a *authFlags) service() (*auth.Service, error) {
	for _, p := range a.providers {
		if _, ok := auth.ProviderName(p); !ok {
			return nil, usageError{fmt.Errorf("--authentication-providers: unknown provider %q", p)}
		}
	}
	if a.refresh <= 0 {
		return nil, usageError{fmt.Errorf("--authentication-refresh-check must be positive")}
	}
	if a.authz && !a.enabled {
		return nil, usageError{fmt.Errorf("--authorization-enabled needs --authentication-enabled (roles come from authentication)")}
	}
	s, err := auth.New(auth.Config{Enabled: a.enabled, Providers: a.providers, AnonymousRole: a.anonymous,
		Token: a.token, BasicFile: a.basicConf})
	if err != nil {
		return nil, usageError{err}
	}
	return s, nil
}

// authorizer builds the authorizer (nil when off).
func (a *authFlags) authorizer() *auth.Authorizer { return auth.NewAuthorizer(a.authz, a.superUsers) }

// withAuth authenticates the admin and lookup REST paths, writing the audit line of every
// refusal (package broker/access); /metrics stays open, as Pulsar's
// authenticateMetricsEndpoint=false leaves it, and /debug/pprof is the superusers'
// (mountPprof).
func withAuth(a *auth.Service, h http.Handler) http.Handler {
	if !a.Enabled() {
		return h
	}
	return access.NewAudit(slog.Default(), ratelog.Options{}).Authenticate(a, h)
}

// tlsFlags are the TLS listeners' settings of the broker and standalone.
type tlsFlags struct {
	listen, https            string // pulsar+ssl:// and https:// addresses ("": off)
	certFile, keyFile, trust string
	requireClientCert        bool
	minVersion               string
	ciphers                  []string
	refresh                  time.Duration
}

// add registers the flags; listenFlag names the TLS protocol listener's flag ("": the
// bookie's, whose one listener is TLS when a certificate is given).
func (t *tlsFlags) add(f *pflag.FlagSet, listenFlag string) {
	if listenFlag != "" {
		f.StringVar(&t.listen, listenFlag, "", "pulsar+ssl:// listen address, e.g. 127.0.0.1:6651 (empty: no TLS listener)")
		f.StringVar(&t.https, "https", "", "HTTPS admin REST and metrics address, e.g. 127.0.0.1:8443 (empty: none)")
	}
	f.StringVar(&t.certFile, "tls-cert-file", "", "PEM certificate (chain) of the TLS listeners")
	f.StringVar(&t.keyFile, "tls-key-file", "", "PEM private key of the TLS listeners (PKCS#8, PKCS#1 or SEC 1)")
	f.StringVar(&t.trust, "tls-trust-certs-file", "", "PEM CAs client certificates must chain to (empty: client certificates not asked for)")
	f.BoolVar(&t.requireClientCert, "tls-require-trusted-client-cert", false, "refuse TLS clients without a trusted certificate")
	f.StringVar(&t.minVersion, "tls-min-version", "TLSv1.2", "lowest TLS version accepted: TLSv1.2 or TLSv1.3")
	f.StringSliceVar(&t.ciphers, "tls-ciphers", nil, "TLS 1.2 cipher suites (IANA names; empty: Go's defaults)")
	f.DurationVar(&t.refresh, "tls-cert-refresh-check", 5*time.Minute, "how often the certificate files are checked for change (0: every handshake)")
}

// tlsKeys are the Pulsar keys of tlsFlags (listenFlag as in add).
func tlsKeys(listenFlag string) []config.Key {
	return []config.Key{
		{Name: "brokerServicePortTls", Flag: listenFlag, Map: portOn("bindAddress", "0.0.0.0", true)},
		{Name: "webServicePortTls", Flag: "https", Map: portOn("bindAddress", "0.0.0.0", true)},
		{Name: "tlsCertificateFilePath", Flag: "tls-cert-file"},
		{Name: "tlsKeyFilePath", Flag: "tls-key-file"},
		{Name: "tlsTrustCertsFilePath", Flag: "tls-trust-certs-file"},
		{Name: "tlsRequireTrustedClientCertOnConnect", Flag: "tls-require-trusted-client-cert"},
		{Name: "tlsProtocols", Flag: "tls-min-version", Map: lowestProtocol},
		{Name: "tlsCiphers", Flag: "tls-ciphers"},
		{Name: "tlsCertRefreshCheckDurationSec", Flag: "tls-cert-refresh-check", Map: config.Seconds},
	}
}

// lowestProtocol maps Pulsar's tlsProtocols list (e.g. TLSv1.3,TLSv1.2) to its lowest.
func lowestProtocol(v string, _ func(string) (string, bool)) (string, error) {
	if v == "" {
		return "", config.Skip
	}
	low, name := uint16(0xffff), ""
	for _, p := range strings.Split(v, ",") {
		n, err := tlsconf.ParseVersion(p)
		if err != nil {
			return "", err
		}
		if n < low {
			low, name = n, strings.TrimSpace(p)
		}
	}
	return name, nil
}

// server loads the TLS configuration if a TLS listener is on (nil otherwise).
func (t *tlsFlags) server() (*tlsconf.Server, error) {
	if t.listen == "" && t.https == "" {
		return nil, nil
	}
	return t.load()
}

// load loads the TLS configuration of the flags.
func (t *tlsFlags) load() (*tlsconf.Server, error) {
	s, err := tlsconf.NewServer(tlsconf.ServerOptions{CertFile: t.certFile, KeyFile: t.keyFile, TrustCertsFile: t.trust,
		RequireClientCert: t.requireClientCert, MinVersion: t.minVersion, Ciphers: t.ciphers, RefreshInterval: t.refresh},
		slog.Default())
	if err != nil {
		return nil, usageError{err}
	}
	return s, nil
}

// serveWeb starts the HTTP and HTTPS listeners that are on (an empty address is off) and
// returns their base URLs ("" for one that is off).
func serveWeb(ctx context.Context, httpAddr, httpsAddr string, ts *tlsconf.Server, h http.Handler) (httpURL, httpsURL string, err error) {
	if httpAddr != "" {
		a, err := serveHTTP(ctx, "--http", httpAddr, h)
		if err != nil {
			return "", "", err
		}
		httpURL = "http://" + a.String()
	}
	if httpsAddr != "" {
		a, err := serveHTTPS(ctx, "--https", httpsAddr, h, ts.Config())
		if err != nil {
			return "", "", err
		}
		httpsURL = "https://" + a.String()
	}
	return httpURL, httpsURL, nil
}

func adminURL(base string) string {
	if base == "" {
		return ""
	}
	return "admin " + base + adminclient.V2Root
}

func joinNonEmpty(ss ...string) string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, ", ")
}

// bookieTLSKeys are bookkeeper.conf's keys of the bookie's TLS listener.
var bookieTLSKeys = []config.Key{
	{Name: "tlsCertificatePath", Flag: "tls-cert-file"},
	{Name: "tlsKeyStore", Flag: "tls-key-file"},
	{Name: "tlsTrustStore", Flag: "tls-trust-certs-file"},
	{Name: "tlsClientAuthentication", Flag: "tls-require-trusted-client-cert"},
	{Name: "tlsCertFilesRefreshDurationSeconds", Flag: "tls-cert-refresh-check", Map: config.Seconds},
}

// bookieClientFlags are the broker's settings for bookies that serve TLS.
type bookieClientFlags struct {
	on                       bool
	trust, certFile, keyFile string
}

func (b *bookieClientFlags) add(f *pflag.FlagSet) {
	f.BoolVar(&b.on, "bookie-tls", false, "dial the bookies over TLS (their listeners are TLS)")
	f.StringVar(&b.trust, "bookie-tls-trust-certs-file", "", "PEM CAs the bookies' certificates must chain to (default: system roots)")
	f.StringVar(&b.certFile, "bookie-tls-cert-file", "", "client certificate presented to the bookies")
	f.StringVar(&b.keyFile, "bookie-tls-key-file", "", "key of --bookie-tls-cert-file")
}

// bookieClientKeys are broker.conf's bookkeeperTLS* keys.
var bookieClientKeys = []config.Key{
	{Name: "bookkeeperTLSTrustCertsFilePath", Flag: "bookie-tls-trust-certs-file"},
	{Name: "bookkeeperTLSCertificateFilePath", Flag: "bookie-tls-cert-file"},
	{Name: "bookkeeperTLSKeyFilePath", Flag: "bookie-tls-key-file"},
}

// dial returns the broker's BookieDial: TLS when on (or when a bookie TLS file is given),
// nil (plain TCP) otherwise.
func (b *bookieClientFlags) dial() (func(ctx context.Context, addr string) (net.Conn, error), error) {
	if !b.on && b.trust == "" && b.certFile == "" {
		return nil, nil
	}
	cfg, err := tlsconf.Client(tlsconf.ClientOptions{TrustCertsFile: b.trust, CertFile: b.certFile, KeyFile: b.keyFile})
	if err != nil {
		return nil, usageError{err}
	}
	return bkclient.DialTLS(cfg), nil
}
