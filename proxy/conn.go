package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// clientConn is one client connection (Pulsar's ProxyConnection). Its serve goroutine reads
// the CONNECT and then either splices the connection to the broker the CONNECT names
// (proxy_to_broker_url; direct.go) or serves it as a lookup connection: it reads the
// client's commands and answers each lookup or metadata request on a goroutine of its own
// (tracked by wg), asking a broker over this connection's upstreams.
type clientConn struct {
	s   *Service
	nc  net.Conn
	log *slog.Logger

	// connect and principal are written by serve before any request goroutine starts.
	connect   *pb.CommandConnect
	principal string // authenticated role ("" with authentication off)

	ctx    context.Context // ends when serve returns
	cancel context.CancelFunc
	wg     sync.WaitGroup // request goroutines
	wmu    sync.Mutex     // serialises writes to nc

	mu struct {
		sync.Mutex // guards the fields below
		ups        map[string]*upstream
		closed     bool
	}
}

func newClientConn(s *Service, nc net.Conn) *clientConn {
	c := &clientConn{s: s, nc: nc, log: s.log.With("remote", nc.RemoteAddr().String())}
	c.ctx, c.cancel = context.WithCancel(s.ctx)
	c.mu.ups = make(map[string]*upstream)
	return c
}

// serve runs the connection until it ends; the caller closes nc.
func (c *clientConn) serve() {
	defer c.shutdown()
	c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.HandshakeTimeout)) //nolint:errcheck // the read reports it
	f, _, err := readOneFrame(c.nc, c.s.cfg.MaxFrameSize)
	if err != nil {
		c.readFailed("handshake", err)
		return
	}
	if f.Cmd.GetType() != pb.BaseCommand_CONNECT {
		c.bad("not_connect", "expected CONNECT, got "+f.Cmd.GetType().String())
		return
	}
	c.connect = f.Cmd.GetConnect()
	if err := c.authenticate(); err != nil {
		return
	}
	if target := c.connect.GetProxyToBrokerUrl(); target != "" {
		c.direct(target)
		return
	}
	c.lookups()
}

// shutdown ends the request goroutines and closes the upstreams.
func (c *clientConn) shutdown() {
	c.cancel()
	c.nc.Close()
	c.wg.Wait()
	c.mu.Lock()
	c.mu.closed = true
	ups := c.mu.ups
	c.mu.ups = nil
	c.mu.Unlock()
	for _, u := range ups {
		u.close()
	}
}

// bad closes the connection for a frame the proxy refuses, logging why.
func (c *clientConn) bad(reason, detail string) {
	c.s.m.bad.WithLabelValues(reason).Inc()
	c.log.Info("closing client connection: bad frame", "reason", detail)
}

// readFailed logs why reading the client failed: a bad frame, or the client going away.
func (c *clientConn) readFailed(phase string, err error) {
	var se *pulsar.FrameSizeError
	var ne net.Error
	switch {
	case errors.As(err, &se):
		c.bad("too_large", err.Error())
	case errors.Is(err, errBadFrame), errors.Is(err, pulsar.ErrMalformed), errors.Is(err, pulsar.ErrChecksum):
		c.bad("malformed", err.Error())
	case errors.As(err, &ne) && ne.Timeout():
		c.log.Info("closing client connection: nothing received in time", "phase", phase)
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		c.log.Debug("client closed the connection", "phase", phase)
	default:
		c.log.Debug("client connection failed", "phase", phase, "err", err)
	}
}

// write sends one command to the client; a failure closes the connection.
func (c *clientConn) write(cmd *pb.BaseCommand) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := writeCmd(c.nc, cmd); err != nil {
		c.log.Debug("writing to the client failed", "err", err)
		c.nc.Close()
	}
}

// authenticate verifies the client's credentials when authentication is on; a refusal is
// answered AuthenticationError and ends the connection.
func (c *clientConn) authenticate() error {
	a := c.s.cfg.Auth
	if !a.Enabled() {
		return nil
	}
	var st *tls.ConnectionState
	if tc, ok := c.nc.(*tls.Conn); ok {
		cs := tc.ConnectionState()
		st = &cs
	}
	p, err := a.AuthenticateBinary(c.connect.GetAuthMethodName(), c.connect.GetAuthData(), st)
	if err != nil {
		c.s.m.authFail.Inc()
		c.log.Info("authentication refused", "err", err)
		c.s.audit.AuthenticationRefused("binary", c.nc.RemoteAddr().String(), c.connect.GetAuthMethodName(), err)
		c.write(errorCmd(connectRequestID, &brokerError{code: pb.ServerError_AuthenticationError, msg: err.Error()}))
		return err
	}
	c.principal = p.Role
	return nil
}

