package perf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/pulsarclient"
)

// fakeTopic is an in-process topic: producers append to a queue that consumers read.
type fakeTopic struct {
	q        chan *pulsarclient.Message
	next     atomic.Int64
	acks     atomic.Int64
	failFrom int64 // sends from this one on fail (0: none)
	mu       sync.Mutex
	opened   []string // "producer" / "consumer" per create
	closed   int
	keys     map[int][]string // the keys each producer sent, in order
}

func newFakeTopic() *fakeTopic { return &fakeTopic{q: make(chan *pulsarclient.Message, 100_000)} }

func (t *fakeTopic) newProducer(_ context.Context, _ int, o pulsarclient.ProducerOptions) (Producer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.opened = append(t.opened, "producer:"+o.Topic)
	return fakeProducer{t, len(t.opened) - 1}, nil
}

func (t *fakeTopic) subscribe(_ context.Context, _ int, o pulsarclient.ConsumerOptions) (Consumer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.opened = append(t.opened, "consumer:"+o.Topic+"/"+o.Subscription)
	return fakeConsumer{t}, nil
}

func (t *fakeTopic) close() error {
	t.mu.Lock()
	t.closed++
	t.mu.Unlock()
	return nil
}

type fakeProducer struct {
	t *fakeTopic
	i int // the order of its creation
}

func (p fakeProducer) Send(ctx context.Context, m *pulsarclient.ProducerMessage) (pulsarclient.MessageID, error) {
	var id pulsarclient.MessageID
	var err error
	p.SendAsync(ctx, m, func(i pulsarclient.MessageID, e error) { id, err = i, e })
	return id, err
}

func (p fakeProducer) SendAsync(_ context.Context, m *pulsarclient.ProducerMessage, cb func(pulsarclient.MessageID, error)) error {
	n := p.t.next.Add(1)
	if m.Key != "" {
		p.t.mu.Lock()
		if p.t.keys == nil {
			p.t.keys = map[int][]string{}
		}
		p.t.keys[p.i] = append(p.t.keys[p.i], m.Key)
		p.t.mu.Unlock()
	}
	if p.t.failFrom > 0 && n >= p.t.failFrom {
		cb(pulsarclient.MessageID{}, errors.New("topic fenced"))
		return nil
	}
	p.t.q <- &pulsarclient.Message{Payload: bytes.Clone(m.Payload)}
	cb(pulsarclient.MessageID{EntryID: n}, nil)
	return nil
}

func (p fakeProducer) Close(context.Context) error { return p.t.close() }

type fakeConsumer struct{ t *fakeTopic }

func (c fakeConsumer) Receive(ctx context.Context) (*pulsarclient.Message, error) {
	select {
	case m := <-c.t.q:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c fakeConsumer) Ack(*pulsarclient.Message) error { c.t.acks.Add(1); return nil }
func (c fakeConsumer) Close(context.Context) error     { return c.t.close() }

func producerOptions(n int, size int, rate float64, messages int64) ProducerOptions {
	return ProducerOptions{Producers: n, Size: size, Rate: rate, MaxPending: 100, Messages: messages, BatchMax: 100,
		BatchDelay: time.Millisecond, InFlight: 1}
}

// TestRunProduceLimit: a run limited to N messages publishes exactly N over all producers,
// each counted with its publish latency, and closes the producers.
func TestRunProduceLimit(t *testing.T) {
	ft := newFakeTopic()
	res, err := Run(context.Background(), Options{Tool: Produce, Topic: "t", Producer: producerOptions(3, 64, 0, 500),
		NewProducer: ft.newProducer})
	if err != nil {
		t.Fatal(err)
	}
	if res.Messages != 500 || ft.next.Load() != 500 || res.Publish["samples"] != 500 || res.Failed != 0 {
		t.Fatalf("%d sent; result %+v", ft.next.Load(), res)
	}
	if res.Tool != "produce" || res.Clients != 3 || res.Size != 64 || res.Mode != "async, 100 in flight" || !res.Batching {
		t.Fatalf("result %+v", res)
	}
	if res.SendLateness != nil || res.EndToEnd != nil {
		t.Fatalf("unpaced produce reported lateness %v or e2e %v", res.SendLateness, res.EndToEnd)
	}
	if ft.closed != 3 || len(ft.opened) != 3 || ft.opened[0] != "producer:t" {
		t.Fatalf("opened %v, closed %d", ft.opened, ft.closed)
	}
	var b strings.Builder
	if err := res.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "produce t: 3 clients, 64 B messages, async, 100 in flight, batching true\n  500 messages in ") ||
		!strings.Contains(b.String(), "  publish latency (ms): p50 ") {
		t.Fatalf("text %q", b.String())
	}
}

