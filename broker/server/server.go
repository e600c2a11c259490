package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/access"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/internal/ratelog"
)

// Config is the server's fixed configuration.
type Config struct {
	// MaxMessageSize bounds a frame's message (CONNECTED tells the client).
	MaxMessageSize int
	// MaxPendingPublishPerConnection bounds the SENDs of one connection in flight: beyond it
	// they are parked (conn_park.go).
	MaxPendingPublishPerConnection int
	// MaxParkedPublishBytes bounds the data of a connection's parked SENDs: beyond it the
	// connection stops reading. 0: DefaultMaxParkedPublishBytes.
	MaxParkedPublishBytes int
	// KeepAliveInterval is how often a connection pings its client; one silent for twice
	// that is closed.
	KeepAliveInterval time.Duration
	// Auth authenticates CONNECT (nil: off); AuthRefreshInterval is how often a
	// connection checks its credential's expiry.
	Auth                *auth.Service
	AuthRefreshInterval time.Duration
	// ProxyRoles may forward an original principal.
	ProxyRoles []string
	// Authz turns authorization on (nil: off); Backend.Authorizer checks the grants.
	Authz *auth.Authorizer
	// Logger (nil: slog.Default()) and Metrics (nil: unregistered ones).
	Logger  *slog.Logger
	Metrics *Metrics
}

// DefaultMaxParkedPublishBytes is Config.MaxParkedPublishBytes's default: about what the
// kernel's receive buffer of a connection holds at most with Linux's default autotuning
// (tcp_rmem's 6 MiB), so parking moves the waiting SENDs out of the kernel rather than
// adding to them.
const DefaultMaxParkedPublishBytes = 8 << 20

// Server serves the Pulsar binary protocol: it accepts connections on the listeners it is
// given and serves each (conn.go) against a Backend. It is safe for concurrent use.
type Server struct {
	b     Backend
	cfg   Config
	log   *slog.Logger
	audit *access.Audit // refused authentications and authorizations
	m     *Metrics
	// ctx bounds every request a connection makes to the Backend (and the scalable
	// sessions); the caller ends it after CloseConns.
	ctx context.Context
	wg  sync.WaitGroup // accept loops and connections

	mu struct {
		sync.Mutex // guards the fields below
		conns      map[*conn]struct{}
		refusing   bool // connections accepted from now on are closed at once
	}
}

// New returns a server of b. ctx is the server's lifetime: the requests its connections
// make to b run under contexts derived from it.
func New(ctx context.Context, b Backend, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.MaxParkedPublishBytes <= 0 {
		cfg.MaxParkedPublishBytes = DefaultMaxParkedPublishBytes
	}
	s := &Server{b: b, cfg: cfg, log: cfg.Logger, audit: access.NewAudit(cfg.Logger, ratelog.Options{}), m: cfg.Metrics, ctx: ctx}
	s.mu.conns = map[*conn]struct{}{}
	return s
}

// Serve accepts connections on ln, on a goroutine of its own, until ln is closed.
func (s *Server) Serve(ln net.Listener) {
	s.wg.Add(1)
	go s.acceptLoop(ln)
}

// Refuse makes the server close every connection it accepts from now on (the broker is
// closing; its listeners close later).
func (s *Server) Refuse() {
	s.mu.Lock()
	s.mu.refusing = true
	s.mu.Unlock()
}

// CloseConns closes every open connection: each writer flushes what is queued, then the
// socket closes and the connection's producers and consumers are detached.
func (s *Server) CloseConns(reason string) {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.mu.conns))
	for c := range s.mu.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close(reason)
	}
}

// Wait waits for the accept loops (each ends when its listener is closed) and the
// connections' reader and writer goroutines.
func (s *Server) Wait() { s.wg.Wait() }

func (s *Server) acceptLoop(ln net.Listener) {
	defer s.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("accept", "err", err)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond): // back off a failing accept (e.g. EMFILE)
			}
			continue
		}
		c := newConn(s, nc)
		s.mu.Lock()
		if s.mu.refusing {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		s.mu.conns[c] = struct{}{}
		s.mu.Unlock()
		s.m.Connections.Inc()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.mu.conns, c)
			s.mu.Unlock()
			s.m.Connections.Dec()
		}()
	}
}

// ListenConfig says where the server listens.
type ListenConfig struct {
	// Listen is the plain listener's address, unless DisablePlain.
	Listen       string
	DisablePlain bool
	// ListenTLS is the TLS listener's address ("": none), with TLS its configuration.
	ListenTLS string
	TLS       *tls.Config
	// Advertise and AdvertiseTLS are the host:port clients are told to use ("": the bound
	// address; the TLS one defaults to Advertise's host with the bound port).
	Advertise, AdvertiseTLS string
}

// Listeners are the bound listeners and the addresses advertised for them.
type Listeners struct {
	Plain, TLS              net.Listener // nil if off
	Advertise, AdvertiseTLS string       // host:port; "" if off
}

// Listen binds the listeners cfg asks for. On an error nothing stays bound.
func Listen(cfg ListenConfig) (ls Listeners, err error) {
	if cfg.DisablePlain && cfg.ListenTLS == "" {
		return ls, fmt.Errorf("%w: the plain listener is off and there is no TLS listener", api.ErrInvalidArgument)
	}
	if cfg.ListenTLS != "" && cfg.TLS == nil {
		return ls, fmt.Errorf("%w: ListenTLS needs a TLS configuration", api.ErrInvalidArgument)
	}
	defer func() {
		if err != nil {
			for _, l := range []net.Listener{ls.Plain, ls.TLS} {
				if l != nil {
					l.Close()
				}
			}
			ls = Listeners{}
		}
	}()
	if !cfg.DisablePlain {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return ls, fmt.Errorf("broker: listen %s: %w", cfg.Listen, err)
		}
		ls.Plain = ln
		ls.Advertise = cfg.Advertise
		if ls.Advertise == "" {
			ls.Advertise = ln.Addr().String()
		}
	}
	if cfg.ListenTLS != "" {
		ln, err := net.Listen("tcp", cfg.ListenTLS)
		if err != nil {
			return ls, fmt.Errorf("broker: listen %s: %w", cfg.ListenTLS, err)
		}
		ls.TLS = tls.NewListener(ln, cfg.TLS)
		ls.AdvertiseTLS = cfg.AdvertiseTLS
		if ls.AdvertiseTLS == "" {
			host := cfg.Advertise
			if host == "" {
				host = ln.Addr().String()
			}
			h, _, err := net.SplitHostPort(host)
			if err != nil {
				return ls, fmt.Errorf("%w: Advertise %q: %v", api.ErrInvalidArgument, cfg.Advertise, err)
			}
			_, p, _ := net.SplitHostPort(ln.Addr().String())
			ls.AdvertiseTLS = net.JoinHostPort(h, p)
		}
	}
	return ls, nil
}
