package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/server"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// The scalable-topic sessions' side of the protocol server's Backend (server.ScalableTopics
// and server.StreamConsumers): the DAG and namespace watches follow metadata-store watches,
// and stream consumers register with their topic's controller leader, here or through its
// admin API.

var (
	_ server.ScalableTopics  = backend{}
	_ server.StreamConsumers = backend{}
)

func (b backend) ScalableDAG(ctx context.Context, t layout.Topic) (*pb.ScalableTopicDAG, error) {
	return b.s.scalableDAG(ctx, t)
}

// WatchScalableTopic ticks when topic t's layout record is listed, then at every change of
// its records (layout, controller), until ctx ends; a failed list is retried every second,
// and a watch that ends (compacted) is started again from a new list (metadata.Follower).
func (b backend) WatchScalableTopic(ctx context.Context, t layout.Topic) <-chan struct{} {
	ch := make(chan struct{})
	prefix := metadata.ScalableTopicPrefix(t.Tenant, t.Namespace, t.Name)
	go func() {
		defer close(ch)
		metadata.Follower{Store: b.s.store, Prefix: prefix}.Run(ctx, func(u metadata.Update) {
			if u.Kind == metadata.WatchEnded {
				return
			}
			select {
			case ch <- struct{}{}:
			case <-ctx.Done():
			}
		})
	}()
	return ch
}

// WatchScalableTopics sends namespace tenant/ns's scalable topics when they are listed,
// then after every batch of changes, until ctx ends; a failed list is retried every
// second, and a watch that ends (compacted) is started again from a new list
// (metadata.Follower).
func (b backend) WatchScalableTopics(ctx context.Context, tenant, ns string) <-chan []string {
	ch := make(chan []string)
	prefix := metadata.PrefixScalableTopics + tenant + "/" + ns + "/"
	go func() {
		defer close(ch)
		have := map[string]bool{}
		metadata.Follower{Store: b.s.store, Prefix: prefix}.Run(ctx, func(u metadata.Update) {
			switch u.Kind {
			case metadata.Listed:
				have = map[string]bool{}
				for _, kv := range u.KVs {
					if t, ok := layoutKeyTopic(kv.Key); ok {
						have[t.String()] = true
					}
				}
			case metadata.Changed:
				have = maps.Clone(have)
				for _, ev := range u.Events {
					t, ok := layoutKeyTopic(ev.KV.Key)
					if !ok {
						continue
					}
					if ev.Type == metadata.EventPut {
						have[t.String()] = true
					} else {
						delete(have, t.String())
					}
				}
			default:
				return
			}
			select {
			case ch <- slices.Sorted(maps.Keys(have)):
			case <-ctx.Done():
			}
		})
	}()
	return ch
}

func (b backend) RegisterStream(ctx context.Context, name, sub, consumer string, session uint64) (string, error) {
	return b.s.registerStream(ctx, name, sub, consumer, session)
}

func (b backend) StreamAssignment(ctx context.Context, leader, name, sub, consumer string, after uint64,
	wait time.Duration) (scalable.Assignment, error) {
	return b.s.streamAssignment(ctx, leader, name, sub, consumer, after, wait)
}

func (b backend) AssignmentProto(ctx context.Context, t layout.Topic, a scalable.Assignment) (*pb.ScalableConsumerAssignment, error) {
	return b.s.assignmentProto(ctx, t, a)
}

func (b backend) StreamLeader(ctx context.Context, name string) (string, error) {
	return b.s.leaderID(ctx, name)
}

// StreamEnded reports the consumer disconnected at once when this broker leads the topic
// and is not closing (otherwise the leader notices its polls stopped).
func (b backend) StreamEnded(leader, name, sub, consumer string, session uint64) {
	if b.s.ctx.Err() == nil && leader == b.s.info.ID {
		b.s.streamGone(name, sub, consumer, session)
	}
}

func (b backend) CheckAttach(topic, sub string, md map[string]string) error {
	return b.s.checkAttach(topic, sub, md)
}

// scalableDAG builds topic t's DAG from its stored layout, the brokers serving its
// segments and its controller leader.
func (s *Service) scalableDAG(ctx context.Context, t layout.Topic) (*pb.ScalableTopicDAG, error) {
	_, l, _, err := s.scalableLayout(ctx, t.String())
	if err != nil {
		return nil, err
	}
	epoch := uint64(l.Epoch)
	dag := &pb.ScalableTopicDAG{Epoch: &epoch}
	for _, seg := range l.Segments {
		dag.Segments = append(dag.Segments, segmentProto(seg))
		r, err := s.lookup(ctx, t.SegmentName(seg))
		if err != nil || r.ServiceURL == "" {
			continue // unknown now: the client looks the segment up itself
		}
		sb := &pb.SegmentBrokerAddress{SegmentId: proto.Uint64(uint64(seg.ID)), BrokerUrl: proto.String(r.ServiceURL)}
		if r.ServiceURLTLS != "" {
			sb.BrokerUrlTls = proto.String(r.ServiceURLTLS)
		}
		dag.SegmentBrokers = append(dag.SegmentBrokers, sb)
	}
	if kv, err := s.store.Get(ctx, metadata.ScalableControllerKey(t.Tenant, t.Namespace, t.Name)); err == nil {
		if bi, err := s.own.LiveBroker(ctx, string(kv.Value)); err == nil && bi.ServiceURL != "" {
			dag.ControllerBrokerUrl = proto.String(bi.ServiceURL)
			if bi.ServiceURLTLS != "" {
				dag.ControllerBrokerUrlTls = proto.String(bi.ServiceURLTLS)
			}
		}
	}
	return dag, nil
}

