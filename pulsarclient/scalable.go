package pulsarclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// Scalable topics (topic://tenant/ns/name, upstream PIP-460): a scalable topic is a DAG of
// segments, each an ordinary topic (segment://tenant/ns/name/<hexStart>-<hexEnd>-<id>). The
// client learns the layout (DAG watch) and a stream consumer's assignments (stream
// subscribe) over the binary protocol (scalable_watch.go), and produces and consumes on the
// segments. The admin API (/admin/v2/scalable/...) serves ScalableLayout, creating a
// consumer's subscription and unregistering a closed stream consumer (the protocol has no
// command for that).

// ErrNotScalable is returned for a topic name that is not topic://tenant/ns/name.
var ErrNotScalable = errors.New("pulsarclient: not a scalable topic name (topic://tenant/namespace/name)")

// IsScalableTopic reports whether name is a scalable topic's (topic://...).
func IsScalableTopic(name string) bool { return strings.HasPrefix(name, "topic://") }

// ScalableOptions says where the admin API is.
type ScalableOptions struct {
	// AdminURL is any broker's admin base URL (http://host:port).
	AdminURL string
	// HTTP is the client for it (nil: one with a 60 s timeout). Authentication, if any, is
	// its transport's.
	HTTP *http.Client
}

// scalableAdmin is the admin API of one scalable topic.
type scalableAdmin struct {
	base string // .../admin/v2/scalable/<tenant>/<ns>/<name>
	http *http.Client
}

func newScalableAdmin(topic string, o ScalableOptions) (*scalableAdmin, layout.Topic, error) {
	t, err := layout.ParseTopic(topic)
	if err != nil {
		return nil, t, fmt.Errorf("%w: %v", ErrNotScalable, err)
	}
	if o.AdminURL == "" {
		return nil, t, errors.New("pulsarclient: ScalableOptions.AdminURL is required for scalable topics")
	}
	hc := o.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	base := strings.TrimSuffix(o.AdminURL, "/") + "/admin/v2/scalable/" + url.PathEscape(t.Tenant) + "/" +
		url.PathEscape(t.Namespace) + "/" + url.PathEscape(t.Name)
	return &scalableAdmin{base: base, http: hc}, t, nil
}

// AdminError is a refused admin call.
type AdminError struct {
	Status int
	Reason string
}

func (e *AdminError) Error() string {
	return fmt.Sprintf("pulsarclient: admin: %d %s", e.Status, e.Reason)
}

