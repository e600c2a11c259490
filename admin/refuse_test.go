package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/access"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/internal/ratelog"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

// lockedBuffer collects log lines from the HTTP server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// secureBroker is a broker (etcd metadata, in-memory topics) with token authentication
// and authorization on, superuser "admin"; its admin API is served twice: with Pulsar's
// default limits (url) and with maxNumPartitionsPerPartitionedTopic=16 (url16).
type secureBroker struct {
	svc        *broker.Service
	url, url16 string
	secret     []byte
	logs       *lockedBuffer
}

func startSecureBroker(t *testing.T) *secureBroker {
	t.Helper()
	sb := &secureBroker{secret: []byte("admin refusal test key, 32 bytes"), logs: &lockedBuffer{}}
	a, err := auth.New(auth.Config{Enabled: true, Providers: []string{"token"},
		Token: auth.TokenConfig{SecretKey: base64.StdEncoding.EncodeToString(sb.secret)}})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(sb.logs, nil))
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	mem := topictest.NewStore()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svc, err := broker.Start(ctx, broker.Config{Store: store, Listen: "127.0.0.1:0", Auth: a,
		Authz: auth.NewAuthorizer(true, []string{"admin"}), Logger: testLogger(),
		OpenLog: func(_ context.Context, name string) (topic.Log, error) { return mem.Open(name), nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	sb.svc = svc
	audit := access.NewAudit(log, ratelog.Options{})
	for _, srv := range []struct {
		url *string
		max int
	}{{&sb.url, 0}, {&sb.url16, 16}} {
		hs := httptest.NewServer(audit.Authenticate(a, Handler(svc, Options{Logger: log, MaxPartitions: srv.max})))
		t.Cleanup(hs.Close)
		*srv.url = hs.URL
	}
	return sb
}

func (sb *secureBroker) token(t *testing.T, role string) string {
	t.Helper()
	s, err := auth.CreateToken(jwt.SigningMethodHS256, sb.secret, role, time.Now().Add(time.Hour), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// do sends a request with a bearer token (none if token is "") and returns its status and
// body.
func do(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metadataSnapshot lists every tenant, namespace, topic and partitioned topic (with its
// partition count) the broker's records hold.
func metadataSnapshot(t *testing.T, svc *broker.Service) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var sb strings.Builder
	tenants, err := svc.Tenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range tenants {
		fmt.Fprintf(&sb, "tenant %s\n", tn)
		nss, err := svc.Namespaces(ctx, tn)
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range nss {
			fmt.Fprintf(&sb, "namespace %s\n", ns)
			ts, err := svc.Topics(ctx, ns)
			if err != nil {
				t.Fatal(err)
			}
			pts, err := svc.PartitionedTopics(ctx, ns)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&sb, "topics %q\n", ts)
			for _, pt := range pts {
				md, err := svc.PartitionedTopicMetadata(ctx, pt)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&sb, "partitioned %s %d\n", pt, md.Partitions)
			}
		}
	}
	return sb.String()
}

type refusal struct {
	method, path, body string
	status             int
	want               string // a substring of the answer
}

func checkRefusals(t *testing.T, base, token string, rs []refusal) {
	t.Helper()
	for _, r := range rs {
		code, body := do(t, r.method, base+r.path, token, r.body)
		if code != r.status || !strings.Contains(body, r.want) || !strings.Contains(body, `"reason"`) {
			t.Errorf("%s %.80s: %d %.200s; want %d with %q and a reason", r.method, r.path, code, body, r.status, r.want)
		}
	}
}

// TestRefusals: what Pulsar refuses is refused before anything is written, and the
// metadata is the same after: names outside Pulsar's rules (412), partition counts above
// maxNumPartitionsPerPartitionedTopic or, unset, PartitionCeiling (406); roles that may not
// (403, never 412, on every admin path: brokers, clusters, transactions, tenants,
// namespaces, topics); no or bad credentials (401). Each refusal is in the audit log, the
// token never.
func TestRefusals(t *testing.T) {
	sb := startSecureBroker(t)
	admin, alice := sb.token(t, "admin"), sb.token(t, "alice")
	for _, s := range []struct{ method, path, body string }{
		{"PUT", "/admin/v2/tenants/acme", `{"adminRoles":["tadmin"],"allowedClusters":["standalone"]}`},
		{"PUT", "/admin/v2/namespaces/acme/ns", ""},
		{"PUT", "/admin/v2/persistent/acme/ns/orders", ""},
		{"POST", "/admin/v2/namespaces/acme/ns/permissions/alice", `["produce"]`},
	} {
		if code, body := do(t, s.method, sb.url+s.path, admin, s.body); code != 204 {
			t.Fatalf("%s %s: %d %s", s.method, s.path, code, body)
		}
	}
	before := metadataSnapshot(t, sb.svc)
	long := strings.Repeat("x", 100_000)

	t.Run("names", func(t *testing.T) {
		checkRefusals(t, sb.url, admin, []refusal{
			{"PUT", "/admin/v2/tenants/te%20nant", "", 412, "Tenant name is not valid"},
			{"PUT", "/admin/v2/tenants/a%00b", "", 412, "Tenant name is not valid"},
			{"PUT", "/admin/v2/tenants/" + strings.Repeat("t", 256), "", 412, "Tenant name is not valid"},
			{"PUT", "/admin/v2/namespaces/acme/a%0Ab", "", 412, "Namespace name is not valid"},
			{"PUT", "/admin/v2/namespaces/acme/" + strings.Repeat("n", 256), "", 412, "Namespace name is not valid"},
			{"PUT", "/admin/v2/persistent/acme/ns/a%00b", "", 412, "Topic name is not valid"},
			{"PUT", "/admin/v2/persistent/acme/ns/a%0D%0Ab", "", 412, "Topic name is not valid"},
			{"PUT", "/admin/v2/persistent/acme/ns/" + long, "", 412, "Topic name is not valid"},
			{"PUT", "/admin/v2/persistent/acme/ns/a%00b/partitions", "4", 412, "Topic name is not valid"},
			{"PUT", "/admin/v2/persistent/acme/ns/" + long + "/partitions", "4", 412, "Topic name is not valid"},
			{"PUT", "/admin/v2/non-persistent/acme/ns/a%0Ab", "", 412, "Topic name is not valid"},
		})
		// "." and ".." are refused by the service too (whatever calls it).
		ctx := context.Background()
		for _, err := range []error{
			sb.svc.CreateTenant(ctx, "..", broker.TenantInfo{}),
			sb.svc.CreateTenant(ctx, ".", broker.TenantInfo{}),
			sb.svc.CreateNamespace(ctx, "acme/.", broker.NamespacePolicies{}),
			sb.svc.CreateNamespace(ctx, "acme/..", broker.NamespacePolicies{}),
			sb.svc.CreateTopic(ctx, "persistent://acme/ns/.."),
			sb.svc.CreateTopic(ctx, "persistent://acme/ns/a\x00b"),
			sb.svc.CreatePartitionedTopic(ctx, "persistent://acme/ns/a\nb", 2),
		} {
			if toREST(err, scope{}).status != http.StatusPreconditionFailed {
				t.Errorf("service: %v, want an invalid name (412)", err)
			}
		}
		// Escaped, they reach the handlers (the router cleans only literal dot segments).
		checkRefusals(t, sb.url, admin, []refusal{
			{"PUT", "/admin/v2/tenants/%2E%2E", "", 412, "Tenant name is not valid"},
			{"PUT", "/admin/v2/tenants/%2E", "", 412, "Tenant name is not valid"},
			{"PUT", "/admin/v2/namespaces/acme/%2E", "", 412, "Namespace name is not valid"},
			{"PUT", "/admin/v2/namespaces/acme/%2E%2E", "", 412, "Namespace name is not valid"},
			{"PUT", "/admin/v2/persistent/acme/ns/%2E%2E", "", 412, "Topic name is not valid"},
			{"PUT", "/admin/v2/persistent/acme/%2E/t", "", 412, "Topic name is not valid"},
		})
	})

	t.Run("partitions", func(t *testing.T) {
		checkRefusals(t, sb.url, admin, []refusal{
			{"PUT", "/admin/v2/persistent/acme/ns/big/partitions", "100000000", 406, "less than or equal to 10000"},
			{"PUT", "/admin/v2/persistent/acme/ns/big/partitions", "10001", 406, "less than or equal to 10000"},
			{"PUT", "/admin/v2/persistent/acme/ns/big/partitions", "0", 406, "more than 0"},
			{"PUT", "/admin/v2/persistent/acme/ns/big/partitions", "-3", 406, "more than 0"},
			{"PUT", "/admin/v2/persistent/acme/ns/big/partitions", "1e12", 406, "less than or equal to 10000"},
			{"POST", "/admin/v2/namespaces/acme/ns/autoTopicCreation",
				`{"allowAutoTopicCreation":true,"topicType":"partitioned","defaultNumPartitions":100000000}`, 406, "less than or equal to 10000"},
		})
		checkRefusals(t, sb.url16, admin, []refusal{
			{"PUT", "/admin/v2/persistent/acme/ns/big/partitions", "17", 406, "less than or equal to 16"},
			{"PUT", "/admin/v2/persistent/acme/ns/big/partitions", `{"partitions": 100000000}`, 406, "less than or equal to 16"},
			{"POST", "/admin/v2/namespaces/acme/ns/autoTopicCreation",
				`{"allowAutoTopicCreation":true,"topicType":"partitioned","defaultNumPartitions":17}`, 406, "less than or equal to 16"},
		})
	})

	t.Run("binary", func(t *testing.T) {
		// alice may produce on acme/ns (auto-creation is on): a producer or consumer on a
		// name Pulsar refuses fails, and creates nothing.
		cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + sb.svc.Addr().String(), Logger: testLogger(),
			Auth: &pulsarclient.Authentication{Method: "token", Data: func() ([]byte, error) { return []byte(alice), nil }}})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, name := range []string{"persistent://acme/ns/a\x00b", "persistent://acme/ns/a\r\nb", "persistent://acme/ns/" + long,
			"persistent://acme/ns/..", "persistent://acme/../x", "persistent://../ns/x"} {
			if p, err := cl.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: name, DisableBatching: true}); err == nil {
				p.Close(ctx)
				t.Errorf("a producer on %.60q was created", name)
			} else if !strings.Contains(err.Error(), "InvalidTopicName") && !strings.Contains(err.Error(), "invalid name") {
				t.Errorf("producer on %.60q: %v, want InvalidTopicName", name, err)
			}
		}
		// The same role on a valid name auto-creates it (restored below: the snapshot).
		p, err := cl.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: "persistent://acme/ns/valid", DisableBatching: true})
		if err != nil {
			t.Fatalf("a producer on a valid name: %v", err)
		}
		p.Close(ctx)
		if err := sb.svc.DeleteTopic(ctx, "persistent://acme/ns/valid", true); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("roles", func(t *testing.T) {
		forbidden := []refusal{
			{"GET", "/admin/v2/brokers", "", 403, "alice"},
			{"GET", "/admin/v2/brokers/standalone", "", 403, "alice"},
			{"GET", "/admin/v2/brokers/leaderBroker", "", 403, "alice"},
			{"GET", "/admin/v2/brokers/standalone/b/ownedNamespaces", "", 403, "alice"},
			{"GET", "/admin/v2/broker-stats/load-report", "", 403, "alice"},
			{"GET", "/admin/v2/clusters/standalone", "", 403, "alice"},
			{"PUT", "/admin/v2/clusters/other", `{"serviceUrl":"http://x:8080"}`, 403, "alice"},
			{"GET", "/admin/v3/transactions/coordinatorStats", "", 403, "alice"},
			{"GET", "/admin/v3/transactions/slowTransactions/1000", "", 403, "alice"},
			{"GET", "/admin/v3/transactions/transactionBufferStats/public/default/elsewhere", "", 403, "alice"},
			{"GET", "/admin/v2/tenants", "", 403, "alice"},
			{"PUT", "/admin/v2/tenants/evil", "", 403, "alice"},
			{"PUT", "/admin/v2/tenants/a%00b", "", 403, "alice"},
			{"DELETE", "/admin/v2/tenants/acme", "", 403, "alice"},
			{"PUT", "/admin/v2/namespaces/acme/ns2", "", 403, "alice"},
			{"PUT", "/admin/v2/namespaces/acme/a%0Ab", "", 403, "alice"},
			{"PUT", "/admin/v2/namespaces/b%00d/ns", "", 403, "alice"},
			{"DELETE", "/admin/v2/namespaces/acme/ns", "", 403, "alice"},
			{"PUT", "/admin/v2/persistent/acme/ns/new", "", 403, "alice"},
			{"PUT", "/admin/v2/persistent/acme/ns/a%00b", "", 403, "alice"},
			{"PUT", "/admin/v2/persistent/acme/ns/" + long, "", 403, "alice"},
			{"PUT", "/admin/v2/persistent/acme/ns/big/partitions", "100000000", 403, "alice"},
			{"DELETE", "/admin/v2/persistent/acme/ns/orders", "", 403, "alice"},
			{"POST", "/admin/v2/namespaces/acme/ns/permissions/alice", `["produce","consume"]`, 403, "alice"},
		}
		checkRefusals(t, sb.url, alice, forbidden)
		for _, p := range []string{"/admin/v2/brokers/health", "/admin/v2/clusters"} {
			if code, body := do(t, "GET", sb.url+p, alice, ""); code != 200 {
				t.Errorf("alice GET %s: %d %s, want 200 (any authenticated role)", p, code, body)
			}
		}
		// A transaction's metadata is any authenticated role's (Pulsar checks only that the
		// coordinator is served here): not refused, answered as the service can (here
		// transactions are off).
		if code, body := do(t, "GET", sb.url+"/admin/v3/transactions/transactionMetadata/0/1", alice, ""); code == 403 || code == 401 {
			t.Errorf("alice GET transactionMetadata: %d %s, want no refusal", code, body)
		}
		// A tenant that does not exist is answered as Pulsar does, before the role check.
		checkRefusals(t, sb.url, alice, []refusal{
			{"PUT", "/admin/v2/namespaces/nosuch/ns", "", 404, "Tenant does not exist"},
			{"POST", "/admin/v2/namespaces/nosuch/ns/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"non-partitioned"}`,
				404, "Tenant does not exist"},
		})
		// The tenant's admin administers it, and only it.
		tadmin := sb.token(t, "tadmin")
		checkRefusals(t, sb.url, tadmin, []refusal{
			{"GET", "/admin/v2/brokers", "", 403, "tadmin"},
			{"PUT", "/admin/v2/namespaces/public/x", "", 403, "tadmin"},
			{"PUT", "/admin/v2/namespaces/acme/a%0Ab", "", 412, "Namespace name is not valid"},
		})
		forged := admin[:len(admin)-2] + "xx"
		for _, tok := range []string{"", forged} {
			for _, r := range forbidden[:8] {
				r.status, r.want = 401, "Authentication required"
				checkRefusals(t, sb.url, tok, []refusal{r})
			}
		}
		logs := sb.logs.String()
		for _, want := range []string{access.MsgAuthorizationRefused + `" protocol=http principal=alice action="GET /admin/v2/brokers"`,
			access.MsgAuthenticationRefused + `" protocol=http client=127.0.0.1`, "method=none"} {
			if !strings.Contains(logs, want) {
				t.Errorf("the audit log lacks %q:\n%.3000s", want, logs)
			}
		}
		for _, tok := range []string{admin, alice, tadmin, forged} {
			if strings.Contains(logs, tok) {
				t.Errorf("a token in the logs")
			}
		}
	})

	if after := metadataSnapshot(t, sb.svc); after != before {
		t.Fatalf("refused requests changed the metadata:\nbefore %s\nafter  %s", before, after)
	}
	// The limits refuse only what is over them.
	if code, body := do(t, "PUT", sb.url16+"/admin/v2/persistent/acme/ns/p16/partitions", admin, "16"); code != 204 {
		t.Fatalf("16 partitions: %d %s", code, body)
	}
	checkRefusals(t, sb.url16, admin, []refusal{
		{"POST", "/admin/v2/persistent/acme/ns/p16/partitions", "17", 406, "less than or equal to 16"},
	})
	if code, body := do(t, "PUT", sb.url+"/admin/v2/persistent/acme/ns/"+strings.Repeat("y", 1024)+"/partitions", admin, "2"); code != 204 {
		t.Fatalf("a name of 1024 bytes: %d %s", code, body)
	}
	if got := metadataSnapshot(t, sb.svc); !strings.Contains(got, "p16 16") || !strings.Contains(got, strings.Repeat("y", 1024)+" 2") {
		t.Fatalf("after the accepted creations: %s", got)
	}

	// max_topics_per_namespace (Pulsar's maxTopicsPerNamespace): acme/ns has 19 topics
	// (orders and 18 partitions); at a limit of 20 one more fits, a partitioned topic of two
	// partitions or growth by two do not.
	if code, body := do(t, "POST", sb.url+"/admin/v2/namespaces/acme/ns/maxTopicsPerNamespace", admin, "20"); code != 204 {
		t.Fatalf("set maxTopicsPerNamespace: %d %s", code, body)
	}
	before = metadataSnapshot(t, sb.svc)
	checkRefusals(t, sb.url16, admin, []refusal{
		{"PUT", "/admin/v2/persistent/acme/ns/p2/partitions", "2", 412, "Exceed maximum number of topics in namespace"},
		{"POST", "/admin/v2/persistent/acme/ns/p16/partitions", "17", 406, "less than or equal to 16"},
	})
	checkRefusals(t, sb.url, admin, []refusal{
		{"POST", "/admin/v2/persistent/acme/ns/p16/partitions", "18", 412, "Exceed maximum number of topics in namespace"},
	})
	if after := metadataSnapshot(t, sb.svc); after != before {
		t.Fatalf("refused creations changed the metadata:\nbefore %s\nafter  %s", before, after)
	}
	if code, body := do(t, "PUT", sb.url+"/admin/v2/persistent/acme/ns/one", admin, ""); code != 204 {
		t.Fatalf("the 20th topic: %d %s", code, body)
	}
	checkRefusals(t, sb.url, admin, []refusal{
		{"PUT", "/admin/v2/persistent/acme/ns/two", "", 412, "Exceed maximum number of topics in namespace"},
	})
}
