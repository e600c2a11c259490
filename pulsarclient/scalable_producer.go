package pulsarclient

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/internal/inbox"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// ScalableProducerOptions configures a ScalableProducer.
type ScalableProducerOptions struct {
	ScalableOptions
	// Topic is topic://tenant/ns/name.
	Topic string
	// Producer configures each segment's producer (its Topic is ignored; its
	// MaxPendingMessages is raised to MaxPendingMessages).
	Producer ProducerOptions
	// MaxPendingMessages bounds the messages sent and not yet acknowledged or failed, over
	// every segment (the pipelining window): SendAsync blocks while it is reached. Default
	// 1000.
	MaxPendingMessages int
}

// ScalableProducer produces to a scalable topic: a keyed message goes to the active segment
// whose range holds the key's hash (layout.KeyHash, murmur3 as upstream), an unkeyed one to
// the active segments in turn. SendAsync pipelines up to MaxPendingMessages messages.
//
// When a segment is sealed (TopicTerminated, after a split or merge), its messages in
// flight fail; the producer holds every message routed to the segment and to any segment
// overlapping it, fetches the layout until it shows the seal, waits until no message to the
// sealed segment is in flight any more, and only then sends the failed messages and the
// held ones to the segments of the new layout, in the order they were given to SendAsync.
// So a key's messages keep their SendAsync order across splits and merges (each persisted
// message of a sealed segment precedes its children's, which stream consumers read after).
// Safe for concurrent use; the order of messages given concurrently is the callers'.
//
// Goroutines: run owns the routing state (prodState), fed by the inbox in: requests,
// segment producers' outcomes, created producers and fetched layouts. One goroutine per
// segment producer being created and one fetching the layout while a seal is being
// resolved post their outcome to in. Close stops them all and waits.
type ScalableProducer struct {
	cl     *Client
	watch  *layoutWatch // the DAG watch (scalable_watch.go); nil in tests
	topic  layout.Topic
	opts   ProducerOptions
	window chan struct{} // a token per pending message
	in     *inbox.Queue[func()]
	ctx    context.Context // the producer's life: canceled by Close
	cancel context.CancelFunc
	stop   chan struct{} // closed by Close: run ends
	done   chan struct{} // closed when run has ended
	once   sync.Once
	wg     sync.WaitGroup // the creating and fetching goroutines

	// Seams for tests: make a segment's producer, fetch the layout, wait for a layout newer
	// than an epoch (nil: fetch is polled).
	newSeg func(ctx context.Context, segment string) (segSender, error)
	fetch  func(ctx context.Context) (layout.Layout, error)
	newer  func(ctx context.Context, epoch int64) (layout.Layout, error)

	mu struct {
		sync.Mutex
		l layout.Layout // the layout run routes by
	}

	st prodState // owned by run
}

// segSender is what the producer needs of a segment's producer (*Producer; a fake in tests).
type segSender interface {
	SendAsync(ctx context.Context, msg *ProducerMessage, cb func(MessageID, error)) error
	Close(ctx context.Context) error
}

// prodState is the routing state, owned by run.
//
// Invariants: a message goes to a segment's producer only when the segment is active in
// l, not sealing, and no segment of segs that is gone (not active in l) overlaps it; each
// segOut's queue is in arrival order (n), and its messages are sent from the front.
type prodState struct {
	l           layout.Layout
	active      []layout.Segment // l.Active()
	segs        map[layout.SegmentID]*segOut
	n           uint64 // arrival number of the last request
	rr          uint64 // round-robin for unkeyed messages
	outstanding int    // requests with n > 0 not finished
	flushes     []*flushWait
	fetching    bool // a layout fetch is running
	closed      bool
}

// segOut is one segment's producer and the messages for it.
type segOut struct {
	seg      layout.Segment
	name     string
	prod     segSender // nil while creating
	creating bool
	sealing  bool // a send failed with TopicTerminated: waiting for a layout showing the seal
	gone     bool // not active in the installed layout: resolved once nothing is in flight
	inflight int
	failed   []*scalReq // sent and failed because the segment is sealed, to re-route
	queue    []*scalReq // not sent yet, in arrival order
}

type scalReq struct {
	msg *ProducerMessage
	cb  func(string, MessageID, error)
	n   uint64 // arrival number (0: never admitted)
}

type flushWait struct {
	n    uint64 // requests up to this arrival number
	left int
	ch   chan struct{}
}

