package scalablehost

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

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// The scalable-topic sessions of the protocol server (its ScalableTopics and
// StreamConsumers, which the broker root answers with these): the DAG and namespace
// watches follow metadata-store watches, and stream consumers register with their
// topic's controller leader, here or through its admin API.

// ScalableDAG builds topic t's DAG from its stored layout, the brokers serving its
// segments and its controller leader.
func (h *Host) ScalableDAG(ctx context.Context, t layout.Topic) (*pb.ScalableTopicDAG, error) {
	_, l, _, err := h.readLayout(ctx, t.String())
	if err != nil {
		return nil, err
	}
	epoch := uint64(l.Epoch)
	dag := &pb.ScalableTopicDAG{Epoch: &epoch}
	for _, seg := range l.Segments {
		dag.Segments = append(dag.Segments, segmentProto(seg))
		r, err := h.env.Broker.Lookup(ctx, t.SegmentName(seg))
		if err != nil || r.ServiceURL == "" {
			continue // unknown now: the client looks the segment up itself
		}
		sb := &pb.SegmentBrokerAddress{SegmentId: proto.Uint64(uint64(seg.ID)), BrokerUrl: proto.String(r.ServiceURL)}
		if r.ServiceURLTLS != "" {
			sb.BrokerUrlTls = proto.String(r.ServiceURLTLS)
		}
		dag.SegmentBrokers = append(dag.SegmentBrokers, sb)
	}
	if id, err := h.leaderOf(ctx, t); err == nil {
		if bi, err := h.env.Broker.LiveBroker(ctx, id); err == nil && bi.ServiceURL != "" {
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

// WatchScalableTopic ticks when topic t's layout record is listed, then at every change of
// its records (layout, controller), until ctx ends; a failed list is retried every second,
// and a watch that ends (compacted) is started again from a new list (metadata.Follower).
// A tick is sent unbuffered; the channel is closed when ctx ends.
func (h *Host) WatchScalableTopic(ctx context.Context, t layout.Topic) <-chan struct{} {
	ch := make(chan struct{})
	prefix := metadata.ScalableTopicPrefix(t.Tenant, t.Namespace, t.Name)
	go func() {
		defer close(ch)
		metadata.Follower{Store: h.env.Store, Prefix: prefix}.Run(ctx, func(u metadata.Update) {
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

// WatchScalableTopics sends namespace tenant/ns's scalable topics (sorted) when they are
// listed, then after every batch of changes, until ctx ends; a failed list is retried
// every second, and a watch that ends (compacted) is started again from a new list
// (metadata.Follower). The channel is closed when ctx ends.
func (h *Host) WatchScalableTopics(ctx context.Context, tenant, ns string) <-chan []string {
	ch := make(chan []string)
	prefix := metadata.PrefixScalableTopics + tenant + "/" + ns + "/"
	go func() {
		defer close(ch)
		have := map[string]bool{}
		metadata.Follower{Store: h.env.Store, Prefix: prefix}.Run(ctx, func(u metadata.Update) {
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

// RegisterStream registers a stream consumer with topic name's leader (here, or through
// the leader's admin API) and returns the leader's id.
func (h *Host) RegisterStream(ctx context.Context, name, sub, consumer string, session uint64) (string, error) {
	err := h.RegisterStreamConsumer(ctx, name, sub, consumer, session)
	var no *api.NotOwnerError
	if errors.As(err, &no) && no.Owner.AdminURL(false) != "" {
		q := url.Values{"session": {strconv.FormatUint(session, 10)}}
		return no.Owner.ID, h.leaderCall(ctx, no.Owner, http.MethodPut, name, sub, consumer, false, q, nil)
	}
	if err != nil {
		return "", err
	}
	return h.env.Broker.ID(), nil
}

// PollAssignment is StreamAssignment on leader (this broker, or through its admin API),
// waiting up to wait for an assignment newer than after.
func (h *Host) PollAssignment(ctx context.Context, leader, name, sub, consumer string, after uint64, wait time.Duration) (scalable.Assignment, error) {
	if leader == h.env.Broker.ID() {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		return h.StreamAssignment(wctx, name, sub, consumer, after)
	}
	ctx, cancel := context.WithTimeout(ctx, wait+10*time.Second)
	defer cancel()
	bi, err := h.env.Broker.LiveBroker(ctx, leader)
	if err != nil {
		return scalable.Assignment{}, fmt.Errorf("%w: controller leader %s: %v", api.ErrServiceNotReady, leader, err)
	}
	q := url.Values{"after": {strconv.FormatUint(after, 10)}, "wait": {strconv.FormatInt(wait.Milliseconds(), 10)}}
	var a scalable.Assignment
	err = h.leaderCall(ctx, bi, http.MethodGet, name, sub, consumer, true, q, &a)
	return a, err
}

// AssignmentProto is assignment a with its segments' ranges and names (from the stored
// layout; a segment no longer in it is left out).
func (h *Host) AssignmentProto(ctx context.Context, t layout.Topic, a scalable.Assignment) (*pb.ScalableConsumerAssignment, error) {
	_, l, _, err := h.readLayout(ctx, t.String())
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

// StreamLeader is the id of the broker leading topic name's controller.
func (h *Host) StreamLeader(ctx context.Context, name string) (string, error) {
	t, err := parseTopic(name)
	if err != nil {
		return "", err
	}
	return h.leaderOf(ctx, t)
}

// StreamEnded reports stream consumer consumer of sub, session session, disconnected at
// once (its grace period starts) when this broker leads the topic (leader, the last one
// the session registered with, is this broker) and is not closing; otherwise the leader
// notices its polls stopped (sweepConsumers). A newer session of the consumer is left
// alone.
func (h *Host) StreamEnded(leader, name, sub, consumer string, session uint64) {
	if h.life.Err() != nil || leader != h.env.Broker.ID() {
		return
	}
	t, err := parseTopic(name)
	if err != nil {
		return
	}
	sct := h.topic(t)
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
	ctx, cancel := context.WithTimeout(h.life, 10*time.Second)
	defer cancel()
	_ = sct.ctl.Disconnected(ctx, sub, consumer, session)
}
