package interop

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/admin"
	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker"
	mproxy "github.com/magnetar-io/magnetar/proxy"
	"github.com/magnetar-io/magnetar/tlsconf"
	"github.com/magnetar-io/magnetar/tlsconf/tlstest"
)

// The tests below run `magnetar proxy`'s package in front of brokers sharing one metadata
// store and one bookie (a multiBroker, each broker with its admin API over HTTP), and the
// real Pulsar Go client and admin client through it.

// statusRecorder remembers the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// testProxy is a running proxy and its HTTP server.
type testProxy struct {
	svc  *mproxy.Service
	http *httptest.Server
}

func (p *testProxy) url() string { return "pulsar://" + p.svc.Addr().String() }

// metric returns the proxy's metrics text.
func (p *testProxy) metrics(t *testing.T) string {
	t.Helper()
	rec := httptest.NewRecorder()
	p.svc.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// startProxy starts a proxy in front of m's brokers.
func (m *multiBroker) startProxy() *testProxy {
	m.t.Helper()
	svc, err := mproxy.Start(context.Background(), mproxy.Config{Store: m.store, Listen: "127.0.0.1:0",
		Logger: testLogger(m.t), BrokerRefresh: 200 * time.Millisecond})
	if err != nil {
		m.t.Fatalf("proxy: %v", err)
	}
	srv := httptest.NewServer(svc.HTTPHandler())
	// Cleanups run last-in first-out: the clients (registered later) close before the proxy.
	m.t.Cleanup(func() {
		srv.Close()
		svc.Close()
	})
	return &testProxy{svc: svc, http: srv}
}

// client is a Pulsar client of url, closed at cleanup.
func proxyClient(t *testing.T, url string) pulsar.Client {
	t.Helper()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 30 * time.Second,
		ConnectionTimeout: 5 * time.Second, Logger: clientLogger()})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// owner returns the id of the broker serving topic.
func (m *multiBroker) owner(topic string) string {
	m.t.Helper()
	r, err := m.nodes[0].svc.Load().Lookup(ctxT(m.t, 10*time.Second), topic)
	if err != nil {
		m.t.Fatalf("lookup %s: %v", topic, err)
	}
	return r.ID
}

// brokers returns the running brokers, in node order.
func (m *multiBroker) brokers() []*broker.Service {
	var out []*broker.Service
	for _, nd := range m.nodes {
		if svc := nd.svc.Load(); svc != nil {
			out = append(out, svc)
		}
	}
	return out
}

// roundTrip produces n messages to topic through prod and receives them on cons, in order.
func roundTrip(t *testing.T, prod pulsar.Producer, cons pulsar.Consumer, tag string, n int) {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	for i := range n {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%s-%d", tag, i)}); err != nil {
			t.Fatalf("send %s %d: %v", tag, i, err)
		}
	}
	got := map[string]bool{}
	for len(got) < n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %s after %d: %v", tag, len(got), err)
		}
		got[string(m.Payload())] = true
		cons.Ack(m) //nolint:errcheck
	}
	for i := range n {
		if !got[fmt.Sprintf("%s-%d", tag, i)] {
			t.Fatalf("%s-%d not received", tag, i)
		}
	}
}

