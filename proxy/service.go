package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/access"
	"github.com/magnetar-io/magnetar/internal/ratelog"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/pulsar"
)

// Config configures a proxy. Brokers are found through Store (their /brokers/available/
// records), through BrokerServiceURLs and BrokerWebServiceURLs, or both: with a store, the
// URLs are only a fallback while it lists no broker.
type Config struct {
	// Store is the metadata store the brokers register in (nil: BrokerServiceURLs only).
	Store metadata.Store
	// BrokerServiceURLs are pulsar://host:port URLs of brokers (Pulsar's brokerServiceURL,
	// which may list several hosts).
	BrokerServiceURLs []string
	// BrokerWebServiceURLs are http://host:port URLs of brokers' admin APIs (Pulsar's
	// brokerWebServiceURL).
	BrokerWebServiceURLs []string

	// Listen is the plain Pulsar protocol listener (Pulsar's servicePort); "" with
	// ListenTLS set means none.
	Listen string
	// ListenTLS is the TLS listener (servicePortTls), served with TLS; "" means none.
	ListenTLS string
	TLS       *tls.Config

	// Auth authenticates clients (nil or disabled: clients are not authenticated, and their
	// credentials pass through to the broker unless BrokerAuthMethod is set).
	Auth *auth.Service
	// BrokerAuthMethod and BrokerAuthData are the proxy's own credentials towards the brokers
	// (Pulsar's brokerClientAuthenticationPlugin and brokerClientAuthenticationParameters);
	// BrokerAuthData is called for every broker connection (a token file is re-read).
	BrokerAuthMethod string
	BrokerAuthData   func() ([]byte, error)
	// ForwardAuthorizationCredentials sends the client's credentials to the broker as
	// original_auth_data and original_auth_method, besides its role (original_principal).
	ForwardAuthorizationCredentials bool

	// MaxConcurrentLookups bounds the lookups and metadata requests in flight (Pulsar's
	// maxConcurrentLookupRequests); past it a request is answered TooManyRequests.
	MaxConcurrentLookups int
	// MaxConnections bounds the client connections (maxConcurrentInboundConnections); past
	// it a connection is refused (0: no limit).
	MaxConnections int
	// MaxFrameSize bounds the frames the proxy reads itself (handshakes and lookups).
	MaxFrameSize int

	// DialTimeout bounds connecting to a broker (TCP and its CONNECTED answer).
	DialTimeout time.Duration
	// RequestTimeout bounds one lookup or metadata request to a broker, redirects included;
	// past it the client gets ServiceNotReady, well before its operation timeout.
	RequestTimeout time.Duration
	// HandshakeTimeout bounds how long a new client takes to send CONNECT.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a lookup connection that sent nothing (not even a PING) for this
	// long.
	IdleTimeout time.Duration
	// BrokerRefresh is how long a list of brokers read from Store is used before it is read
	// again (a failed broker also makes it read again).
	BrokerRefresh time.Duration

	Logger *slog.Logger
	// Registerer receives the proxy's metrics (nil: a registry of its own, served by
	// MetricsHandler).
	Registerer prometheus.Registerer
}

