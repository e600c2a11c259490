package pulsarclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// lookupSeen is a DAG watch session the fake broker was asked to open.
type lookupSeen struct {
	fc *fakeConn
	id uint64
}

func dagUpdate(id, epoch uint64, segs ...*pb.SegmentInfoProto) *pb.BaseCommand {
	return pulsar.Wrap(&pb.CommandScalableTopicUpdate{SessionId: &id, Dag: &pb.ScalableTopicDAG{Epoch: &epoch, Segments: segs}})
}

func segInfo(id uint64, start, end uint32, sealed bool, children ...uint64) *pb.SegmentInfoProto {
	st := pb.SegmentState_ACTIVE
	if sealed {
		st = pb.SegmentState_SEALED
	}
	return &pb.SegmentInfoProto{SegmentId: &id, HashStart: &start, HashEnd: &end, State: st.Enum(), ChildIds: children}
}

// TestLayoutWatch: the client's CONNECT sets supports_scalable_topics; a DAG watch takes
// its first layout from the lookup's answer, follows a pushed split, opens a new session
// when the connection dies (and follows that one), and ends on the broker's refusal.
func TestLayoutWatch(t *testing.T) {
	fb := startFakeBroker(t)
	lookups := make(chan lookupSeen, 4)
	fb.onScalable = func(fc *fakeConn, cmd *pb.BaseCommand) {
		if l := cmd.GetScalableTopicLookup(); l != nil {
			if l.GetTopic() != "topic://public/default/w" || l.GetCreateIfMissing() {
				t.Errorf("lookup %v", l)
			}
			lookups <- lookupSeen{fc, l.GetSessionId()}
		}
	}
	cl := newTestClient(t, fb.url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := func() lookupSeen {
		t.Helper()
		select {
		case l := <-lookups:
			return l
		case <-ctx.Done():
			t.Fatal("no lookup")
		}
		return lookupSeen{}
	}
	type result struct {
		w   *layoutWatch
		err error
	}
	res := make(chan result, 1)
	go func() {
		w, err := cl.watchLayout(ctx, layout.Topic{Tenant: "public", Namespace: "default", Name: "w"})
		res <- result{w, err}
	}()
	s1 := next()
	s1.fc.write(dagUpdate(s1.id, 1, segInfo(0, 0, 0xffff, false)))
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	w := r.w
	defer w.Close()
	fb.mu.Lock()
	flags := fb.connectFlags
	fb.mu.Unlock()
	if len(flags) != 1 || !flags[0].GetSupportsScalableTopics() {
		t.Fatalf("CONNECT feature flags %v", flags)
	}
	if l := w.Layout(); l.Epoch != 1 || len(l.Active()) != 1 {
		t.Fatalf("first layout %+v", l)
	}

	// A pushed split.
	s1.fc.write(dagUpdate(s1.id, 2, segInfo(0, 0, 0xffff, true, 1, 2), segInfo(1, 0, 0x7fff, false), segInfo(2, 0x8000, 0xffff, false)))
	l, err := w.newer(ctx, 1)
	if err != nil || l.Epoch != 2 || len(l.Active()) != 2 {
		t.Fatalf("after the split: %+v %v", l, err)
	}
	if s, _ := l.Segment(0); s.State != layout.StateSealed || len(s.Children) != 2 {
		t.Fatalf("parent after the split: %+v", s)
	}
	if s, ok := l.FindActive(0x9000); !ok || s.ID != 2 {
		t.Fatalf("FindActive(0x9000) = %+v", s)
	}

	// The connection dies: a new session, whose pushes are followed.
	s1.fc.nc.Close()
	s2 := next()
	if s2.id == s1.id {
		t.Fatalf("session id %d reused", s2.id)
	}
	s2.fc.write(dagUpdate(s2.id, 2)) // the same epoch again: ignored
	s2.fc.write(dagUpdate(s2.id, 3, segInfo(3, 0, 0xffff, false)))
	if l, err := w.newer(ctx, 2); err != nil || l.Epoch != 3 || len(l.Segments) != 1 {
		t.Fatalf("after the reconnect: %+v %v", l, err)
	}

	// A refusal (the topic was deleted) is final.
	code := pb.ServerError_TopicNotFound
	s2.fc.write(pulsar.Wrap(&pb.CommandScalableTopicUpdate{SessionId: &s2.id, Error: &code, Message: proto.String("gone")}))
	_, err = w.newer(ctx, 3)
	var se *ServerError
	if !errors.As(err, &se) || se.Code != code {
		t.Fatalf("after the refusal: %v", err)
	}
	select {
	case l := <-lookups:
		t.Fatalf("a session opened after the refusal: %v", l.id)
	case <-w.done:
	}
}

// TestAssignmentWatch: a stream consumer's subscribe is retried while the broker answers
// ServiceNotReady (no controller leader yet), its first assignment comes with the answer,
// a pushed update follows, a dead connection subscribes again, and a refusal of the first
// subscribe (here AuthorizationError) fails it.
func TestAssignmentWatch(t *testing.T) {
	fb := startFakeBroker(t)
	subs := make(chan *pb.CommandScalableTopicSubscribe, 4)
	conns := make(chan *fakeConn, 4)
	fb.onScalable = func(fc *fakeConn, cmd *pb.BaseCommand) {
		if s := cmd.GetScalableTopicSubscribe(); s != nil {
			subs <- s
			conns <- fc
		}
	}
	cl := newTestClient(t, fb.url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	assignment := func(ids ...uint64) *pb.ScalableConsumerAssignment {
		a := &pb.ScalableConsumerAssignment{LayoutEpoch: proto.Uint64(1)}
		for _, id := range ids {
			a.Segments = append(a.Segments, &pb.ScalableAssignedSegment{SegmentId: proto.Uint64(id), HashStart: proto.Uint32(0),
				HashEnd: proto.Uint32(0xffff), SegmentTopic: proto.String("segment://public/default/a/x-" + string(rune('0'+id)))})
		}
		return a
	}
	answer := func(code *pb.ServerError, a *pb.ScalableConsumerAssignment) (*pb.CommandScalableTopicSubscribe, *fakeConn) {
		t.Helper()
		var s *pb.CommandScalableTopicSubscribe
		select {
		case s = <-subs:
		case <-ctx.Done():
			t.Fatal("no subscribe")
		}
		fc := <-conns
		if s.GetConsumerName() != "c1" || s.GetSubscription() != "s" || s.GetConsumerType() != pb.ScalableConsumerType_STREAM {
			t.Errorf("subscribe %v", s)
		}
		fc.write(pulsar.Wrap(&pb.CommandScalableTopicSubscribeResponse{RequestId: s.RequestId, Error: code, Assignment: a}))
		return s, fc
	}
	recv := func(a *assignmentWatch) []assignedSegment {
		t.Helper()
		select {
		case a := <-a.out:
			return a.segs
		case <-ctx.Done():
			t.Fatal("no assignment")
		}
		return nil
	}
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	type result struct {
		a   *assignmentWatch
		err error
	}
	res := make(chan result, 1)
	go func() {
		a, err := cl.watchAssignment(ctx, runCtx, "topic://public/default/a", "s", "c1")
		res <- result{a, err}
	}()
	answer(pb.ServerError_ServiceNotReady.Enum(), nil)
	s1, fc1 := answer(nil, assignment(0))
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if segs := recv(r.a); len(segs) != 1 || segs[0].id != 0 {
		t.Fatalf("first assignment %v", segs)
	}
	fc1.write(pulsar.Wrap(&pb.CommandScalableTopicAssignmentUpdate{ConsumerId: s1.ConsumerId, Assignment: assignment(1, 2)}))
	if segs := recv(r.a); len(segs) != 2 || segs[1].id != 2 || segs[1].topic != "segment://public/default/a/x-2" {
		t.Fatalf("pushed assignment %v", segs)
	}
	fc1.nc.Close()
	s2, _ := answer(nil, assignment(2))
	if s2.GetConsumerId() == s1.GetConsumerId() {
		t.Fatalf("consumer id %d reused", s2.GetConsumerId())
	}
	if segs := recv(r.a); len(segs) != 1 || segs[0].id != 2 {
		t.Fatalf("assignment after the reconnect %v", segs)
	}
	stop()
	for range r.a.out { // closed once run ends
	}

	go func() {
		_, err := cl.watchAssignment(ctx, context.Background(), "topic://public/default/a", "s", "c1")
		res <- result{nil, err}
	}()
	answer(pb.ServerError_AuthorizationError.Enum(), nil)
	var se *ServerError
	if r := <-res; !errors.As(r.err, &se) || se.Code != pb.ServerError_AuthorizationError {
		t.Fatalf("refused subscribe: %v", r.err)
	}
}

// TestScalableNeedsBrokerSupport: against a broker whose CONNECTED lacks
// supports_scalable_topics the client sends no scalable-topic command and fails the DAG
// watch and the stream subscribe with ErrScalableUnsupported.
func TestScalableNeedsBrokerSupport(t *testing.T) {
	fb := startFakeBroker(t)
	fb.mu.Lock()
	fb.noScalable = true
	fb.mu.Unlock()
	fb.onScalable = func(_ *fakeConn, cmd *pb.BaseCommand) { t.Errorf("the client sent %v", cmd.GetType()) }
	cl := newTestClient(t, fb.url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.watchLayout(ctx, layout.Topic{Tenant: "public", Namespace: "default", Name: "w"}); !errors.Is(err, ErrScalableUnsupported) {
		t.Fatalf("DAG watch: %v", err)
	}
	if _, err := cl.watchAssignment(ctx, ctx, "topic://public/default/w", "s", "c1"); !errors.Is(err, ErrScalableUnsupported) {
		t.Fatalf("stream subscribe: %v", err)
	}
}
