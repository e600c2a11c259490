package websocket

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

// Config configures a Service.
type Config struct {
	// ServiceURL is the Pulsar URL (pulsar:// or pulsar+ssl://) of the broker or proxy the
	// service connects to.
	ServiceURL string
	// TLS configures a pulsar+ssl:// ServiceURL (nil: the system roots).
	TLS *tls.Config
	// Auth authenticates WebSocket clients (nil: authentication off).
	Auth *auth.Service
	// ServiceAuth is the service's own credentials toward the broker. With authentication
	// on and ServiceAuth set, the service connects with them and names each client's role
	// as original_principal (the service's role must be one of the broker's proxyRoles).
	// With authentication on and ServiceAuth nil, a client's own credentials (its token, or
	// its Basic user and password) are presented to the broker. Either way the broker
	// authorizes the client's role as it authorizes a binary-protocol client.
	ServiceAuth *pulsarclient.Authentication
	// MaxTextFrameSize bounds a message read from a socket (Pulsar's
	// webSocketMaxTextFrameSize). Default 1 MiB.
	MaxTextFrameSize int64
	// OperationTimeout bounds the broker calls made while a socket opens (lookup, producer
	// creation, subscription). Default 30s.
	OperationTimeout time.Duration
	// Logger receives the service's logs. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the service's metrics (nil: not registered).
	Registerer prometheus.Registerer
}

// Service serves Pulsar's WebSocket API as an http.Handler. It is safe for concurrent use.
type Service struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics
	ctx    context.Context // ends every session (Close)
	cancel context.CancelFunc
	wg     sync.WaitGroup // sessions

	pool struct {
		sync.Mutex // guards the fields below
		closed     bool
		clients    map[string]*pooledClient
	}
}

// pooledClient is a client shared by the sockets of one identity toward the broker.
type pooledClient struct {
	cl   *pulsarclient.Client
	refs int
}

// New returns a service; it connects to the broker when the first socket opens.
func New(cfg Config) (*Service, error) {
	if cfg.MaxTextFrameSize <= 0 {
		cfg.MaxTextFrameSize = 1 << 20
	}
	if cfg.OperationTimeout <= 0 {
		cfg.OperationTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if _, err := pulsarclient.New(pulsarclient.Options{URL: cfg.ServiceURL}); err != nil {
		return nil, fmt.Errorf("websocket: %w", err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: cfg.Logger.With("component", "websocket"), m: m}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.pool.clients = make(map[string]*pooledClient)
	return s, nil
}

// Close closes every socket (status 1001, going away), waits for their sessions and closes
// the broker connections. Idempotent.
func (s *Service) Close() error {
	s.pool.Lock()
	if s.pool.closed {
		s.pool.Unlock()
		return nil
	}
	s.pool.closed = true
	s.pool.Unlock()
	s.cancel()
	s.wg.Wait()
	s.pool.Lock()
	clients := s.pool.clients
	s.pool.clients = nil
	s.pool.Unlock()
	for _, pc := range clients {
		pc.cl.Close()
	}
	return nil
}

// ServeHTTP serves the WebSocket paths (see parseRoute); others get 404.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, err := parseRoute(r.URL.EscapedPath())
	if errors.Is(err, errNotFound) {
		http.NotFound(w, r)
		return
	}
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, "Invalid query params: "+err.Error(), "bad_request")
		return
	}
	if !s.enter() {
		s.refuse(w, r, http.StatusServiceUnavailable, "WebSocket service is closing", "closing")
		return
	}
	defer s.wg.Done()
	if rt.kind == kindPingPong {
		s.servePingPong(w, r)
		return
	}
	// Validate the query parameters before anything else (Pulsar: 400).
	var pp producerParams
	var cp consumerParams
	switch rt.kind {
	case kindProducer:
		pp, err = parseProducer(r.URL.Query())
	case kindConsumer:
		cp, err = parseConsumer(rt, r.URL.Query())
	case kindReader:
		cp, err = parseReader(rt, r.URL.Query(), readerSubscription())
	}
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, "Invalid query params: "+err.Error(), "bad_request")
		return
	}
	p, err := s.authenticate(r)
	if err != nil {
		s.log.Warn("websocket client refused: authentication failed", "remote", r.RemoteAddr, "topic", rt.topic, "err", err)
		s.refuse(w, r, http.StatusUnauthorized, "Failed to authenticate", "authentication")
		return
	}
	key, opts, err := s.clientOptions(p, r)
	if err != nil {
		s.log.Warn("websocket client refused", "remote", r.RemoteAddr, "role", p.Role, "topic", rt.topic, "err", err)
		s.refuse(w, r, http.StatusUnauthorized, err.Error(), "authentication")
		return
	}
	cl, release, err := s.acquire(key, opts)
	if err != nil {
		s.refuse(w, r, http.StatusServiceUnavailable, err.Error(), "closing")
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.OperationTimeout)
	var sess session
	switch rt.kind {
	case kindProducer:
		sess, err = s.newProducer(ctx, cl, rt, pp)
	default:
		sess, err = s.newConsumer(ctx, cl, rt, cp)
	}
	cancel()
	if err != nil {
		status, reason := httpStatus(err)
		s.log.Warn("websocket "+rt.kind.String()+" refused", "remote", r.RemoteAddr, "role", p.Role, "topic", rt.topic, "err", err)
		verb := "create producer"
		if rt.kind != kindProducer {
			verb = "subscribe"
		}
		s.refuse(w, r, status, "Failed to "+verb+": "+err.Error(), reason)
		return
	}
	defer sess.close()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// Pulsar's WebSocket service accepts every Origin: credentials travel in the token
		// parameter or the Authorization header, never in cookies a browser would add.
		InsecureSkipVerify: true,
	})
	if err != nil {
		s.m.errors.WithLabelValues("handshake").Inc()
		s.log.Debug("websocket handshake failed", "remote", r.RemoteAddr, "err", err)
		return
	}
	ws.SetReadLimit(s.cfg.MaxTextFrameSize)
	s.m.sessions.WithLabelValues(rt.kind.String()).Inc()
	defer s.m.sessions.WithLabelValues(rt.kind.String()).Dec()
	s.log.Debug("websocket session opened", "kind", rt.kind, "remote", r.RemoteAddr, "role", p.Role, "topic", rt.topic)
	sctx, scancel := context.WithCancel(s.ctx)
	defer scancel()
	sess.run(sctx, ws)
	s.log.Debug("websocket session closed", "kind", rt.kind, "remote", r.RemoteAddr, "topic", rt.topic)
}

