package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/adminclient"
	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/config"
	"github.com/magnetar-io/magnetar/pulsarclient"
	"github.com/magnetar-io/magnetar/tlsconf"
)

// clientSecurity are the tools' credentials and TLS settings, named as pulsar-admin's and
// pulsar-client's (--auth-plugin, --auth-params) and as client.conf's keys.
type clientSecurity struct {
	authPlugin, authParams string
	trustCerts             string
	allowInsecure          bool
	hostnameVerification   bool
}

func (s *clientSecurity) add(f *pflag.FlagSet) {
	f.StringVar(&s.authPlugin, "auth-plugin", "", "authentication: token, basic or tls (or Pulsar's AuthenticationToken/Basic/Tls class names)")
	f.StringVar(&s.authParams, "auth-params", "", `credentials: token:JWT or file:///path (token); {"userId":"u","password":"p"} or u:p (basic); tlsCertFile:/c.pem,tlsKeyFile:/k.pem (tls)`)
	f.StringVar(&s.trustCerts, "tls-trust-certs-file", "", "PEM CA bundle the server's certificate must chain to (default: system roots)")
	f.BoolVar(&s.allowInsecure, "tls-allow-insecure", false, "accept any server certificate")
	f.BoolVar(&s.hostnameVerification, "tls-hostname-verification", true, "check that the server's certificate names the host dialled")
}

// clientKeys are client.conf's keys for clientSecurity (urlKey is webServiceUrl for admin,
// brokerServiceUrl for the Pulsar tools).
func clientKeys(urlKey string) []config.Key {
	return []config.Key{
		{Name: urlKey, Flag: "url"},
		{Name: "authPlugin", Flag: "auth-plugin"},
		{Name: "authParams", Flag: "auth-params", Secret: true},
		{Name: "tlsTrustCertsFilePath", Flag: "tls-trust-certs-file"},
		{Name: "tlsAllowInsecureConnection", Flag: "tls-allow-insecure"},
		{Name: "tlsEnableHostnameVerification", Flag: "tls-hostname-verification"},
	}
}

// clientPlugins maps Pulsar's client authentication classes to methods.
var clientPlugins = map[string]string{
	"org.apache.pulsar.client.impl.auth.AuthenticationToken": auth.MethodToken,
	"org.apache.pulsar.client.impl.auth.AuthenticationBasic": auth.MethodBasic,
	"org.apache.pulsar.client.impl.auth.AuthenticationTls":   auth.MethodTLS,
	"token": auth.MethodToken, "basic": auth.MethodBasic, "tls": auth.MethodTLS,
}

// credentials resolves the plugin and parameters: the method, a function returning the
// current auth data (a token file is re-read each time), and the client certificate files.
func (s *clientSecurity) credentials() (method string, data func() ([]byte, error), certFile, keyFile string, err error) {
	if s.authPlugin == "" {
		if s.authParams != "" {
			return "", nil, "", "", usageError{errors.New("--auth-params needs --auth-plugin")}
		}
		return "", nil, "", "", nil
	}
	method, ok := clientPlugins[s.authPlugin]
	if !ok {
		return "", nil, "", "", usageError{fmt.Errorf("--auth-plugin: unknown plugin %q", s.authPlugin)}
	}
	p := strings.TrimSpace(s.authParams)
	switch method {
	case auth.MethodToken:
		switch {
		case strings.HasPrefix(p, "file:"):
			path := strings.TrimPrefix(strings.TrimPrefix(p, "file://"), "file:")
			data = func() ([]byte, error) {
				b, err := os.ReadFile(path)
				return []byte(strings.TrimSpace(string(b))), err
			}
		case p == "":
			return "", nil, "", "", usageError{errors.New("--auth-params: the token plugin needs token:JWT or file:///path")}
		default:
			tok := []byte(strings.TrimPrefix(p, "token:"))
			data = func() ([]byte, error) { return tok, nil }
		}
	case auth.MethodBasic:
		var up struct {
			UserID   string `json:"userId"`
			Password string `json:"password"`
		}
		if strings.HasPrefix(p, "{") {
			if json.Unmarshal([]byte(p), &up) != nil {
				return "", nil, "", "", usageError{errors.New(`--auth-params: want {"userId":"...","password":"..."}`)}
			}
		} else {
			up.UserID, up.Password, _ = strings.Cut(p, ":")
		}
		if up.UserID == "" {
			return "", nil, "", "", usageError{errors.New("--auth-params: the basic plugin needs a user id")}
		}
		b := []byte(up.UserID + ":" + up.Password)
		data = func() ([]byte, error) { return b, nil }
	case auth.MethodTLS:
		for _, kv := range strings.Split(p, ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(kv), ":")
			switch k {
			case "tlsCertFile":
				certFile = v
			case "tlsKeyFile":
				keyFile = v
			}
		}
		if certFile == "" || keyFile == "" {
			return "", nil, "", "", usageError{errors.New("--auth-params: the tls plugin needs tlsCertFile:PATH,tlsKeyFile:PATH")}
		}
		data = func() ([]byte, error) { return nil, nil }
	}
	return method, data, certFile, keyFile, nil
}