func (c *Config) defaults() {
	if c.MaxConcurrentLookups <= 0 {
		c.MaxConcurrentLookups = 50000
	}
	if c.MaxFrameSize <= 0 {
		c.MaxFrameSize = pulsar.MaxFrameSizeDefault
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 15 * time.Second
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.BrokerRefresh <= 0 {
		c.BrokerRefresh = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Service is a running proxy.
type Service struct {
	cfg     Config
	log     *slog.Logger
	audit   *access.Audit   // refused authentications
	ctx     context.Context // ends at Close
	cancel  context.CancelFunc
	brokers *brokers
	m       *metrics
	reg     *prometheus.Registry // nil when Config.Registerer was given
	lookups chan struct{}        // semaphore of MaxConcurrentLookups
	http    *httpProxy

	lns []net.Listener
	wg  sync.WaitGroup // accept loops and connections

	mu struct {
		sync.Mutex // guards the fields below
		conns      map[net.Conn]struct{}
		closed     bool
	}
}

// ErrNoBrokers: neither a metadata store nor broker URLs were given.
var ErrNoBrokers = errors.New("proxy: no way to find brokers (give a metadata store or broker URLs)")

// Start starts the listeners and returns the running proxy. ctx only bounds the start.
func Start(_ context.Context, cfg Config) (*Service, error) {
	cfg.defaults()
	if cfg.Store == nil && len(cfg.BrokerServiceURLs) == 0 && len(cfg.BrokerWebServiceURLs) == 0 {
		return nil, ErrNoBrokers
	}
	if cfg.ListenTLS != "" && cfg.TLS == nil {
		return nil, errors.New("proxy: a TLS listener needs a TLS configuration")
	}
	bs, err := newBrokers(cfg.Store, cfg.BrokerServiceURLs, cfg.BrokerWebServiceURLs, cfg.BrokerRefresh)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: cfg.Logger, audit: access.NewAudit(cfg.Logger, ratelog.Options{}), brokers: bs,
		lookups: make(chan struct{}, cfg.MaxConcurrentLookups)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mu.conns = make(map[net.Conn]struct{})
	reg := cfg.Registerer
	if reg == nil {
		s.reg = prometheus.NewRegistry()
		reg = s.reg
	}
	s.m = newMetrics(reg)
	s.http = newHTTPProxy(s)
	for _, l := range []struct {
		addr string
		tls  *tls.Config
	}{{cfg.Listen, nil}, {cfg.ListenTLS, cfg.TLS}} {
		if l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			s.Close()
			return nil, err
		}
		if l.tls != nil {
			ln = tls.NewListener(ln, l.tls)
		}
		s.lns = append(s.lns, ln)
	}
	for _, ln := range s.lns {
		s.wg.Add(1)
		go s.accept(ln)
	}
	return s, nil
}

// Addr is the plain listener's address (nil if none); AddrTLS the TLS listener's.
func (s *Service) Addr() net.Addr    { return s.listenerAddr(s.cfg.Listen, 0) }
func (s *Service) AddrTLS() net.Addr { return s.listenerAddr(s.cfg.ListenTLS, len(s.lns)-1) }

func (s *Service) listenerAddr(cfg string, i int) net.Addr {
	if cfg == "" || i < 0 || i >= len(s.lns) {
		return nil
	}
	return s.lns[i].Addr()
}

// HTTPHandler serves the admin and lookup REST API (/admin/, /lookup/) by forwarding each
// request to a broker, following redirects to the owning broker itself.
func (s *Service) HTTPHandler() http.Handler { return s.http }

// MetricsHandler serves the proxy's metrics (Prometheus text format). With a Registerer
// given in Config, serve that registry instead; this then serves nothing.
func (s *Service) MetricsHandler() http.Handler {
	if s.reg == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
}

// Close stops the listeners, closes every connection and waits for their goroutines.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	for c := range s.mu.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.cancel()
	for _, ln := range s.lns {
		ln.Close()
	}
	s.wg.Wait()
	s.http.close()
	return nil
}

func (s *Service) accept(ln net.Listener) {
	defer s.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		if !s.track(nc) {
			s.m.rejected.Inc()
			nc.Close()
			continue
		}
		s.m.newConns.Inc()
		s.m.active.Inc()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.m.active.Dec()
			defer s.untrack(nc)
			newClientConn(s, nc).serve()
		}()
	}
}

// track registers a new connection; false if the proxy is closed or at MaxConnections.
func (s *Service) track(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed || (s.cfg.MaxConnections > 0 && len(s.mu.conns) >= s.cfg.MaxConnections) {
		return false
	}
	s.mu.conns[nc] = struct{}{}
	return true
}

func (s *Service) untrack(nc net.Conn) {
	s.mu.Lock()
	delete(s.mu.conns, nc)
	s.mu.Unlock()
	nc.Close()
}

// trackUpstream registers a connection to a broker so that Close closes it; false if the
// proxy is closed (the caller closes nc).
func (s *Service) trackUpstream(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return false
	}
	s.mu.conns[nc] = struct{}{}
	return true
}

// errClosed: the proxy is closing.
var errClosed = errors.New("proxy: closing")
