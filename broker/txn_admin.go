package broker

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/magnetar-io/magnetar/txn"
)

// The admin API of transactions (Pulsar's /admin/v3/transactions).

func (s *Service) txnOn() error {
	if s.txn == nil {
		return fmt.Errorf("%w: %v", ErrNotAllowed, errTxnDisabled)
	}
	return nil
}

// CoordinatorStats returns the stats of coordinator tc, or of every coordinator (nil).
func (s *Service) CoordinatorStats(ctx context.Context, tc *uint64) (map[string]CoordinatorStats, error) {
	if err := s.txnOn(); err != nil {
		return nil, err
	}
	ids := []uint64{}
	if tc != nil {
		if *tc >= uint64(s.cfg.TransactionCoordinators) {
			return nil, fmt.Errorf("%w: coordinator %d", ErrTransactionNotFound, *tc)
		}
		ids = append(ids, *tc)
	} else {
		for i := 0; i < s.cfg.TransactionCoordinators; i++ {
			ids = append(ids, uint64(i))
		}
	}
	out := map[string]CoordinatorStats{}
	for _, id := range ids {
		c, err := s.txn.coordinator(ctx, id)
		if err != nil {
			return nil, err
		}
		in, err := c.Describe(ctx)
		if err != nil {
			return nil, err
		}
		st := CoordinatorStats{State: in.State.String(), OngoingTxnSize: in.Open}
		var low uint64
		for seq, h := range in.Txns {
			if seq > st.LeastSigBits {
				st.LeastSigBits = seq
			}
			if h.Status == txn.Open && (low == 0 || seq < low) {
				low = seq
			}
		}
		if low > 0 {
			st.LowWaterMark = low - 1
		} else {
			st.LowWaterMark = st.LeastSigBits
		}
		out[fmt.Sprint(id)] = st
	}
	return out, nil
}

// TransactionMetadata describes transaction id.
func (s *Service) TransactionMetadata(ctx context.Context, id txn.ID) (TxnMetadata, error) {
	if err := s.txnOn(); err != nil {
		return TxnMetadata{}, err
	}
	h, ok, err := s.txn.tracker.Header(ctx, id)
	if err != nil {
		return TxnMetadata{}, err
	}
	if !ok {
		return TxnMetadata{}, fmt.Errorf("%w: %v", ErrTransactionNotFound, id)
	}
	return s.describeTxn(ctx, id, h), nil
}

func (s *Service) describeTxn(ctx context.Context, id txn.ID, h txn.Header) TxnMetadata {
	status := h.Status.String()
	if h.TimedOut {
		status = "TIME_OUT"
	}
	md := TxnMetadata{TxnID: id.String(), Status: status, OpenTimestamp: h.OpenedMs,
		TimeoutAt: h.TimeoutAtMs - h.OpenedMs, Owner: h.Owner,
		ProducedPartitions: map[string]TxnInBufferStats{}, AckedPartitions: map[string]map[string]TxnInPendingAckStats{}}
	for _, p := range h.Partitions {
		st, err := s.TransactionInBufferStats(ctx, p, id)
		if err != nil {
			st = TxnInBufferStats{Aborted: h.Status == txn.Aborted}
		}
		md.ProducedPartitions[p] = st
	}
	for _, sr := range h.Subscriptions {
		if md.AckedPartitions[sr.Topic] == nil {
			md.AckedPartitions[sr.Topic] = map[string]TxnInPendingAckStats{}
		}
		md.AckedPartitions[sr.Topic][sr.Subscription] = TxnInPendingAckStats{}
	}
	return md
}

// TransactionInBufferStats is transaction id as topic's buffer sees it.
func (s *Service) TransactionInBufferStats(ctx context.Context, topicName string, id txn.ID) (TxnInBufferStats, error) {
	if err := s.txnOn(); err != nil {
		return TxnInBufferStats{}, err
	}
	t, err := s.adminTopic(ctx, topicName)
	if err != nil {
		return TxnInBufferStats{}, err
	}
	start, aborted, err := t.TxnInBuffer(ctx, id)
	if err != nil {
		return TxnInBufferStats{}, err
	}
	out := TxnInBufferStats{Aborted: aborted}
	if start != nil {
		p := start.String()
		out.StartPosition = &p
	}
	return out, nil
}

