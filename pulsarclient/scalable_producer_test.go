package pulsarclient

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// fakeSegs are the segment producers of a ScalableProducer under test: each segment keeps
// the messages it persisted, in order, and the sends in flight until the test answers
// them (or answers them at once with auto).
type fakeSegs struct {
	mu     sync.Mutex
	l      layout.Layout // what fetch returns
	segs   map[string]*fakeSeg
	auto   map[string]bool // segments answering every send at once with success
	sealed map[string]bool // segments refusing new producers and sends with TopicTerminated
}

type fakeSeg struct {
	stored  []string // payloads persisted, in order
	pending []fakeSend
}

type fakeSend struct {
	msg *ProducerMessage
	cb  func(MessageID, error)
}

type fakeSegProducer struct {
	f    *fakeSegs
	name string
}

func newFakeSegs(l layout.Layout) *fakeSegs {
	return &fakeSegs{l: l, segs: map[string]*fakeSeg{}, auto: map[string]bool{}, sealed: map[string]bool{}}
}

func (f *fakeSegs) seg(name string) *fakeSeg {
	s := f.segs[name]
	if s == nil {
		s = &fakeSeg{}
		f.segs[name] = s
	}
	return s
}

var errTerminated = &ServerError{Code: pb.ServerError_TopicTerminatedError, Message: "terminated"}

func (f *fakeSegs) newSeg(_ context.Context, name string) (segSender, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sealed[name] {
		return nil, errTerminated
	}
	f.seg(name)
	return &fakeSegProducer{f: f, name: name}, nil
}

func (f *fakeSegs) fetch(context.Context) (layout.Layout, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.l, nil
}

func (fp *fakeSegProducer) SendAsync(_ context.Context, msg *ProducerMessage, cb func(MessageID, error)) error {
	f := fp.f
	f.mu.Lock()
	s := f.seg(fp.name)
	if f.auto[fp.name] {
		s.stored = append(s.stored, string(msg.Payload))
		n := len(s.stored)
		f.mu.Unlock()
		cb(MessageID{EntryID: int64(n - 1)}, nil)
		return nil
	}
	s.pending = append(s.pending, fakeSend{msg, cb})
	f.mu.Unlock()
	return nil
}

// Close fails the sends in flight with ErrClosed, as Producer.Close does after its flush.
func (fp *fakeSegProducer) Close(context.Context) error {
	fp.f.mu.Lock()
	s := fp.f.seg(fp.name)
	pending := s.pending
	s.pending = nil
	fp.f.mu.Unlock()
	for _, x := range pending {
		x.cb(MessageID{}, ErrClosed)
	}
	return nil
}

// answer answers the oldest send in flight to name: persisted (err nil) or failed.
func (f *fakeSegs) answer(t *testing.T, name string, err error) {
	t.Helper()
	f.mu.Lock()
	s := f.seg(name)
	if len(s.pending) == 0 {
		f.mu.Unlock()
		t.Fatalf("no send in flight to %s", name)
	}
	x := s.pending[0]
	s.pending = s.pending[1:]
	if err == nil {
		s.stored = append(s.stored, string(x.msg.Payload))
	}
	n := len(s.stored)
	f.mu.Unlock()
	x.cb(MessageID{EntryID: int64(n - 1)}, err)
}

func (f *fakeSegs) pending(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.seg(name).pending)
}

// waitFor polls cond until it holds (a deadline, no sleep as synchronisation).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
}

// inspect runs fn on the producer's owner goroutine and waits.
func (p *ScalableProducer) inspect(fn func(st *prodState)) {
	done := make(chan struct{})
	if !p.post(func() { fn(&p.st); close(done) }) {
		return
	}
	<-done
}

// keyIn returns a key whose hash is in r.
func keyIn(r layout.HashRange, prefix string) string {
	for i := 0; ; i++ {
		k := prefix + strconv.Itoa(i)
		if r.Contains(layout.KeyHash([]byte(k))) {
			return k
		}
	}
}

