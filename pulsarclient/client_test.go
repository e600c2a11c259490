package pulsarclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newTestClient(t *testing.T, url string) *Client {
	t.Helper()
	cl, err := New(Options{URL: url, OperationTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestNewBadURL(t *testing.T) {
	for _, u := range []string{"", "http://x:1", "pulsar://", "::"} {
		if _, err := New(Options{URL: u}); !errors.Is(err, ErrBadURL) {
			t.Errorf("New(%q) = %v, want ErrBadURL", u, err)
		}
	}
	cl, err := New(Options{URL: "pulsar://localhost"})
	if err != nil || cl.svcAddr != "localhost:6650" {
		t.Fatalf("default port: %v %q", err, cl.svcAddr)
	}
}

// TestProduceConsumeBatched: 5000 messages sent asynchronously in batches arrive in order
// with their batch indexes, and cumulative acks reach the broker.
func TestProduceConsumeBatched(t *testing.T) {
	b := startFakeBroker(t)
	cl := newTestClient(t, b.url)
	ctx := testCtx(t)
	cons, err := cl.Subscribe(ctx, ConsumerOptions{Topic: "t", Subscription: "s", InitialPosition: Earliest,
		ReceiverQueueSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cl.CreateProducer(ctx, ProducerOptions{Topic: "t", BatchingMaxMessages: 50, MaxPendingMessages: 300})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000
	var wg sync.WaitGroup
	wg.Add(n)
	ids := make([]MessageID, n)
	for i := range n {
		err := p.SendAsync(ctx, &ProducerMessage{Payload: fmt.Appendf(nil, "m-%d", i), Key: "k"}, func(id MessageID, err error) {
			if err != nil {
				t.Errorf("send %d: %v", i, err)
			}
			ids[i] = id
			wg.Done()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	// The first message goes alone (nothing was in flight); the rest gather in batches of up
	// to 50 while entries are in flight.
	entries := map[int64]bool{}
	for _, id := range ids {
		entries[id.EntryID] = true
	}
	if len(entries) > n/10 {
		t.Errorf("%d messages in %d entries: want batches", n, len(entries))
	}
	var last *Message
	for i := range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(m.Payload), fmt.Sprintf("m-%d", i); got != want {
			t.Fatalf("message %d: %q, want %q", i, got, want)
		}
		if m.ID.LedgerID != ids[i].LedgerID || m.ID.EntryID != ids[i].EntryID || m.ID.BatchIndex != ids[i].BatchIndex {
			t.Fatalf("message %d: id %v, receipt said %v", i, m.ID, ids[i])
		}
		if m.Key != "k" || m.ProducerName == "" || m.PublishTime.IsZero() {
			t.Fatalf("message %d: key %q producer %q time %v", i, m.Key, m.ProducerName, m.PublishTime)
		}
		last = m
	}
	if err := cons.AckCumulative(last); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cons.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.acks) == 0 {
		t.Fatal("no ACK reached the broker")
	}
	a := b.acks[len(b.acks)-1]
	if a.GetAckType() != pb.CommandAck_Cumulative || a.MessageId[0].GetEntryId() != uint64(last.ID.EntryID) {
		t.Fatalf("last ack %v, want cumulative on entry %d", a, last.ID.EntryID)
	}
	for _, f := range b.flows {
		if f > 100 {
			t.Fatalf("FLOW of %d permits exceeds the queue size", f)
		}
	}
	if len(b.flows) < 2 {
		t.Fatalf("flows %v: permits were never replenished", b.flows)
	}
}

// TestSendSyncUnbatched: Send waits for its receipt and unbatched ids have batch index -1.
func TestSendSyncUnbatched(t *testing.T) {
	b := startFakeBroker(t)
	cl := newTestClient(t, b.url)
	ctx := testCtx(t)
	p, err := cl.CreateProducer(ctx, ProducerOptions{Topic: "persistent://a/b/c", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	for i := range 3 {
		id, err := p.Send(ctx, &ProducerMessage{Payload: []byte("x"), Properties: map[string]string{"a": "b"}})
		if err != nil {
			t.Fatal(err)
		}
		if id.EntryID != int64(i) || id.BatchIndex != -1 || id.Partition != -1 {
			t.Fatalf("send %d: id %v", i, id)
		}
	}
	big := make([]byte, 2<<20)
	if _, err := p.Send(ctx, &ProducerMessage{Payload: big}); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("oversized send: %v", err)
	}
}

// TestPartitioned: a producer spreads over the partitions (keys stick to one), a consumer
// reads them all.
func TestPartitioned(t *testing.T) {
	b := startFakeBroker(t)
	b.partitions["persistent://public/default/pt"] = 3
	cl := newTestClient(t, b.url)
	ctx := testCtx(t)
	cons, err := cl.Subscribe(ctx, ConsumerOptions{Topic: "pt", Subscription: "s", InitialPosition: Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	p, err := cl.CreateProducer(ctx, ProducerOptions{Topic: "pt", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	parts := map[int32]int{}
	keyPart := map[int32]bool{}
	for i := range 30 {
		msg := &ProducerMessage{Payload: []byte("x")}
		if i%2 == 0 {
			msg.Key = "same"
		}
		id, err := p.Send(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		parts[id.Partition]++
		if msg.Key != "" {
			keyPart[id.Partition] = true
		}
	}
	if len(parts) != 3 || len(keyPart) != 1 {
		t.Fatalf("partitions used %v, by the keyed messages %v", parts, keyPart)
	}
	for range 30 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProducerReconnectResends: the connection drops with sends in flight; the producer
// reconnects, re-sends in order, and every callback fires exactly once with success (the
// broker deduplicates the re-sent entries it had stored).
func TestProducerReconnectResends(t *testing.T) {
	b := startFakeBroker(t)
	b.dropAfter = 7
	cl := newTestClient(t, b.url)
	ctx := testCtx(t)
	p, err := cl.CreateProducer(ctx, ProducerOptions{Topic: "r", BatchingMaxMessages: 10, MaxPendingMessages: 100})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	var mu sync.Mutex
	calls := make([]int, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		if err := p.SendAsync(ctx, &ProducerMessage{Payload: fmt.Appendf(nil, "%d", i)}, func(_ MessageID, err error) {
			if err != nil {
				t.Errorf("send %d: %v", i, err)
			}
			mu.Lock()
			calls[i]++
			mu.Unlock()
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i, c := range calls {
		if c != 1 {
			t.Fatalf("callback %d called %d times", i, c)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Every message is stored exactly once, in order.
	cons, err := cl.Subscribe(ctx, ConsumerOptions{Topic: "r", Subscription: "s", InitialPosition: Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	for i := range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload) != fmt.Sprint(i) {
			t.Fatalf("message %d is %q", i, m.Payload)
		}
	}
}

// TestConsumerResubscribes: after CLOSE_CONSUMER from the broker the consumer subscribes
// again and receives what is published next.
func TestConsumerResubscribes(t *testing.T) {
	b := startFakeBroker(t)
	cl := newTestClient(t, b.url)
	ctx := testCtx(t)
	cons, err := cl.Subscribe(ctx, ConsumerOptions{Topic: "c", Subscription: "s", AckGroupingTime: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	p, err := cl.CreateProducer(ctx, ProducerOptions{Topic: "c"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := p.Send(ctx, &ProducerMessage{Payload: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil || string(m.Payload) != "one" {
		t.Fatalf("first: %v %v", m, err)
	}
	b.closeConsumers("persistent://public/default/c")
	if _, err := p.Send(ctx, &ProducerMessage{Payload: []byte("two")}); err != nil {
		t.Fatal(err)
	}
	m, err = cons.Receive(ctx)
	if err != nil || string(m.Payload) != "two" {
		t.Fatalf("after resubscribing: %v %v", m, err)
	}
}

// TestErrors: permanent broker errors surface as ServerErrors; Receive ends on Close.
func TestErrors(t *testing.T) {
	b := startFakeBroker(t)
	b.subErr["busy"] = pb.ServerError_ConsumerBusy
	b.terminated["persistent://public/default/term"] = true
	cl := newTestClient(t, b.url)
	ctx := testCtx(t)
	if _, err := cl.Subscribe(ctx, ConsumerOptions{Topic: "t", Subscription: "busy"}); !IsServerError(err, pb.ServerError_ConsumerBusy) {
		t.Fatalf("subscribe: %v, want ConsumerBusy", err)
	}
	p, err := cl.CreateProducer(ctx, ProducerOptions{Topic: "term"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, &ProducerMessage{Payload: []byte("x")}); !IsServerError(err, pb.ServerError_TopicTerminatedError) {
		t.Fatalf("send to terminated: %v", err)
	}
	if _, err := p.Send(ctx, &ProducerMessage{Payload: []byte("x")}); !IsServerError(err, pb.ServerError_TopicTerminatedError) {
		t.Fatalf("second send to terminated: %v", err)
	}
	p.Close(ctx)
	cons, err := cl.Subscribe(ctx, ConsumerOptions{Topic: "t", Subscription: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := cons.Receive(ctx)
		done <- err
	}()
	cons.Close(ctx)
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Receive after Close: %v", err)
	}
	if _, err := cl.Subscribe(ctx, ConsumerOptions{Topic: "t"}); err == nil {
		t.Fatal("subscribe without a subscription name succeeded")
	}
}

// TestMaxPending: SendAsync blocks while MaxPendingMessages are unacknowledged; Client.Close
// fails them with ErrClosed.
func TestMaxPending(t *testing.T) {
	b := startFakeBroker(t)
	b.holdReceipts = true
	cl := newTestClient(t, b.url)
	ctx := testCtx(t)
	p, err := cl.CreateProducer(ctx, ProducerOptions{Topic: "m", MaxPendingMessages: 2, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		if err := p.SendAsync(ctx, &ProducerMessage{Payload: []byte("x")}, func(_ MessageID, err error) { errs <- err }); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond) // long enough to see it block
	defer cancel()
	if err := p.SendAsync(short, &ProducerMessage{Payload: []byte("x")}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third SendAsync: %v, want it to block", err)
	}
	cl.Close()
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Fatalf("pending send after Close: %v", err)
		}
	}
	if err := p.SendAsync(ctx, &ProducerMessage{Payload: []byte("x")}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("SendAsync after Close: %v", err)
	}
}

func TestParseSubscriptionType(t *testing.T) {
	for in, want := range map[string]SubscriptionType{"shared": Shared, "Key_Shared": KeyShared, "keyshared": KeyShared,
		"Exclusive": Exclusive, "FAILOVER": Failover} {
		if got, err := ParseSubscriptionType(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	if _, err := ParseSubscriptionType("bogus"); err == nil {
		t.Error("bogus type parsed")
	}
}

// TestFlushCoversQueued: Flush (and so Close) covers every message SendAsync accepted
// before it, even those still queued for the producer's goroutine.
func TestFlushCoversQueued(t *testing.T) {
	b := startFakeBroker(t)
	cl := newTestClient(t, b.url)
	ctx := testCtx(t)
	for round := range 5 {
		p, err := cl.CreateProducer(ctx, ProducerOptions{Topic: fmt.Sprintf("f%d", round), MaxPendingMessages: 2000})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		done := 0
		for range 1000 {
			if err := p.SendAsync(ctx, &ProducerMessage{Payload: []byte("x")}, func(_ MessageID, err error) {
				if err != nil {
					t.Errorf("send: %v", err)
				}
				mu.Lock()
				done++
				mu.Unlock()
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if done != 1000 {
			t.Fatalf("round %d: %d of 1000 callbacks after Close", round, done)
		}
		mu.Unlock()
	}
}

// TestBatchGoesWhenIdle: with a batching delay far beyond the test's deadline and one
// entry in flight at most, a message sent while nothing is in flight goes at once, and the messages sent while it is in flight
// go together, as one batch entry, when it is acknowledged.
func TestBatchGoesWhenIdle(t *testing.T) {
	b := startFakeBroker(t)
	release := make(chan struct{})
	var once sync.Once
	b.mu.Lock()
	b.onSend = func(_ *fakeConn, seq uint64) {
		if seq == 0 {
			<-release // hold the first entry's receipt until the rest are queued
		}
	}
	b.mu.Unlock()
	defer once.Do(func() { close(release) })
	cl := newTestClient(t, b.url)
	ctx := testCtx(t)
	p, err := cl.CreateProducer(ctx, ProducerOptions{Topic: "idle", BatchingMaxDelay: time.Hour, BatchingMaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	ids, send, wg := recordSends(t, ctx, p, n)
	send(0)
	// The first message reaches the broker without waiting for the hour.
	waitSends(t, b, 1, "the first message was not sent while nothing was in flight")
	for i := 1; i < n; i++ {
		send(i)
	}
	once.Do(func() { close(release) })
	wg.Wait()
	if ids[0].EntryID != 0 || ids[0].BatchIndex != 0 {
		t.Fatalf("first message: %v, want entry 0 alone", ids[0])
	}
	for i := 1; i < n; i++ {
		if ids[i].EntryID != 1 || ids[i].BatchIndex != int32(i-1) {
			t.Fatalf("message %d: %v, want entry 1 batch index %d", i, ids[i], i-1)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPartialBatchesInFlight: below BatchingMaxInFlight entries in flight, each message goes
// at once (the delay is an hour); at the limit, messages gather into one batch that goes
// when an entry in flight is acknowledged.
func TestPartialBatchesInFlight(t *testing.T) {
	b := startFakeBroker(t)
	b.holdReceipts = true
	cl := newTestClient(t, b.url)
	ctx := testCtx(t)
	const inFlight, n = 3, 10
	p, err := cl.CreateProducer(ctx, ProducerOptions{Topic: "inflight", BatchingMaxDelay: time.Hour, BatchingMaxInFlight: inFlight})
	if err != nil {
		t.Fatal(err)
	}
	ids, send, wg := recordSends(t, ctx, p, n)
	for i := range inFlight {
		send(i)
		waitSends(t, b, i+1, fmt.Sprintf("message %d was not sent with %d entries in flight", i, i))
	}
	for i := inFlight; i < n; i++ {
		send(i)
	}
	b.releaseReceipts()
	wg.Wait()
	for i := range n {
		entry, index := int64(i), int32(0)
		if i >= inFlight {
			entry, index = inFlight, int32(i-inFlight)
		}
		if ids[i].EntryID != entry || ids[i].BatchIndex != index {
			t.Fatalf("message %d: %v, want entry %d batch index %d", i, ids[i], entry, index)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// recordSends returns n slots for message ids, a send(i) that publishes message i with
// SendAsync and records its id in slot i, and a WaitGroup done once all n are acknowledged.
func recordSends(t *testing.T, ctx context.Context, p *Producer, n int) ([]MessageID, func(int), *sync.WaitGroup) {
	ids := make([]MessageID, n)
	wg := new(sync.WaitGroup)
	wg.Add(n)
	send := func(i int) {
		if err := p.SendAsync(ctx, &ProducerMessage{Payload: []byte("x")}, func(id MessageID, err error) {
			if err != nil {
				t.Errorf("send %d: %v", i, err)
			}
			ids[i] = id
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	return ids, send, wg
}

// waitSends waits until the broker has seen want SEND frames, or fails with msg.
func waitSends(t *testing.T, b *fakeBroker, want int, msg string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		sends := b.sends
		b.mu.Unlock()
		if sends == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
	}
}
