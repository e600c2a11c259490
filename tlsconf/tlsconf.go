package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// ServerOptions configure a TLS listener (Pulsar's tls* keys).
type ServerOptions struct {
	// CertFile and KeyFile are the PEM certificate (chain) and private key. Required.
	CertFile, KeyFile string
	// TrustCertsFile is the PEM bundle of CAs client certificates must chain to; empty: client
	// certificates are not asked for.
	TrustCertsFile string
	// RequireClientCert refuses clients without a trusted certificate
	// (tlsRequireTrustedClientCertOnConnect).
	RequireClientCert bool
	// MinVersion is "TLSv1.2" (default) or "TLSv1.3"; "TLSv1", "TLSv1.1" are accepted too.
	MinVersion string
	// Ciphers are cipher-suite names (Go's or the IANA names Java uses); empty: Go's defaults.
	// They apply to TLS 1.2 and lower (TLS 1.3 suites are not configurable).
	Ciphers []string
	// RefreshInterval is how often the files are checked for change
	// (tlsCertRefreshCheckDurationSec); 0 checks on every handshake, negative never.
	RefreshInterval time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Server is a TLS server configuration whose certificate and trusted CAs follow their files.
// It is safe for concurrent use.
type Server struct {
	opts ServerOptions
	base *tls.Config // immutable template: versions, ciphers, client-auth mode
	log  *slog.Logger

	mu struct {
		sync.Mutex // guards the fields below
		cfg        *tls.Config
		stamp      string // sizes and modification times of the files cfg was loaded from
		checked    time.Time
		failed     string // stamp of files that failed to load (logged once)
	}
}

// NewServer loads the files; a file that does not load is an error naming it.
func NewServer(o ServerOptions, log *slog.Logger) (*Server, error) {
	if o.CertFile == "" || o.KeyFile == "" {
		return nil, errors.New("tlsconf: a TLS listener needs a certificate and a key file")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	minV, err := ParseVersion(o.MinVersion)
	if err != nil {
		return nil, err
	}
	suites, err := ParseCiphers(o.Ciphers)
	if err != nil {
		return nil, err
	}
	base := &tls.Config{MinVersion: minV, CipherSuites: suites}
	switch {
	case o.TrustCertsFile == "":
		if o.RequireClientCert {
			return nil, errors.New("tlsconf: requiring client certificates needs a trusted CA file")
		}
		base.ClientAuth = tls.NoClientCert
	case o.RequireClientCert:
		base.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		base.ClientAuth = tls.VerifyClientCertIfGiven
	}
	s := &Server{opts: o, base: base, log: log}
	cfg, stamp, err := s.load()
	if err != nil {
		return nil, err
	}
	s.mu.cfg, s.mu.stamp, s.mu.checked = cfg, stamp, o.Now()
	return s, nil
}

// Config returns the configuration to serve with: each handshake uses the current files.
func (s *Server) Config() *tls.Config {
	c := s.base.Clone()
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return s.current(), nil }
	// Certificates are needed for a config to be valid even though GetConfigForClient answers.
	c.Certificates = s.current().Certificates
	return c
}

// current returns the configuration for a new handshake, reloading changed files.
func (s *Server) current() *tls.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Now()
	if s.opts.RefreshInterval < 0 || now.Sub(s.mu.checked) < s.opts.RefreshInterval {
		return s.mu.cfg
	}
	s.mu.checked = now
	stamp := s.stamp()
	if stamp == s.mu.stamp || stamp == s.mu.failed {
		return s.mu.cfg
	}
	cfg, loaded, err := s.load()
	if err != nil {
		s.mu.failed = stamp
		s.log.Warn("tls: changed certificate files do not load; keeping the previous ones", "err", err)
		return s.mu.cfg
	}
	s.mu.cfg, s.mu.stamp = cfg, loaded
	s.log.Info("tls: certificate files reloaded", "cert", s.opts.CertFile)
	return cfg
}

func (s *Server) files() []string {
	fs := []string{s.opts.CertFile, s.opts.KeyFile}
	if s.opts.TrustCertsFile != "" {
		fs = append(fs, s.opts.TrustCertsFile)
	}
	return fs
}

// stamp summarises the files' sizes and modification times.
func (s *Server) stamp() string {
	var b strings.Builder
	for _, f := range s.files() {
		if st, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%d/%d;", st.Size(), st.ModTime().UnixNano())
		} else {
			b.WriteString("missing;")
		}
	}
	return b.String()
}

// load reads the files into a new configuration; stamp is taken before reading, so a
// change during the read is seen at the next check.
func (s *Server) load() (*tls.Config, string, error) {
	stamp := s.stamp()
	cert, err := tls.LoadX509KeyPair(s.opts.CertFile, s.opts.KeyFile)
	if err != nil {
		return nil, "", fmt.Errorf("tlsconf: certificate %s / key %s: %w", s.opts.CertFile, s.opts.KeyFile, err)
	}
	cfg := s.base.Clone()
	cfg.Certificates = []tls.Certificate{cert}
	if s.opts.TrustCertsFile != "" {
		pool, err := LoadPool(s.opts.TrustCertsFile)
		if err != nil {
			return nil, "", err
		}
		cfg.ClientCAs = pool
	}
	return cfg, stamp, nil
}

// LoadPool reads a PEM bundle of CA certificates.
func LoadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: trusted CAs: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tlsconf: trusted CAs %s: no PEM certificate", file)
	}
	return pool, nil
}

// ClientOptions configure a TLS client (Pulsar's client.conf tls* keys).
type ClientOptions struct {
	// TrustCertsFile is the PEM bundle of CAs the server must chain to; empty: system roots.
	TrustCertsFile string
	// AllowInsecure accepts any server certificate (tlsAllowInsecureConnection).
	AllowInsecure bool
	// SkipHostnameVerification verifies the chain but not the name
	// (tlsEnableHostnameVerification=false).
	SkipHostnameVerification bool
	// CertFile and KeyFile are the client certificate and key (TLS authentication); optional.
	CertFile, KeyFile string
	// ServerName overrides the name checked (default: the dialled host).
	ServerName string
}

// Client builds a client configuration.
func Client(o ClientOptions) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if o.TrustCertsFile != "" {
		pool, err := LoadPool(o.TrustCertsFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("tlsconf: a client certificate needs both the certificate and the key file")
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tlsconf: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	switch {
	case o.AllowInsecure:
		cfg.InsecureSkipVerify = true
	case o.SkipHostnameVerification:
		// Verify the chain by hand, without the name.
		cfg.InsecureSkipVerify = true
		roots := cfg.RootCAs
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: the server sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	return cfg, nil
}

// ParseVersion maps "TLSv1.2"-style names (also "1.2") to a TLS version; "" is TLS 1.2.
func ParseVersion(s string) (uint16, error) {
	switch strings.TrimPrefix(strings.TrimSpace(s), "TLSv") {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	case "1.1":
		return tls.VersionTLS11, nil
	case "1", "1.0":
		return tls.VersionTLS10, nil
	}
	return 0, fmt.Errorf("tlsconf: unknown TLS version %q (want TLSv1.2 or TLSv1.3)", s)
}

// ParseCiphers maps cipher-suite names to ids; insecure suites are refused.
func ParseCiphers(names []string) ([]uint16, error) {
	var ids []uint16
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		found := false
		for _, cs := range tls.CipherSuites() {
			if cs.Name == n {
				ids = append(ids, cs.ID)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("tlsconf: unknown or insecure cipher suite %q", n)
		}
	}
	return ids, nil
}
