package interop

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/itest"
)

// TestStandaloneKill9: `magnetar standalone` (the built binary) is killed with SIGKILL while
// a producer publishes and a consumer acknowledges; after a restart on the same data
// directory every message whose send was acknowledged is there, and the subscription
// resumes no later than its last flushed acknowledgement.
func TestStandaloneKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	etcd, bk, brk, web := itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t)
	proc := itest.Start(t, "standalone", "standalone", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--etcd-listen", etcd, "--bookie-listen", bk, "--broker-listen", brk, "--http", web)
	itest.WaitTCP(t, brk, 60*time.Second)
	url := "pulsar://" + brk
	topic := "persistent://public/default/kill9"

	newClient := func() pulsar.Client {
		cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 30 * time.Second,
			ConnectionTimeout: 5 * time.Second, Logger: clientLogger()})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	cl := newClient()
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 20, SendTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000
	var mu sync.Mutex
	acked := map[int]bool{}
	var wg sync.WaitGroup
	killed := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		p.SendAsync(ctxT(t, time.Minute), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("msg-%d", i))},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err == nil {
					mu.Lock()
					acked[i] = true
					mu.Unlock()
				}
				wg.Done()
			})
		if i == n/2 {
			// Consume and acknowledge a part, then kill the process mid-stream.
			ctx := ctxT(t, time.Minute)
			for j := 0; j < n/4; j++ {
				m, err := cons.Receive(ctx)
				if err != nil {
					t.Fatal(err)
				}
				cons.AckCumulative(m)
			}
			time.Sleep(200 * time.Millisecond) // let the grouped acks reach the broker
			proc.Kill()
			close(killed)
		}
	}
	<-killed
	t0 := time.Now()
	wg.Wait() // sends after the kill fail by timeout
	t.Logf("pending sends failed after %v", time.Since(t0))
	cl.Close()
	mu.Lock()
	nAcked := len(acked)
	mu.Unlock()
	if nAcked < n/2 {
		t.Fatalf("only %d sends acknowledged before the kill", nAcked)
	}

	t0 = time.Now()
	proc.Restart()
	itest.WaitTCP(t, brk, 60*time.Second)
	t.Logf("restarted in %v", time.Since(t0))
	cl = newClient()
	defer cl.Close()
	ctx := ctxT(t, 2*time.Minute)
	// Everything acknowledged is there, for a new subscription from the earliest message.
	all, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "audit",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	p2, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if _, err := p2.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("msg-end")}); err != nil {
		t.Fatalf("send after restart: %v", err)
	}
	t.Logf("first send after restart after %v", time.Since(t0))
	seen := map[int]bool{}
	for {
		m, err := all.Receive(ctx)
		if err != nil {
			t.Fatalf("receive after %d messages: %v", len(seen), err)
		}
		if string(m.Payload()) == "msg-end" {
			break
		}
		seen[msgIndex(t, m)] = true
	}
	for i := range acked {
		if !seen[i] {
			t.Errorf("acknowledged msg-%d lost after kill -9", i)
		}
	}
	// The durable subscription resumes at or before its first unacknowledged message.
	s, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, err := s.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first := msgIndex(t, m); first > n/4 {
		t.Errorf("subscription resumed at msg-%d, after its last acknowledged msg-%d", first, n/4-1)
	}
	t.Logf("%d of %d sends acknowledged before the kill; %d messages after restart; subscription resumed at %q",
		nAcked, n, len(seen), m.Payload())
}