// session is one socket's producer or consumer.
type session interface {
	// run serves the socket until it or ctx closes; it closes ws.
	run(ctx context.Context, ws *websocket.Conn)
	// close closes the producer or consumer on the broker.
	close()
}

// enter registers a session unless the service is closing.
func (s *Service) enter() bool {
	s.pool.Lock()
	defer s.pool.Unlock()
	if s.pool.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

func (s *Service) refuse(w http.ResponseWriter, r *http.Request, status int, msg, reason string) {
	s.m.errors.WithLabelValues(reason).Inc()
	http.Error(w, msg, status)
}

// servePingPong answers the client's pings (coder/websocket answers them while a read is in
// progress) until the client closes.
func (s *Service) servePingPong(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	s.m.sessions.WithLabelValues(kindPingPong.String()).Inc()
	defer s.m.sessions.WithLabelValues(kindPingPong.String()).Dec()
	ws.SetReadLimit(s.cfg.MaxTextFrameSize)
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	for {
		if _, _, err := ws.Read(ctx); err != nil {
			ws.Close(websocket.StatusGoingAway, "")
			return
		}
	}
}

// authenticate authenticates the request as Pulsar's WebSocket service does: the token
// query parameter stands for "Authorization: Bearer <token>" when there is no
// Authorization header. With authentication off it returns the zero Principal.
func (s *Service) authenticate(r *http.Request) (auth.Principal, error) {
	if !s.cfg.Auth.Enabled() {
		return auth.Principal{}, nil
	}
	withToken(r)
	return s.cfg.Auth.AuthenticateHTTP(r)
}

// withToken turns the token query parameter into an Authorization header if there is none.
func withToken(r *http.Request) {
	t := r.URL.Query().Get("token")
	if t == "" || r.Header.Get("Authorization") != "" {
		return
	}
	if !strings.HasPrefix(t, "Bearer ") {
		t = "Bearer " + t
	}
	r.Header.Set("Authorization", t)
}

// clientOptions returns the broker client options for an authenticated principal and the
// key of the client they make (clients are shared by the sockets of one key).
func (s *Service) clientOptions(p auth.Principal, r *http.Request) (string, pulsarclient.Options, error) {
	opts := pulsarclient.Options{URL: s.cfg.ServiceURL, TLS: s.cfg.TLS, OperationTimeout: s.cfg.OperationTimeout,
		ClientVersion: "magnetar-websocket", Logger: s.log}
	switch {
	case !s.cfg.Auth.Enabled():
		opts.Auth = s.cfg.ServiceAuth
		return "", opts, nil
	case s.cfg.ServiceAuth != nil:
		opts.Auth, opts.OriginalPrincipal = s.cfg.ServiceAuth, p.Role
		return "role\x00" + p.Role, opts, nil
	}
	scheme, param, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	param = strings.TrimSpace(param)
	var method string
	var data []byte
	switch {
	case strings.EqualFold(scheme, "bearer"):
		method, data = auth.MethodToken, []byte(param)
	case strings.EqualFold(scheme, "basic"):
		dec, err := base64.StdEncoding.DecodeString(param)
		if err != nil {
			return "", opts, errors.New("malformed Basic credentials")
		}
		method, data = auth.MethodBasic, dec
	case p.Anonymous():
		return "anonymous", opts, nil
	default:
		return "", opts, errors.New("the client's credentials cannot be presented to the broker (a client certificate): the WebSocket service needs credentials of its own")
	}
	sum := sha256.Sum256(append([]byte(method+"\x00"), data...))
	opts.Auth = &pulsarclient.Authentication{Method: method, Data: func() ([]byte, error) { return data, nil }}
	return "cred\x00" + hex.EncodeToString(sum[:]), opts, nil
}

// acquire returns the client of key (made with opts if there is none) and its release.
func (s *Service) acquire(key string, opts pulsarclient.Options) (*pulsarclient.Client, func(), error) {
	s.pool.Lock()
	defer s.pool.Unlock()
	if s.pool.closed {
		return nil, nil, errors.New("WebSocket service is closing")
	}
	pc := s.pool.clients[key]
	if pc == nil {
		cl, err := pulsarclient.New(opts)
		if err != nil {
			return nil, nil, err
		}
		pc = &pooledClient{cl: cl}
		s.pool.clients[key] = pc
	}
	pc.refs++
	var once sync.Once
	return pc.cl, func() { once.Do(func() { s.release(key, pc) }) }, nil
}

// release drops a reference to a pooled client, closing it with the last one.
func (s *Service) release(key string, pc *pooledClient) {
	s.pool.Lock()
	pc.refs--
	last := pc.refs == 0 && s.pool.clients[key] == pc
	if last {
		delete(s.pool.clients, key)
	}
	s.pool.Unlock()
	if last {
		pc.cl.Close()
	}
}

// httpStatus maps a failure to create a producer or consumer to the upgrade's HTTP status
// (Pulsar's AbstractWebSocketHandler.getErrorCode) and the errors metric's reason.
func httpStatus(err error) (int, string) {
	var se *pulsarclient.ServerError
	switch {
	case errors.As(err, &se):
		switch se.Code {
		case pb.ServerError_AuthenticationError:
			return http.StatusUnauthorized, "authentication"
		case pb.ServerError_AuthorizationError:
			return http.StatusForbidden, "authorization"
		case pb.ServerError_TopicNotFound, pb.ServerError_SubscriptionNotFound:
			return http.StatusNotFound, "create"
		case pb.ServerError_ProducerBusy, pb.ServerError_ConsumerBusy, pb.ServerError_ProducerFenced,
			pb.ServerError_IncompatibleSchema:
			return http.StatusConflict, "create"
		case pb.ServerError_TooManyRequests:
			return http.StatusTooManyRequests, "create"
		case pb.ServerError_ProducerBlockedQuotaExceededError, pb.ServerError_ProducerBlockedQuotaExceededException,
			pb.ServerError_TopicTerminatedError:
			return http.StatusServiceUnavailable, "create"
		case pb.ServerError_InvalidTopicName:
			return http.StatusBadRequest, "create"
		}
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "create"
	}
	return http.StatusInternalServerError, "create"
}
