package server_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/access"
	"github.com/magnetar-io/magnetar/broker/server"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// TestInvalidTopicNames: a producer or a consumer (which would auto-create its topic) on a
// name Pulsar refuses — a tenant or namespace "." or "..", a NUL, CR or LF, 100,000
// characters — is answered InvalidTopicName, as Pulsar's broker answers, and no topic is
// loaded or created.
func TestInvalidTopicNames(t *testing.T) {
	b := newFakeBackend()
	ts := startServer(t, b, server.Config{})
	c := ts.connected(t)
	names := []string{
		"persistent://../default/t", "persistent://public/./t", "persistent://public/../t", "public/default/..",
		"persistent://public/default/a\x00b", "persistent://public/default/a\r\nb", "a\nb",
		"persistent://public/default/" + strings.Repeat("x", 100_000),
		"persistent://te nant/default/t",
	}
	for i, name := range names {
		id := uint64(i + 1)
		got := c.roundTrip(&pb.CommandProducer{Topic: proto.String(name), ProducerId: &id, RequestId: c.nextID()})
		if got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_InvalidTopicName {
			t.Errorf("producer on %.60q: %v, want InvalidTopicName", name, got.GetType())
		}
		got = c.roundTrip(&pb.CommandSubscribe{Topic: proto.String(name), Subscription: proto.String("s"),
			SubType: pb.CommandSubscribe_Shared.Enum(), ConsumerId: &id, RequestId: c.nextID(), ForceTopicCreation: proto.Bool(true)})
		if got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_InvalidTopicName {
			t.Errorf("consumer on %.60q: %v, want InvalidTopicName", name, got.GetType())
		}
		if len(got.GetError().GetMessage()) > 1000 {
			t.Errorf("consumer on %.60q: the error repeats the whole name (%d bytes)", name, len(got.GetError().GetMessage()))
		}
	}
	b.mu.Lock()
	loaded := len(b.mu.topics)
	b.mu.Unlock()
	if loaded != 0 {
		t.Fatalf("%d topics loaded or created by refused names", loaded)
	}
	// The connection still serves a valid name.
	id := uint64(100)
	if got := c.roundTrip(&pb.CommandProducer{Topic: proto.String("persistent://public/default/ok"), ProducerId: &id,
		RequestId: c.nextID()}); got.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("producer on a valid name: %v", got)
	}
}

// TestAuditLines: a refused CONNECT and a refused command each write an audit line with
// the client's address, the principal, action and resource, never the credential.
func TestAuditLines(t *testing.T) {
	a, err := auth.New(auth.Config{Enabled: true, Providers: []string{"token"},
		Token: auth.TokenConfig{SecretKey: base64.StdEncoding.EncodeToString(testSecret)}})
	if err != nil {
		t.Fatal(err)
	}
	b := newFakeBackend()
	b.allowed = map[string]bool{"alice": true}
	ts := startServer(t, b, server.Config{Auth: a, AuthRefreshInterval: time.Hour, Authz: auth.NewAuthorizer(true, nil)})

	forged := testToken(t, "alice") + "x"
	c, got := ts.connect(t, &pb.CommandConnect{AuthMethodName: proto.String("token"), AuthData: []byte(forged)})
	if got.GetType() != pb.BaseCommand_ERROR || !c.closedByServer() {
		t.Fatalf("forged token: %v", got)
	}
	c, got = ts.connect(t, &pb.CommandConnect{AuthMethodName: proto.String("token"), AuthData: []byte(testToken(t, "bob"))})
	if got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("bob: %v", got)
	}
	id := uint64(1)
	const topic = "persistent://public/default/secret-plans"
	if got := c.roundTrip(&pb.CommandProducer{Topic: proto.String(topic), ProducerId: &id, RequestId: c.nextID()}); got.GetError().GetError() != pb.ServerError_AuthorizationError {
		t.Fatalf("bob produces: %v", got)
	}
	logs := ts.logs.String()
	var authn, authz string
	for _, l := range strings.Split(logs, "\n") {
		switch {
		case strings.Contains(l, access.MsgAuthenticationRefused):
			authn = l
		case strings.Contains(l, access.MsgAuthorizationRefused):
			authz = l
		}
	}
	if !strings.Contains(authn, "protocol=binary") || !strings.Contains(authn, "method=token") || !strings.Contains(authn, "remote=127.0.0.1:") {
		t.Errorf("authentication audit line %q", authn)
	}
	if !strings.Contains(authz, "principal=bob") || !strings.Contains(authz, "action=produce") || !strings.Contains(authz, "resource="+topic) ||
		!strings.Contains(authz, "remote=127.0.0.1:") {
		t.Errorf("authorization audit line %q", authz)
	}
	if strings.Contains(logs, forged) || strings.Contains(logs, testToken(t, "bob")[:40]) {
		t.Error("a credential in the logs")
	}
}

// TestSubscriptionRoles: a consumer is authorized with its subscription
// (Authorizer.AuthorizeSubscription): a subscription restricted to other roles is refused
// with AuthorizationError before its topic is loaded, another one is served.
func TestSubscriptionRoles(t *testing.T) {
	a, err := auth.New(auth.Config{Enabled: true, Providers: []string{"token"},
		Token: auth.TokenConfig{SecretKey: base64.StdEncoding.EncodeToString(testSecret)}})
	if err != nil {
		t.Fatal(err)
	}
	b := newFakeBackend()
	b.allowed = map[string]bool{"alice": true, "bob": true}
	b.subRoles = map[string][]string{"alices": {"alice"}}
	ts := startServer(t, b, server.Config{Auth: a, AuthRefreshInterval: time.Hour, Authz: auth.NewAuthorizer(true, nil)})
	c, got := ts.connect(t, &pb.CommandConnect{AuthMethodName: proto.String("token"), AuthData: []byte(testToken(t, "bob"))})
	if got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("bob: %v", got)
	}
	subscribe := func(id uint64, sub string) *pb.BaseCommand {
		return c.roundTrip(&pb.CommandSubscribe{Topic: proto.String("persistent://public/default/t"), Subscription: proto.String(sub),
			SubType: pb.CommandSubscribe_Shared.Enum(), ConsumerId: &id, RequestId: c.nextID()})
	}
	if got := subscribe(1, "alices"); got.GetError().GetError() != pb.ServerError_AuthorizationError {
		t.Fatalf("bob subscribes through alice's subscription: %v", got)
	}
	b.mu.Lock()
	loaded := len(b.mu.topics)
	b.mu.Unlock()
	if loaded != 0 {
		t.Fatalf("a refused subscription loaded %d topics", loaded)
	}
	if got := subscribe(2, "bobs"); got.GetType() != pb.BaseCommand_SUCCESS {
		t.Fatalf("bob subscribes through an unrestricted subscription: %v", got)
	}
}