// TestScalableProducerSealInFlight: messages of a key are in flight to a segment when it is
// sealed (split); the first fails with TopicTerminated, and the producer learns the new
// layout, while a second is still in flight. A later message of the key, given meanwhile,
// must not reach the child before the second's failure is re-sent there: a consumer reading
// the parent and then the children (a stream consumer's order) sees the key's messages in
// SendAsync order. The timing is the test's: the fake answers each send when told, and a
// message to the other, unaffected segment is the barrier showing the producer handled the
// later message before the second failure arrives.
func TestScalableProducerSealInFlight(t *testing.T) {
	tp := layout.Topic{Tenant: "t", Namespace: "ns", Name: "x"}
	v1 := layout.Layout{Epoch: 1, Subscriptions: []string{}, Segments: []layout.Segment{
		{ID: 0, Range: layout.HashRange{Start: 0, End: 0x7fff}, State: layout.StateActive},
		{ID: 1, Range: layout.HashRange{Start: 0x8000, End: 0xffff}, State: layout.StateActive},
	}}
	v2 := v1
	v2.Epoch = 2
	v2.Segments = []layout.Segment{
		{ID: 0, Range: layout.HashRange{Start: 0, End: 0x7fff}, State: layout.StateSealed, Children: []layout.SegmentID{2, 3}},
		v1.Segments[1],
		{ID: 2, Range: layout.HashRange{Start: 0, End: 0x3fff}, State: layout.StateActive, Parents: []layout.SegmentID{0}},
		{ID: 3, Range: layout.HashRange{Start: 0x4000, End: 0x7fff}, State: layout.StateActive, Parents: []layout.SegmentID{0}},
	}
	f := newFakeSegs(v1)
	p := newScalableProducer(nil, tp, ScalableProducerOptions{MaxPendingMessages: 100})
	p.newSeg, p.fetch = f.newSeg, f.fetch
	p.start(v1)
	defer p.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	name := func(id layout.SegmentID) string { s, _ := v2.Segment(id); return tp.SegmentName(s) }
	k := keyIn(layout.HashRange{Start: 0, End: 0x3fff}, "k") // in segment 0, then child 2
	j := keyIn(layout.HashRange{Start: 0x8000, End: 0xffff}, "j")
	f.mu.Lock()
	f.auto[name(1)], f.auto[name(2)], f.auto[name(3)] = true, true, true
	f.mu.Unlock()

	var mu sync.Mutex
	results := map[string]string{} // payload → segment or error
	send := func(key string, seq int) {
		t.Helper()
		payload := key + ":" + strconv.Itoa(seq)
		if err := p.SendAsync(ctx, &ProducerMessage{Key: key, Payload: []byte(payload)}, func(seg string, _ MessageID, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				seg = "error: " + err.Error()
			}
			results[payload] = seg
		}); err != nil {
			t.Fatal(err)
		}
	}

	send(k, 0)
	waitFor(t, "k:0 in flight", func() bool { return f.pending(name(0)) == 1 })
	f.answer(t, name(0), nil) // k:0 persisted on segment 0
	send(k, 1)
	send(k, 2)
	waitFor(t, "k:1 and k:2 in flight", func() bool { return f.pending(name(0)) == 2 })

	// The split: segment 0 is sealed, the new layout is there, k:1 fails.
	f.mu.Lock()
	f.l, f.sealed[name(0)] = v2, true
	f.mu.Unlock()
	f.answer(t, name(0), errTerminated)
	waitFor(t, "the producer at layout 2 with child 2's producer", func() bool {
		var ok bool
		p.inspect(func(st *prodState) { ok = st.l.Epoch == 2 && st.segs[2] != nil && st.segs[2].prod != nil })
		return ok
	})
	send(k, 3)
	send(j, 0) // the barrier: handled after k:3
	waitFor(t, "j:0 persisted", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return results[j+":0"] != ""
	})
	f.answer(t, name(0), errTerminated) // k:2 fails only now
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	// A stream consumer reads segment 0 to its end, then its children.
	var got []string
	f.mu.Lock()
	for _, id := range []layout.SegmentID{0, 2, 3} {
		for _, m := range f.segs[name(id)].stored {
			if strings.HasPrefix(m, k+":") {
				got = append(got, m)
			}
		}
	}
	f.mu.Unlock()
	want := []string{k + ":0", k + ":1", k + ":2", k + ":3"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("key %s consumed as %v, want %v", k, got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range want[1:] {
		if results[m] != name(2) {
			t.Errorf("%s acknowledged as %q, want %s", m, results[m], name(2))
		}
	}
	if results[k+":0"] != name(0) {
		t.Errorf("%s:0 acknowledged as %q", k, results[k+":0"])
	}
}

// TestScalableProducerWindowAndClose: SendAsync blocks at MaxPendingMessages until one is
// acknowledged (or ctx ends); Flush waits for the messages given before it; Close fails the
// messages still in flight with ErrClosed, and later calls fail with ErrClosed.
func TestScalableProducerWindowAndClose(t *testing.T) {
	tp := layout.Topic{Tenant: "t", Namespace: "ns", Name: "w"}
	seg := layout.Segment{ID: 0, Range: layout.HashRange{Start: 0, End: layout.MaxHash}, State: layout.StateActive}
	l := layout.Layout{Epoch: 1, Subscriptions: []string{}, Segments: []layout.Segment{seg}}
	f := newFakeSegs(l)
	p := newScalableProducer(nil, tp, ScalableProducerOptions{MaxPendingMessages: 2})
	p.newSeg, p.fetch = f.newSeg, f.fetch
	p.start(l)
	name := tp.SegmentName(seg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 10)
	cb := func(_ string, _ MessageID, err error) { errs <- err }
	for i := range 2 {
		if err := p.SendAsync(ctx, &ProducerMessage{Payload: []byte{byte(i)}}, cb); err != nil {
			t.Fatal(err)
		}
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if err := p.SendAsync(short, &ProducerMessage{Payload: []byte{2}}, cb); err != context.DeadlineExceeded {
		t.Fatalf("a third SendAsync with a window of 2: %v, want to block until ctx ends", err)
	}
	waitFor(t, "two sends in flight", func() bool { return f.pending(name) == 2 })
	f.answer(t, name, nil)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if err := p.SendAsync(ctx, &ProducerMessage{Payload: []byte{3}}, cb); err != nil { // a token is free again
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- p.Flush(ctx) }()
	waitFor(t, "two sends in flight", func() bool { return f.pending(name) == 2 })
	f.answer(t, name, nil)
	select {
	case err := <-flushed:
		t.Fatalf("Flush returned (%v) with a message in flight", err)
	case err := <-errs:
		if err != nil {
			t.Fatal(err)
		}
	}
	closeCtx, cancelClose := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelClose()
	if err := p.Close(closeCtx); err != nil { // the flush gives up at closeCtx; the rest fails
		t.Fatal(err)
	}
	if err := <-flushed; err != ErrClosed && err != nil {
		t.Fatalf("Flush across Close: %v", err)
	}
	if err := <-errs; err != ErrClosed {
		t.Fatalf("the message in flight at Close: %v, want ErrClosed", err)
	}
	if err := p.SendAsync(ctx, &ProducerMessage{Payload: []byte{4}}, cb); err != ErrClosed {
		t.Fatalf("SendAsync after Close: %v", err)
	}
	if err := p.Flush(ctx); err != ErrClosed {
		t.Fatalf("Flush after Close: %v", err)
	}
}
