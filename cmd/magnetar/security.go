package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/config"
)

// authFlags are the authentication settings of the broker and standalone.
type authFlags struct {
	enabled              bool
	providers            []string
	anonymous, basicConf string
	token                auth.TokenConfig
	refresh              time.Duration
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
	s, err := auth.New(auth.Config{Enabled: a.enabled, Providers: a.providers, AnonymousRole: a.anonymous,
		Token: a.token, BasicFile: a.basicConf})
	if err != nil {
		return nil, usageError{err}
	}
	return s, nil
}

// withAuth authenticates the admin and lookup REST paths; /metrics and /debug/pprof stay
// open, as Pulsar's authenticateMetricsEndpoint=false leaves them.
func withAuth(a *auth.Service, h http.Handler) http.Handler {
	if !a.Enabled() {
		return h
	}
	return a.Middleware(h)
}
