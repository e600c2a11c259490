package broker

import (
	"context"
	"time"

	"github.com/magnetar-io/magnetar/txn"
)

// The admin API of transactions (Pulsar's /admin/v3/transactions), answered by the
// transaction host (package broker/txnhost; transactions off: ErrNotAllowed).

// CoordinatorStats returns the stats of coordinator tc, or of every coordinator (nil).
func (s *Service) CoordinatorStats(ctx context.Context, tc *uint64) (map[string]CoordinatorStats, error) {
	return s.txn.CoordinatorStats(ctx, tc)
}

// TransactionMetadata describes transaction id.
func (s *Service) TransactionMetadata(ctx context.Context, id txn.ID) (TxnMetadata, error) {
	return s.txn.TransactionMetadata(ctx, id)
}

// TransactionInBufferStats is transaction id as topic's buffer sees it.
func (s *Service) TransactionInBufferStats(ctx context.Context, topicName string, id txn.ID) (TxnInBufferStats, error) {
	return s.txn.TransactionInBufferStats(ctx, topicName, id)
}

// TransactionBufferStats returns topic's transaction buffer statistics.
func (s *Service) TransactionBufferStats(ctx context.Context, topicName string) (TxnBufferStats, error) {
	return s.txn.TransactionBufferStats(ctx, topicName)
}

// PendingAckStats returns subscription sub's pending acknowledgements.
func (s *Service) PendingAckStats(ctx context.Context, topicName, sub string) (PendingAckStats, error) {
	return s.txn.PendingAckStats(ctx, topicName, sub)
}

// TransactionInPendingAckStats is transaction id as subscription sub's pending acks see it.
func (s *Service) TransactionInPendingAckStats(ctx context.Context, topicName, sub string, id txn.ID) (TxnInPendingAckStats, error) {
	return s.txn.TransactionInPendingAckStats(ctx, topicName, sub, id)
}

// SlowTransactions returns the open transactions older than age, of coordinator tc or of
// every coordinator (nil).
func (s *Service) SlowTransactions(ctx context.Context, age time.Duration, tc *uint64) (map[string]TxnMetadata, error) {
	return s.txn.SlowTransactions(ctx, age, tc)
}
