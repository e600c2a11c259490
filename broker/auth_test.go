package broker_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	mp "github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func testToken(t *testing.T, sub string, exp time.Time) string {
	t.Helper()
	s, err := auth.CreateToken(jwt.SigningMethodHS256, testSecret, sub, exp, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startAuthService starts a broker with token authentication (and the anonymous role anon).
func startAuthService(t *testing.T, anon string, refresh time.Duration) *broker.Service {
	t.Helper()
	a, err := auth.New(auth.Config{Enabled: true, Providers: []string{"org.apache.pulsar.broker.authentication.AuthenticationProviderToken"},
		AnonymousRole: anon, Token: auth.TokenConfig{SecretKey: base64.StdEncoding.EncodeToString(testSecret)}})
	if err != nil {
		t.Fatal(err)
	}
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	return startServiceWith(t, store, topictest.NewStore(), "b1", func(c *broker.Config) {
		c.Auth, c.AuthRefreshInterval = a, refresh
	})
}

// connectWith sends a CONNECT with the given credentials and returns the answer.
func connectWith(t *testing.T, svc *broker.Service, method, data string) (*rawClient, *pb.BaseCommand) {
	t.Helper()
	cmd := &pb.CommandConnect{FeatureFlags: &pb.FeatureFlags{SupportsAuthRefresh: new(true)}}
	if method != "" {
		cmd.AuthMethodName, cmd.AuthData = &method, []byte(data)
	}
	return dialConnect(t, svc, cmd)
}

// closedByBroker reports whether the broker closed the connection (EOF before any frame).
func (c *rawClient) closedByBroker() bool {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return !strings.Contains(err.Error(), "timeout")
		}
		if f.Cmd.GetType() != pb.BaseCommand_PING {
			c.t.Logf("unexpected frame %v", f.Cmd.GetType())
			return false
		}
	}
}

// TestConnectAuthentication: with token authentication on, a CONNECT is served only with a
// valid token (surrounding whitespace ignored) or, where configured, as the anonymous role;
// a wrong, expired or missing credential gets AuthenticationError and the connection closes.
func TestConnectAuthentication(t *testing.T) {
	svc := startAuthService(t, "", 0)
	if _, got := connectWith(t, svc, "token", testToken(t, "alice", time.Now().Add(time.Hour))+"\n"); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("good token: %v", got)
	}
	wrong, _ := auth.CreateToken(jwt.SigningMethodHS256, []byte("another secret of 32 bytes......"), "alice", time.Time{}, nil)
	for name, tc := range map[string]struct{ method, data, want string }{
		"wrong key": {"token", wrong, "signature is invalid"},
		"expired":   {"token", testToken(t, "alice", time.Now().Add(-time.Minute)), "expired"},
		"garbage":   {"token", "xyz", "malformed"},
		"none":      {"", "", "credentials required"},
		"basic":     {"basic", "u:p", `no provider for authentication method "basic"`},
	} {
		c, got := connectWith(t, svc, tc.method, tc.data)
		e := got.GetError()
		if got.GetType() != pb.BaseCommand_ERROR || e.GetError() != pb.ServerError_AuthenticationError ||
			!strings.Contains(e.GetMessage(), tc.want) || (tc.data != "" && strings.Contains(e.GetMessage(), tc.data)) {
			t.Errorf("%s: %v", name, got)
			continue
		}
		if !c.closedByBroker() {
			t.Errorf("%s: connection not closed", name)
		}
	}
	anon := startAuthService(t, "guest", 0)
	if _, got := connectWith(t, anon, "", ""); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("anonymous: %v", got)
	}
	if _, got := connectWith(t, anon, "token", "xyz"); got.GetType() != pb.BaseCommand_ERROR {
		t.Fatalf("a bad token is not anonymous: %v", got)
	}
}

