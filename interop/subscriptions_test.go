package interop

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// devOpts is the storage the end-to-end tests run on.
var devOpts = clusterOpts{}

func subscribe(t *testing.T, cl pulsar.Client, o pulsar.ConsumerOptions) pulsar.Consumer {
	t.Helper()
	if o.SubscriptionInitialPosition == pulsar.SubscriptionPositionLatest {
		o.SubscriptionInitialPosition = pulsar.SubscriptionPositionEarliest
	}
	c, err := cl.Subscribe(o)
	if err != nil {
		t.Fatalf("subscribe %s: %v", o.SubscriptionName, err)
	}
	t.Cleanup(c.Close)
	return c
}

func producer(t *testing.T, cl pulsar.Client, o pulsar.ProducerOptions) pulsar.Producer {
	t.Helper()
	p, err := cl.CreateProducer(o)
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func msgIndex(t *testing.T, m pulsar.Message) int {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(string(m.Payload()), "msg-"))
	if err != nil {
		t.Fatalf("payload %q", m.Payload())
	}
	return i
}

func TestExclusiveConsumerBusy(t *testing.T) {
	c := newCluster(t, devOpts)
	cl := c.client()
	topic := topicName(t)
	subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Exclusive})
	_, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Exclusive})
	if err == nil || !strings.Contains(err.Error(), "ConsumerBusy") {
		t.Fatalf("second exclusive consumer: err = %v, want ConsumerBusy", err)
	}
	_, err = cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
	if err == nil || !strings.Contains(err.Error(), "ConsumerBusy") {
		t.Fatalf("consumer of another type: err = %v, want ConsumerBusy", err)
	}
}

type activeListener struct {
	name string
	ch   chan bool
}

func (l *activeListener) BecameActive(pulsar.Consumer, string, int32)   { l.ch <- true }
func (l *activeListener) BecameInactive(pulsar.Consumer, string, int32) { l.ch <- false }

func waitActive(t *testing.T, l *activeListener, want bool) {
	t.Helper()
	select {
	case got := <-l.ch:
		if got != want {
			t.Fatalf("%s: active = %v, want %v", l.name, got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no active-consumer change to %v", l.name, want)
	}
}

func TestFailoverSwitchOnClose(t *testing.T) {
	c := newCluster(t, devOpts)
	cl := c.client()
	topic := topicName(t)
	l1 := &activeListener{name: "c1", ch: make(chan bool, 10)}
	l2 := &activeListener{name: "c2", ch: make(chan bool, 10)}
	c1, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Failover,
		Name: "c1", EventListener: l1, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	waitActive(t, l1, true)
	c2 := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Failover,
		Name: "c2", EventListener: l2})
	waitActive(t, l2, false)

	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	produceN(t, p, 20, nil)
	ctx := ctxT(t, time.Minute)
	for i := 0; i < 10; i++ { // c1 is active: it gets everything, in order
		m, err := c1.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if msgIndex(t, m) != i {
			t.Fatalf("c1 got %q, want msg-%d", m.Payload(), i)
		}
		c1.Ack(m)
	}
	c1.Close()
	waitActive(t, l2, true)
	// c2 takes over: everything c1 did not acknowledge, in order (c1's acks are flushed on
	// close, so it resumes at 10).
	for want := 10; want < 20; want++ {
		m, err := c2.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := msgIndex(t, m); got != want {
			t.Fatalf("c2 got msg-%d, want msg-%d", got, want)
		}
		c2.Ack(m)
	}
}

func TestSharedSpreading(t *testing.T) {
	c := newCluster(t, devOpts)
	cl := c.client()
	topic := topicName(t)
	const nCons, n = 3, 300
	var cons []pulsar.Consumer
	for i := 0; i < nCons; i++ {
		cons = append(cons, subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
			Type: pulsar.Shared, Name: fmt.Sprintf("c%d", i), ReceiverQueueSize: 10}))
	}
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	produceN(t, p, n, nil)
	var mu sync.Mutex
	seen := map[int]int{}
	per := make([]int, nCons)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for i, cn := range cons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ctx := ctxT(t, 30*time.Second)
				m, err := cn.Receive(ctx)
				if err != nil {
					select {
					case <-done:
					default:
						t.Errorf("c%d receive: %v", i, err)
					}
					return
				}
				time.Sleep(time.Millisecond) // a little work, so that all consumers take part
				cn.Ack(m)
				mu.Lock()
				seen[msgIndex(t, m)]++
				per[i]++
				total := len(seen)
				mu.Unlock()
				if total == n {
					select {
					case <-done:
					default:
						close(done)
					}
				}
				select {
				case <-done:
					return
				default:
				}
			}
		}()
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("received %d of %d", len(seen), n)
	}
	for _, cn := range cons {
		cn.Close() // unblocks Receive
	}
	wg.Wait()
	for i, k := range per {
		if k == 0 {
			t.Errorf("consumer c%d got nothing: %v", i, per)
		}
	}
	for i := 0; i < n; i++ {
		if seen[i] != 1 {
			t.Errorf("msg-%d received %d times", i, seen[i])
		}
	}
}