// lookups serves a lookup connection: the proxy answers CONNECT itself, then the lookup and
// metadata requests (Pulsar's LookupProxyHandler).
func (c *clientConn) lookups() {
	pv := min(c.connect.GetProtocolVersion(), pulsar.ProtocolVersion)
	c.write(pulsar.Wrap(&pb.CommandConnected{ServerVersion: proto.String(serverVersion), ProtocolVersion: &pv}))
	fr := pulsar.NewFrameReader(c.nc, c.s.cfg.MaxFrameSize)
	for {
		c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.IdleTimeout)) //nolint:errcheck
		f, err := fr.ReadFrame()
		if err != nil {
			c.readFailed("lookup", err)
			return
		}
		switch t := f.Cmd.GetType(); t {
		case pb.BaseCommand_PING:
			c.write(pulsar.Wrap(&pb.CommandPong{}))
		case pb.BaseCommand_PONG, pb.BaseCommand_AUTH_RESPONSE:
		case pb.BaseCommand_LOOKUP, pb.BaseCommand_PARTITIONED_METADATA, pb.BaseCommand_GET_TOPICS_OF_NAMESPACE,
			pb.BaseCommand_GET_SCHEMA, pb.BaseCommand_GET_OR_CREATE_SCHEMA:
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				c.request(f.Cmd)
			}()
		case pb.BaseCommand_CONNECT:
			c.bad("second_connect", "second CONNECT")
			return
		default:
			// Producers, consumers and the rest go to a broker's connection (the client
			// names it in proxy_to_broker_url), never to a lookup connection.
			c.bad("unexpected", t.String()+" on a lookup connection")
			return
		}
	}
}

// request answers one lookup or metadata request.
func (c *clientConn) request(cmd *pb.BaseCommand) {
	rid, _ := requestOf(cmd)
	typ := cmd.GetType()
	select {
	case c.s.lookups <- struct{}{}:
		defer func() { <-c.s.lookups }()
	default:
		c.s.m.failures.WithLabelValues(typ.String()).Inc()
		c.write(failedResponse(typ, rid, &brokerError{code: pb.ServerError_TooManyRequests,
			msg: "too many lookup requests on the proxy"}))
		return
	}
	c.s.m.ops.WithLabelValues(typ.String()).Inc()
	ctx, cancel := context.WithTimeout(c.ctx, c.s.cfg.RequestTimeout)
	defer cancel()
	var resp *pb.BaseCommand
	var err error
	if typ == pb.BaseCommand_LOOKUP {
		resp, err = c.lookup(ctx, cmd.GetLookupTopic())
	} else {
		resp, err = c.ask(ctx, "", cmd)
	}
	if err != nil {
		c.s.m.failures.WithLabelValues(typ.String()).Inc()
		c.log.Debug("request failed", "type", typ, "err", err)
		resp = failedResponse(typ, rid, codeOf(err))
	}
	setRequestID(resp, rid)
	c.write(resp)
}

// maxRedirects bounds the lookup redirects the proxy follows (as the Go client does).
const maxRedirects = 20

