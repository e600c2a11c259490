package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/internal/fsm"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// refreshAuthData is the challenge a broker sends when a connection's credentials expire
// (Pulsar's AuthData.REFRESH_AUTH_DATA): the client answers with fresh ones.
var refreshAuthData = []byte("PulsarAuthRefresh")

// authState is where a connection's credential is in its refresh cycle (guarded by
// connAuth.mu).
type authState uint8

const (
	// authVerified: the credential verified (on CONNECT or the last AUTH_RESPONSE); it may
	// expire, then the client is challenged.
	authVerified authState = iota
	// authChallenged: the credential expired and an AUTH_CHALLENGE was sent; an answer that
	// verifies goes back to authVerified; no answer by the next check closes the connection.
	authChallenged
)

var authStateNames = [...]string{authVerified: "Verified", authChallenged: "Challenged"}

func (s authState) String() string { return fsm.Name(authStateNames[:], s, "authState") }

var authEdges = fsm.Edges[authState]{
	authVerified:   {authChallenged},
	authChallenged: {authVerified},
}

// becomeLocked moves the refresh state (connAuth.mu held); an illegal edge is a bug.
func (a *connAuth) becomeLocked(to authState) {
	a.mu.state = authEdges.Must(errAuthState, "connection auth", a.mu.state, to)
}

// errAuthState is the category of an illegal authState edge.
var errAuthState = errors.New("broker: illegal authentication state transition")

// connAuth is a connection's authentication state. role is written once, on CONNECT, before
// any command is served (goroutines started afterwards read it freely); the rest is
// guarded by mu, because the writer goroutine checks expiry and the reader goroutine handles
// AUTH_RESPONSE.
type connAuth struct {
	// role is what authorization checks: the authenticated role, or on a proxied
	// connection the original principal the proxy forwarded.
	role string
	// authRole is the authenticated role (a refresh must keep it); proxy is it too when it
	// is one of Config.ProxyRoles forwarding an original principal, else "".
	authRole, proxy string

	mu struct {
		sync.Mutex      // guards the fields below
		method          string
		expires         time.Time // zero: the credential does not expire
		state           authState
		supportsRefresh bool
	}
}

// tlsState returns the connection's TLS state (nil on a plain connection).
func (c *conn) tlsState() *tls.ConnectionState {
	if tc, ok := c.nc.(*tls.Conn); ok {
		st := tc.ConnectionState()
		return &st
	}
	return nil
}

// authenticate verifies CONNECT's credentials (authentication on). A refusal is answered
// with AuthenticationError and the returned error closes the connection.
func (c *conn) authenticate(cmd *pb.CommandConnect) error {
	a := c.s.cfg.Auth
	if !a.Enabled() {
		return nil
	}
	p, err := a.AuthenticateBinary(cmd.GetAuthMethodName(), cmd.GetAuthData(), c.tlsState())
	if err != nil {
		c.refuseAuth(cmd.GetAuthMethodName(), err)
		return fmt.Errorf("authentication: %w", err)
	}
	c.auth.role, c.auth.authRole = p.Role, p.Role
	if orig := cmd.GetOriginalPrincipal(); orig != "" {
		if !slices.Contains(c.s.cfg.ProxyRoles, p.Role) {
			err := fmt.Errorf("%w: an original principal from role %s, which is not a proxy role", auth.ErrAuthentication, p.Role)
			c.refuseAuth(cmd.GetAuthMethodName(), err)
			return err
		}
		c.auth.role, c.auth.proxy = orig, p.Role
	}
	c.auth.mu.Lock()
	c.auth.mu.method, c.auth.mu.expires = p.Method, p.Expires
	c.auth.mu.supportsRefresh = cmd.GetFeatureFlags().GetSupportsAuthRefresh()
	c.auth.mu.Unlock()
	// c.log is not replaced here: the writer goroutine, already running, reads it.
	c.log.Debug("client authenticated", "role", p.Role, "method", p.Method)
	return nil
}

// refuseAuth answers a failed authentication with method (the message says why, never the
// credential) and writes its audit line.
func (c *conn) refuseAuth(method string, err error) {
	c.s.m.AuthFailures.Inc()
	c.log.Info("authentication refused", "err", err)
	c.s.audit.AuthenticationRefused("binary", c.remote, method, err)
	msg := err.Error()
	rid := uint64(math.MaxUint64) // Pulsar answers a CONNECT's failure with request id -1
	c.Send(pulsar.Wrap(&pb.CommandError{RequestId: &rid, Error: pb.ServerError_AuthenticationError.Enum(), Message: &msg}))
}

// checkAuthExpiry runs on the writer goroutine every Config.AuthRefreshInterval: once the
// credential expired, the client is challenged for fresh credentials (AUTH_CHALLENGE); a
// client that cannot refresh, or did not answer the previous challenge, is disconnected.
func (c *conn) checkAuthExpiry(now time.Time) {
	c.auth.mu.Lock()
	defer c.auth.mu.Unlock()
	if c.auth.mu.expires.IsZero() || now.Before(c.auth.mu.expires) {
		return
	}
	switch {
	case c.auth.mu.state == authChallenged:
		c.log.Info("closing connection: the client did not refresh its expired credentials")
		c.close("auth refresh timed out")
	case !c.auth.mu.supportsRefresh:
		c.log.Info("closing connection: credentials expired and the client cannot refresh them")
		c.close("credentials expired")
	default:
		c.auth.becomeLocked(authChallenged)
		sv, pv := serverVersion, pulsar.ProtocolVersion
		method := c.auth.mu.method
		c.Send(pulsar.Wrap(&pb.CommandAuthChallenge{ServerVersion: &sv, ProtocolVersion: &pv,
			Challenge: &pb.AuthData{AuthMethodName: &method, AuthData: refreshAuthData}}))
	}
}

// handleAuthResponse verifies refreshed credentials: they must verify with the same method
// and name the same role, else the connection closes.
func (c *conn) handleAuthResponse(r *pb.CommandAuthResponse) error {
	a := c.s.cfg.Auth
	if !a.Enabled() {
		return nil
	}
	c.auth.mu.Lock()
	method := c.auth.mu.method
	c.auth.mu.Unlock()
	resp := r.GetResponse()
	if resp.GetAuthMethodName() != method {
		err := fmt.Errorf("%w: AUTH_RESPONSE with method %q, connected with %q", auth.ErrAuthentication, resp.GetAuthMethodName(), method)
		c.refuseAuth(resp.GetAuthMethodName(), err)
		return err
	}
	p, err := a.AuthenticateBinary(method, resp.GetAuthData(), c.tlsState())
	if err == nil && p.Role != c.auth.authRole {
		err = fmt.Errorf("%w: refreshed credentials are for another role", auth.ErrAuthentication)
	}
	if err != nil {
		c.refuseAuth(method, err)
		return err
	}
	c.auth.mu.Lock()
	c.auth.mu.expires = p.Expires
	if c.auth.mu.state == authChallenged {
		c.auth.becomeLocked(authVerified)
	}
	c.auth.mu.Unlock()
	c.s.m.AuthRefreshes.Inc()
	c.log.Debug("credentials refreshed")
	return nil
}
