package proxy

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/access"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

type auditBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (a *auditBuffer) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.b.Write(p)
}

func (a *auditBuffer) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.b.String()
}

// TestAuthenticationAudited: a CONNECT the proxy refuses writes an audit line with the
// client's address and the method, never the token.
func TestAuthenticationAudited(t *testing.T) {
	a, err := auth.New(auth.Config{Enabled: true, Providers: []string{"token"},
		Token: auth.TokenConfig{SecretKey: "data:;base64,MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}})
	if err != nil {
		t.Fatal(err)
	}
	logs := &auditBuffer{}
	b := newFakeBroker(t)
	s := startProxy(t, Config{BrokerServiceURLs: []string{b.url()}, Auth: a, BrokerAuthMethod: "token",
		BrokerAuthData: func() ([]byte, error) { return []byte("proxy-token"), nil },
		Logger:         slog.New(slog.NewTextHandler(logs, nil))})
	forged := token(t, []byte("another key, another key, another"), "alice")
	c := dialProxy(t, s)
	if r := c.connect(b.addr(), func(cmd *pb.CommandConnect) {
		cmd.AuthMethodName, cmd.AuthData = proto.String("token"), []byte(forged)
	}); r.GetError().GetError() != pb.ServerError_AuthenticationError {
		t.Fatalf("a bad token answered %v", r)
	}
	c.expectClosed()
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, access.MsgAuthenticationRefused) {
			line = l
		}
	}
	if !strings.Contains(line, "protocol=binary") || !strings.Contains(line, "method=token") || !strings.Contains(line, "remote=127.0.0.1:") {
		t.Errorf("audit line %q", line)
	}
	if strings.Contains(logs.String(), forged) {
		t.Error("the token is in the logs")
	}
}