// TestRunE2E: paced producers and a consumer on the fake topic: every acknowledged message
// is received within the drain, and end-to-end latencies come from the payload stamps.
func TestRunE2E(t *testing.T) {
	ft := newFakeTopic()
	var reports atomic.Int64
	res, err := Run(context.Background(), Options{Tool: E2E, Topic: "t", Duration: 1200 * time.Millisecond,
		Producer:    producerOptions(2, 16, 500, 0),
		Consumer:    ConsumerOptions{Consumers: 1, Options: pulsarclient.ConsumerOptions{Subscription: "s"}},
		NewProducer: ft.newProducer, Subscribe: ft.subscribe,
		Progress: func(p Progress) {
			if p.Counted == "received" && p.Unit == "msg" {
				reports.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	// 500 msg/s for 1.2 s is 600 due; the window closes at the end.
	if res.Messages < 500 || res.Messages > 602 {
		t.Fatalf("%d messages published in the window, want about 600", res.Messages)
	}
	if ft.acks.Load() != ft.next.Load() || res.EndToEnd["samples"] == 0 || res.ReceivedMsgPerSec == 0 {
		t.Fatalf("%d sent, %d received; result %+v", ft.next.Load(), ft.acks.Load(), res)
	}
	if res.SendLateness == nil || res.TargetRate != 500 {
		t.Fatalf("paced run: lateness %v, rate %v", res.SendLateness, res.TargetRate)
	}
	if reports.Load() == 0 {
		t.Fatal("no progress report")
	}
	if ft.closed != 3 {
		t.Fatalf("%d closed, want 2 producers and 1 consumer", ft.closed)
	}
}

// TestRunConsumeBacklog: a consume run with a message limit reads that many of a backlog,
// and reports a shortfall as an error with the result.
func TestRunConsumeBacklog(t *testing.T) {
	ft := newFakeTopic()
	for range 300 {
		ft.q <- &pulsarclient.Message{Payload: make([]byte, 10)}
	}
	o := Options{Tool: Consume, Topic: "t", Warmup: time.Hour, // skipped with a message limit
		Consumer:  ConsumerOptions{Consumers: 2, Messages: 200, Options: pulsarclient.ConsumerOptions{Subscription: "s"}},
		Subscribe: ft.subscribe}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Messages < 200 || res.Size != 10 || res.Clients != 2 || res.Mode != "" || ft.closed != 2 {
		t.Fatalf("result %+v, %d closed", res, ft.closed)
	}
	o.Consumer.Messages = 1000
	o.Duration = 100 * time.Millisecond
	res, err = Run(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), " of 1000 messages") || res == nil {
		t.Fatalf("short backlog: %v, %+v", err, res)
	}
}

// TestRunSendFailure: a failed send is counted and returned with the result.
func TestRunSendFailure(t *testing.T) {
	ft := newFakeTopic()
	ft.failFrom = 11
	res, err := Run(context.Background(), Options{Tool: Produce, Topic: "t", Producer: producerOptions(1, 8, 0, 50),
		NewProducer: ft.newProducer})
	if err == nil || err.Error() != "topic fenced" || res == nil || res.Failed == 0 || res.Messages != 10 {
		t.Fatalf("err %v, result %+v", err, res)
	}
}

// TestRunSetupError: a producer that cannot be created ends the run with no result, and the
// producers created before it are closed.
func TestRunSetupError(t *testing.T) {
	ft := newFakeTopic()
	n := 0
	res, err := Run(context.Background(), Options{Tool: Produce, Topic: "t", Producer: producerOptions(3, 8, 0, 10),
		NewProducer: func(ctx context.Context, i int, o pulsarclient.ProducerOptions) (Producer, error) {
			if n++; n == 3 {
				return nil, errors.New("not authorized")
			}
			return ft.newProducer(ctx, i, o)
		}})
	if res != nil || err == nil || err.Error() != "not authorized" || ft.closed != 2 {
		t.Fatalf("result %+v, err %v, %d closed", res, err, ft.closed)
	}
}

// TestRunKeys: with Keys, producer p's n-th message has key (p + n*producers) mod keys: with
// as many keys as producers each producer sends its own, with more they go round.
func TestRunKeys(t *testing.T) {
	for _, tc := range []struct{ producers, keys int }{{3, 5}, {4, 4}} {
		ft := newFakeTopic()
		po := producerOptions(tc.producers, 16, 0, 60)
		po.Keys = tc.keys
		if _, err := Run(context.Background(), Options{Tool: Produce, Topic: "t", Producer: po, NewProducer: ft.newProducer}); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for p, ks := range ft.keys {
			for n, k := range ks {
				if want := fmt.Sprintf("key-%d", (p+n*tc.producers)%tc.keys); k != want {
					t.Fatalf("%+v: producer %d message %d has key %q, want %q", tc, p, n, k, want)
				}
				seen[k] = true
			}
		}
		if len(seen) == 0 {
			t.Fatalf("%+v: no key sent", tc)
		}
	}
}

// TestRunWindows: a run with a window reports each closed window (also to OnWindow): its
// start follows the previous window's end, its rates count what was acknowledged and
// received in it, and its latencies are its own samples.
func TestRunWindows(t *testing.T) {
	ft := newFakeTopic()
	var mu sync.Mutex
	var live []WindowResult
	res, err := Run(context.Background(), Options{Tool: E2E, Topic: "t", Duration: 1200 * time.Millisecond,
		Window: 300 * time.Millisecond, Producer: producerOptions(2, 16, 1000, 0),
		Consumer:    ConsumerOptions{Consumers: 1, Options: pulsarclient.ConsumerOptions{Subscription: "s"}},
		NewProducer: ft.newProducer, Subscribe: ft.subscribe,
		OnWindow: func(w WindowResult) {
			mu.Lock()
			live = append(live, w)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Windows) == 0 || len(res.Windows) > 4 || len(live) != len(res.Windows) {
		t.Fatalf("%d windows (%d reported live), want 1 to 4 of 300 ms in 1.2 s", len(res.Windows), len(live))
	}
	end := 0.0
	var published float64
	for i, w := range res.Windows {
		if w.Start < end-1e-6 || w.Start > end+1e-6 || w.Seconds <= 0 {
			t.Fatalf("window %d %+v does not start at the previous end %.3f", i, w, end)
		}
		end = w.Start + w.Seconds
		if w.Published <= 0 || w.Received <= 0 || w.Publish["samples"] == 0 || w.EndToEnd["samples"] == 0 || w.Backlog < 0 {
			t.Fatalf("window %d: %+v", i, w)
		}
		published += w.Published * w.Seconds
	}
	// The fake topic acknowledges at once: the windows count about what the run's window did
	// over their span (1000 msg/s).
	if published > float64(res.Messages)+10 {
		t.Fatalf("windows count %.0f published, the run %d", published, res.Messages)
	}
	var b strings.Builder
	if err := res.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "  windows (end, rates, backlog, latencies of the window):\n") ||
		!strings.Contains(b.String(), " e2e ms p50 ") {
		t.Fatalf("text %q", b.String())
	}
}
