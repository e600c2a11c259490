package pulsarclient

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Options configures a Client.
type Options struct {
	// URL is the service URL, pulsar://host:port (port 6650 if omitted).
	URL string
	// OperationTimeout bounds each lookup, producer creation and subscription attempt when
	// the caller's context has no earlier deadline. Default 30s.
	OperationTimeout time.Duration
	// ClientVersion is sent in CONNECT. Default "magnetar-pulsarclient".
	ClientVersion string
	// Logger receives connection-level warnings. Default slog.Default().
	Logger *slog.Logger
	// Auth, if set, authenticates the client: its method and data go in CONNECT, and Data
	// is asked again when the broker challenges expired credentials (AUTH_CHALLENGE).
	Auth *Authentication
	// TLS configures pulsar+ssl:// connections (nil: the system roots, hostname checked).
	// Its ServerName is set per broker unless given.
	TLS *tls.Config
	// OriginalPrincipal, if set, is sent in CONNECT's original_principal: a proxy (or a
	// WebSocket service) authenticating with Auth as one of the broker's proxyRoles acts for
	// this role, which the broker authorizes.
	OriginalPrincipal string
	// ListenerName names the broker's advertised listener whose URLs lookups answer
	// (Pulsar's listenerName); "": the broker's internal listener.
	ListenerName string
}

// Authentication is a client's credentials.
type Authentication struct {
	// Method is CONNECT's auth_method_name: "token", "basic" or "tls".
	Method string
	// Data returns the current credentials (e.g. a token re-read from its file).
	Data func() ([]byte, error)
}

// Client is a Pulsar client: it looks topics up and keeps one connection per broker, shared
// by the producers and consumers it creates. It is safe for concurrent use.
type Client struct {
	opts    Options
	svcAddr string
	log     *slog.Logger
	ids     atomic.Uint64 // request, producer and consumer ids (unique per client)

	mu struct {
		sync.Mutex // guards the fields below
		closed     bool
		conns      map[string]*connEntry
		closers    map[closer]struct{} // producers and consumers, closed by Close
	}
}

type closer interface{ forceClose() }

// connEntry is a connection being dialled (ready open) or dialled (c or err set).
type connEntry struct {
	ready chan struct{}
	c     *conn
	err   error
}

// New returns a client for the service URL. It does no I/O: connections are made by the
// first call that needs them.
func New(opts Options) (*Client, error) {
	addr, useTLS, err := parseURL(opts.URL)
	if err != nil {
		return nil, err
	}
	if useTLS && opts.TLS == nil {
		opts.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if !useTLS {
		opts.TLS = nil
	}
	if opts.OperationTimeout <= 0 {
		opts.OperationTimeout = 30 * time.Second
	}
	if opts.ClientVersion == "" {
		opts.ClientVersion = "magnetar-pulsarclient"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	cl := &Client{opts: opts, svcAddr: addr, log: opts.Logger}
	cl.mu.conns = make(map[string]*connEntry)
	cl.mu.closers = make(map[closer]struct{})
	return cl, nil
}

// hostPort extracts host:port from a pulsar:// or pulsar+ssl:// URL.
func hostPort(s string) (string, error) {
	addr, _, err := parseURL(s)
	return addr, err
}

// parseURL extracts host:port from a pulsar:// (default port 6650) or pulsar+ssl:// (6651)
// URL and reports whether it is TLS.
func parseURL(s string) (addr string, useTLS bool, err error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "pulsar" && u.Scheme != "pulsar+ssl") || u.Host == "" {
		return "", false, fmt.Errorf("%w: %q: want pulsar://host:port or pulsar+ssl://host:port", ErrBadURL, s)
	}
	useTLS = u.Scheme == "pulsar+ssl"
	if u.Port() == "" {
		port := "6650"
		if useTLS {
			port = "6651"
		}
		return net.JoinHostPort(u.Hostname(), port), useTLS, nil
	}
	return u.Host, useTLS, nil
}

// proxiedAddr is the connection key of a broker reached through the proxy at proxy: the
// proxy's address, then '>' and the broker's host:port (dial splits it).
func proxiedAddr(proxy, broker string) string { return proxy + ">" + broker }

// splitProxied splits a connection key into the address to dial and the broker to name in
// proxy_to_broker_url ("" for a direct connection).
func splitProxied(addr string) (dialAddr, proxyTo string) {
	dialAddr, proxyTo, _ = strings.Cut(addr, ">")
	return dialAddr, proxyTo
}

// brokerURL is the lookup answer's URL for this client: the TLS one on a TLS client.
func (cl *Client) brokerURL(r *pb.CommandLookupTopicResponse) string {
	if cl.opts.TLS != nil {
		return r.GetBrokerServiceUrlTls()
	}
	return r.GetBrokerServiceUrl()
}

// Close closes every producer and consumer (failing their pending operations with
// ErrClosed) and every connection. It is idempotent.
func (cl *Client) Close() error {
	cl.mu.Lock()
	if cl.mu.closed {
		cl.mu.Unlock()
		return nil
	}
	cl.mu.closed = true
	closers := cl.mu.closers
	cl.mu.closers = nil
	entries := cl.mu.conns
	cl.mu.conns = nil
	cl.mu.Unlock()
	for c := range closers {
		c.forceClose()
	}
	for _, e := range entries {
		<-e.ready
		if e.c != nil {
			e.c.Close()
		}
	}
	return nil
}

func (cl *Client) track(c closer) error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.mu.closed {
		return ErrClosed
	}
	cl.mu.closers[c] = struct{}{}
	return nil
}

