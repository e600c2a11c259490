package topicreg

import (
	"context"
	"fmt"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/compression"
)

func (reg *Registry) storedMessage(t *topic.Topic, e topic.Entry) (api.StoredMessage, error) {
	meta, payload, err := pulsar.ParseHeadersAndPayload(e.Data)
	if err != nil {
		return api.StoredMessage{}, fmt.Errorf("entry %v of %s: %w", e.Position, t.Name(), err)
	}
	id := api.MessageID{LedgerID: e.Position.LedgerID, EntryID: e.Position.EntryID, BatchIndex: -1,
		Partition: int32(t.Name().Partition)}
	if meta.EncryptionAlgo == nil && len(meta.EncryptionKeys) == 0 {
		if payload, err = compression.Decompress(meta, payload, reg.cfg.MaxMessageSize); err != nil {
			return api.StoredMessage{}, fmt.Errorf("entry %v of %s: %w", e.Position, t.Name(), err)
		}
	}
	return api.StoredMessage{ID: id, Metadata: meta, Payload: payload}, nil
}

// PeekMessage returns the n-th (from 1) entry of subscription sub's backlog, without
// consuming it.
func (reg *Registry) PeekMessage(ctx context.Context, topicName, sub string, n int) (api.StoredMessage, error) {
	t, err := reg.AdminTopic(ctx, topicName)
	if err != nil {
		return api.StoredMessage{}, err
	}
	e, err := t.PeekBacklog(ctx, sub, n)
	if err != nil {
		return api.StoredMessage{}, err
	}
	return reg.storedMessage(t, e)
}

// MessageByID returns the stored entry ledger:entry.
func (reg *Registry) MessageByID(ctx context.Context, topicName string, ledger, entry int64) (api.StoredMessage, error) {
	t, err := reg.AdminTopic(ctx, topicName)
	if err != nil {
		return api.StoredMessage{}, err
	}
	e, err := t.ReadEntry(ctx, topic.Position{LedgerID: ledger, EntryID: entry})
	if err != nil {
		return api.StoredMessage{}, err
	}
	return reg.storedMessage(t, e)
}

// ExamineMessage returns the n-th (from 1) stored entry from the earliest, or from the
// latest if latest.
func (reg *Registry) ExamineMessage(ctx context.Context, topicName string, latest bool, n int) (api.StoredMessage, error) {
	t, err := reg.AdminTopic(ctx, topicName)
	if err != nil {
		return api.StoredMessage{}, err
	}
	e, err := t.ExamineEntry(ctx, latest, n)
	if err != nil {
		return api.StoredMessage{}, err
	}
	return reg.storedMessage(t, e)
}

// MessageIDByTime returns the id of the first entry published at or after at.
func (reg *Registry) MessageIDByTime(ctx context.Context, topicName string, at time.Time) (api.MessageID, error) {
	t, err := reg.AdminTopic(ctx, topicName)
	if err != nil {
		return api.MessageID{}, err
	}
	p, err := t.FindByPublishTime(ctx, at.UnixMilli())
	if err != nil {
		return api.MessageID{}, err
	}
	return api.MessageID{LedgerID: p.LedgerID, EntryID: p.EntryID, BatchIndex: -1, Partition: int32(t.Name().Partition)}, nil
}