// TestKeySharedOrderUnderChurn produces keyed messages while Key_Shared consumers join and
// leave; for every key, the first receipts of its messages (over all consumers, in the order
// they were processed) must be in publish order, and every message must arrive.
func TestKeySharedOrderUnderChurn(t *testing.T) {
	c := newCluster(t, devOpts)
	cl := c.client()
	topic := topicName(t)
	const keys, n = 20, 2000
	var mu sync.Mutex
	order := map[string][]int{} // key → message indexes in processing order (first receipts)
	seen := map[int]bool{}
	all := make(chan struct{})
	run := func(name string) (stop func()) {
		cn := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared,
			Name: name, ReceiverQueueSize: 100})
		quit := make(chan struct{})
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			for {
				select {
				case <-quit:
					return
				default:
				}
				ctx := ctxT(t, 200*time.Millisecond)
				m, err := cn.Receive(ctx)
				if err != nil {
					continue
				}
				i := msgIndex(t, m)
				time.Sleep(200 * time.Microsecond) // slow consumers keep prefetched messages queued
				mu.Lock()
				if !seen[i] {
					seen[i] = true
					order[m.Key()] = append(order[m.Key()], i)
					if len(seen) == n {
						close(all)
					}
				}
				mu.Unlock()
				cn.Ack(m)
			}
		}()
		return func() {
			close(quit)
			<-finished
			cn.Close()
		}
	}
	stop1 := run("c1")
	stop2 := run("c2")
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, BatcherBuilderType: pulsar.KeyBasedBatchBuilder})
	key := func(i int) string { return fmt.Sprintf("k%d", i%keys) }
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for chunk := 0; chunk < 10; chunk++ {
			for i := chunk * n / 10; i < (chunk+1)*n/10; i++ {
				p.SendAsync(ctxT(t, time.Minute), &pulsar.ProducerMessage{Key: key(i),
					Payload: []byte(fmt.Sprintf("msg-%d", i))}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err != nil {
						t.Errorf("send: %v", err)
					}
				})
			}
			p.Flush()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	stop3 := run("c3") // joins mid-stream
	time.Sleep(50 * time.Millisecond)
	stop1() // leaves mid-stream with messages in its queue
	time.Sleep(50 * time.Millisecond)
	stop4 := run("c4")
	<-produced
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		mu.Lock()
		st, err := c.broker.TopicStats(ctxT(t, 10*time.Second), topic)
		b, _ := json.MarshalIndent(st, "", " ")
		t.Fatalf("received %d of %d messages; stats (%v): %s", len(seen), n, err, b)
	}
	stop2()
	stop3()
	stop4()
	mu.Lock()
	defer mu.Unlock()
	for k, idx := range order {
		if !sort.IntsAreSorted(idx) {
			t.Errorf("key %s out of order: %v", k, idx)
		}
	}
}

func TestNackRedeliveryCount(t *testing.T) {
	c := newCluster(t, devOpts)
	cl := c.client()
	topic := topicName(t)
	cons := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared,
		NackRedeliveryDelay: 100 * time.Millisecond})
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic})
	produceN(t, p, 1, nil)
	ctx := ctxT(t, time.Minute)
	for want := uint32(0); want < 3; want++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.RedeliveryCount() != want {
			t.Fatalf("redelivery count %d, want %d", m.RedeliveryCount(), want)
		}
		cons.Nack(m)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cons.Ack(m)
}

func TestUnackedRedeliveredOnClose(t *testing.T) {
	c := newCluster(t, devOpts)
	cl := c.client()
	topic := topicName(t)
	c1 := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic})
	produceN(t, p, 5, nil)
	ctx := ctxT(t, time.Minute)
	for i := 0; i < 5; i++ {
		if _, err := c1.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c1.Close()
	c2 := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
	got := map[int]bool{}
	for i := 0; i < 5; i++ {
		m, err := c2.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.RedeliveryCount() < 1 {
			t.Errorf("msg %q: redelivery count %d, want >= 1", m.Payload(), m.RedeliveryCount())
		}
		got[msgIndex(t, m)] = true
		c2.Ack(m)
	}
	if len(got) != 5 {
		t.Fatalf("redelivered %v", got)
	}
}