// CreateScalableProducer creates a producer of a scalable topic.
func (cl *Client) CreateScalableProducer(ctx context.Context, o ScalableProducerOptions) (*ScalableProducer, error) {
	t, err := layout.ParseTopic(o.Topic)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotScalable, err)
	}
	w, err := cl.watchLayout(ctx, t)
	if err != nil {
		return nil, err
	}
	if o.MaxPendingMessages <= 0 {
		o.MaxPendingMessages = 1000
	}
	p := newScalableProducer(cl, t, o)
	p.watch = w
	p.fetch = func(context.Context) (layout.Layout, error) { return w.Layout(), nil }
	p.newer = w.newer
	p.newSeg = func(ctx context.Context, segment string) (segSender, error) {
		po := o.Producer
		po.Topic = segment
		po.MaxPendingMessages = max(po.MaxPendingMessages, o.MaxPendingMessages)
		prod, err := cl.CreateProducer(ctx, po)
		if err != nil {
			return nil, err
		}
		return prod, nil
	}
	l, err := p.fetch(ctx)
	if err != nil {
		w.Close()
		return nil, err
	}
	p.start(l)
	return p, nil
}

func newScalableProducer(cl *Client, t layout.Topic, o ScalableProducerOptions) *ScalableProducer {
	ctx, cancel := context.WithCancel(context.Background())
	return &ScalableProducer{cl: cl, topic: t, opts: o.Producer, window: make(chan struct{}, o.MaxPendingMessages),
		in: inbox.New[func()](), ctx: ctx, cancel: cancel, stop: make(chan struct{}), done: make(chan struct{})}
}

func (p *ScalableProducer) start(l layout.Layout) {
	p.st = prodState{l: l, active: l.Active(), segs: map[layout.SegmentID]*segOut{}}
	p.mu.l = l
	go p.run()
}

// Layout returns the layout the producer routes by.
func (p *ScalableProducer) Layout() layout.Layout {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.l
}

// SendAsync queues msg and returns once it is queued (blocking while MaxPendingMessages
// are pending, until ctx ends); cb is called once with the segment's name and the id when a
// segment acknowledged it, or with the error. cb runs on the producer's goroutine: it must
// be quick and must not call Send, SendAsync, Flush or Close.
func (p *ScalableProducer) SendAsync(ctx context.Context, msg *ProducerMessage, cb func(segment string, id MessageID, err error)) error {
	if msg == nil {
		return errors.New("pulsarclient: nil message")
	}
	select {
	case <-p.stop:
		return ErrClosed
	default:
	}
	select {
	case p.window <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.stop:
		return ErrClosed
	}
	r := &scalReq{msg: msg, cb: cb}
	if !p.in.Push(func() { p.onRequest(r) }) {
		<-p.window
		return ErrClosed
	}
	return nil
}

// Send sends msg and waits for its receipt; it returns the segment's name with the id.
func (p *ScalableProducer) Send(ctx context.Context, msg *ProducerMessage) (string, MessageID, error) {
	type result struct {
		seg string
		id  MessageID
		err error
	}
	ch := make(chan result, 1)
	if err := p.SendAsync(ctx, msg, func(seg string, id MessageID, err error) { ch <- result{seg, id, err} }); err != nil {
		return "", MessageID{}, err
	}
	select {
	case r := <-ch:
		return r.seg, r.id, r.err
	case <-ctx.Done():
		return "", MessageID{}, ctx.Err()
	}
}

// Flush waits until every message given to SendAsync before it is acknowledged or failed.
func (p *ScalableProducer) Flush(ctx context.Context) error {
	ch := make(chan struct{})
	if !p.in.Push(func() { p.onFlush(ch) }) {
		return ErrClosed
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		return ErrClosed
	}
}

// Close flushes (until ctx ends), then fails what is left with ErrClosed and closes the
// segments' producers. Idempotent.
func (p *ScalableProducer) Close(ctx context.Context) error {
	_ = p.Flush(ctx)
	p.once.Do(func() { close(p.stop) })
	<-p.done
	return nil
}

// post runs fn on run; false once run has stopped.
func (p *ScalableProducer) post(fn func()) bool { return p.in.Push(fn) }

func (p *ScalableProducer) run() {
	defer close(p.done)
	var buf []func()
	for {
		select {
		case <-p.in.Signal():
			buf = p.in.Drain(buf)
			for _, fn := range buf {
				fn()
			}
		case <-p.stop:
			p.shutdown()
			return
		}
	}
}

