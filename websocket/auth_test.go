package websocket_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/proxy"
	"github.com/magnetar-io/magnetar/pulsarclient"
	mws "github.com/magnetar-io/magnetar/websocket"
)

// secureAuth is token authentication with the tests' secret.
func secureAuth(t *testing.T) *auth.Service {
	t.Helper()
	a, err := auth.New(auth.Config{Enabled: true, Providers: []string{"token"},
		Token: auth.TokenConfig{SecretKey: "data:;base64," + base64.StdEncoding.EncodeToString(secret)}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// checkRoles: with the writer's token a producer socket publishes; a consumer socket is
// refused 403; the superuser's consumer socket gets what was published.
func checkRoles(t *testing.T, ctx context.Context, w *world, topic string) {
	t.Helper()
	if got := w.refused(ctx, "/ws/v2/consumer/persistent/public/default/"+topic+"/s?token="+token(t, "writer"), nil); got != http.StatusForbidden {
		t.Fatalf("writer's consumer: %d, want 403", got)
	}
	admin := w.dial(ctx, "/ws/v2/consumer/persistent/public/default/"+topic+"/s?token="+token(t, "admin"), nil)
	p := w.dial(ctx, "/ws/v2/producer/persistent/public/default/"+topic+"?token="+token(t, "writer"), nil)
	writeJSON(t, ctx, p, map[string]string{"payload": b64("hello")})
	if a := readAck(t, ctx, p); a.Result != "ok" {
		t.Fatalf("writer's producer: %+v", a)
	}
	if m := readMessage(t, ctx, admin); unb64(t, m.Payload) != "hello" {
		t.Fatalf("superuser's consumer: %+v", m)
	}
}

// TestAuthServiceCredentials: with Config.ServiceAuth the service connects with its own
// credentials (a role in the broker's proxyRoles) and names each client's role as
// original_principal: the broker authorizes the client's role (writer may produce, not
// consume), not the service's.
func TestAuthServiceCredentials(t *testing.T) {
	a := secureAuth(t)
	svcToken := token(t, "ws-service")
	w := newWorld(t, func(c *broker.Config) {
		// The service's role is a proxy role and a superuser (else the broker would require
		// the grants of both roles, as Pulsar's does).
		c.Auth, c.Authz, c.ProxyRoles = a, auth.NewAuthorizer(true, []string{"admin", "ws-service"}), []string{"ws-service"}
	}, func(c *mws.Config) {
		c.Auth = a
		c.ServiceAuth = &pulsarclient.Authentication{Method: "token", Data: func() ([]byte, error) { return []byte(svcToken), nil }}
	})
	ctx := testCtx(t)
	if err := w.broker.GrantNamespacePermission(ctx, "public/default", "writer", []auth.Action{auth.ActionProduce}); err != nil {
		t.Fatal(err)
	}
	checkRoles(t, ctx, w, "svc-creds")
}

// TestThroughProxy: the service in front of Magnetar's proxy (as `magnetar proxy` mounts
// it): clients' tokens go to the proxy, which authenticates them and forwards their roles
// to the broker with its own credentials; the broker's decisions come back as 403s.
func TestThroughProxy(t *testing.T) {
	a := secureAuth(t)
	proxyToken := token(t, "the-proxy")
	var px *proxy.Service
	w := newWorld(t, func(c *broker.Config) {
		c.Auth, c.Authz, c.ProxyRoles = a, auth.NewAuthorizer(true, []string{"admin", "the-proxy"}), []string{"the-proxy"}
	}, func(c *mws.Config) {
		var err error
		px, err = proxy.Start(context.Background(), proxy.Config{BrokerServiceURLs: []string{c.ServiceURL},
			Listen: "127.0.0.1:0", Auth: a, BrokerAuthMethod: "token",
			BrokerAuthData: func() ([]byte, error) { return []byte(proxyToken), nil }, Logger: c.Logger})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		c.ServiceURL, c.Auth = "pulsar://"+px.Addr().String(), a
	})
	ctx := testCtx(t)
	if err := w.broker.GrantNamespacePermission(ctx, "public/default", "writer", []auth.Action{auth.ActionProduce}); err != nil {
		t.Fatal(err)
	}
	checkRoles(t, ctx, w, "via-proxy")
	if got := w.refused(ctx, "/ws/v2/producer/persistent/public/default/via-proxy?token=xyz", nil); got != http.StatusUnauthorized {
		t.Fatalf("bad token through the proxy: %d, want 401", got)
	}
}

// TestUnsubscribe: {"type":"unsubscribe"} deletes the subscription and closes the socket
// normally.
func TestUnsubscribe(t *testing.T) {
	w := newWorld(t, nil, nil)
	ctx := testCtx(t)
	cons := w.dial(ctx, "/ws/v2/consumer/persistent/public/default/unsub/gone", nil)
	w.produce(ctx, "/ws/v2/producer/persistent/public/default/unsub", "x")
	readMessage(t, ctx, cons)
	st, err := w.broker.TopicStats(ctx, "persistent://public/default/unsub")
	if _, ok := st.Subscriptions["gone"]; err != nil || !ok {
		t.Fatalf("subscription before: %v %v", st.Subscriptions, err)
	}
	writeJSON(t, ctx, cons, map[string]string{"type": "unsubscribe"})
	if _, _, err := cons.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after unsubscribe: %v, want a normal close", err)
	}
	st, err = w.broker.TopicStats(ctx, "persistent://public/default/unsub")
	if _, ok := st.Subscriptions["gone"]; err != nil || ok {
		t.Fatalf("subscription after: %v %v", keys(st.Subscriptions), err)
	}
}

func keys[V any](m map[string]V) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return strings.Join(ks, ",")
}