// TestAuthRefresh: once a connection's token expires the broker sends AUTH_CHALLENGE; a
// fresh token for the same role keeps the connection; one for another role, or none at all,
// closes it.
func TestAuthRefresh(t *testing.T) {
	// The broker checks expiry every 250 ms: a challenge unanswered by the next check closes
	// the connection without an answer, so the check must leave a loaded machine time to answer.
	svc := startAuthService(t, "", 250*time.Millisecond)
	short := func() string { return testToken(t, "alice", time.Now().Add(1500*time.Millisecond)) }
	respond := func(c *rawClient, tok string) {
		t.Helper()
		m := "token"
		b, _ := mp.AppendCommand(nil, mp.Wrap(&pb.CommandAuthResponse{Response: &pb.AuthData{AuthMethodName: &m, AuthData: []byte(tok)}}))
		if _, err := c.nc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	waitChallenge := func(c *rawClient) {
		t.Helper()
		for {
			f, err := c.fr.ReadFrame()
			if err != nil {
				t.Fatalf("waiting for AUTH_CHALLENGE: %v", err)
			}
			if f.Cmd.GetType() == pb.BaseCommand_AUTH_CHALLENGE {
				if ch := f.Cmd.GetAuthChallenge().GetChallenge(); ch.GetAuthMethodName() != "token" || string(ch.GetAuthData()) != "PulsarAuthRefresh" {
					t.Fatalf("challenge %v", ch)
				}
				return
			}
		}
	}
	c, got := connectWith(t, svc, "token", short())
	if got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatal(got)
	}
	waitChallenge(c)
	respond(c, testToken(t, "alice", time.Now().Add(time.Hour)))
	// Still served: a lookup is answered.
	tp := "persistent://public/default/t"
	if got := c.roundTrip(&pb.CommandLookupTopic{Topic: &tp, RequestId: c.nextID()}); got.GetType() != pb.BaseCommand_LOOKUP_RESPONSE {
		t.Fatalf("after refresh: %v", got)
	}

	c2, _ := connectWith(t, svc, "token", short())
	waitChallenge(c2)
	respond(c2, testToken(t, "mallory", time.Now().Add(time.Hour)))
	if got := c2.roundTrip(&pb.CommandPing{}); got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_AuthenticationError {
		t.Fatalf("role change: %v", got)
	}
	if !c2.closedByBroker() {
		t.Fatal("role change: connection not closed")
	}

	c3, _ := connectWith(t, svc, "token", short())
	waitChallenge(c3)
	if !c3.closedByBroker() {
		t.Fatal("unanswered challenge: connection not closed")
	}
}

// TestProxyRoles: a proxy role may forward its client's role (original_principal), which
// is what gets authorized — with the proxy's own role too unless it is a superuser; any
// other role forwarding one is refused at CONNECT.
func TestProxyRoles(t *testing.T) {
	a, err := auth.New(auth.Config{Enabled: true, Providers: []string{"token"},
		Token: auth.TokenConfig{SecretKey: base64.StdEncoding.EncodeToString(testSecret)}})
	if err != nil {
		t.Fatal(err)
	}
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	svc := startServiceWith(t, store, topictest.NewStore(), "b1", func(c *broker.Config) {
		c.Auth, c.Authz, c.ProxyRoles = a, auth.NewAuthorizer(true, []string{"proxy-su"}), []string{"proxy", "proxy-su"}
	})
	if err := svc.GrantNamespacePermission(testCtx(t), "public/default", "alice", []auth.Action{auth.ActionProduce}); err != nil {
		t.Fatal(err)
	}
	connectAs := func(role, original string) (*rawClient, *pb.BaseCommand) {
		tok, m := testToken(t, role, time.Now().Add(time.Hour)), "token"
		cmd := &pb.CommandConnect{AuthMethodName: &m, AuthData: []byte(tok)}
		if original != "" {
			cmd.OriginalPrincipal = &original
		}
		return dialConnect(t, svc, cmd)
	}
	lookup := func(c *rawClient) pb.ServerError {
		tp := "persistent://public/default/proxied"
		r := c.roundTrip(&pb.CommandLookupTopic{Topic: &tp, RequestId: c.nextID()}).GetLookupTopicResponse()
		if r.GetResponse() == pb.CommandLookupTopicResponse_Connect {
			return -1
		}
		return r.GetError()
	}
	for _, tc := range []struct {
		role, original string
		want           pb.ServerError
	}{
		{"proxy-su", "alice", -1},
		{"proxy-su", "bob", pb.ServerError_AuthorizationError},
		{"proxy", "alice", pb.ServerError_AuthorizationError}, // the proxy itself has no grant
		{"alice", "", -1},
	} {
		c, got := connectAs(tc.role, tc.original)
		if got.GetType() != pb.BaseCommand_CONNECTED {
			t.Fatalf("%s for %s: %v", tc.role, tc.original, got)
		}
		if e := lookup(c); e != tc.want {
			t.Errorf("%s for %q: lookup %v, want %v", tc.role, tc.original, e, tc.want)
		}
	}
	c, got := connectAs("mallory", "alice")
	if got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_AuthenticationError ||
		!strings.Contains(got.GetError().GetMessage(), "not a proxy role") || !c.closedByBroker() {
		t.Fatalf("original principal from a non-proxy: %v", got)
	}
}
