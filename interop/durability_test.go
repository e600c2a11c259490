package interop

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker"
	mp "github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// waitFor polls cond (a broker statistic: there is no event to wait on across processes)
// every 20 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	waitEvery(t, d, 20*time.Millisecond, what, cond)
}

// waitEvery waits up to d for cond, checking it every interval.
func waitEvery(t *testing.T, d, every time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(every)
	}
}

// TestDedupAcrossReconnect: the broker stores a producer's messages but the receipts are
// lost; the producer reconnects and resends them unchanged; deduplication answers them
// without storing them again.
func TestDedupAcrossReconnect(t *testing.T) {
	px := newProxy(t)
	c := newCluster(t, clusterOpts{tweak: func(cfg *broker.Config) {
		cfg.Advertise = px.addr() // lookups send clients through the proxy
		cfg.DeduplicationSnapshotInterval = 5
	}})
	px.setBackend(c.broker.Addr().String())
	c.url = "pulsar://" + px.addr()
	cl := c.client()
	topic := topicName(t)
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, Name: "dedup-producer", BatchingMaxMessages: 5})
	produceN(t, p, 10, nil)

	px.blackhole.Store(true) // receipts from now on are lost
	const lost = 20
	var wg sync.WaitGroup
	errs := make(chan error, lost)
	for i := 10; i < 10+lost; i++ {
		wg.Add(1)
		p.SendAsync(ctxT(t, time.Minute), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("msg-%d", i))},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				errs <- err
				wg.Done()
			})
	}
	waitFor(t, 30*time.Second, "the broker to store the messages", func() bool {
		st, err := c.broker.TopicStats(ctxT(t, 5*time.Second), topic)
		return err == nil && st.MsgInCounter >= 10+lost
	})
	px.blackhole.Store(false)
	px.cut() // the client reconnects and resends its pending messages
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	st, err := c.broker.TopicStats(ctxT(t, 5*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	if st.MsgInCounter != 10+lost {
		t.Fatalf("broker stored %d messages, want %d (duplicates stored?)", st.MsgInCounter, 10+lost)
	}
	cons := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	expectRange(t, receiveIndexes(t, cons, 10+lost), 0)
	ctx := ctxT(t, time.Second)
	if m, err := cons.Receive(ctx); err == nil {
		t.Fatalf("extra message %q (a duplicate)", m.Payload())
	}
}

// TestBrokerRestartMidStream: a producer publishes while the broker restarts twice; every
// message whose send was acknowledged is consumed afterwards, once.
func TestBrokerRestartMidStream(t *testing.T) {
	c := newCluster(t, devOpts)
	cl := c.client()
	topic := topicName(t)
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 10, SendTimeout: time.Minute})
	cons := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	const n = 3000
	var mu sync.Mutex
	acked := map[int]bool{}
	var failed int
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			p.SendAsync(ctxT(t, 2*time.Minute), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("msg-%d", i))},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					mu.Lock()
					if err == nil {
						acked[i] = true
					} else {
						failed++
					}
					mu.Unlock()
					wg.Done()
				})
			if i%50 == 0 {
				time.Sleep(20 * time.Millisecond) // spread the stream over the restarts
			}
		}
		wg.Wait()
	}()
	// Consume concurrently, acknowledging, so that the restarts also hit the subscription.
	seen := map[int]int{}
	ctx := ctxT(t, 3*time.Minute)
	restarts := 0
	for len(seen) < n {
		if (len(seen) > n/3 && restarts == 0) || (len(seen) > 2*n/3 && restarts == 1) {
			c.restartBroker()
			restarts++
		}
		m, err := cons.Receive(ctx)
		if err != nil {
			mu.Lock()
			t.Fatalf("receive after %d distinct messages (%d acked, %d failed): %v", len(seen), len(acked), failed, err)
		}
		seen[msgIndex(t, m)]++
		cons.Ack(m)
		mu.Lock()
		if len(acked)+failed == n && len(seen) >= len(acked) {
			mu.Unlock()
			break
		}
		mu.Unlock()
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	for i := range acked {
		if seen[i] == 0 {
			t.Errorf("acknowledged msg-%d was not consumed", i)
		}
	}
	if len(acked) < n/2 {
		t.Errorf("only %d of %d sends succeeded", len(acked), n)
	}
	t.Logf("%d restarts, %d acknowledged sends, %d failed, %d distinct consumed", restarts, len(acked), failed, len(seen))
}

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func rawConnect(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	v, pv := "raw-test", int32(20)
	b, err := mp.AppendCommand(nil, mp.Wrap(&pb.CommandConnect{ClientVersion: &v, ProtocolVersion: &pv}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	f, err := mp.NewFrameReader(nc, 0).ReadFrame()
	if err != nil || f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("handshake: %v %v", f.Cmd, err)
	}
	if f.Cmd.GetConnected().GetMaxMessageSize() != 1<<20 {
		t.Fatalf("max_message_size %d, want 1 MiB", f.Cmd.GetConnected().GetMaxMessageSize())
	}
	return nc
}

// expectClosed reads until the broker closes nc.
func expectClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, bufio.NewReader(nc)); err != nil {
		t.Fatalf("connection not closed by the broker: %v", err)
	}
}