func segmentProto(seg layout.Segment) *pb.SegmentInfoProto {
	state := pb.SegmentState_ACTIVE
	if seg.State != layout.StateActive {
		state = pb.SegmentState_SEALED
	}
	ids := func(in []layout.SegmentID) []uint64 {
		out := make([]uint64, len(in))
		for i, id := range in {
			out[i] = uint64(id)
		}
		return out
	}
	p := &pb.SegmentInfoProto{SegmentId: proto.Uint64(uint64(seg.ID)), HashStart: proto.Uint32(uint32(seg.Range.Start)),
		HashEnd: proto.Uint32(uint32(seg.Range.End)), State: state.Enum(), ParentIds: ids(seg.Parents),
		ChildIds: ids(seg.Children), CreatedAtEpoch: proto.Uint64(uint64(seg.CreatedEpoch)),
		CreatedAtMs: proto.Uint64(uint64(seg.CreatedMs))}
	if seg.State != layout.StateActive {
		p.SealedAtEpoch, p.SealedAtMs = proto.Uint64(uint64(seg.SealedEpoch)), proto.Uint64(uint64(seg.SealedMs))
	}
	return p
}

// streamGone reports stream consumer consumer of sub, session session, disconnected at once
// (its grace period starts) when this broker leads the topic; otherwise the leader notices
// its polls stopped (sweepConsumers). A newer session of the consumer is left alone.
func (s *Service) streamGone(name, sub, consumer string, session uint64) {
	t, err := s.scalableTopic(name)
	if err != nil {
		return
	}
	sct := s.scal.topic(t)
	if sct == nil || !sct.ctl.Leading() {
		return
	}
	k := [2]string{sub, consumer}
	sct.mu.Lock()
	mine := sct.session[k] == session
	if mine {
		delete(sct.polled, k)
	}
	sct.mu.Unlock()
	if !mine {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	_ = sct.ctl.Disconnected(ctx, sub, consumer, session)
}

// assignmentProto is assignment a with its segments' ranges and names (from the stored
// layout; a segment no longer in it is left out).
func (s *Service) assignmentProto(ctx context.Context, t layout.Topic, a scalable.Assignment) (*pb.ScalableConsumerAssignment, error) {
	_, l, _, err := s.scalableLayout(ctx, t.String())
	if err != nil {
		return nil, err
	}
	epoch := uint64(l.Epoch)
	out := &pb.ScalableConsumerAssignment{LayoutEpoch: &epoch, AssignmentVersion: proto.Uint64(a.Version)}
	for _, id := range a.Segments {
		seg, ok := l.Segment(id)
		if !ok {
			continue
		}
		out.Segments = append(out.Segments, &pb.ScalableAssignedSegment{SegmentId: proto.Uint64(uint64(id)),
			HashStart: proto.Uint32(uint32(seg.Range.Start)), HashEnd: proto.Uint32(uint32(seg.Range.End)),
			SegmentTopic: proto.String(t.SegmentName(seg))})
	}
	return out, nil
}

// leaderID is the broker id leading topic name's controller.
func (s *Service) leaderID(ctx context.Context, name string) (string, error) {
	t, err := s.scalableTopic(name)
	if err != nil {
		return "", err
	}
	kv, err := s.store.Get(ctx, metadata.ScalableControllerKey(t.Tenant, t.Namespace, t.Name))
	if err != nil {
		return "", err
	}
	return string(kv.Value), nil
}

// registerStream registers a stream consumer with topic name's leader (here, or through
// the leader's admin API) and returns the leader's id.
func (s *Service) registerStream(ctx context.Context, name, sub, consumer string, session uint64) (string, error) {
	err := s.RegisterStreamConsumer(ctx, name, sub, consumer, session)
	var no *NotOwnerError
	if errors.As(err, &no) && no.Owner.AdminURL(false) != "" {
		q := url.Values{"session": {strconv.FormatUint(session, 10)}}
		return no.Owner.ID, s.scal.leaderCall(ctx, no.Owner, http.MethodPut, name, sub, consumer, false, q, nil)
	}
	if err != nil {
		return "", err
	}
	return s.info.ID, nil
}

// streamAssignment is StreamAssignment on leader (this broker, or through its admin API),
// waiting up to wait for an assignment newer than after.
func (s *Service) streamAssignment(ctx context.Context, leader, name, sub, consumer string, after uint64, wait time.Duration) (scalable.Assignment, error) {
	if leader == s.info.ID {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		return s.StreamAssignment(wctx, name, sub, consumer, after)
	}
	ctx, cancel := context.WithTimeout(ctx, wait+10*time.Second)
	defer cancel()
	bi, err := s.own.LiveBroker(ctx, leader)
	if err != nil {
		return scalable.Assignment{}, fmt.Errorf("%w: controller leader %s: %v", ErrServiceNotReady, leader, err)
	}
	q := url.Values{"after": {strconv.FormatUint(after, 10)}, "wait": {strconv.FormatInt(wait.Milliseconds(), 10)}}
	var a scalable.Assignment
	err = s.scal.leaderCall(ctx, bi, http.MethodGet, name, sub, consumer, true, q, &a)
	return a, err
}
