package broker

import (
	"context"

	"github.com/magnetar-io/magnetar/broker/scalablehost"
)

// Scalable-topic hosting (a controller per scalable topic, stream consumers' assignments,
// the segment operations the leaders call here or through the admin API) is package
// broker/scalablehost; the root gives it the broker through scalBroker.

// ScalableConfig configures the scalable-topic controllers (Config.Scalable).
type ScalableConfig = scalablehost.Config

// scalableHost is the Service's scalable-topic host; Service embeds it under this name,
// so its scalable-topic API (admin.ScalableService) is the Service's.
type scalableHost = scalablehost.Host

func newScalableHost(s *Service) *scalableHost {
	return scalablehost.New(s.ctx, s.cfg.Scalable, scalablehost.Env{Store: s.store,
		SessionTTL: s.cfg.SessionTTL, Registry: s.reg, Logger: s.log, Broker: scalBroker{s}, Segments: scalBroker{s},
		Peers: s.peer})
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
	return b.s.CreateTopic(ctx, name)
}
func (b scalBroker) DeleteTopic(ctx context.Context, name string) error {
	return b.s.DeleteTopic(ctx, name, true)
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
	t, err := b.s.AdminTopic(ctx, name)
	if err != nil {
		return nil, err
	}
	return t, nil
}
