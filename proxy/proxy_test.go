package proxy

import (
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// TestLookupFollowsRedirects: the proxy follows a broker's Redirect itself and answers
// Connect with the owner's URL and proxy_through_service_url, under the client's request id;
// it asks the brokers for their internal listener whatever listener the client names.
func TestLookupFollowsRedirects(t *testing.T) {
	owner, other := newFakeBroker(t), newFakeBroker(t)
	other.lookup = func(*pb.CommandLookupTopic) *pb.CommandLookupTopicResponse {
		return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Redirect.Enum(),
			BrokerServiceUrl: proto.String(owner.url()), Authoritative: proto.Bool(true)}
	}
	var authoritative []bool
	var listeners []string
	var mu sync.Mutex
	owner.lookup = func(l *pb.CommandLookupTopic) *pb.CommandLookupTopicResponse {
		mu.Lock()
		authoritative = append(authoritative, l.GetAuthoritative())
		listeners = append(listeners, l.GetAdvertisedListenerName())
		mu.Unlock()
		return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Connect.Enum(),
			BrokerServiceUrl: proto.String(owner.url())}
	}
	s := startProxy(t, Config{BrokerServiceURLs: []string{other.url()}})
	c := dialProxy(t, s)
	if r := c.connect(""); r.GetType() != pb.BaseCommand_CONNECTED || r.GetConnected().GetServerVersion() != serverVersion {
		t.Fatalf("CONNECT answered %v", r)
	}
	c.send(pulsar.Wrap(&pb.CommandLookupTopic{RequestId: proto.Uint64(77), Topic: proto.String("persistent://a/b/c"),
		AdvertisedListenerName: proto.String("external")}))
	r := c.recv().GetLookupTopicResponse()
	if r.GetRequestId() != 77 || r.GetResponse() != pb.CommandLookupTopicResponse_Connect ||
		r.GetBrokerServiceUrl() != owner.url() || r.GetBrokerServiceUrlTls() != "pulsar+ssl://"+owner.addr() || !r.GetProxyThroughServiceUrl() {
		t.Fatalf("lookup answered %v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(authoritative) != 1 || !authoritative[0] {
		t.Fatalf("the owner was asked %v (authoritative), want once, authoritative", authoritative)
	}
	if listeners[0] != "" {
		t.Fatalf("the proxy asked for listener %q, want the brokers' internal one", listeners[0])
	}
	// The owner, named by a lookup answer, is a broker the proxy connects clients to.
	if !s.brokers.allowed(t.Context(), owner.addr()) {
		t.Fatal("the owner a lookup named is not allowed")
	}
}

// TestMetadataRequestsRelayed: concurrent requests get their own answers under their own
// request ids; PING is answered by the proxy.
func TestMetadataRequestsRelayed(t *testing.T) {
	b := newFakeBroker(t)
	b.partitions = 12
	s := startProxy(t, Config{BrokerServiceURLs: []string{b.url()}})
	c := dialProxy(t, s)
	c.connect("")
	for _, id := range []uint64{5, 6, 7} {
		c.send(pulsar.Wrap(&pb.CommandPartitionedTopicMetadata{RequestId: proto.Uint64(id), Topic: proto.String("persistent://a/b/c")}))
	}
	c.send(pulsar.Wrap(&pb.CommandPing{}))
	seen := map[uint64]bool{}
	pong := false
	for len(seen) < 3 || !pong {
		r := c.recv()
		switch r.GetType() {
		case pb.BaseCommand_PONG:
			pong = true
		case pb.BaseCommand_PARTITIONED_METADATA_RESPONSE:
			m := r.GetPartitionMetadataResponse()
			if m.GetPartitions() != 12 {
				t.Fatalf("partitions %d, want 12", m.GetPartitions())
			}
			seen[m.GetRequestId()] = true
		default:
			t.Fatalf("unexpected %v", r.GetType())
		}
	}
	if !seen[5] || !seen[6] || !seen[7] {
		t.Fatalf("answered request ids %v, want 5, 6, 7", seen)
	}
}

// TestDirectSplices: a CONNECT naming a broker is passed on to it (without
// proxy_to_broker_url), the broker's CONNECTED comes back, and then frames flow both ways;
// the bytes are counted.
func TestDirectSplices(t *testing.T) {
	b := newFakeBroker(t)
	s := startProxy(t, Config{BrokerServiceURLs: []string{b.url()}})
	c := dialProxy(t, s)
	r := c.connect(b.addr())
	if r.GetConnected().GetServerVersion() != "fake" || r.GetConnected().GetMaxMessageSize() != 1234 {
		t.Fatalf("CONNECT answered %v, want the broker's CONNECTED", r)
	}
	got := b.nextConnect()
	if got.ProxyToBrokerUrl != nil || got.GetClientVersion() != "test" || got.GetProtocolVersion() != 21 || got.OriginalPrincipal != nil {
		t.Fatalf("the broker got %v", got)
	}
	frame, err := pulsar.AppendPayloadCommand(nil, pulsar.Wrap(&pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(9)}),
		&pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(9), PublishTime: proto.Uint64(1)}, []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	c.raw(frame)
	if rc := c.recv().GetSendReceipt(); rc.GetSequenceId() != 9 {
		t.Fatalf("receipt %v", rc)
	}
	c.nc.Close()
	waitFor(t, "the proxied connection to end", func() bool { return value(s.m.direct) == 0 })
	if n := value(s.m.bytes.WithLabelValues(toBroker)); n < float64(len(frame)) {
		t.Fatalf("%v bytes to the broker counted, sent %d", n, len(frame))
	}
	if n := value(s.m.bytes.WithLabelValues(toClient)); n == 0 {
		t.Fatal("no bytes to the client counted")
	}
}

