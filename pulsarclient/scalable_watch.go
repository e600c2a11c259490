package pulsarclient

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// The scalable-topic protocol (proto/pulsar/doc.go, BaseCommand types 70..78), which the
// client speaks because its CONNECT sets FeatureFlags.supports_scalable_topics, and only to a
// broker whose CONNECTED sets it too (else ErrScalableUnsupported):
//
//   - layoutWatch follows a topic's layout over a DAG watch session
//     (SCALABLE_TOPIC_LOOKUP, then every SCALABLE_TOPIC_UPDATE the broker pushes), on the
//     service URL's connection; it opens a new session when the connection dies.
//   - assignmentWatch follows a stream consumer's assignment: SCALABLE_TOPIC_SUBSCRIBE,
//     answered with the first one, then SCALABLE_TOPIC_ASSIGNMENT_UPDATE pushes; any broker
//     forwards it to the controller's leader. A dead connection subscribes again (the
//     broker registers the consumer anew: its reconnect).
//
// Both keep only the newest value (a layout or an assignment is whole, not a delta) in a
// small mailbox the connection's reader fills without blocking; one goroutine (run) owns
// each session.

// scalableHandlers are a connection's scalable-topic sessions (a leaf lock; the reader
// goroutine calls them and must not block).
type scalableHandlers struct {
	mu        sync.Mutex // guards the maps
	dags      map[uint64]func(*pb.CommandScalableTopicUpdate)
	consumers map[uint64]func(*pb.CommandScalableTopicAssignmentUpdate)
	gone      map[uint64]func(error) // both kinds: told when the connection closes
}

func (h *scalableHandlers) add(id uint64, dag func(*pb.CommandScalableTopicUpdate), as func(*pb.CommandScalableTopicAssignmentUpdate), gone func(error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone == nil {
		h.dags, h.consumers, h.gone = map[uint64]func(*pb.CommandScalableTopicUpdate){},
			map[uint64]func(*pb.CommandScalableTopicAssignmentUpdate){}, map[uint64]func(error){}
	}
	if dag != nil {
		h.dags[id] = dag
	}
	if as != nil {
		h.consumers[id] = as
	}
	h.gone[id] = gone
}

func (h *scalableHandlers) remove(id uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.dags, id)
	delete(h.consumers, id)
	delete(h.gone, id)
}

// dispatch hands a pushed scalable-topic command to its session (reader goroutine).
func (h *scalableHandlers) dispatch(c *conn, cmd *pb.BaseCommand) {
	switch cmd.GetType() {
	case pb.BaseCommand_SCALABLE_TOPIC_UPDATE:
		u := cmd.GetScalableTopicUpdate()
		h.mu.Lock()
		fn := h.dags[u.GetSessionId()]
		h.mu.Unlock()
		if fn != nil {
			fn(u)
		}
	case pb.BaseCommand_SCALABLE_TOPIC_ASSIGNMENT_UPDATE:
		u := cmd.GetScalableTopicAssignmentUpdate()
		h.mu.Lock()
		fn := h.consumers[u.GetConsumerId()]
		h.mu.Unlock()
		if fn != nil {
			fn(u)
		}
	case pb.BaseCommand_SCALABLE_TOPIC_SUBSCRIBE_RESPONSE:
		c.complete(cmd.GetScalableTopicSubscribeResponse().GetRequestId(), cmd)
	default:
		c.log.Debug("pulsarclient: ignoring scalable-topic command", "type", cmd.GetType())
	}
}

// closeAll tells every session that the connection closed with err.
func (h *scalableHandlers) closeAll(err error) {
	h.mu.Lock()
	gone := h.gone
	h.dags, h.consumers, h.gone = nil, nil, nil
	h.mu.Unlock()
	for _, fn := range gone {
		fn(err)
	}
}

// mailbox holds the newest value of a stream of whole values, and wakes one reader.
type mailbox[T any] struct {
	mu    sync.Mutex
	v     T
	err   error // the connection closed (the value is from the old session)
	full  bool
	ready chan struct{} // cap 1
}