// lookup asks a broker where a topic is served, following redirects, and answers Connect
// with that broker's URL and proxy_through_service_url: the client connects to the proxy
// again, naming that broker in CONNECT.proxy_to_broker_url.
func (c *clientConn) lookup(ctx context.Context, l *pb.CommandLookupTopic) (*pb.BaseCommand, error) {
	target, authoritative := "", l.GetAuthoritative()
	for range maxRedirects {
		q := proto.Clone(l).(*pb.CommandLookupTopic)
		q.Authoritative = proto.Bool(authoritative)
		// The proxy reaches the brokers on their internal listener, as Pulsar's proxy does:
		// the client's listener name (one of the brokers' advertised listeners, for clients
		// dialling them directly) is not the proxy's.
		q.AdvertisedListenerName = nil
		r, err := c.ask(ctx, target, pulsar.Wrap(q))
		if err != nil {
			return nil, err
		}
		lr := r.GetLookupTopicResponse()
		if lr == nil {
			return r, nil // an ERROR: relayed
		}
		switch lr.GetResponse() {
		case pb.CommandLookupTopicResponse_Redirect:
			if target = hostOf(lr.GetBrokerServiceUrl()); target == "" {
				return nil, notReady("lookup redirected to %q", lr.GetBrokerServiceUrl())
			}
			c.s.brokers.learn(target)
			authoritative = lr.GetAuthoritative()
		case pb.CommandLookupTopicResponse_Connect:
			addr := hostOf(lr.GetBrokerServiceUrl())
			if addr == "" {
				return nil, notReady("lookup answered %q", lr.GetBrokerServiceUrl())
			}
			c.s.brokers.learn(addr)
			// A client on the proxy's TLS listener takes the TLS URL's host as
			// proxy_to_broker_url: it names the plain listener too, which the proxy dials
			// (TLS is between the client and the proxy).
			return pulsar.Wrap(&pb.CommandLookupTopicResponse{
				Response:         pb.CommandLookupTopicResponse_Connect.Enum(),
				BrokerServiceUrl: lr.BrokerServiceUrl, BrokerServiceUrlTls: proto.String("pulsar+ssl://" + addr),
				Authoritative: proto.Bool(true), ProxyThroughServiceUrl: proto.Bool(true),
			}), nil
		default:
			return r, nil // Failed: relayed
		}
	}
	return nil, notReady("more than %d lookup redirects", maxRedirects)
}

// ask sends a request to the broker at target ("": any broker, the next one if a broker is
// unreachable) and returns its answer.
func (c *clientConn) ask(ctx context.Context, target string, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	addrs := []string{target}
	if target == "" {
		var err error
		if addrs, err = c.s.brokers.binary(ctx); err != nil {
			return nil, notReady("%v", err)
		}
	}
	var last error
	for _, a := range addrs {
		u, err := c.upstream(ctx, a)
		if err == nil {
			var r *pb.BaseCommand
			if r, err = u.request(ctx, proto.Clone(cmd).(*pb.BaseCommand)); err == nil {
				return r, nil
			}
		}
		var be *brokerError
		if errors.As(err, &be) && be.code != pb.ServerError_ServiceNotReady {
			return nil, err // the broker refused us (e.g. authentication): the next would too
		}
		c.s.brokers.invalidate()
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

// upstream returns this connection's connection to the broker at addr, opening it if
// needed with the client's CONNECT (see Service.brokerConnect).
func (c *clientConn) upstream(ctx context.Context, addr string) (*upstream, error) {
	c.mu.Lock()
	u := c.mu.ups[addr]
	c.mu.Unlock()
	if u != nil && !u.dead() {
		return u, nil
	}
	bc, err := c.s.brokerConnect(c.connect, c.principal)
	if err != nil {
		return nil, err
	}
	nu, err := c.s.openUpstream(ctx, addr, bc, c.log)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		nu.close()
		return nil, notReady("%v", errClosed)
	}
	if old := c.mu.ups[addr]; old != nil && old != u && !old.dead() {
		nu.close() // another request opened one meanwhile
		return old, nil
	}
	c.mu.ups[addr] = nu
	return nu, nil
}

// failedResponse is the answer to a request of type typ that failed with e, in the form the
// clients expect for it.
func failedResponse(typ pb.BaseCommand_Type, rid uint64, e *brokerError) *pb.BaseCommand {
	msg := e.msg
	switch typ {
	case pb.BaseCommand_LOOKUP:
		return pulsar.Wrap(&pb.CommandLookupTopicResponse{RequestId: &rid, Response: pb.CommandLookupTopicResponse_Failed.Enum(),
			Error: e.code.Enum(), Message: &msg})
	case pb.BaseCommand_PARTITIONED_METADATA:
		return pulsar.Wrap(&pb.CommandPartitionedTopicMetadataResponse{RequestId: &rid,
			Response: pb.CommandPartitionedTopicMetadataResponse_Failed.Enum(), Error: e.code.Enum(), Message: &msg})
	}
	return errorCmd(rid, e)
}

// targetHost accepts proxy_to_broker_url as host:port (what the clients send) or as a URL.
func targetHost(s string) string {
	if strings.Contains(s, "://") {
		return hostOf(s)
	}
	return s
}