// TestDeadBrokerIsRetryable: a broker that is down, or that accepts and never answers, gets
// the client ServiceNotReady in bounded time, for a proxied connection and for a lookup.
func TestDeadBrokerIsRetryable(t *testing.T) {
	silent := newFakeBroker(t)
	silent.silent = true
	for _, tc := range []struct {
		name   string
		broker string
	}{{"down", deadAddr(t)}, {"silent", silent.addr()}} {
		t.Run(tc.name, func(t *testing.T) {
			s := startProxy(t, Config{BrokerServiceURLs: []string{"pulsar://" + tc.broker}, DialTimeout: 300 * time.Millisecond})
			start := time.Now()
			c := dialProxy(t, s)
			r := c.connect(tc.broker)
			if r.GetError().GetError() != pb.ServerError_ServiceNotReady {
				t.Fatalf("proxied CONNECT answered %v, want ServiceNotReady", r)
			}
			c.expectClosed()
			l := dialProxy(t, s)
			l.connect("")
			l.send(pulsar.Wrap(&pb.CommandLookupTopic{RequestId: proto.Uint64(1), Topic: proto.String("persistent://a/b/c")}))
			lr := l.recv().GetLookupTopicResponse()
			if lr.GetResponse() != pb.CommandLookupTopicResponse_Failed || lr.GetError() != pb.ServerError_ServiceNotReady || lr.GetRequestId() != 1 {
				t.Fatalf("lookup answered %v, want Failed ServiceNotReady", lr)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("answers took %v", d)
			}
		})
	}
}

// TestUnknownBrokerRefused: the proxy connects clients only to brokers it knows.
func TestUnknownBrokerRefused(t *testing.T) {
	known, stranger := newFakeBroker(t), newFakeBroker(t)
	s := startProxy(t, Config{BrokerServiceURLs: []string{known.url()}})
	c := dialProxy(t, s)
	if r := c.connect(stranger.addr()); r.GetError().GetError() != pb.ServerError_ServiceNotReady {
		t.Fatalf("CONNECT to an unknown address answered %v", r)
	}
	c.expectClosed()
	if n := stranger.accepted.Load(); n != 0 {
		t.Fatalf("the proxy connected %d times to an address that is not a broker", n)
	}
}

// TestBadFramesClose: what is not the protocol closes the connection, counted by reason.
func TestBadFramesClose(t *testing.T) {
	b := newFakeBroker(t)
	frame := func(cmd *pb.BaseCommand) []byte {
		f, err := pulsar.AppendCommand(nil, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	garbage := binary.BigEndian.AppendUint32(nil, 8)
	garbage = binary.BigEndian.AppendUint32(garbage, 4)
	garbage = append(garbage, 0xff, 0xff, 0xff, 0xff)
	for _, tc := range []struct {
		name, reason string
		lookup       bool // send a good CONNECT first
		bytes        []byte
	}{
		{"huge first frame", "too_large", false, []byte{0x7f, 0xff, 0xff, 0xff}},
		{"garbage first frame", "malformed", false, garbage},
		{"PING before CONNECT", "not_connect", false, frame(pulsar.Wrap(&pb.CommandPing{}))},
		{"huge frame", "too_large", true, []byte{0x7f, 0xff, 0xff, 0xff}},
		{"garbage frame", "malformed", true, garbage},
		{"second CONNECT", "second_connect", true, frame(pulsar.Wrap(&pb.CommandConnect{ClientVersion: proto.String("x"), ProtocolVersion: proto.Int32(1)}))},
		{"PRODUCER on a lookup connection", "unexpected", true, frame(pulsar.Wrap(&pb.CommandProducer{Topic: proto.String("t"),
			ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)}))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startProxy(t, Config{BrokerServiceURLs: []string{b.url()}})
			c := dialProxy(t, s)
			if tc.lookup {
				c.connect("")
			}
			c.raw(tc.bytes)
			c.expectClosed()
			waitFor(t, "the bad frame to be counted", func() bool { return value(s.m.bad.WithLabelValues(tc.reason)) == 1 })
		})
	}
}

// TestHandshakeTimeout: a client that never sends CONNECT is disconnected.
func TestHandshakeTimeout(t *testing.T) {
	s := startProxy(t, Config{BrokerServiceURLs: []string{"pulsar://127.0.0.1:1"}, HandshakeTimeout: 100 * time.Millisecond})
	dialProxy(t, s).expectClosed()
}