func newMailbox[T any]() *mailbox[T] { return &mailbox[T]{ready: make(chan struct{}, 1)} }

func (m *mailbox[T]) put(v T, err error) {
	m.mu.Lock()
	if err != nil {
		m.err = err
	} else {
		m.v, m.full = v, true
	}
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

// take returns the newest value (ok false: none since the last take) and a connection error.
func (m *mailbox[T]) take() (v T, ok bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok, err = m.v, m.full, m.err
	var zero T
	m.v, m.full, m.err = zero, false, nil
	return v, ok, err
}

// layoutWatch follows one scalable topic's layout. Its methods are safe for concurrent use.
type layoutWatch struct {
	cl     *Client
	topic  layout.Topic
	cancel context.CancelFunc
	done   chan struct{}

	mu struct {
		sync.Mutex
		l       layout.Layout
		have    bool
		err     error         // a refusal of the broker (e.g. the topic is deleted): final
		changed chan struct{} // closed and replaced at every new layout or at err
	}
}

// watchLayout opens a DAG watch of t and waits for its first layout.
func (cl *Client) watchLayout(ctx context.Context, t layout.Topic) (*layoutWatch, error) {
	rctx, cancel := context.WithCancel(context.Background())
	w := &layoutWatch{cl: cl, topic: t, cancel: cancel, done: make(chan struct{})}
	w.mu.changed = make(chan struct{})
	go w.run(rctx)
	if _, err := w.newer(ctx, -1); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// Layout returns the newest layout.
func (w *layoutWatch) Layout() layout.Layout {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.l
}

// newer waits for a layout with an epoch above epoch.
func (w *layoutWatch) newer(ctx context.Context, epoch int64) (layout.Layout, error) {
	for {
		w.mu.Lock()
		l, have, err, ch := w.mu.l, w.mu.have, w.mu.err, w.mu.changed
		w.mu.Unlock()
		switch {
		case have && l.Epoch > epoch:
			return l, nil
		case err != nil:
			return layout.Layout{}, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return layout.Layout{}, ctx.Err()
		case <-w.done:
			return layout.Layout{}, ErrClosed
		}
	}
}

// Close ends the session and waits for its goroutine.
func (w *layoutWatch) Close() {
	w.cancel()
	<-w.done
}

func (w *layoutWatch) publish(l layout.Layout, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil && w.mu.have && l.Epoch <= w.mu.l.Epoch {
		return // the same layout again (a new session, or a change of brokers only)
	}
	if err != nil {
		w.mu.err = err
	} else {
		w.mu.l, w.mu.have = l, true
	}
	close(w.mu.changed)
	w.mu.changed = make(chan struct{})
}

// run keeps a session open until ctx ends or the broker refuses the topic.
func (w *layoutWatch) run(ctx context.Context) {
	defer close(w.done)
	pol := reconnectBackoff
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := w.session(ctx)
		var se *ServerError
		if errors.As(err, &se) || errors.Is(err, ErrScalableUnsupported) {
			w.publish(layout.Layout{}, err)
			return
		}
		if ctx.Err() == nil {
			w.cl.log.Debug("pulsarclient: DAG watch session ended", "topic", w.topic, "err", err)
		}
		if !backoff.Sleep(ctx, pol.Delay(attempt)) {
			return
		}
	}
}

// session runs one DAG watch session: it returns a *ServerError the broker answered, or the
// connection's error.
func (w *layoutWatch) session(ctx context.Context) error {
	c, err := w.cl.getConn(ctx, w.cl.svcAddr)
	if err != nil {
		return err
	}
	if !c.scalableOK {
		return ErrScalableUnsupported
	}
	id := w.cl.nextID()
	box := newMailbox[*pb.CommandScalableTopicUpdate]()
	c.scal.add(id, func(u *pb.CommandScalableTopicUpdate) { box.put(u, nil) }, nil,
		func(err error) { box.put(nil, err) })
	defer c.scal.remove(id)
	if c.isClosed() { // closed before the handler was added: it is not told
		return c.err()
	}
	topic := w.topic.String()
	if err := c.write(pulsar.Wrap(&pb.CommandScalableTopicLookup{SessionId: &id, Topic: &topic,
		CreateIfMissing: proto.Bool(false)})); err != nil {
		return err
	}
	defer func() {
		if !c.isClosed() {
			_ = c.write(pulsar.Wrap(&pb.CommandScalableTopicClose{SessionId: &id}))
		}
	}()
	for {
		select {
		case <-box.ready:
		case <-ctx.Done():
			return ctx.Err()
		}
		u, ok, err := box.take()
		if ok {
			if u.Error != nil {
				return serverError(u.GetError(), u.GetMessage())
			}
			l, lerr := dagLayout(u.GetDag())
			if lerr != nil {
				return lerr // a broken DAG: drop the session, open another
			}
			w.publish(l, nil)
		}
		if err != nil {
			return err
		}
	}
}

// dagLayout converts a pushed DAG to the layout the client routes by (the parts a DAG has:
// segments, their ranges, states, parents and children, and the epoch).
func dagLayout(d *pb.ScalableTopicDAG) (layout.Layout, error) {
	if d == nil {
		return layout.Layout{}, fmt.Errorf("%w: SCALABLE_TOPIC_UPDATE without a DAG or an error", ErrProtocol)
	}
	l := layout.Layout{Epoch: int64(d.GetEpoch())}
	ids := func(in []uint64) []layout.SegmentID {
		var out []layout.SegmentID
		for _, id := range in {
			out = append(out, layout.SegmentID(id))
		}
		return out
	}
	for _, s := range d.GetSegments() {
		if s.GetHashStart() > s.GetHashEnd() || s.GetHashEnd() > layout.MaxHash {
			return layout.Layout{}, fmt.Errorf("%w: segment %d's range %x-%x", ErrProtocol, s.GetSegmentId(), s.GetHashStart(), s.GetHashEnd())
		}
		seg := layout.Segment{ID: layout.SegmentID(s.GetSegmentId()),
			Range:    layout.HashRange{Start: uint16(s.GetHashStart()), End: uint16(s.GetHashEnd())},
			State:    layout.StateActive,
			Parents:  ids(s.GetParentIds()),
			Children: ids(s.GetChildIds()), CreatedEpoch: int64(s.GetCreatedAtEpoch()), CreatedMs: int64(s.GetCreatedAtMs()),
			SealedEpoch: int64(s.GetSealedAtEpoch()), SealedMs: int64(s.GetSealedAtMs())}
		if s.GetState() == pb.SegmentState_SEALED {
			seg.State = layout.StateSealed
		}
		l.Segments = append(l.Segments, seg)
		l.NextID = max(l.NextID, seg.ID+1)
	}
	return l, nil
}

// assignment is a stream consumer's assignment: the controller's version of it (named at
// each segment attach, layout.AssignmentMetadataKey) and its segments.
type assignment struct {
	version uint64
	segs    []assignedSegment
}

// assignedSegment is one segment of a stream consumer's assignment.
type assignedSegment struct {
	id    layout.SegmentID
	topic string // its segment:// name
}

// assignmentWatch follows a stream consumer's assignment; its goroutine (run) sends every
// new one to out.
type assignmentWatch struct {
	cl               *Client
	topic, sub, name string
	out              chan assignment
	firstErr         chan error // the first subscribe's outcome (cap 1)
	reportedFirst    bool       // run goroutine only
}

// watchAssignment subscribes stream consumer name of sub on topic and waits for its first
// assignment, which is the first value on the returned channel; run follows it until ctx ends.
func (cl *Client) watchAssignment(ctx, runCtx context.Context, topic, sub, name string) (*assignmentWatch, error) {
	a := &assignmentWatch{cl: cl, topic: topic, sub: sub, name: name, out: make(chan assignment, 1),
		firstErr: make(chan error, 1)}
	go a.run(runCtx)
	select {
	case err := <-a.firstErr:
		if err != nil {
			return nil, err
		}
		return a, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (a *assignmentWatch) run(ctx context.Context) {
	defer close(a.out)
	pol := reconnectBackoff
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := a.session(ctx)
		var se *ServerError
		final := errors.Is(err, ErrScalableUnsupported) || (errors.As(err, &se) && se.Code != pb.ServerError_ServiceNotReady)
		if !a.reportedFirst && final {
			a.reportedFirst = true // refused: no leader-election or connection trouble
			a.firstErr <- err
			return
		}
		if ctx.Err() != nil {
			return
		}
		a.cl.log.Debug("pulsarclient: stream consumer session ended", "topic", a.topic, "consumer", a.name, "err", err)
		if !backoff.Sleep(ctx, pol.Delay(attempt)) {
			return
		}
	}
}

// session subscribes once and follows the pushed assignments until the connection dies.
// The first subscribe's outcome is reported (firstErr) before any value is sent.
func (a *assignmentWatch) session(ctx context.Context) error {
	c, err := a.cl.getConn(ctx, a.cl.svcAddr)
	if err != nil {
		return err
	}
	if !c.scalableOK {
		return ErrScalableUnsupported
	}
	cid, rid := a.cl.nextID(), a.cl.nextID()
	box := newMailbox[*pb.ScalableConsumerAssignment]()
	c.scal.add(cid, nil, func(u *pb.CommandScalableTopicAssignmentUpdate) { box.put(u.GetAssignment(), nil) },
		func(err error) { box.put(nil, err) })
	defer c.scal.remove(cid)
	if c.isClosed() {
		return c.err()
	}
	rctx, cancel := a.cl.opContext(ctx)
	resp, err := c.request(rctx, rid, pulsar.Wrap(&pb.CommandScalableTopicSubscribe{RequestId: &rid, Topic: &a.topic,
		Subscription: &a.sub, ConsumerName: &a.name, ConsumerId: &cid, ConsumerType: pb.ScalableConsumerType_STREAM.Enum()}))
	cancel()
	if err != nil {
		return fmt.Errorf("subscribe stream consumer %s: %w", a.name, err)
	}
	r := resp.GetScalableTopicSubscribeResponse()
	if r == nil {
		return fmt.Errorf("%w: answer to SCALABLE_TOPIC_SUBSCRIBE is %v", ErrProtocol, resp.GetType())
	}
	if r.Error != nil {
		return fmt.Errorf("subscribe stream consumer %s: %w", a.name, serverError(r.GetError(), r.GetMessage()))
	}
	if !a.reportedFirst {
		a.reportedFirst = true
		a.firstErr <- nil
	}
	send := func(as *pb.ScalableConsumerAssignment) bool {
		segs := assignment{version: as.GetAssignmentVersion(), segs: []assignedSegment{}}
		for _, s := range as.GetSegments() {
			segs.segs = append(segs.segs, assignedSegment{id: layout.SegmentID(s.GetSegmentId()), topic: s.GetSegmentTopic()})
		}
		select { // keep only the newest: drop an unread older one
		case <-a.out:
		default:
		}
		select {
		case a.out <- segs:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !send(r.GetAssignment()) {
		return ctx.Err()
	}
	for {
		select {
		case <-box.ready:
		case <-ctx.Done():
			return ctx.Err()
		}
		as, ok, err := box.take()
		if ok && !send(as) {
			return ctx.Err()
		}
		if err != nil {
			return err
		}
	}
}

// WaitLayout waits until the producer's layout has an epoch above epoch (the DAG watch
// pushes every change) and returns it. Safe for concurrent use.
func (p *ScalableProducer) WaitLayout(ctx context.Context, epoch int64) (layout.Layout, error) {
	return p.watch.newer(ctx, epoch)
}
