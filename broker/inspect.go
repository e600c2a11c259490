package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/compression"
)

func (s *Service) storedMessage(t *topic.Topic, e topic.Entry) (StoredMessage, error) {
	meta, payload, err := pulsar.ParseHeadersAndPayload(e.Data)
	if err != nil {
		return StoredMessage{}, fmt.Errorf("entry %v of %s: %w", e.Position, t.Name(), err)
	}
	id := MessageID{LedgerID: e.Position.LedgerID, EntryID: e.Position.EntryID, BatchIndex: -1,
		Partition: int32(t.Name().Partition)}
	if meta.EncryptionAlgo == nil && len(meta.EncryptionKeys) == 0 {
		if payload, err = compression.Decompress(meta, payload, s.cfg.MaxMessageSize); err != nil {
			return StoredMessage{}, fmt.Errorf("entry %v of %s: %w", e.Position, t.Name(), err)
		}
	}
	return StoredMessage{ID: id, Metadata: meta, Payload: payload}, nil
}

// PeekMessage returns the n-th (from 1) entry of subscription sub's backlog, without
// consuming it.
func (s *Service) PeekMessage(ctx context.Context, topicName, sub string, n int) (StoredMessage, error) {
	t, err := s.adminTopic(ctx, topicName)
	if err != nil {
		return StoredMessage{}, err
	}
	e, err := t.PeekBacklog(ctx, sub, n)
	if err != nil {
		return StoredMessage{}, err
	}
	return s.storedMessage(t, e)
}

// MessageByID returns the stored entry ledger:entry.
func (s *Service) MessageByID(ctx context.Context, topicName string, ledger, entry int64) (StoredMessage, error) {
	t, err := s.adminTopic(ctx, topicName)
	if err != nil {
		return StoredMessage{}, err
	}
	e, err := t.ReadEntry(ctx, topic.Position{LedgerID: ledger, EntryID: entry})
	if err != nil {
		return StoredMessage{}, err
	}
	return s.storedMessage(t, e)
}

// ExamineMessage returns the n-th (from 1) stored entry from the earliest, or from the
// latest if latest.
func (s *Service) ExamineMessage(ctx context.Context, topicName string, latest bool, n int) (StoredMessage, error) {
	t, err := s.adminTopic(ctx, topicName)
	if err != nil {
		return StoredMessage{}, err
	}
	e, err := t.ExamineEntry(ctx, latest, n)
	if err != nil {
		return StoredMessage{}, err
	}
	return s.storedMessage(t, e)
}

// MessageIDByTime returns the id of the first entry published at or after at.
func (s *Service) MessageIDByTime(ctx context.Context, topicName string, at time.Time) (MessageID, error) {
	t, err := s.adminTopic(ctx, topicName)
	if err != nil {
		return MessageID{}, err
	}
	p, err := t.FindByPublishTime(ctx, at.UnixMilli())
	if err != nil {
		return MessageID{}, err
	}
	return MessageID{LedgerID: p.LedgerID, EntryID: p.EntryID, BatchIndex: -1, Partition: int32(t.Name().Partition)}, nil
}
