package broker

import (
	"context"
	"time"

	"github.com/magnetar-io/magnetar/broker/server"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// The scalable-topic sessions' side of the protocol server's Backend (server.ScalableTopics
// and server.StreamConsumers), answered by the scalable-topic host (package
// broker/scalablehost, server.go).

var (
	_ server.ScalableTopics  = backend{}
	_ server.StreamConsumers = backend{}
)

func (b backend) ScalableDAG(ctx context.Context, t layout.Topic) (*pb.ScalableTopicDAG, error) {
	return b.s.scalableHost.ScalableDAG(ctx, t)
}

func (b backend) WatchScalableTopic(ctx context.Context, t layout.Topic) <-chan struct{} {
	return b.s.scalableHost.WatchScalableTopic(ctx, t)
}

func (b backend) WatchScalableTopics(ctx context.Context, tenant, ns string) <-chan []string {
	return b.s.scalableHost.WatchScalableTopics(ctx, tenant, ns)
}

func (b backend) RegisterStream(ctx context.Context, name, sub, consumer string, session uint64) (string, error) {
	return b.s.scalableHost.RegisterStream(ctx, name, sub, consumer, session)
}

func (b backend) StreamAssignment(ctx context.Context, leader, name, sub, consumer string, after uint64,
	wait time.Duration) (scalable.Assignment, error) {
	return b.s.scalableHost.PollAssignment(ctx, leader, name, sub, consumer, after, wait)
}

func (b backend) AssignmentProto(ctx context.Context, t layout.Topic, a scalable.Assignment) (*pb.ScalableConsumerAssignment, error) {
	return b.s.scalableHost.AssignmentProto(ctx, t, a)
}

func (b backend) StreamLeader(ctx context.Context, name string) (string, error) {
	return b.s.scalableHost.StreamLeader(ctx, name)
}

func (b backend) StreamEnded(leader, name, sub, consumer string, session uint64) {
	b.s.scalableHost.StreamEnded(leader, name, sub, consumer, session)
}

func (b backend) CheckAttach(topic, sub string, md map[string]string) error {
	return b.s.scalableHost.CheckAttach(topic, sub, md)
}
