// Package scalabletest drives scalable topics end to end in tests: producers on many keys and
// stream consumers through package pulsarclient, with the check that every acknowledged
// message is consumed and each key's messages arrive in the order produced, and admin calls
// that wait for the controller. Used by the admin package's and interop's tests.
//
// Goroutines: a Load runs one per producer and one per consumer; Finish stops and waits for
// them. A Load's methods are called from the test's goroutine.
package scalabletest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/pulsarclient"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// Call sends an admin request to base+path, retrying while the controller is not ready
// (503) or the broker does not answer, for up to a minute, and fails the test unless the
// answer is 2xx.
func Call(t testing.TB, base, method, path string) []byte {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(""))
		resp, err := http.DefaultClient.Do(req)
		status, body := 0, ""
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return b
			}
			status, body = resp.StatusCode, string(b)
		}
		if (err == nil && status != http.StatusServiceUnavailable) || time.Now().After(deadline) {
			t.Fatalf("%s %s: %d %s %v", method, path, status, body, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
	}
}

// Layout returns the layout at base+path (/admin/v2/scalable/t/ns/name).
func Layout(t testing.TB, base, path string) layout.Layout {
	t.Helper()
	l, err := layout.Unmarshal(Call(t, base, "GET", path))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Load runs producers on many keys and stream consumers of subscription "s" on a scalable
// topic, and checks that each key's messages are consumed in the order produced.
type Load struct {
	t      testing.TB
	cl     *pulsarclient.Client
	topic  string
	admins []string
	ctx    context.Context

	mu       sync.Mutex
	seen     map[string][]int // key → sequence numbers consumed for the first time, in order
	got      map[string]bool
	orderErr string
	sent     map[string]int // key → messages acknowledged to the producer
	prodErr  error

	stop      chan struct{}
	pwg, cwg  sync.WaitGroup
	consumers []*pulsarclient.ScalableConsumer
}

// NewLoad returns a load on topic through cl, its admin calls going to admins in turn.
func NewLoad(t testing.TB, ctx context.Context, cl *pulsarclient.Client, topic string, admins []string) *Load {
	return &Load{t: t, cl: cl, topic: topic, admins: admins, ctx: ctx, seen: map[string][]int{}, got: map[string]bool{},
		sent: map[string]int{}, stop: make(chan struct{})}
}

func (ld *Load) admin(i int) pulsarclient.ScalableOptions {
	return pulsarclient.ScalableOptions{AdminURL: ld.admins[i%len(ld.admins)]}
}

// AddConsumer starts stream consumer name (its admin calls go to admins[i]).
func (ld *Load) AddConsumer(name string, i int) *pulsarclient.ScalableConsumer {
	sc, err := ld.cl.SubscribeStream(ld.ctx, pulsarclient.ScalableConsumerOptions{Topic: ld.topic, Subscription: "s", Name: name,
		ScalableOptions: ld.admin(i), PollWait: time.Second})
	if err != nil {
		ld.t.Fatal(err)
	}
	ld.consumers = append(ld.consumers, sc)
	ld.cwg.Go(func() {
		for {
			m, err := sc.Receive(ld.ctx)
			if err != nil {
				return
			}
			key, seqText, _ := strings.Cut(string(m.Payload), ":")
			seq, _ := strconv.Atoi(seqText)
			ld.mu.Lock()
			if !ld.got[string(m.Payload)] {
				ld.got[string(m.Payload)] = true
				if n := len(ld.seen[key]); seq != n && ld.orderErr == "" {
					ld.orderErr = fmt.Sprintf("key %s: got seq %d after %d messages (%v)", key, seq, n, ld.seen[key])
				}
				ld.seen[key] = append(ld.seen[key], seq)
			}
			ld.mu.Unlock()
			_ = sc.Ack(m) // after processing: a segment is drained only once its messages are
		}
	})
	return sc
}

// Produce starts n producers, each sending its 8 keys' sequence numbers in turn, one at a
// time.
func (ld *Load) Produce(n int) { ld.produce(n, 0) }

// ProducePipelined is Produce with each producer pipelining up to window messages
// (SendAsync): a key's order across splits is then the producer's re-routing.
func (ld *Load) ProducePipelined(n, window int) { ld.produce(n, window) }

func (ld *Load) produce(n, window int) {
	for g := range n {
		pr, err := ld.cl.CreateScalableProducer(ld.ctx, pulsarclient.ScalableProducerOptions{Topic: ld.topic,
			ScalableOptions: ld.admin(g), MaxPendingMessages: max(window, 1)})
		if err != nil {
			ld.t.Fatal(err)
		}
		ld.pwg.Go(func() {
			defer pr.Close(context.Background())
			for i := 0; ; i++ {
				select {
				case <-ld.stop:
					return
				default:
				}
				key := fmt.Sprintf("k%d-%d", g, i%8)
				seq := i / 8
				msg := &pulsarclient.ProducerMessage{Key: key, Payload: []byte(key + ":" + strconv.Itoa(seq))}
				done := func(err error) bool {
					ld.mu.Lock()
					defer ld.mu.Unlock()
					if err != nil {
						ld.prodErr = err
					} else {
						ld.sent[key] = max(ld.sent[key], seq+1)
					}
					return err == nil
				}
				if window == 0 {
					if _, _, err := pr.Send(ld.ctx, msg); !done(err) {
						return
					}
					continue
				}
				if err := pr.SendAsync(ld.ctx, msg, func(_ string, _ pulsarclient.MessageID, err error) { done(err) }); err != nil {
					done(err)
					return
				}
			}
		})
	}
}

// Total returns the messages acknowledged to the producers so far.
func (ld *Load) Total() int {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	n := 0
	for _, v := range ld.sent {
		n += v
	}
	return n
}

// WaitSent waits until the producers got n messages acknowledged.
func (ld *Load) WaitSent(n int) {
	ld.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for ld.Total() < n {
		ld.mu.Lock()
		err := ld.prodErr
		ld.mu.Unlock()
		if err != nil || time.Now().After(deadline) {
			ld.t.Fatalf("only %d messages sent (%v)", ld.Total(), err)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, with a deadline
	}
}

// Finish stops the producers, waits until every acknowledged message is consumed (describe
// explains a timeout) and checks each key's order; it returns the number of messages.
func (ld *Load) Finish(describe func() string) int {
	t := ld.t
	t.Helper()
	close(ld.stop)
	ld.pwg.Wait()
	if ld.prodErr != nil {
		t.Fatalf("produce: %v", ld.prodErr)
	}
	want := ld.Total()
	deadline := time.Now().Add(time.Minute)
	for {
		ld.mu.Lock()
		n, bad := len(ld.got), ld.orderErr
		ld.mu.Unlock()
		if bad != "" {
			t.Fatal(bad)
		}
		if n >= want {
			break
		}
		if time.Now().After(deadline) {
			var segs []string
			for i, sc := range ld.consumers {
				segs = append(segs, fmt.Sprintf("consumer %d: %v", i, sc.Segments()))
			}
			t.Fatalf("consumed %d of %d messages; attached %v; %s", n, want, segs, describe())
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
	for _, sc := range ld.consumers {
		sc.Close(context.Background())
	}
	ld.cwg.Wait()
	ld.mu.Lock()
	defer ld.mu.Unlock()
	for key, n := range ld.sent {
		if len(ld.seen[key]) != n {
			t.Errorf("key %s: %d sent, %d consumed", key, n, len(ld.seen[key]))
		}
	}
	return want
}