func (p *ScalableProducer) shutdown() {
	st := &p.st
	st.closed = true
	p.cancel()
	for _, fn := range p.in.Close() {
		fn()
	}
	var prods []segSender
	for _, so := range st.segs {
		for _, r := range append(so.failed, so.queue...) {
			p.finish(r, "", MessageID{}, ErrClosed)
		}
		so.failed, so.queue = nil, nil
		if so.prod != nil {
			prods = append(prods, so.prod)
		}
	}
	st.segs = map[layout.SegmentID]*segOut{}
	for _, w := range st.flushes {
		close(w.ch)
	}
	st.flushes = nil
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, prod := range prods {
		_ = prod.Close(ctx) // fails its pending: their outcomes finish them (post fails now)
	}
	p.wg.Wait()
	if p.watch != nil {
		p.watch.Close()
	}
}

// finish ends r: its callback, its window token, the flushes waiting for it.
func (p *ScalableProducer) finish(r *scalReq, seg string, id MessageID, err error) {
	if r.cb != nil {
		r.cb(seg, id, err)
	}
	<-p.window
	if r.n == 0 {
		return
	}
	st := &p.st
	st.outstanding--
	st.flushes = slices.DeleteFunc(st.flushes, func(w *flushWait) bool {
		if r.n > w.n {
			return false
		}
		w.left--
		if w.left == 0 {
			close(w.ch)
			return true
		}
		return false
	})
}

// finishAfterStop ends r from a segment producer's goroutine once run has stopped: its
// callback and its window token only (the flushes are released by shutdown).
func (p *ScalableProducer) finishAfterStop(r *scalReq, seg string, id MessageID, err error) {
	if r.cb != nil {
		r.cb(seg, id, err)
	}
	<-p.window
}

func (p *ScalableProducer) onFlush(ch chan struct{}) {
	st := &p.st
	if st.outstanding == 0 || st.closed {
		close(ch)
		return
	}
	st.flushes = append(st.flushes, &flushWait{n: st.n, left: st.outstanding, ch: ch})
}

func (p *ScalableProducer) onRequest(r *scalReq) {
	st := &p.st
	if st.closed {
		p.finish(r, "", MessageID{}, ErrClosed)
		return
	}
	st.n++
	r.n = st.n
	st.outstanding++
	so, err := p.target(r)
	if err != nil {
		p.finish(r, "", MessageID{}, err)
		return
	}
	so.queue = append(so.queue, r)
	p.flush(so)
}

// target returns the segOut of the active segment r goes to, created if needed.
func (p *ScalableProducer) target(r *scalReq) (*segOut, error) {
	st := &p.st
	var seg layout.Segment
	var ok bool
	if r.msg.Key != "" {
		seg, ok = st.l.FindActive(layout.KeyHash([]byte(r.msg.Key)))
	} else if act := st.active; len(act) > 0 {
		st.rr++
		seg, ok = act[st.rr%uint64(len(act))], true
	}
	if !ok {
		return nil, errors.New("pulsarclient: no active segment for the message in the layout")
	}
	return p.segOut(seg), nil
}

func (p *ScalableProducer) segOut(seg layout.Segment) *segOut {
	st := &p.st
	if so := st.segs[seg.ID]; so != nil {
		return so
	}
	so := &segOut{seg: seg, name: p.topic.SegmentName(seg), creating: true}
	st.segs[seg.ID] = so
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		prod, err := p.newSeg(p.ctx, so.name)
		if !p.post(func() { p.onCreated(so, prod, err) }) && prod != nil {
			_ = prod.Close(context.Background())
		}
	}()
	return so
}

func (p *ScalableProducer) onCreated(so *segOut, prod segSender, err error) {
	st := &p.st
	so.creating = false
	if st.segs[so.seg.ID] != so {
		if prod != nil {
			go prod.Close(context.Background())
		}
		return
	}
	switch {
	case err == nil:
		so.prod = prod
	case isTerminated(err):
		so.sealing = true
		p.fetchLayout()
	default:
		delete(st.segs, so.seg.ID) // the next message tries again
		for _, r := range so.queue {
			p.finish(r, "", MessageID{}, err)
		}
		so.queue = nil
		return
	}
	p.resolve(so)
	p.flushAll()
}

// sendable reports whether so's queue may be sent now (prodState's invariant).
func (p *ScalableProducer) sendable(so *segOut) bool {
	if so.prod == nil || so.sealing || so.gone {
		return false
	}
	for _, o := range p.st.segs {
		if o != so && o.gone && o.seg.Range.Overlaps(so.seg.Range) {
			return false
		}
	}
	return true
}