func token(t *testing.T, key []byte, role string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": role}).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAuthentication: the proxy verifies the client's token, presents its own to the broker
// and names the client's role as original principal (a client cannot claim one itself); with
// forwarding on, the client's credentials go too. A bad token never reaches the broker.
func TestAuthentication(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	a, err := auth.New(auth.Config{Enabled: true, Providers: []string{"token"},
		Token: auth.TokenConfig{SecretKey: "data:;base64,MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}})
	if err != nil {
		t.Fatal(err)
	}
	alice := token(t, key, "alice")
	withToken := func(tok string) func(*pb.CommandConnect) {
		return func(c *pb.CommandConnect) {
			c.AuthMethodName, c.AuthData = proto.String("token"), []byte(tok)
			c.OriginalPrincipal = proto.String("root") // a client's claim: dropped
		}
	}
	for _, forward := range []bool{false, true} {
		b := newFakeBroker(t)
		s := startProxy(t, Config{BrokerServiceURLs: []string{b.url()}, Auth: a, BrokerAuthMethod: "token",
			BrokerAuthData:                  func() ([]byte, error) { return []byte("proxy-token"), nil },
			ForwardAuthorizationCredentials: forward})
		if r := dialProxy(t, s).connect(b.addr(), withToken(alice)); r.GetType() != pb.BaseCommand_CONNECTED {
			t.Fatalf("CONNECT answered %v", r)
		}
		got := b.nextConnect()
		if got.GetAuthMethodName() != "token" || string(got.GetAuthData()) != "proxy-token" || got.GetOriginalPrincipal() != "alice" {
			t.Fatalf("the broker got %v", got)
		}
		if got.GetFeatureFlags().GetSupportsAuthRefresh() {
			t.Fatal("the broker is told the connection can refresh the proxy's credentials")
		}
		if forward != (got.GetOriginalAuthData() == alice && got.GetOriginalAuthMethod() == "token") {
			t.Fatalf("forward=%v: original credentials %q %q", forward, got.GetOriginalAuthMethod(), got.GetOriginalAuthData())
		}
		// The lookups' broker connections carry the principal too.
		l := dialProxy(t, s)
		l.connect("", withToken(alice))
		l.send(pulsar.Wrap(&pb.CommandLookupTopic{RequestId: proto.Uint64(1), Topic: proto.String("persistent://a/b/c")}))
		if lr := l.recv().GetLookupTopicResponse(); lr.GetResponse() != pb.CommandLookupTopicResponse_Connect {
			t.Fatalf("lookup answered %v", lr)
		}
		if got := b.nextConnect(); got.GetOriginalPrincipal() != "alice" {
			t.Fatalf("the lookup's broker connection: %v", got)
		}
		before := b.accepted.Load()
		bad := dialProxy(t, s)
		if r := bad.connect(b.addr(), withToken(token(t, []byte("another key, another key, another"), "alice"))); r.GetError().GetError() != pb.ServerError_AuthenticationError {
			t.Fatalf("a bad token answered %v", r)
		}
		bad.expectClosed()
		if b.accepted.Load() != before {
			t.Fatal("a client with a bad token reached the broker")
		}
	}
}

// TestHTTPFollowsRedirects: an admin request is forwarded with its body, and a 307 to
// another broker is followed by the proxy; an unreachable broker is skipped; other paths are
// not forwarded.
func TestHTTPFollowsRedirects(t *testing.T) {
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Write([]byte("owner " + r.Method + " " + r.URL.RequestURI() + " " + string(body))) //nolint:errcheck
	}))
	defer owner.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, owner.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	defer other.Close()
	s := startProxy(t, Config{BrokerServiceURLs: []string{"pulsar://127.0.0.1:1"},
		BrokerWebServiceURLs: []string{"http://" + deadAddr(t), other.URL}})
	front := httptest.NewServer(s.HTTPHandler())
	defer front.Close()
	for range 2 { // both orders of the round robin: the dead broker first, then second
		resp, err := http.Post(front.URL+"/admin/v2/persistent/a/b/c/subscription/s?x=1", "application/json", strings.NewReader(`{"k":1}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := `owner POST /admin/v2/persistent/a/b/c/subscription/s?x=1 {"k":1}`; resp.StatusCode != 200 || string(body) != want {
			t.Fatalf("answered %d %q, want 200 %q", resp.StatusCode, body, want)
		}
	}
	resp, err := http.Get(front.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("GET /metrics forwarded: %d", resp.StatusCode)
	}
}

// TestHTTPNoBroker: with every broker down the client gets 503 at once.
func TestHTTPNoBroker(t *testing.T) {
	s := startProxy(t, Config{BrokerWebServiceURLs: []string{"http://" + deadAddr(t)}})
	front := httptest.NewServer(s.HTTPHandler())
	defer front.Close()
	resp, err := http.Get(front.URL + "/admin/v2/tenants")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("answered %d, want 503", resp.StatusCode)
	}
}

// value reads a counter or gauge.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}