// TestProxyTopicsOnThreeBrokers: through one proxy, topics land on different brokers and a
// partitioned topic's partitions too; every message produced through the proxy is consumed
// through it, and the proxy counts the bytes it forwarded.
func TestProxyTopicsOnThreeBrokers(t *testing.T) {
	c := newMultiBroker(t, 3, mbOpts{})
	p := c.startProxy()
	cl := proxyClient(t, p.url())
	owners := map[string]bool{}
	for i := range 6 {
		topic := topicName(t)
		prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatalf("producer %d: %v", i, err)
		}
		cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatalf("consumer %d: %v", i, err)
		}
		roundTrip(t, prod, cons, fmt.Sprintf("t%d", i), 20)
		owners[c.owner(topic)] = true
		prod.Close()
		cons.Close()
	}
	if len(owners) < 2 {
		t.Fatalf("all 6 topics on %v: the proxy's lookups do not spread", owners)
	}

	// A partitioned topic, created through the proxy's admin API.
	adm := proxyAdmin(t, p)
	topic := topicName(t)
	if err := adm.Topics().Create(mustTopic(t, topic), 6); err != nil {
		t.Fatalf("create partitioned topic through the proxy: %v", err)
	}
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if ps, err := cl.TopicPartitions(topic); err != nil || len(ps) != 6 {
		t.Fatalf("partitions through the proxy: %v, %v", ps, err)
	}
	roundTrip(t, prod, cons, "part", 120)
	partOwners := map[string]bool{}
	for i := range 6 {
		partOwners[c.owner(fmt.Sprintf("%s-partition-%d", topic, i))] = true
	}
	if len(partOwners) < 2 {
		t.Fatalf("all partitions on %v", partOwners)
	}
	m := p.metrics(t)
	for _, want := range []string{`pulsar_proxy_binary_bytes{direction="to_broker"}`, `pulsar_proxy_binary_bytes{direction="to_client"}`,
		`magnetar_proxy_lookup_requests_total{type="LOOKUP"}`, "pulsar_proxy_new_connections"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	t.Logf("topic owners %v, partition owners %v", owners, partOwners)
}