// TransactionBufferStats returns topic's transaction buffer statistics.
func (s *Service) TransactionBufferStats(ctx context.Context, topicName string) (TxnBufferStats, error) {
	if err := s.txnOn(); err != nil {
		return TxnBufferStats{}, err
	}
	t, err := s.adminTopic(ctx, topicName)
	if err != nil {
		return TxnBufferStats{}, err
	}
	st, err := t.TxnBufferStats(ctx)
	if err != nil {
		return TxnBufferStats{}, err
	}
	out := TxnBufferStats{State: st.State, LastStored: st.LastStored.String(), Watermark: st.Watermark.String(),
		OngoingTxnSize: st.Open, AbortedTxnSize: st.Aborted, HeldSends: st.HeldSends, MaxReadPositionLag: st.MaxReadLag}
	if st.MaxRead != nil {
		p := st.MaxRead.String()
		out.MaxReadPosition = &p
	}
	return out, nil
}

// PendingAckStats returns subscription sub's pending acknowledgements.
func (s *Service) PendingAckStats(ctx context.Context, topicName, sub string) (PendingAckStats, error) {
	if err := s.txnOn(); err != nil {
		return PendingAckStats{}, err
	}
	t, err := s.adminTopic(ctx, topicName)
	if err != nil {
		return PendingAckStats{}, err
	}
	st, err := t.PendingAckStats(ctx, sub)
	if err != nil {
		return PendingAckStats{}, err
	}
	lw := map[string]int{}
	return PendingAckStats{State: st.State, Error: st.Err, LowWaterMarks: lw, OngoingTxnSize: st.Txns,
		LockedPositions: st.Positions, ReplayFailures: st.Attempts}, nil
}

// TransactionInPendingAckStats is transaction id as subscription sub's pending acks see it.
func (s *Service) TransactionInPendingAckStats(ctx context.Context, topicName, sub string, id txn.ID) (TxnInPendingAckStats, error) {
	if err := s.txnOn(); err != nil {
		return TxnInPendingAckStats{}, err
	}
	t, err := s.adminTopic(ctx, topicName)
	if err != nil {
		return TxnInPendingAckStats{}, err
	}
	if _, err := t.PendingAckStats(ctx, sub); err != nil {
		return TxnInPendingAckStats{}, err
	}
	// Transactional acknowledgements are individual (no transactional cumulative acks).
	return TxnInPendingAckStats{}, nil
}

// SlowTransactions returns the open transactions older than age, of coordinator tc or of
// every coordinator (nil).
func (s *Service) SlowTransactions(ctx context.Context, age time.Duration, tc *uint64) (map[string]TxnMetadata, error) {
	if err := s.txnOn(); err != nil {
		return nil, err
	}
	ids := []uint64{}
	if tc != nil {
		ids = append(ids, *tc)
	} else {
		for i := 0; i < s.cfg.TransactionCoordinators; i++ {
			ids = append(ids, uint64(i))
		}
	}
	now := time.Now().UnixMilli()
	out := map[string]TxnMetadata{}
	for _, tcID := range ids {
		c, err := s.txn.coordinator(ctx, tcID)
		if err != nil {
			return nil, err
		}
		in, err := c.Describe(ctx)
		if err != nil {
			return nil, err
		}
		seqs := make([]uint64, 0, len(in.Txns))
		for seq := range in.Txns {
			seqs = append(seqs, seq)
		}
		sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
		for _, seq := range seqs {
			h := in.Txns[seq]
			if h.Status != txn.Open || now-h.OpenedMs < age.Milliseconds() {
				continue
			}
			id := txn.ID{Most: tcID, Least: seq}
			out[id.String()] = s.describeTxn(ctx, id, h)
		}
	}
	return out, nil
}