func (a *scalableAdmin) do(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, bytes.NewReader(nil))
	if err != nil {
		return err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode/100 != 2 {
		var e struct{ Reason string }
		_ = json.Unmarshal(b, &e)
		if e.Reason == "" {
			e.Reason = strings.TrimSpace(string(b))
		}
		return &AdminError{Status: resp.StatusCode, Reason: e.Reason}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func (a *scalableAdmin) layout(ctx context.Context) (layout.Layout, error) {
	var l layout.Layout
	err := a.do(ctx, http.MethodGet, "", &l)
	return l, err
}

// ScalableLayout returns the layout of scalable topic topic.
func ScalableLayout(ctx context.Context, topic string, o ScalableOptions) (layout.Layout, error) {
	a, _, err := newScalableAdmin(topic, o)
	if err != nil {
		return layout.Layout{}, err
	}
	return a.layout(ctx)
}

// ScalableConsumerOptions configures a stream or queue consumer of a scalable topic.
type ScalableConsumerOptions struct {
	ScalableOptions
	// Topic is topic://tenant/ns/name; Subscription is created if missing.
	Topic, Subscription string
	// Name identifies a stream consumer in its subscription (required for stream consumers:
	// a reconnect under the same name keeps its assignment).
	Name string
	// ReceiverQueueSize is each segment consumer's (default 1000).
	ReceiverQueueSize int
	// PollWait is unused: assignments and layouts are pushed by the broker.
	PollWait time.Duration
}

// ScalableConsumer consumes a scalable topic: a stream consumer (SubscribeStream) reads the
// segments the topic's controller assigns it, exclusively, and a segment only once every
// ancestor is drained for the subscription, so a key's messages arrive in order across
// splits and merges provided the application acknowledges each message after processing it;
// a queue consumer (SubscribeQueue) reads every segment, shared, without order. Receive and
// Ack are safe for concurrent use.
//
// Goroutines: run (follows the stream consumer's pushed assignments, or the queue
// consumer's DAG watch), the watch's own, and one per attached segment (subscribes with retries, then
// moves its messages to Receive's queue); Close stops them all and waits.
type ScalableConsumer struct {
	cl     *Client
	adm    *scalableAdmin
	topic  layout.Topic
	opts   ScalableConsumerOptions
	stream bool
	assign *assignmentWatch // stream consumers
	watch  *layoutWatch     // queue consumers
	msgs   chan *Message
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{}

	mu struct {
		sync.Mutex
		segs    map[layout.SegmentID]*segConsumer
		byTopic map[string]*Consumer
		version uint64 // the newest assignment's (stream consumers)
	}
}

type segConsumer struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// SubscribeStream creates an ordered (stream) consumer of a scalable topic.
func (cl *Client) SubscribeStream(ctx context.Context, o ScalableConsumerOptions) (*ScalableConsumer, error) {
	if o.Name == "" {
		return nil, errors.New("pulsarclient: a stream consumer needs a Name")
	}
	return cl.subscribeScalable(ctx, o, true)
}

// SubscribeQueue creates an unordered (queue) consumer of a scalable topic.
func (cl *Client) SubscribeQueue(ctx context.Context, o ScalableConsumerOptions) (*ScalableConsumer, error) {
	return cl.subscribeScalable(ctx, o, false)
}

func (cl *Client) subscribeScalable(ctx context.Context, o ScalableConsumerOptions, stream bool) (*ScalableConsumer, error) {
	if o.Subscription == "" {
		return nil, errors.New("pulsarclient: a subscription name is required")
	}
	adm, t, err := newScalableAdmin(o.Topic, o.ScalableOptions)
	if err != nil {
		return nil, err
	}
	err = adm.do(ctx, http.MethodPut, "/subscription/"+url.PathEscape(o.Subscription), nil)
	var ae *AdminError
	if err != nil && !(errors.As(err, &ae) && ae.Status == http.StatusConflict) {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	c := &ScalableConsumer{cl: cl, adm: adm, topic: t, opts: o, stream: stream,
		msgs: make(chan *Message), cancel: cancel, done: make(chan struct{})}
	c.mu.segs, c.mu.byTopic = map[layout.SegmentID]*segConsumer{}, map[string]*Consumer{}
	if stream {
		c.assign, err = cl.watchAssignment(ctx, rctx, t.String(), o.Subscription, o.Name)
	} else {
		c.watch, err = cl.watchLayout(ctx, t)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	go c.run(rctx)
	return c, nil
}

func (c *ScalableConsumer) consumerPath() string {
	return "/subscription/" + url.PathEscape(c.opts.Subscription) + "/consumers/" + url.PathEscape(c.opts.Name)
}

// run follows the assignment (stream) or the layout (queue) until Close.
func (c *ScalableConsumer) run(ctx context.Context) {
	defer close(c.done)
	if c.stream {
		for a := range c.assign.out {
			c.mu.Lock()
			c.mu.version = max(c.mu.version, a.version)
			c.mu.Unlock()
			c.attach(ctx, a.segs)
		}
		return
	}
	defer c.watch.Close()
	for epoch := int64(-1); ; {
		l, err := c.watch.newer(ctx, epoch)
		if err != nil {
			return
		}
		epoch = l.Epoch
		segs := make([]assignedSegment, 0, len(l.Segments))
		for _, s := range l.Segments {
			segs = append(segs, assignedSegment{id: s.ID, topic: c.topic.SegmentName(s)})
		}
		c.attach(ctx, segs)
	}
}

// attach makes the attached segments exactly segs: it detaches the others first.
func (c *ScalableConsumer) attach(ctx context.Context, segs []assignedSegment) {
	want := map[layout.SegmentID]bool{}
	for _, s := range segs {
		want[s.id] = true
	}
	c.mu.Lock()
	var gone []*segConsumer
	for id, sc := range c.mu.segs {
		if !want[id] {
			gone = append(gone, sc)
			delete(c.mu.segs, id)
		}
	}
	c.mu.Unlock()
	for _, sc := range gone {
		sc.cancel()
		<-sc.done
	}
	for _, s := range segs {
		c.mu.Lock()
		if c.mu.segs[s.id] == nil && ctx.Err() == nil {
			sctx, cancel := context.WithCancel(ctx)
			sc := &segConsumer{cancel: cancel, done: make(chan struct{})}
			c.mu.segs[s.id] = sc
			c.wg.Add(1)
			go c.segment(sctx, sc, s.topic)
		}
		c.mu.Unlock()
	}
}

// segment subscribes to one segment (retrying: its previous consumer may still hold it) and
// moves its messages to Receive until ctx ends.
func (c *ScalableConsumer) segment(ctx context.Context, sc *segConsumer, name string) {
	defer c.wg.Done()
	defer close(sc.done)
	typ := Exclusive
	if !c.stream {
		typ = Shared
	}
	var cons *Consumer
	for delay := 10 * time.Millisecond; cons == nil; delay = min(2*delay, time.Second) {
		var err error
		cons, err = c.cl.Subscribe(ctx, ConsumerOptions{Topic: name, Subscription: c.opts.Subscription, Type: typ,
			Name: c.opts.Name, ReceiverQueueSize: c.opts.ReceiverQueueSize, InitialPosition: Earliest,
			metadata: c.attachMetadata})
		if err != nil && !backoff.Sleep(ctx, delay) {
			return
		}
	}
	c.mu.Lock()
	c.mu.byTopic[name] = cons
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.mu.byTopic, name)
		c.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = cons.Close(cctx)
		cancel()
	}()
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			return
		}
		select {
		case c.msgs <- m:
		case <-ctx.Done():
			return
		}
	}
}

