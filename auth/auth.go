package auth

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Method names, as clients send them in CONNECT's auth_method_name.
const (
	MethodToken = "token"
	MethodTLS   = "tls"
	MethodBasic = "basic"
)

// ErrAuthentication marks every failed authentication. Its messages say why (expired,
// bad signature, unknown user) but never carry the credential.
var ErrAuthentication = errors.New("authentication failed")

// Principal is an authenticated client.
type Principal struct {
	// Role is what authorization checks (the token's role claim, the certificate's CN, the
	// basic user name, or the anonymous role).
	Role string
	// Method is the provider that verified it ("" for the anonymous role).
	Method string
	// Expires is when the credential stops being valid; zero if never.
	Expires time.Time
}

// Anonymous reports whether p is the configured anonymous role rather than a verified one.
func (p Principal) Anonymous() bool { return p.Method == "" }

// Credentials is what a client presents.
type Credentials struct {
	// Data is the credential (CONNECT's auth_data; over HTTP the Authorization header's
	// parameter).
	Data []byte
	// TLS is the connection's TLS state, nil on a plain connection.
	TLS *tls.ConnectionState
}

// Provider verifies one method's credentials. Implementations are safe for concurrent use.
type Provider interface {
	// Method is the auth_method_name the provider serves.
	Method() string
	// Authenticate verifies c; errors wrap ErrAuthentication.
	Authenticate(c Credentials) (Principal, error)
}

// Config selects the providers (Pulsar's authenticationEnabled, authenticationProviders,
// anonymousUserRole and the providers' own keys).
type Config struct {
	// Enabled turns authentication on; with it off every client is served and has no role.
	Enabled bool
	// Providers are method names ("token", "tls", "basic") or Pulsar's provider class names
	// (org.apache.pulsar.broker.authentication.AuthenticationProviderToken, ...).
	Providers []string
	// AnonymousRole is the role of clients that present no credentials (or a method no
	// provider serves); "" refuses them.
	AnonymousRole string
	// Token configures the token provider.
	Token TokenConfig
	// BasicFile is the htpasswd file of the basic provider (Pulsar's basicAuthConf).
	BasicFile string
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Service authenticates clients with the configured providers. A nil *Service is a
// disabled one. It is safe for concurrent use.
type Service struct {
	providers map[string]Provider
	order     []Provider
	anonymous string
}

// providerNames maps Pulsar's provider class names to method names.
var providerNames = map[string]string{
	"org.apache.pulsar.broker.authentication.AuthenticationProviderToken": MethodToken,
	"org.apache.pulsar.broker.authentication.AuthenticationProviderTls":   MethodTLS,
	"org.apache.pulsar.broker.authentication.AuthenticationProviderBasic": MethodBasic,
}

// ProviderName maps a configured provider (method or Pulsar class name) to its method;
// ok is false for one Magnetar does not have.
func ProviderName(s string) (string, bool) {
	s = strings.TrimSpace(s)
	if m, ok := providerNames[s]; ok {
		return m, true
	}
	switch s {
	case MethodToken, MethodTLS, MethodBasic:
		return s, true
	}
	return "", false
}

// New builds the service; it reads the keys and files the providers need. It returns nil
// (disabled) when cfg.Enabled is false.
func New(cfg Config) (*Service, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{providers: map[string]Provider{}, anonymous: cfg.AnonymousRole}
	for _, name := range cfg.Providers {
		if strings.TrimSpace(name) == "" {
			continue
		}
		m, ok := ProviderName(name)
		if !ok {
			return nil, fmt.Errorf("auth: unknown authentication provider %q", name)
		}
		if _, dup := s.providers[m]; dup {
			continue
		}
		var p Provider
		var err error
		switch m {
		case MethodToken:
			p, err = NewTokenProvider(cfg.Token, cfg.Now)
		case MethodTLS:
			p = TLSProvider{}
		case MethodBasic:
			p, err = NewBasicProvider(cfg.BasicFile)
		}
		if err != nil {
			return nil, err
		}
		s.providers[m] = p
		s.order = append(s.order, p)
	}
	if len(s.order) == 0 && s.anonymous == "" {
		return nil, errors.New("auth: authentication is enabled with no provider and no anonymous role")
	}
	return s, nil
}

// Enabled reports whether authentication is on.
func (s *Service) Enabled() bool { return s != nil }

// Provider returns the provider of a method, if configured.
func (s *Service) Provider(method string) (Provider, bool) {
	if s == nil {
		return nil, false
	}
	p, ok := s.providers[method]
	return p, ok
}

// AuthenticateBinary authenticates a CONNECT (or AUTH_RESPONSE): the provider of method
// verifies data; a client with no method (or one no provider serves) gets the anonymous
// role if there is one, as in Pulsar.
func (s *Service) AuthenticateBinary(method string, data []byte, ts *tls.ConnectionState) (Principal, error) {
	p, ok := s.Provider(method)
	if !ok {
		if s.anonymous != "" {
			return Principal{Role: s.anonymous}, nil
		}
		if method == "" || method == "none" {
			return Principal{}, fmt.Errorf("%w: credentials required (no anonymous role)", ErrAuthentication)
		}
		return Principal{}, fmt.Errorf("%w: no provider for authentication method %q", ErrAuthentication, method)
	}
	return p.Authenticate(Credentials{Data: data, TLS: ts})
}

// AuthenticateHTTP authenticates an HTTP request: a Bearer token, Basic credentials, or
// (when neither is given) a client certificate; else the anonymous role. Pulsar's
// X-Pulsar-Auth-Method-Name header, when present, names the provider to use.
func (s *Service) AuthenticateHTTP(r *http.Request) (Principal, error) {
	method, data := "", []byte(nil)
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, param, _ := strings.Cut(strings.TrimSpace(h), " ")
		param = strings.TrimSpace(param)
		switch strings.ToLower(scheme) {
		case "bearer":
			method, data = MethodToken, []byte(param)
		case "basic":
			dec, err := base64.StdEncoding.DecodeString(param)
			if err != nil {
				return Principal{}, fmt.Errorf("%w: malformed Basic credentials", ErrAuthentication)
			}
			method, data = MethodBasic, dec
		default:
			return Principal{}, fmt.Errorf("%w: unsupported Authorization scheme", ErrAuthentication)
		}
	} else if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		method = MethodTLS
	}
	if m := r.Header.Get("X-Pulsar-Auth-Method-Name"); m != "" && method != "" && m != method {
		return Principal{}, fmt.Errorf("%w: X-Pulsar-Auth-Method-Name %q does not match the credentials", ErrAuthentication, m)
	}
	return s.AuthenticateBinary(method, data, r.TLS)
}

// WriteJSONError answers status with {"reason": reason}, the admin API's error form.
func WriteJSONError(w http.ResponseWriter, status int, reason string) {
	b, _ := json.Marshal(map[string]string{"reason": reason})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n')) //nolint:errcheck // the client went away
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal a request was authenticated as; ok is false when
// authentication is off.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Middleware authenticates every request before next; a request that fails gets 401 with
// a JSON reason ({"reason": "..."}, as the admin API's errors). With s disabled it is next.
func (s *Service) Middleware(next http.Handler) http.Handler {
	if s == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.AuthenticateHTTP(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pulsar", Basic realm="pulsar"`)
			WriteJSONError(w, http.StatusUnauthorized, "Authentication required: "+err.Error())
			return
		}
		next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
	})
}
