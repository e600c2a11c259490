package pulsarclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// ScalableProducerOptions configures a ScalableProducer.
type ScalableProducerOptions struct {
	ScalableOptions
	// Topic is topic://tenant/ns/name.
	Topic string
	// Producer configures each segment's producer (its Topic is ignored).
	Producer ProducerOptions
}

// ScalableProducer produces to a scalable topic: a keyed message goes to the active segment
// whose range holds the key's hash (layout.KeyHash, murmur3 as upstream), an unkeyed one to
// the active segments in turn. When a segment is sealed (TopicTerminated, after a split or
// merge), the producer waits for the layout showing the seal (its DAG watch session
// pushes every change) and sends to the new segment: a key's messages sent one after the other keep their order across splits. Safe
// for concurrent use; the order of messages sent concurrently is the caller's.
type ScalableProducer struct {
	cl    *Client
	watch *layoutWatch // the DAG watch (scalable_watch.go)
	topic layout.Topic
	opts  ProducerOptions
	rr    atomic.Uint64

	mu struct {
		sync.Mutex
		l      layout.Layout
		prods  map[layout.SegmentID]*Producer
		closed bool
	}
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
	p := &ScalableProducer{cl: cl, watch: w, topic: t, opts: o.Producer}
	p.mu.l, p.mu.prods = w.Layout(), map[layout.SegmentID]*Producer{}
	return p, nil
}

// Layout returns the layout the producer routes by.
func (p *ScalableProducer) Layout() layout.Layout {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.l
}

// Send sends msg and waits for its receipt; it returns the segment's name with the id.
func (p *ScalableProducer) Send(ctx context.Context, msg *ProducerMessage) (string, MessageID, error) {
	n := p.rr.Add(1)
	for {
		seg, prod, err := p.route(ctx, msg, n)
		if err != nil {
			return "", MessageID{}, err
		}
		id, err := prod.Send(ctx, msg)
		if err == nil {
			return p.topic.SegmentName(seg), id, nil
		}
		if !IsServerError(err, 0) && !errors.Is(err, ErrClosed) && !isTerminated(err) {
			return "", MessageID{}, err
		}
		if !isTerminated(err) && !errors.Is(err, ErrClosed) {
			return "", MessageID{}, err
		}
		if err := p.sealed(ctx, seg); err != nil {
			return "", MessageID{}, err
		}
	}
}

func isTerminated(err error) bool {
	var se *ServerError
	return errors.As(err, &se) && se.Code.String() == "TopicTerminatedError"
}

// route returns the segment for msg and its producer (created if needed).
func (p *ScalableProducer) route(ctx context.Context, msg *ProducerMessage, n uint64) (layout.Segment, *Producer, error) {
	for {
		p.mu.Lock()
		if p.mu.closed {
			p.mu.Unlock()
			return layout.Segment{}, nil, ErrClosed
		}
		var seg layout.Segment
		if msg.Key != "" {
			seg, _ = p.mu.l.FindActive(layout.KeyHash([]byte(msg.Key)))
		} else if act := p.mu.l.Active(); len(act) > 0 {
			seg = act[n%uint64(len(act))]
		}
		prod := p.mu.prods[seg.ID]
		p.mu.Unlock()
		if prod != nil {
			return seg, prod, nil
		}
		o := p.opts
		o.Topic = p.topic.SegmentName(seg)
		prod, err := p.cl.CreateProducer(ctx, o)
		if isTerminated(err) {
			if err := p.sealed(ctx, seg); err != nil {
				return seg, nil, err
			}
			continue
		}
		if err != nil {
			return seg, nil, err
		}
		p.mu.Lock()
		if cur := p.mu.prods[seg.ID]; cur != nil || p.mu.closed {
			p.mu.Unlock()
			_ = prod.Close(ctx)
			continue
		}
		p.mu.prods[seg.ID] = prod
		p.mu.Unlock()
		return seg, prod, nil
	}
}

// sealed waits for a layout (pushed by the DAG watch) in which seg is no longer active, and
// closes the producers of segments that are not active any more.
func (p *ScalableProducer) sealed(ctx context.Context, seg layout.Segment) error {
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		p.mu.Lock()
		l := p.mu.l
		p.mu.Unlock()
		if s, ok := l.Segment(seg.ID); !ok || s.State != layout.StateActive {
			return nil
		}
		next, err := p.watch.newer(ctx, l.Epoch)
		if err == nil {
			p.install(ctx, next)
			continue
		}
		if !backoff.Sleep(ctx, delay) {
			return ctx.Err()
		}
	}
}

func (p *ScalableProducer) install(ctx context.Context, next layout.Layout) {
	p.mu.Lock()
	if next.Epoch <= p.mu.l.Epoch {
		p.mu.Unlock()
		return
	}
	p.mu.l = next
	var old []*Producer
	for id, prod := range p.mu.prods {
		if s, ok := next.Segment(id); !ok || s.State != layout.StateActive {
			old = append(old, prod)
			delete(p.mu.prods, id)
		}
	}
	p.mu.Unlock()
	for _, prod := range old {
		_ = prod.Close(ctx)
	}
}

// Close closes the segments' producers.
func (p *ScalableProducer) Close(ctx context.Context) error {
	p.watch.Close()
	p.mu.Lock()
	p.mu.closed = true
	prods := p.mu.prods
	p.mu.prods = map[layout.SegmentID]*Producer{}
	p.mu.Unlock()
	var errs []error
	for _, prod := range prods {
		errs = append(errs, prod.Close(ctx))
	}
	return errors.Join(errs...)
}