func (cl *Client) untrack(c closer) {
	cl.mu.Lock()
	delete(cl.mu.closers, c)
	cl.mu.Unlock()
}

func (cl *Client) nextID() uint64 { return cl.ids.Add(1) }

// opContext applies OperationTimeout to ctx.
func (cl *Client) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, cl.opts.OperationTimeout)
}

// getConn returns the open connection to addr, dialling it if needed.
func (cl *Client) getConn(ctx context.Context, addr string) (*conn, error) {
	for {
		cl.mu.Lock()
		if cl.mu.closed {
			cl.mu.Unlock()
			return nil, ErrClosed
		}
		e, ok := cl.mu.conns[addr]
		if !ok {
			e = &connEntry{ready: make(chan struct{})}
			cl.mu.conns[addr] = e
			cl.mu.Unlock()
			e.c, e.err = dial(ctx, addr, cl.opts, cl.log)
			close(e.ready)
			if e.err != nil {
				cl.dropConn(addr, e)
			}
			return e.c, e.err
		}
		cl.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.err != nil {
			return nil, e.err
		}
		if !e.c.isClosed() {
			return e.c, nil
		}
		cl.dropConn(addr, e) // dead: dial again
	}
}

func (cl *Client) dropConn(addr string, e *connEntry) {
	cl.mu.Lock()
	if cl.mu.conns[addr] == e {
		delete(cl.mu.conns, addr)
	}
	cl.mu.Unlock()
}

// maxLookupRedirects bounds the Redirect answers followed by one lookup, as the Go client.
const maxLookupRedirects = 20

// Lookup returns the address (host:port) of the broker that serves topic.
func (cl *Client) Lookup(ctx context.Context, topic string) (string, error) {
	full, err := fullTopicName(topic)
	if err != nil {
		return "", err
	}
	ctx, cancel := cl.opContext(ctx)
	defer cancel()
	addr, authoritative := cl.svcAddr, false
	for range maxLookupRedirects {
		c, err := cl.getConn(ctx, addr)
		if err != nil {
			return "", err
		}
		id := cl.nextID()
		resp, err := c.request(ctx, id, pulsar.Wrap(&pb.CommandLookupTopic{
			Topic: proto.String(full), RequestId: proto.Uint64(id), Authoritative: proto.Bool(authoritative),
			AdvertisedListenerName: proto.String(cl.opts.ListenerName),
		}))
		if err != nil {
			return "", fmt.Errorf("lookup %s: %w", full, err)
		}
		r := resp.GetLookupTopicResponse()
		if r == nil {
			return "", fmt.Errorf("%w: answer to LOOKUP is %v", ErrProtocol, resp.GetType())
		}
		switch r.GetResponse() {
		case pb.CommandLookupTopicResponse_Connect:
			if r.GetProxyThroughServiceUrl() {
				// Through a proxy: connect to the service address, naming the broker in
				// CONNECT's proxy_to_broker_url (the proxy then splices the connection).
				target, err := hostPort(cl.brokerURL(r))
				if err != nil {
					return "", err
				}
				return proxiedAddr(cl.svcAddr, target), nil
			}
			return hostPort(cl.brokerURL(r))
		case pb.CommandLookupTopicResponse_Redirect:
			if addr, err = hostPort(cl.brokerURL(r)); err != nil {
				return "", err
			}
			authoritative = r.GetAuthoritative()
		default:
			return "", fmt.Errorf("lookup %s: %w", full, serverError(r.GetError(), r.GetMessage()))
		}
	}
	return "", fmt.Errorf("lookup %s: %w: more than %d redirects", full, ErrProtocol, maxLookupRedirects)
}

// PartitionedMetadata returns the number of partitions of topic (0: not partitioned).
func (cl *Client) PartitionedMetadata(ctx context.Context, topic string) (int, error) {
	full, err := fullTopicName(topic)
	if err != nil {
		return 0, err
	}
	ctx, cancel := cl.opContext(ctx)
	defer cancel()
	c, err := cl.getConn(ctx, cl.svcAddr)
	if err != nil {
		return 0, err
	}
	id := cl.nextID()
	resp, err := c.request(ctx, id, pulsar.Wrap(&pb.CommandPartitionedTopicMetadata{
		Topic: proto.String(full), RequestId: proto.Uint64(id),
	}))
	if err != nil {
		return 0, fmt.Errorf("partitioned metadata of %s: %w", full, err)
	}
	r := resp.GetPartitionMetadataResponse()
	if r == nil {
		return 0, fmt.Errorf("%w: answer to PARTITIONED_METADATA is %v", ErrProtocol, resp.GetType())
	}
	if r.GetResponse() == pb.CommandPartitionedTopicMetadataResponse_Failed {
		return 0, fmt.Errorf("partitioned metadata of %s: %w", full, serverError(r.GetError(), r.GetMessage()))
	}
	return int(r.GetPartitions()), nil
}

// topicConn looks topic up and returns the connection to its broker.
func (cl *Client) topicConn(ctx context.Context, topic string) (*conn, error) {
	addr, err := cl.Lookup(ctx, topic)
	if err != nil {
		return nil, err
	}
	return cl.getConn(ctx, addr)
}

// reconnectBackoff is the retry delay schedule of reconnections: 100 ms doubling to 5 s.
var reconnectBackoff = backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}
