package topicreg

import (
	"context"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
)

// api.TopicStats returns a topic's (or one partition's) statistics, loading the topic if needed.
func (reg *Registry) TopicStats(ctx context.Context, topic string) (api.TopicStats, error) {
	t, err := reg.AdminTopic(ctx, topic)
	if err != nil {
		return api.TopicStats{}, err
	}
	return t.Stats(ctx)
}

// api.InternalStats returns a topic's managed-ledger statistics.
func (reg *Registry) InternalStats(ctx context.Context, topic string) (api.InternalStats, error) {
	t, err := reg.AdminTopic(ctx, topic)
	if err != nil {
		return api.InternalStats{}, err
	}
	return t.InternalStats(ctx)
}

// LastMessageID returns the id of a topic's last message (EntryID -1: empty topic).
func (reg *Registry) LastMessageID(ctx context.Context, topic string) (api.MessageID, error) {
	t, err := reg.AdminTopic(ctx, topic)
	if err != nil {
		return api.MessageID{}, err
	}
	id, err := t.LastMessageID(ctx)
	if err != nil {
		return api.MessageID{}, err
	}
	return FromTopicID(id, t.Name().Partition), nil
}

// Terminate terminates a topic: no more messages are accepted (producers get
// TopicTerminatedError) and the id of the last message is returned.
func (reg *Registry) Terminate(ctx context.Context, topic string) (api.MessageID, error) {
	t, err := reg.AdminTopic(ctx, topic)
	if err != nil {
		return api.MessageID{}, err
	}
	id, err := t.Terminate(ctx)
	if err != nil {
		return api.MessageID{}, err
	}
	return FromTopicID(id, t.Name().Partition), nil
}

// Subscriptions lists a topic's subscriptions (durable ones, and the readers' connected now).
func (reg *Registry) Subscriptions(ctx context.Context, topic string) ([]string, error) {
	t, err := reg.AdminTopic(ctx, topic)
	if err != nil {
		return nil, err
	}
	return t.Subscriptions(ctx)
}

// CreateSubscription creates a durable subscription at a message id (api.Earliest, api.Latest or an
// id); api.ErrAlreadyExists if it exists.
func (reg *Registry) CreateSubscription(ctx context.Context, topic, sub string, at api.MessageID) error {
	t, err := reg.AdminTopic(ctx, topic)
	if err != nil {
		return err
	}
	return t.CreateSubscription(ctx, sub, ToTopicID(at))
}

// DeleteSubscription deletes a subscription. Without force it fails with api.ErrNotEmpty while
// consumers are connected; with force they are disconnected.
func (reg *Registry) DeleteSubscription(ctx context.Context, topic, sub string, force bool) error {
	t, err := reg.AdminTopic(ctx, topic)
	if err != nil {
		return err
	}
	return t.DeleteSubscription(ctx, sub, force)
}

// ResetCursor moves a subscription to a message id: messages after it are (re)delivered.
// Connected consumers are disconnected and reconnect.
func (reg *Registry) ResetCursor(ctx context.Context, topic, sub string, to api.MessageID) error {
	t, err := reg.AdminTopic(ctx, topic)
	if err != nil {
		return err
	}
	return t.ResetCursor(ctx, sub, ToTopicID(to))
}

// ResetCursorToTime moves a subscription to the first message published at or after t.
func (reg *Registry) ResetCursorToTime(ctx context.Context, topic, sub string, at time.Time) error {
	t, err := reg.AdminTopic(ctx, topic)
	if err != nil {
		return err
	}
	return t.ResetCursorToTime(ctx, sub, at)
}

// SkipMessages acknowledges the next n entries of a subscription's backlog.
func (reg *Registry) SkipMessages(ctx context.Context, topic, sub string, n int) error {
	if n < 0 {
		return api.ErrInvalidArgument
	}
	t, err := reg.AdminTopic(ctx, topic)
	if err != nil {
		return err
	}
	return t.Skip(ctx, sub, n)
}

// ClearBacklog acknowledges a subscription's whole backlog.
func (reg *Registry) ClearBacklog(ctx context.Context, topic, sub string) error {
	t, err := reg.AdminTopic(ctx, topic)
	if err != nil {
		return err
	}
	return t.Skip(ctx, sub, -1)
}
