package interop

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/admin"
	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker"
)

// adminCall sends an admin request with a token (or none) and returns the status and body.
func adminCall(t *testing.T, base, method, path, token string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctxT(t, 30*time.Second), method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAuthorization: with authorization on, a producer on a namespace without a grant is
// refused with an authorization error and works once the role is granted produce; consume
// needs its own grant (namespace or topic); revoking refuses new producers; tenant admins
// administer their tenant only; superusers are allowed everywhere; the admin API answers
// 401 without credentials and 403 with a JSON reason without permission.
func TestAuthorization(t *testing.T) {
	c := secCluster(t, auth.Config{Providers: []string{"token"}}, func(bc *broker.Config) {
		bc.Authz = auth.NewAuthorizer(true, []string{"admin"})
	})
	web := httptest.NewServer(c.cfg.Auth.Middleware(admin.Handler(c.broker, admin.Options{Logger: testLogger(t)})))
	t.Cleanup(web.Close)
	adminTok, aliceTok, bobTok := secToken(t, "admin", time.Hour), secToken(t, "alice", time.Hour), secToken(t, "bob", time.Hour)
	alice := clientWith(t, pulsar.ClientOptions{URL: c.url, Authentication: pulsar.NewAuthenticationToken(aliceTok)})
	topic := "persistent://public/default/" + sanitize(t.Name())

	produce := func(cl pulsar.Client, topic string) error {
		p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			return err
		}
		defer p.Close()
		_, err = p.Send(ctxT(t, 30*time.Second), &pulsar.ProducerMessage{Payload: []byte("x")})
		return err
	}
	subscribe := func(cl pulsar.Client, topic string) error {
		cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
		if err == nil {
			cons.Close()
		}
		return err
	}
	if err := produce(alice, topic); err == nil || !strings.Contains(err.Error(), "AuthorizationError") {
		t.Fatalf("producer without a grant: %v", err)
	}
	if _, err := c.broker.Topics(ctxT(t, 10*time.Second), "public/default"); err != nil {
		t.Fatal(err)
	}
	if ts, _ := c.broker.Topics(ctxT(t, 10*time.Second), "public/default"); len(ts) != 0 {
		t.Fatalf("a refused producer created topics: %v", ts)
	}

	// Admin API: no credentials 401; alice may not grant herself anything (403).
	if st, body := adminCall(t, web.URL, "GET", "/admin/v2/namespaces/public/default/permissions", "", nil); st != 401 || !strings.Contains(body, `"reason"`) {
		t.Fatalf("anonymous admin: %d %s", st, body)
	}
	if st, body := adminCall(t, web.URL, "POST", "/admin/v2/namespaces/public/default/permissions/alice", aliceTok, []string{"produce"}); st != 403 || !strings.Contains(body, "alice may not") {
		t.Fatalf("alice granting herself: %d %s", st, body)
	}
	if st, body := adminCall(t, web.URL, "POST", "/admin/v2/namespaces/public/default/permissions/alice", adminTok, []string{"produce"}); st != 204 {
		t.Fatalf("grant: %d %s", st, body)
	}
	if err := produce(alice, topic); err != nil {
		t.Fatalf("producer with the grant: %v", err)
	}
	if err := subscribe(alice, topic); err == nil {
		t.Fatal("consumer without a consume grant")
	}
	if st, body := adminCall(t, web.URL, "POST", "/admin/v2/persistent/public/default/"+sanitize(t.Name())+"/permissions/alice", adminTok, []string{"consume"}); st != 204 {
		t.Fatalf("topic grant: %d %s", st, body)
	}
	if err := subscribe(alice, topic); err != nil {
		t.Fatalf("consumer with a topic grant: %v", err)
	}
	st, body := adminCall(t, web.URL, "GET", "/admin/v2/persistent/public/default/"+sanitize(t.Name())+"/permissions", adminTok, nil)
	if st != 200 || !strings.Contains(body, `"alice":["consume","produce"]`) {
		t.Fatalf("topic permissions: %d %s", st, body)
	}
	// Alice may read her topic's stats (she may produce) but not administer the namespace.
	if st, _ := adminCall(t, web.URL, "GET", "/admin/v2/persistent/public/default/"+sanitize(t.Name())+"/stats", aliceTok, nil); st != 200 {
		t.Errorf("stats with a produce grant: %d", st)
	}
	if st, _ := adminCall(t, web.URL, "DELETE", "/admin/v2/persistent/public/default/"+sanitize(t.Name()), aliceTok, nil); st != 403 {
		t.Errorf("delete by a producer: %d", st)
	}
	if st, body := adminCall(t, web.URL, "DELETE", "/admin/v2/namespaces/public/default/permissions/alice", adminTok, nil); st != 204 {
		t.Fatalf("revoke: %d %s", st, body)
	}
	if err := produce(alice, "persistent://public/default/other-"+sanitize(t.Name())); err == nil {
		t.Fatal("producer after the revoke")
	}

	// Tenant admins: bob administers t-bob, not public, and not the tenant list.
	if st, body := adminCall(t, web.URL, "PUT", "/admin/v2/tenants/t-bob", bobTok, map[string]any{"adminRoles": []string{"bob"}}); st != 403 {
		t.Fatalf("tenant creation by bob: %d %s", st, body)
	}
	if st, body := adminCall(t, web.URL, "PUT", "/admin/v2/tenants/t-bob", adminTok, map[string]any{"adminRoles": []string{"bob"}, "allowedClusters": []string{}}); st/100 != 2 {
		t.Fatalf("tenant creation: %d %s", st, body)
	}
	if st, body := adminCall(t, web.URL, "PUT", "/admin/v2/namespaces/t-bob/ns", bobTok, nil); st/100 != 2 {
		t.Fatalf("namespace creation by the tenant admin: %d %s", st, body)
	}
	bob := clientWith(t, pulsar.ClientOptions{URL: c.url, Authentication: pulsar.NewAuthenticationToken(bobTok)})
	if err := produce(bob, "persistent://t-bob/ns/t"); err != nil {
		t.Fatalf("tenant admin producing: %v", err)
	}
	if err := produce(bob, topic); err == nil {
		t.Fatal("bob produced on public/default")
	}
	if st, _ := adminCall(t, web.URL, "GET", "/admin/v2/tenants", bobTok, nil); st != 403 {
		t.Errorf("tenant list by a tenant admin: %d", st)
	}
	// The superuser is allowed everywhere.
	su := clientWith(t, pulsar.ClientOptions{URL: c.url, Authentication: pulsar.NewAuthenticationToken(adminTok)})
	if err := produce(su, "persistent://t-bob/ns/su"); err != nil {
		t.Fatalf("superuser: %v", err)
	}
	if st, _ := adminCall(t, web.URL, "GET", "/admin/v2/tenants", adminTok, nil); st != 200 {
		t.Errorf("tenant list by the superuser: %d", st)
	}
}
