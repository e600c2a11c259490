package access

import (
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/internal/ratelog"
)

// Audit messages, one per kind of refusal.
const (
	MsgAuthenticationRefused = "audit: authentication refused"
	MsgAuthorizationRefused  = "audit: authorization refused"
)

// Audit writes the audit lines of refused requests, as Pulsar's brokers log theirs (its
// HTTP filter's "[remote] Failed to authenticate HTTP request: reason", its connection's
// "[remote] ... with role R ... on topic T"): one line at Warn per refusal, with the
// protocol ("binary", "http"), the client's address, the principal (role), the action and
// the resource, and the reason. Never a credential: package auth's errors never carry one,
// and of an HTTP Authorization header only its scheme is written.
//
// Lines are rate-limited (package internal/ratelog): failed authentications per protocol
// and client host, refused authorizations per protocol, role and action; a kind passes one
// line per interval, the next one counting the ones suppressed meanwhile. A nil *Audit
// writes nothing. Safe for concurrent use.
type Audit struct {
	log *slog.Logger
}

// NewAudit returns an Audit writing to log (nil: slog.Default()), limited as opts says
// (zero: ratelog's defaults, one line per kind every 10 s).
func NewAudit(log *slog.Logger, opts ratelog.Options) *Audit {
	if log == nil {
		log = slog.Default()
	}
	return &Audit{log: slog.New(ratelog.New(log.Handler(), opts))}
}

// AuthenticationRefused writes the line of a failed authentication: the client at remote
// tried method ("token", "basic", "tls", "none", ...) and err says why.
func (a *Audit) AuthenticationRefused(proto, remote, method string, err error) {
	if a == nil {
		return
	}
	a.log.With("protocol", proto, "client", hostOf(remote)).Warn(MsgAuthenticationRefused,
		"remote", remote, "method", clip(method, 32), "reason", reasonOf(err))
}

// AuthorizationRefused writes the line of a refused authorization: role (authenticated)
// may not do action on resource, err says why.
func (a *Audit) AuthorizationRefused(proto, remote, role, action, resource string, err error) {
	if a == nil {
		return
	}
	if role == "" {
		role = "(anonymous)"
	}
	a.log.With("protocol", proto, "principal", clip(role, 256), "action", clip(action, 256)).Warn(MsgAuthorizationRefused,
		"remote", remote, "resource", clip(resource, 256), "reason", reasonOf(err))
}

// Authenticate is auth.Service.Middleware writing the audit line of every refusal: a
// request whose credentials do not verify is answered 401 with a JSON reason and a
// WWW-Authenticate challenge; the others reach next with their principal in the context
// (auth.FromContext). With authentication off (s nil) it is next.
func (a *Audit) Authenticate(s *auth.Service, next http.Handler) http.Handler {
	if !s.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.AuthenticateHTTP(r)
		if err != nil {
			a.AuthenticationRefused("http", r.RemoteAddr, httpScheme(r), err)
			w.Header().Set("WWW-Authenticate", `Bearer realm="pulsar", Basic realm="pulsar"`)
			auth.WriteJSONError(w, http.StatusUnauthorized, "Authentication required: "+err.Error())
			return
		}
		next.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), p)))
	})
}

// RequireSuperUser lets through only requests whose principal (put in the context by
// Authenticate) is one of superUsers; the others are answered 403 with a JSON reason and
// audited as action on resource.
func (a *Audit) RequireSuperUser(superUsers []string, action, resource string, next http.Handler) http.Handler {
	az := auth.NewAuthorizer(true, superUsers)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := auth.FromContext(r.Context())
		if !az.IsSuperUser(p.Role) {
			err := notAuthorized(p.Role, action+" (superusers only)", resource)
			a.AuthorizationRefused("http", r.RemoteAddr, p.Role, action, resource, err)
			auth.WriteJSONError(w, http.StatusForbidden, err.Error())
			return
		}
		next.ServeHTTP(w, r)
	})
}

// httpScheme names the credential an HTTP request presented (never the credential).
func httpScheme(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, _, _ := strings.Cut(strings.TrimSpace(h), " ")
		return strings.ToLower(scheme)
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		return auth.MethodTLS
	}
	return "none"
}

func hostOf(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

func reasonOf(err error) string {
	if err == nil {
		return ""
	}
	return clip(err.Error(), 512)
}

// clip cuts s to n bytes, marking the cut: names in refused requests can be very long.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
