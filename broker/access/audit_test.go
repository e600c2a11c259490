package access_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/access"
	"github.com/magnetar-io/magnetar/internal/ratelog"
)

// syncBuffer is a log destination safe for the HTTP server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the lines written since the last call.
func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := strings.TrimSpace(s.b.String())
	s.b.Reset()
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newAudit() (*access.Audit, *syncBuffer, *clock) {
	buf := &syncBuffer{}
	c := &clock{t: time.Unix(1000, 0)}
	return access.NewAudit(slog.New(slog.NewTextHandler(buf, nil)), ratelog.Options{Interval: 10 * time.Second, Now: c.now}), buf, c
}

// TestAuditRateLimited: a refused authorization is one line naming the protocol,
// principal, action, resource and client; repeated ones of the same principal and action
// pass one line per interval (the next counting the suppressed ones), while another
// principal's pass at once.
func TestAuditRateLimited(t *testing.T) {
	a, buf, c := newAudit()
	err := errors.New("not authorized: role bob may not produce on persistent://t/ns/x")
	for range 50 {
		a.AuthorizationRefused("binary", "10.0.0.7:5555", "bob", "produce", "persistent://t/ns/x", err)
	}
	got := buf.lines()
	if len(got) != 1 {
		t.Fatalf("50 refusals at once: %d lines %q, want 1", len(got), got)
	}
	for _, want := range []string{"level=WARN", access.MsgAuthorizationRefused, "protocol=binary", "principal=bob", "action=produce",
		"resource=persistent://t/ns/x", "remote=10.0.0.7:5555"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("line %q lacks %q", got[0], want)
		}
	}
	a.AuthorizationRefused("binary", "10.0.0.8:1", "carol", "produce", "persistent://t/ns/x", err)
	if got := buf.lines(); len(got) != 1 || !strings.Contains(got[0], "principal=carol") {
		t.Fatalf("another principal: %q", got)
	}
	c.add(10 * time.Second)
	a.AuthorizationRefused("binary", "10.0.0.7:5556", "bob", "produce", "persistent://t/ns/x", err)
	if got := buf.lines(); len(got) != 1 || !strings.Contains(got[0], "suppressed=49") {
		t.Fatalf("after the interval: %q, want one line with suppressed=49", got)
	}
	var nilAudit *access.Audit
	nilAudit.AuthenticationRefused("http", "x", "none", err) // writes nothing, does not panic
	a.AuthorizationRefused("http", "10.0.0.9:1", "", "GET /admin/v2/brokers", strings.Repeat("r", 5000), err)
	if got := buf.lines(); len(got) != 1 || !strings.Contains(got[0], "principal=(anonymous)") || len(got[0]) > 2000 {
		t.Fatalf("anonymous, long resource: %q", got)
	}
}

// TestAuditAuthenticate: over HTTP, a bad or missing credential is 401 with a JSON reason
// and an audit line that names the scheme but never the credential; a good one reaches
// the handler with its principal; RequireSuperUser answers other roles 403 (audited).
func TestAuditAuthenticate(t *testing.T) {
	secret := []byte("audit-test secret key of 32 byte")
	s, err := auth.New(auth.Config{Enabled: true, Providers: []string{"token"},
		Token: auth.TokenConfig{SecretKey: base64.StdEncoding.EncodeToString(secret)}})
	if err != nil {
		t.Fatal(err)
	}
	token := func(sub string) string {
		tok, err := auth.CreateToken(jwt.SigningMethodHS256, secret, sub, time.Now().Add(time.Hour), nil)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	a, buf, clk := newAudit()
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := auth.FromContext(r.Context())
		w.Write([]byte("hello " + p.Role))
	})
	srv := httptest.NewServer(a.Authenticate(s, a.RequireSuperUser([]string{"root"}, "profile", "/debug/pprof", inner)))
	defer srv.Close()
	get := func(authz string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+"/x", nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	forged := token("root") + "x"
	for _, tc := range []struct {
		authz, scheme string
	}{{"", "none"}, {"Bearer " + forged, "bearer"}, {"Basic " + base64.StdEncoding.EncodeToString([]byte("root:hunter2")), "basic"}} {
		clk.add(10 * time.Second) // the refusals of one client host pass a line per interval
		code, body := get(tc.authz)
		if code != http.StatusUnauthorized || !strings.Contains(body, `"reason"`) {
			t.Errorf("%s: %d %s, want 401 with a reason", tc.scheme, code, body)
		}
		got := buf.lines()
		if len(got) != 1 || !strings.Contains(got[0], access.MsgAuthenticationRefused) || !strings.Contains(got[0], "method="+tc.scheme) ||
			!strings.Contains(got[0], "protocol=http") || !strings.Contains(got[0], "remote=127.0.0.1:") {
			t.Errorf("%s: audit lines %q", tc.scheme, got)
		}
		if strings.Contains(strings.Join(got, "\n"), forged) || strings.Contains(strings.Join(got, "\n"), "hunter2") ||
			strings.Contains(strings.Join(got, "\n"), base64.StdEncoding.EncodeToString([]byte("root:hunter2"))) {
			t.Errorf("%s: a credential in the audit line %q", tc.scheme, got)
		}
	}
	if code, body := get("Bearer " + token("alice")); code != http.StatusForbidden || !strings.Contains(body, "alice") {
		t.Errorf("alice: %d %s, want 403", code, body)
	}
	if got := buf.lines(); len(got) != 1 || !strings.Contains(got[0], access.MsgAuthorizationRefused) || !strings.Contains(got[0], "principal=alice") ||
		!strings.Contains(got[0], "action=profile") || !strings.Contains(got[0], "resource=/debug/pprof") {
		t.Errorf("alice: audit lines %q", got)
	}
	if code, body := get("Bearer " + token("root")); code != http.StatusOK || body != "hello root" {
		t.Errorf("root: %d %s", code, body)
	}
	if got := buf.lines(); len(got) != 0 {
		t.Errorf("an allowed request audited: %q", got)
	}
	var off *auth.Service // authentication off: every request reaches the handler, without a principal
	rec := httptest.NewRecorder()
	a.Authenticate(off, inner).ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "hello " {
		t.Errorf("authentication off: %d %q", rec.Code, rec.Body.String())
	}
}