// TestBadFramesCloseOnlyThatConnection: an oversized frame, a malformed command, a
// non-CONNECT first frame and garbage protobuf each close their connection with a logged
// reason; a client on another connection keeps producing and consuming.
func TestBadFramesCloseOnlyThatConnection(t *testing.T) {
	logs := &syncBuffer{}
	c := newCluster(t, clusterOpts{tweak: func(cfg *broker.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}})
	cl := c.client()
	topic := topicName(t)
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	cons := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	addr := c.broker.Addr().String()
	ctx := ctxT(t, time.Minute)
	next := 0
	check := func() {
		t.Helper()
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("msg-%d", next))}); err != nil {
			t.Fatal(err)
		}
		expectRange(t, receiveIndexes(t, cons, 1), next)
		next++
	}
	check()

	cases := []struct {
		name, reason string
		frame        func() []byte
		handshake    bool
	}{
		{"oversized", "oversized", func() []byte { return binary.BigEndian.AppendUint32(nil, 64<<20) }, true},
		{"garbage-protobuf", "malformed", func() []byte {
			b := binary.BigEndian.AppendUint32(nil, 4+5)
			b = binary.BigEndian.AppendUint32(b, 5)
			return append(b, 0xff, 0xff, 0xff, 0xff, 0xff)
		}, true},
		{"bad-lengths", "malformed", func() []byte {
			b := binary.BigEndian.AppendUint32(nil, 4)
			return binary.BigEndian.AppendUint32(b, 100) // cmdSize beyond the frame
		}, true},
		{"no-connect", "protocol", func() []byte {
			b, _ := mp.AppendCommand(nil, mp.Wrap(&pb.CommandPing{}))
			return b
		}, false},
		{"send-without-payload", "malformed", func() []byte {
			pid, seq := uint64(1), uint64(0)
			cmd := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: &pid, SequenceId: &seq}}
			body, _ := proto.Marshal(cmd)
			b := binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))
			b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
			return append(b, body...)
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var nc net.Conn
			if tc.handshake {
				nc = rawConnect(t, addr)
			} else {
				var err error
				if nc, err = net.Dial("tcp", addr); err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
			}
			if _, err := nc.Write(tc.frame()); err != nil {
				t.Fatal(err)
			}
			expectClosed(t, nc)
			check() // the other connection goes on
		})
	}
	out := logs.String()
	for _, reason := range []string{"oversized", "malformed", "protocol"} {
		if !strings.Contains(out, "closing connection: bad frame") || !strings.Contains(out, "reason="+reason) {
			t.Errorf("no logged reason %q in:\n%s", reason, out)
		}
	}
}