func proxyAdmin(t *testing.T, p *testProxy) pulsaradmin.Client {
	t.Helper()
	a, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: p.http.URL})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestProxyAdmin: pulsaradmin through the proxy's HTTP port reaches every topic's owner (the
// proxy follows the brokers' 307s), and HTTP lookups and http:// service URLs answer.
func TestProxyAdmin(t *testing.T) {
	c := newMultiBroker(t, 3, mbOpts{})
	p := c.startProxy()
	adm := proxyAdmin(t, p)
	ns := "public/" + strings.ToLower(sanitize(t.Name()))
	if err := adm.Namespaces().CreateNamespace(ns); err != nil {
		t.Fatalf("create namespace through the proxy: %v", err)
	}
	nss, err := adm.Namespaces().GetNamespaces("public")
	if err != nil || !contains(nss, ns) {
		t.Fatalf("namespaces %v, %v", nss, err)
	}
	// Topics created by producing to each broker directly (their bundles' owners are the
	// brokers the lookups chose).
	var topics []string
	for i, b := range c.brokers() {
		topic := fmt.Sprintf("persistent://%s/on-%d", ns, i)
		direct := proxyClient(t, "pulsar://"+b.Addr().String())
		prod, err := direct.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatalf("producer on broker %d: %v", i, err)
		}
		if _, err := prod.Send(ctxT(t, 30*time.Second), &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		topics = append(topics, topic)
	}
	// Several rounds, each in another order: whatever the proxy's round robin, some requests
	// reach a broker that does not own the topic.
	for round := range 3 {
		for i := range topics {
			topic := topics[(i+round)%len(topics)]
			st, err := adm.Topics().GetStats(mustTopic(t, topic))
			if err != nil {
				t.Fatalf("stats of %s through the proxy: %v", topic, err)
			}
			if st.MsgCounterIn != 1 {
				t.Fatalf("stats of %s: %d messages in, want 1", topic, st.MsgCounterIn)
			}
		}
	}
	if c.redirects.Load() == 0 {
		t.Fatal("no request reached a broker that does not own its topic: the redirects were not exercised")
	}
	if err := adm.Subscriptions().Create(mustTopic(t, topics[1]), "sub", utils.Earliest); err != nil {
		t.Fatalf("create subscription through the proxy: %v", err)
	}
	// The HTTP lookup, as the clients call it.
	resp, err := http.Get(p.http.URL + "/lookup/v2/topic/persistent/" + strings.TrimPrefix(topics[2], "persistent://"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ownerAddr string
	for _, b := range c.brokers() {
		if b.Info().ID == c.owner(topics[2]) {
			ownerAddr = b.Addr().String()
		}
	}
	if resp.StatusCode != 200 || ownerAddr == "" || !strings.Contains(string(body), ownerAddr) {
		t.Fatalf("HTTP lookup through the proxy: %d %s", resp.StatusCode, body)
	}
	// A client on the proxy's http:// URL (its binary connections go to the brokers the
	// lookups name, as with Pulsar's proxy).
	hc := proxyClient(t, p.http.URL)
	hprod, err := hc.CreateProducer(pulsar.ProducerOptions{Topic: topics[0]})
	if err != nil {
		t.Fatalf("producer on the proxy's http:// URL: %v", err)
	}
	if _, err := hprod.Send(ctxT(t, 30*time.Second), &pulsar.ProducerMessage{Payload: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	// Paths that are not the API are not forwarded.
	if resp, err := http.Get(p.http.URL + "/debug/pprof/"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("GET /debug/pprof/ through the proxy: %v %v", resp, err)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestProxyTwoProxies: proxies are stateless: a producer on one and a consumer on the other
// share a topic.
func TestProxyTwoProxies(t *testing.T) {
	c := newMultiBroker(t, 3, mbOpts{})
	p1, p2 := c.startProxy(), c.startProxy()
	topic := topicName(t)
	cons, err := proxyClient(t, p2.url()).Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := proxyClient(t, p1.url()).CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	roundTrip(t, prod, cons, "two", 50)
}

// TestProxyBrokerStops: the broker serving a topic stops behind the proxy; the producer and
// consumer reconnect through the proxy to the broker that takes the topic over, and every
// message sent is received.
func TestProxyBrokerStops(t *testing.T) {
	c := newMultiBroker(t, 3, mbOpts{})
	p := c.startProxy()
	cl := proxyClient(t, p.url())
	topic := topicName(t)
	// Batching on: the Go client's unbatched send path races with its own reconnect
	// (producer_partition.go grabCnx against internalSingleSend, under -race).
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	roundTrip(t, prod, cons, "before", 20)
	first := c.owner(topic)
	for _, b := range c.brokers() {
		if b.Info().ID == first {
			b.Close()
		}
	}
	start := time.Now()
	roundTrip(t, prod, cons, "after", 20)
	t.Logf("resumed %v after the broker stopped", time.Since(start).Round(time.Millisecond))
	var live *broker.Service
	for _, b := range c.brokers() {
		if b.Info().ID != first {
			live = b
		}
	}
	r, err := live.Lookup(ctxT(t, 10*time.Second), topic)
	if err != nil || r.ID == first {
		t.Fatalf("topic still on %s (%v)", r.ID, err)
	}
}

// TestProxyTLS: a client on the proxy's pulsar+ssl:// listener produces and consumes on
// topics of several brokers (the proxy talks plain TCP to them).
func TestProxyTLS(t *testing.T) {
	c := newMultiBroker(t, 2, mbOpts{})
	ca, err := tlstest.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files, err := ca.IssueFiles(dir, "proxy", "proxy", []string{"127.0.0.1", "localhost"}, tlstest.PKCS8)
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	ts, err := tlsconf.NewServer(tlsconf.ServerOptions{CertFile: files.Cert, KeyFile: files.Key}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := mproxy.Start(context.Background(), mproxy.Config{Store: c.store, ListenTLS: "127.0.0.1:0", TLS: ts.Config(),
		Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar+ssl://" + svc.AddrTLS().String(), TLSTrustCertsFilePath: caFile,
		OperationTimeout: 30 * time.Second, ConnectionTimeout: 5 * time.Second, Logger: clientLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	for i := range 4 {
		topic := topicName(t)
		prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatalf("producer over TLS: %v", err)
		}
		cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatalf("consumer over TLS: %v", err)
		}
		roundTrip(t, prod, cons, fmt.Sprintf("tls%d", i), 10)
		prod.Close()
		cons.Close()
	}
}

// TestProxyAuthorization: the proxy authenticates the client, connects to the broker as
// itself (a proxy role, even a superuser) and names the client as original principal: the
// broker authorizes the client's role, not the proxy's.
func TestProxyAuthorization(t *testing.T) {
	c := secCluster(t, auth.Config{Providers: []string{"token"}}, func(bc *broker.Config) {
		bc.Authz = auth.NewAuthorizer(true, []string{"admin", "proxy"})
		bc.ProxyRoles = []string{"proxy"}
	})
	web := httptest.NewServer(c.cfg.Auth.Middleware(admin.Handler(c.broker, admin.Options{Logger: testLogger(t)})))
	t.Cleanup(web.Close)
	proxyTok := secToken(t, "proxy", time.Hour)
	svc, err := mproxy.Start(context.Background(), mproxy.Config{Store: c.store, Listen: "127.0.0.1:0", Auth: c.cfg.Auth,
		BrokerAuthMethod: "token", BrokerAuthData: func() ([]byte, error) { return []byte(proxyTok), nil }, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	url := "pulsar://" + svc.Addr().String()
	alice := clientWith(t, pulsar.ClientOptions{URL: url, Authentication: pulsar.NewAuthenticationToken(secToken(t, "alice", time.Hour))})
	if err := roundTripOne(t, alice); err == nil || !strings.Contains(err.Error(), "AuthorizationError") {
		t.Fatalf("alice without a grant, through the proxy: %v", err)
	}
	grant := []string{"produce", "consume"}
	if st, body := adminCall(t, web.URL, "POST", "/admin/v2/namespaces/public/default/permissions/alice", secToken(t, "admin", time.Hour), grant); st != 204 {
		t.Fatalf("grant: %d %s", st, body)
	}
	if err := roundTripOne(t, alice); err != nil {
		t.Fatalf("alice with a grant, through the proxy: %v", err)
	}
	mallory := clientWith(t, pulsar.ClientOptions{URL: url, Authentication: pulsar.NewAuthenticationToken("not-a-token")})
	if err := roundTripOne(t, mallory); err == nil {
		t.Fatal("a bad token got through the proxy")
	}
}

// TestProxyBrokerUnreachable: the broker serving a topic becomes unreachable but keeps its
// ownership for a while (as a crashed broker keeps it until its session expires): the
// clients' reconnections through the proxy get ServiceNotReady, not a hang, and keep
// retrying; once the ownership is released another broker serves the topic and every
// message sent is received.
func TestProxyBrokerUnreachable(t *testing.T) {
	c := newMultiBroker(t, 3, mbOpts{relayed: true})
	p := c.startProxy()
	cl := proxyClient(t, p.url())
	topic := topicName(t)
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	roundTrip(t, prod, cons, "before", 20)
	first := c.owner(topic)
	var dead *broker.Service
	for i, b := range c.brokers() {
		if b.Info().ID == first {
			dead = b
			c.nodes[i].relay.ln.Close()
			c.nodes[i].relay.cut()
		}
	}
	failures := func() float64 {
		m := p.metrics(t)
		i := strings.Index(m, "\nmagnetar_proxy_broker_connect_failures_total ")
		if i < 0 {
			return 0
		}
		var v float64
		fmt.Sscan(m[i+len("\nmagnetar_proxy_broker_connect_failures_total "):], &v) //nolint:errcheck
		return v
	}
	// The clients reconnect through the proxy and are refused while the owner is away.
	deadline := time.Now().Add(30 * time.Second)
	for failures() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the clients did not try the unreachable broker through the proxy")
		}
		time.Sleep(10 * time.Millisecond)
	}
	sent := make(chan error, 1)
	go func() {
		_, err := prod.Send(ctxT(t, time.Minute), &pulsar.ProducerMessage{Payload: []byte("during")})
		sent <- err
	}()
	dead.Close() // its ownership goes, as a dead broker's goes when its session expires
	start := time.Now()
	if err := <-sent; err != nil {
		t.Fatalf("send across the outage: %v", err)
	}
	t.Logf("resumed %v after the ownership was released; %v refused connections to the dead broker",
		time.Since(start).Round(time.Millisecond), failures())
	m, err := cons.Receive(ctxT(t, 30*time.Second))
	if err != nil || string(m.Payload()) != "during" {
		t.Fatalf("received %v, %v", m, err)
	}
	cons.Ack(m) //nolint:errcheck
	roundTrip(t, prod, cons, "after", 20)
}