// attachMetadata names the newest assignment's version at each (re)subscribe of a segment:
// a segment's broker refuses it while below the segment's fence (a seek of an ancestor
// withdrew the segment; layout.AssignmentMetadataKey).
func (c *ScalableConsumer) attachMetadata() map[string]string {
	if !c.stream {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return map[string]string{layout.AssignmentMetadataKey: strconv.FormatUint(c.mu.version, 10)}
}

// Receive returns the next message (its Topic is its segment's name).
func (c *ScalableConsumer) Receive(ctx context.Context) (*Message, error) {
	select {
	case m := <-c.msgs:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		return nil, ErrClosed
	}
}

// Ack acknowledges m on its segment; a message of a segment no longer attached is not
// acknowledged (ErrClosed: it is delivered again to whoever reads the segment now).
func (c *ScalableConsumer) Ack(m *Message) error {
	c.mu.Lock()
	cons := c.mu.byTopic[m.Topic]
	c.mu.Unlock()
	if cons == nil {
		return ErrClosed
	}
	return cons.Ack(m)
}

// Segments returns the segments attached now.
func (c *ScalableConsumer) Segments() []layout.SegmentID {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]layout.SegmentID, 0, len(c.mu.segs))
	for id := range c.mu.segs {
		out = append(out, id)
	}
	return out
}

// Close detaches every segment and, for a stream consumer, unregisters it (its segments go
// to the subscription's other consumers at once).
func (c *ScalableConsumer) Close(ctx context.Context) error {
	c.cancel()
	<-c.done
	c.mu.Lock()
	segs := c.mu.segs
	c.mu.segs = map[layout.SegmentID]*segConsumer{}
	c.mu.Unlock()
	for _, sc := range segs {
		sc.cancel()
	}
	c.wg.Wait()
	if c.stream {
		return c.adm.do(ctx, http.MethodDelete, c.consumerPath(), nil)
	}
	return nil
}