// flush sends so's queue while it may.
func (p *ScalableProducer) flush(so *segOut) {
	for len(so.queue) > 0 && p.sendable(so) {
		r := so.queue[0]
		so.queue = so.queue[1:]
		so.inflight++
		err := so.prod.SendAsync(p.ctx, r.msg, func(id MessageID, err error) {
			if !p.post(func() { p.onSent(so, r, id, err) }) { // run has stopped: prodState is gone
				if err != nil {
					p.finishAfterStop(r, "", MessageID{}, ErrClosed)
				} else {
					p.finishAfterStop(r, so.name, id, nil)
				}
			}
		})
		if err != nil {
			p.onSent(so, r, MessageID{}, err)
		}
	}
}

func (p *ScalableProducer) flushAll() {
	for _, id := range slices.Sorted(maps.Keys(p.st.segs)) {
		if so := p.st.segs[id]; so != nil {
			p.flush(so)
		}
	}
}

func (p *ScalableProducer) onSent(so *segOut, r *scalReq, id MessageID, err error) {
	so.inflight--
	switch {
	case err == nil:
		p.finish(r, so.name, id, nil)
	case isTerminated(err) || errors.Is(err, ErrClosed):
		so.failed = append(so.failed, r)
		if !so.gone && !so.sealing {
			so.sealing = true
			p.fetchLayout()
		}
	default:
		p.finish(r, "", MessageID{}, err)
	}
	p.resolve(so)
}

// resolve re-routes a gone segment's failed and held messages once none is in flight to it:
// into the queues of the installed layout's segments, in arrival order.
func (p *ScalableProducer) resolve(so *segOut) {
	st := &p.st
	if !so.gone || so.inflight > 0 || so.creating || st.segs[so.seg.ID] != so {
		return
	}
	delete(st.segs, so.seg.ID)
	if so.prod != nil {
		prod := so.prod
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			_ = prod.Close(context.Background())
		}()
	}
	moved := map[*segOut]bool{}
	for _, r := range append(so.failed, so.queue...) {
		to, err := p.target(r)
		if err != nil {
			p.finish(r, "", MessageID{}, err)
			continue
		}
		to.queue = append(to.queue, r)
		moved[to] = true
	}
	so.failed, so.queue = nil, nil
	for to := range moved {
		slices.SortFunc(to.queue, func(a, b *scalReq) int { return cmp.Compare(a.n, b.n) })
	}
	p.flushAll()
}

// fetchLayout fetches the layout until one newer than the installed one, and installs it.
func (p *ScalableProducer) fetchLayout() {
	st := &p.st
	if st.fetching || st.closed {
		return
	}
	st.fetching = true
	cur := st.l.Epoch
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for delay := 5 * time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) { // a layout read is cheap; a seal is waited for
			if p.newer != nil { // the DAG watch pushes every change: wait for it
				if next, err := p.newer(p.ctx, cur); err == nil {
					p.post(func() { p.onLayout(next) })
					return
				}
			}
			next, err := p.fetch(p.ctx)
			if err == nil && next.Epoch > cur {
				p.post(func() { p.onLayout(next) })
				return
			}
			if !backoff.Sleep(p.ctx, delay) {
				return
			}
		}
	}()
}

func (p *ScalableProducer) onLayout(next layout.Layout) {
	st := &p.st
	st.fetching = false
	if next.Epoch > st.l.Epoch {
		st.l, st.active = next, next.Active()
		p.mu.Lock()
		p.mu.l = next
		p.mu.Unlock()
		var gone []*segOut
		for _, so := range st.segs {
			if s, ok := next.Segment(so.seg.ID); !ok || s.State != layout.StateActive {
				so.gone = true
				gone = append(gone, so)
			}
		}
		// Start the producers of the segments taking over while the gone ones resolve.
		for _, so := range gone {
			for _, s := range next.Active() {
				if s.Range.Overlaps(so.seg.Range) {
					p.segOut(s)
				}
			}
		}
		for _, so := range gone {
			p.resolve(so)
		}
	}
	for _, so := range st.segs {
		if so.sealing && !so.gone {
			p.fetchLayout() // the layout does not show the seal yet
			break
		}
	}
	p.flushAll()
}

func isTerminated(err error) bool {
	var se *ServerError
	return errors.As(err, &se) && se.Code.String() == "TopicTerminatedError"
}
