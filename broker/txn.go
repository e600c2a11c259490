package broker

import (
	"context"
	"fmt"

	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/broker/txnhost"
)

// Transaction hosting is package broker/txnhost; the root gives it the broker through
// txnBroker and holds it as Service.txn (nil: transactions off).

// startTxn creates the transaction host when transactions are on, and the system records
// it needs; its sweep starts once the broker has its session (Start).
func (s *Service) startTxn(ctx context.Context) error {
	if !s.cfg.TransactionCoordinatorEnabled {
		return nil
	}
	h := txnhost.New(s.ctx, txnhost.Config{Store: s.store, Registry: s.reg, Logger: s.log, Cluster: s.cfg.Cluster,
		Coordinators: s.cfg.TransactionCoordinators, MaxActivePerCoordinator: s.cfg.MaxActiveTransactionsPerCoordinator},
		txnBroker{s})
	s.closers = append(s.closers, h.Close)
	if err := h.EnsureDefaults(ctx); err != nil {
		return fmt.Errorf("broker: transaction defaults: %w", err)
	}
	s.txn = h
	return nil
}

// txnBroker is the Service as the transaction host's Broker.
type txnBroker struct{ s *Service }

var _ txnhost.Broker = txnBroker{}

func (b txnBroker) ID() string { return b.s.info.ID }

func (b txnBroker) Acquire(ctx context.Context, n topicname.Name) error { return b.s.acquire(ctx, n) }

func (b txnBroker) CreatePartitioned(ctx context.Context, topic string, n int) error {
	return b.s.res.createPartitioned(ctx, topic, n)
}

func (b txnBroker) LoadedTopic(name string) txnhost.Topic {
	if t := b.s.LoadedTopic(name); t != nil {
		return t
	}
	return nil
}

func (b txnBroker) LoadedTopics() []txnhost.Topic {
	ts := b.s.LoadedTopics()
	out := make([]txnhost.Topic, len(ts))
	for i, t := range ts {
		out[i] = t
	}
	return out
}

func (b txnBroker) AdminTopic(ctx context.Context, name string) (txnhost.Topic, error) {
	t, err := b.s.AdminTopic(ctx, name)
	if err != nil {
		return nil, err
	}
	return t, nil
}
