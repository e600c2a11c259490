package pulsarclient

import (
	"slices"
	"testing"
)

// TestThroughProxy: a lookup answered with proxy_through_service_url (as a proxy answers)
// makes the client connect to the service URL again with CONNECT.proxy_to_broker_url naming
// the broker, and produce and consume on that connection, not on the lookup connection
// (whose CONNECT names no broker).
func TestThroughProxy(t *testing.T) {
	b := startFakeBroker(t)
	b.mu.Lock()
	b.proxyThrough = "pulsar://behind-the-proxy:6650"
	b.mu.Unlock()
	cl := newTestClient(t, b.url)
	ctx := testCtx(t)
	p, err := cl.CreateProducer(ctx, ProducerOptions{Topic: "proxied"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, &ProducerMessage{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	c, err := cl.Subscribe(ctx, ConsumerOptions{Topic: "proxied", Subscription: "s", InitialPosition: Earliest})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := c.Receive(ctx); err != nil || string(m.Payload) != "x" {
		t.Fatalf("receive: %v %v", m, err)
	}
	b.mu.Lock()
	got := slices.Clone(b.proxyTo)
	b.mu.Unlock()
	if !slices.Equal(got, []string{"", "behind-the-proxy:6650"}) {
		t.Fatalf("CONNECTs named %q, want the lookup connection's and one to behind-the-proxy:6650", got)
	}
}
