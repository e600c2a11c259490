package metadata

import (
	"context"
	"errors"
	"fmt"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Bounds of the embedded server's lifecycle calls.
const (
	embeddedStartTimeout = 60 * time.Second
	// embeddedCloseTimeout bounds Close. A single member stops in well under a second when
	// its clients are gone; open client streams can hold it for the server's request timeout
	// (5 s + 2 election timeouts).
	embeddedCloseTimeout = 30 * time.Second
)

// EmbeddedConfig configures StartEmbedded.
type EmbeddedConfig struct {
	// Name is the member name ("magnetar" if empty).
	Name string
	// DataDir holds the member's WAL and database. Required. Restarting on the same DataDir
	// keeps the data.
	DataDir string
	// ListenClient is the client address "host:port" (a http:// URL is accepted too);
	// "127.0.0.1:2379" if empty. Port 0 picks a free port: see Embedded.Endpoints.
	ListenClient string
	// ListenPeer is the peer (raft) address. A single member never dials it, so "" means the
	// client host with a free port.
	ListenPeer string
	// Fast shortens the raft tick to 10 ms and the election timeout to 100 ms (tests): the
	// member is ready in tens of milliseconds instead of up to a second.
	Fast bool
	// Logger receives start/stop logs. etcd's own (very chatty) log is forwarded to it only
	// when it has debug enabled. nil: discard.
	Logger *slog.Logger
}

// Embedded is a single-member etcd server running inside this process. Its methods are safe
// for concurrent use.
type Embedded struct {
	etcd      *embed.Etcd
	endpoints []string // actual bound client addresses, host:port
	peer      string   // actual bound peer address
	log       *slog.Logger

	closeOnce sync.Once
	closeErr  error
}

// StartEmbedded starts a single-member etcd and waits until it serves requests (or ctx ends,
// or 60 s pass). The caller must Close it.
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("metadata: start embedded etcd: no data dir")
	}
	name := cfg.Name
	if name == "" {
		name = "magnetar"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	clientURL, err := listenURL(cfg.ListenClient, "127.0.0.1:2379")
	if err != nil {
		return nil, fmt.Errorf("metadata: start embedded etcd: client address: %w", err)
	}
	peerURL, err := listenURL(cfg.ListenPeer, net.JoinHostPort(clientURL.Hostname(), "0"))
	if err != nil {
		return nil, fmt.Errorf("metadata: start embedded etcd: peer address: %w", err)
	}

	ec := embed.NewConfig()
	ec.Name = name
	ec.Dir = cfg.DataDir
	ec.ListenClientUrls = []url.URL{*clientURL}
	ec.AdvertiseClientUrls = []url.URL{advertiseURL(clientURL)}
	ec.ListenPeerUrls = []url.URL{*peerURL}
	ec.AdvertisePeerUrls = []url.URL{advertiseURL(peerURL)}
	ec.InitialCluster = ec.InitialClusterFromName(name)
	ec.InitialClusterToken = "magnetar-" + name
	// Without compaction the history grows until etcd's space quota stops all writes.
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = "1h"
	// A transaction's ADD of many partitions creates a record for each in one commit; etcd's
	// default of 128 operations per commit would refuse an ADD of more than ~120 (an
	// external etcd takes --max-txn-ops).
	ec.MaxTxnOps = 1024
	if cfg.Fast {
		ec.TickMs = 10
		ec.ElectionMs = 100
	}
	// etcd logs at Info on every step and Error on harmless shutdown races ("mux: server
	// closed"): forward it only when debugging.
	zl := zap.NewNop()
	if log.Enabled(ctx, slog.LevelDebug) {
		zl = newZapLogger(log.With("component", "etcd-server"), zapcore.DebugLevel)
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zl)

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("metadata: start embedded etcd %q in %s: %w", name, cfg.DataDir, err)
	}
	m := &Embedded{etcd: e, log: log}
	for _, l := range e.Clients {
		m.endpoints = append(m.endpoints, dialAddr(l.Addr()))
	}
	if len(e.Peers) > 0 {
		m.peer = dialAddr(e.Peers[0].Addr())
	}

	timer := time.NewTimer(embeddedStartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case <-e.Server.StopNotify():
		err = errors.New("server stopped before it was ready")
	case err = <-e.Err():
		if err == nil {
			err = errors.New("server stopped before it was ready")
		}
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
		err = fmt.Errorf("not ready after %v", embeddedStartTimeout)
	}
	if err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("metadata: start embedded etcd %q in %s: %w", name, cfg.DataDir, err)
	}
	log.Info("embedded etcd ready", "name", name, "client", m.endpoints, "peer", m.peer, "data_dir", cfg.DataDir)
	return m, nil
}

// Endpoints returns the client addresses actually bound ("host:port", with port 0 resolved
// and an unspecified host such as 0.0.0.0 replaced by loopback), ready for Config.Endpoints.
func (m *Embedded) Endpoints() []string { return append([]string(nil), m.endpoints...) }

// OpenStore opens a store on this server through in-process calls (etcd's v3client: no
// socket, no gRPC framing), for the roles of the process that runs it; cfg's Endpoints are
// ignored. Other processes use Open with Endpoints. Close the store before the server.
func (m *Embedded) OpenStore(ctx context.Context, cfg Config) (*EtcdStore, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dial := cfg.DialTimeout
	if dial <= 0 {
		dial = DefaultDialTimeout
	}
	return openClient(ctx, v3client.New(m.etcd.Server), cfg, log, dial)
}

// PeerAddr returns the peer address actually bound.
func (m *Embedded) PeerAddr() string { return m.peer }

// Done is closed when the server stops, by Close or by a fatal error.
func (m *Embedded) Done() <-chan struct{} { return m.etcd.Server.StopNotify() }

// Close stops the server and waits for it, at most 30 s. Close clients first: open watch
// streams hold the server's graceful stop for several seconds. Idempotent.
func (m *Embedded) Close() error {
	m.closeOnce.Do(func() {
		stopped := make(chan struct{})
		go func() {
			m.etcd.Close()
			close(stopped)
		}()
		timer := time.NewTimer(embeddedCloseTimeout)
		defer timer.Stop()
		select {
		case <-stopped:
			m.log.Info("embedded etcd stopped", "client", m.endpoints)
		case <-timer.C:
			m.closeErr = fmt.Errorf("metadata: embedded etcd %v did not stop within %v", m.endpoints, embeddedCloseTimeout)
		}
	})
	return m.closeErr
}

// listenURL turns "host:port" (or "http://host:port") into an http URL; def if addr is "".
func listenURL(addr, def string) (*url.URL, error) {
	if addr == "" {
		addr = def
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("%q: only http is supported", addr)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%q: unexpected path", addr)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return nil, fmt.Errorf("%q: %w", addr, err)
	}
	u.Path = ""
	return u, nil
}

// advertiseURL is the listen URL with an unspecified host (0.0.0.0, ::) made loopback. A single
// member's advertised URLs are only recorded in the membership, never dialled by Magnetar.
func advertiseURL(u *url.URL) url.URL {
	a := *u
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		a.Host = net.JoinHostPort("127.0.0.1", u.Port())
	}
	return a
}

// dialAddr is a listener's address as a client would dial it.
func dialAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