// tlsConfig builds the client TLS configuration (with the client certificate of the tls plugin).
func (s *clientSecurity) tlsConfig(certFile, keyFile string) (*tls.Config, error) {
	cfg, err := tlsconf.Client(tlsconf.ClientOptions{TrustCertsFile: s.trustCerts, AllowInsecure: s.allowInsecure,
		SkipHostnameVerification: !s.hostnameVerification, CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		return nil, usageError{err}
	}
	return cfg, nil
}

// pulsarOptions fills a pulsarclient's Auth and TLS.
func (s *clientSecurity) pulsarOptions(o *pulsarclient.Options) error {
	method, data, cert, key, err := s.credentials()
	if err != nil {
		return err
	}
	if method != "" {
		o.Auth = &pulsarclient.Authentication{Method: method, Data: data}
	}
	if strings.HasPrefix(o.URL, "pulsar+ssl://") {
		if o.TLS, err = s.tlsConfig(cert, key); err != nil {
			return err
		}
	}
	return nil
}

// adminOptions are the admin client's TLS and credentials (Bearer or Basic; a tls plugin
// presents its certificate).
func (s *clientSecurity) adminOptions() (adminclient.Options, error) {
	method, data, cert, key, err := s.credentials()
	if err != nil {
		return adminclient.Options{}, err
	}
	tcfg, err := s.tlsConfig(cert, key)
	if err != nil {
		return adminclient.Options{}, err
	}
	o := adminclient.Options{TLS: tcfg}
	switch method {
	case auth.MethodToken:
		o.Auth = adminclient.TokenAuth(data)
	case auth.MethodBasic:
		o.Auth = func(context.Context) (string, error) {
			d, err := data()
			if err != nil {
				return "", fmt.Errorf("credentials: %w", err)
			}
			return "Basic " + base64.StdEncoding.EncodeToString(d), nil
		}
	}
	return o, nil
}

// httpClient returns an HTTP client sending the credentials and verifying TLS as configured
// (the admin client's).
func (s *clientSecurity) httpClient() (*http.Client, error) {
	o, err := s.adminOptions()
	if err != nil {
		return nil, err
	}
	return adminclient.HTTPClient(o), nil
}

// adminClient returns an admin REST client of the broker at base.
func (s *clientSecurity) adminClient(base string) (*adminclient.Client, error) {
	o, err := s.adminOptions()
	if err != nil {
		return nil, err
	}
	o.URLs = []string{base}
	return adminclient.New(o)
}

// serviceFlags are the Pulsar tools' connection flags: --url and clientSecurity.
type serviceFlags struct {
	url      string
	adminURL string // for scalable topics (client_scalable.go)
	sec      clientSecurity
}

// addServiceFlags adds --url, the Pulsar service URL every client tool takes (also
// --service-url and -u, the names of Pulsar's tools), and the credential and TLS flags.
func addServiceFlags(c *cobra.Command, sf *serviceFlags) {
	c.Flags().StringVarP(&sf.url, "url", "u", "pulsar://127.0.0.1:6650", "Pulsar service URL (pulsar:// or pulsar+ssl://); also --service-url")
	aliasFlag(c.Flags(), "service-url", "url")
	c.Flags().StringVar(&sf.adminURL, "admin-url", "http://127.0.0.1:8080", "admin REST URL of a broker, for scalable topics (topic://...)")
	sf.sec.add(c.Flags())
}

// clientTool gives a Pulsar client tool --config (client.conf) and --print-config.
func clientTool(c *cobra.Command) *cobra.Command {
	return withConfig(c, clientKeys("brokerServiceUrl"), "auth-params")
}
