package broker

import (
	"context"

	"github.com/magnetar-io/magnetar/broker/scalablehost"
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// Scalable-topic hosting (a controller per scalable topic, stream consumers' assignments,
// the segment operations the leaders call here or through the admin API) is package
// broker/scalablehost; the root gives it the broker through scalBroker and holds it as
// Service.scal. The Service's scalable-topic API (admin.ScalableService) delegates to it.

// ScalableConfig configures the scalable-topic controllers (Config.Scalable).
type ScalableConfig = scalablehost.Config

// scalableTopics is the Service's scalable-topic host (nil until Start has run it).
type scalableTopics struct{ *scalablehost.Host }

func startScalable(s *Service) *scalableTopics {
	return &scalableTopics{scalablehost.New(s.ctx, s.cfg.Scalable, scalablehost.Env{Store: s.store,
		SessionTTL: s.cfg.SessionTTL, Registry: s.reg, Logger: s.log, Broker: scalBroker{s}, Segments: scalBroker{s},
		Peers: s.peer})}
}

// close stops the controllers (resigning their leaderships) and the watch.
func (st *scalableTopics) close() {
	if st != nil {
		st.Close()
	}
}

// scalBroker is the Service as the scalable-topic host's Broker and Segments.
type scalBroker struct{ s *Service }

var (
	_ scalablehost.Broker   = scalBroker{}
	_ scalablehost.Segments = scalBroker{}
)

func (b scalBroker) ID() string { return b.s.info.ID }
func (b scalBroker) LiveBroker(ctx context.Context, id string) (BrokerInfo, error) {
	return b.s.own.LiveBroker(ctx, id)
}
func (b scalBroker) Lookup(ctx context.Context, topic string) (LookupResult, error) {
	return b.s.lookup(ctx, topic)
}
func (b scalBroker) CheckNamespace(ctx context.Context, tenant, ns string) error {
	return b.s.res.CheckNamespace(ctx, tenant, ns)
}
func (b scalBroker) CreateTopic(ctx context.Context, name string) error {
	return b.s.createTopic(ctx, name)
}
func (b scalBroker) DeleteTopic(ctx context.Context, name string) error {
	return b.s.deleteTopic(ctx, name, true)
}
func (b scalBroker) CreateSubscription(ctx context.Context, topic, sub string, at MessageID) error {
	return b.s.CreateSubscription(ctx, topic, sub, at)
}
func (b scalBroker) Terminate(ctx context.Context, name string) error {
	_, err := b.s.Terminate(ctx, name)
	return err
}
func (b scalBroker) TopicStats(ctx context.Context, name string) (TopicStats, error) {
	return b.s.TopicStats(ctx, name)
}
func (b scalBroker) ResetCursor(ctx context.Context, topic, sub string, to MessageID) error {
	return b.s.ResetCursor(ctx, topic, sub, to)
}
func (b scalBroker) Topic(ctx context.Context, name string) (scalablehost.Topic, error) {
	t, err := b.s.adminTopic(ctx, name)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// The scalable-topic API of the admin layer (admin/scalable.go); scalablehost.Host has
// the full documentation of each.

// CreateScalableTopic creates scalable topic name (topic://tenant/ns/name) with n initial segments.
func (s *Service) CreateScalableTopic(ctx context.Context, name string, n int) error {
	return s.scal.CreateScalableTopic(ctx, name, n)
}

// DeleteScalableTopic deletes scalable topic name: its layout record, then every segment.
func (s *Service) DeleteScalableTopic(ctx context.Context, name string) error {
	return s.scal.DeleteScalableTopic(ctx, name)
}

// ScalableTopics lists namespace ns's scalable topics (topic:// names, in order).
func (s *Service) ScalableTopics(ctx context.Context, ns string) ([]string, error) {
	return s.scal.ScalableTopics(ctx, ns)
}

// ScalableLayout returns scalable topic name's stored layout.
func (s *Service) ScalableLayout(ctx context.Context, name string) (layout.Layout, error) {
	return s.scal.ScalableLayout(ctx, name)
}

// SplitScalableSegment splits active segment seg of topic name at hash at (0: the midpoint).
func (s *Service) SplitScalableSegment(ctx context.Context, name string, seg uint64, at uint16) error {
	return s.scal.SplitScalableSegment(ctx, name, seg, at)
}

// MergeScalableSegments merges adjacent active segments a and b of topic name.
func (s *Service) MergeScalableSegments(ctx context.Context, name string, a, b uint64) error {
	return s.scal.MergeScalableSegments(ctx, name, a, b)
}

// CreateScalableSubscription adds subscription sub to topic name.
func (s *Service) CreateScalableSubscription(ctx context.Context, name, sub string) error {
	return s.scal.CreateScalableSubscription(ctx, name, sub)
}

// RegisterStreamConsumer registers stream consumer consumer of sub on topic name for session.
func (s *Service) RegisterStreamConsumer(ctx context.Context, name, sub, consumer string, session uint64) error {
	return s.scal.RegisterStreamConsumer(ctx, name, sub, consumer, session)
}

// UnregisterStreamConsumer removes stream consumer consumer of sub on topic name.
func (s *Service) UnregisterStreamConsumer(ctx context.Context, name, sub, consumer string) error {
	return s.scal.UnregisterStreamConsumer(ctx, name, sub, consumer)
}

// StreamAssignment long-polls (until ctx ends) for the consumer's assignment newer than after.
func (s *Service) StreamAssignment(ctx context.Context, name, sub, consumer string, after uint64) (scalable.Assignment, error) {
	return s.scal.StreamAssignment(ctx, name, sub, consumer, after)
}

// ScalableTopicStats returns the statistics of topic name's segments and their sums.
func (s *Service) ScalableTopicStats(ctx context.Context, name string) (ScalableStats, error) {
	return s.scal.ScalableTopicStats(ctx, name)
}

// SeekScalableSubscription rewinds subscription sub of topic name on segment seg to to, through the controller.
func (s *Service) SeekScalableSubscription(ctx context.Context, name, sub string, seg uint64, to MessageID) error {
	return s.scal.SeekScalableSubscription(ctx, name, sub, seg, to)
}

// The segment operations, on this broker only (*NotOwnerError if another serves the segment).

// SegmentCreate creates segment's topic if missing and the subscriptions of subs it lacks.
func (s *Service) SegmentCreate(ctx context.Context, segment string, subs []string) error {
	return s.scal.SegmentCreate(ctx, segment, subs)
}

// SegmentSeal terminates segment's managed ledger (idempotent).
func (s *Service) SegmentSeal(ctx context.Context, segment string) error {
	return s.scal.SegmentSeal(ctx, segment)
}

// SegmentDelete deletes segment's topic and data (a missing one is not an error).
func (s *Service) SegmentDelete(ctx context.Context, segment string) error {
	return s.scal.SegmentDelete(ctx, segment)
}

// SegmentDrained reports whether segment is terminated and sub has acknowledged all of it.
func (s *Service) SegmentDrained(ctx context.Context, segment, sub string) (bool, error) {
	return s.scal.SegmentDrained(ctx, segment, sub)
}

// SegmentFence raises sub's fence on segment to version for the controller of term.
func (s *Service) SegmentFence(ctx context.Context, segment, sub string, term, version uint64) error {
	return s.scal.SegmentFence(ctx, segment, sub, term, version)
}

// SegmentReset moves sub's cursor on segment to to for the controller of term.
func (s *Service) SegmentReset(ctx context.Context, segment, sub string, term uint64, to MessageID) error {
	return s.scal.SegmentReset(ctx, segment, sub, term, to)
}
