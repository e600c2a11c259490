package txnhost

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/txn"
)

// The admin API of transactions (Pulsar's /admin/v3/transactions).

func (h *Host) on() error {
	if h == nil {
		return fmt.Errorf("%w: %v", api.ErrNotAllowed, topic.ErrTxnDisabled)
	}
	return nil
}

// all returns coordinator tc, or every coordinator (nil).
func (h *Host) all(tc *uint64) []uint64 {
	if tc != nil {
		return []uint64{*tc}
	}
	ids := make([]uint64, 0, h.cfg.Coordinators)
	for i := 0; i < h.cfg.Coordinators; i++ {
		ids = append(ids, uint64(i))
	}
	return ids
}

// CoordinatorStats returns the stats of coordinator tc, or of every coordinator (nil).
func (h *Host) CoordinatorStats(ctx context.Context, tc *uint64) (map[string]api.CoordinatorStats, error) {
	if err := h.on(); err != nil {
		return nil, err
	}
	if tc != nil && *tc >= uint64(h.cfg.Coordinators) {
		return nil, fmt.Errorf("%w: coordinator %d", api.ErrTransactionNotFound, *tc)
	}
	out := map[string]api.CoordinatorStats{}
	for _, id := range h.all(tc) {
		c, err := h.Coordinator(ctx, id)
		if err != nil {
			return nil, err
		}
		in, err := c.Describe(ctx)
		if err != nil {
			return nil, err
		}
		out[fmt.Sprint(id)] = coordinatorStats(in)
	}
	return out, nil
}

// coordinatorStats summarises a coordinator: the highest sequence it holds (leastSigBits)
// and the low watermark, the sequence before its oldest open transaction (all of them
// settled: the highest).
func coordinatorStats(in txn.Info) api.CoordinatorStats {
	st := api.CoordinatorStats{State: in.State.String(), OngoingTxnSize: in.Open}
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
	return st
}

// TransactionMetadata describes transaction id.
func (h *Host) TransactionMetadata(ctx context.Context, id txn.ID) (api.TxnMetadata, error) {
	if err := h.on(); err != nil {
		return api.TxnMetadata{}, err
	}
	hd, ok, err := h.tracker.Header(ctx, id)
	if err != nil {
		return api.TxnMetadata{}, err
	}
	if !ok {
		return api.TxnMetadata{}, fmt.Errorf("%w: %v", api.ErrTransactionNotFound, id)
	}
	return h.describe(ctx, id, hd), nil
}

func (h *Host) describe(ctx context.Context, id txn.ID, hd txn.Header) api.TxnMetadata {
	status := hd.Status.String()
	if hd.TimedOut {
		status = "TIME_OUT"
	}
	md := api.TxnMetadata{TxnID: id.String(), Status: status, OpenTimestamp: hd.OpenedMs,
		TimeoutAt: hd.TimeoutAtMs - hd.OpenedMs, Owner: hd.Owner,
		ProducedPartitions: map[string]api.TxnInBufferStats{}, AckedPartitions: map[string]map[string]api.TxnInPendingAckStats{}}
	for _, p := range hd.Partitions {
		st, err := h.TransactionInBufferStats(ctx, p, id)
		if err != nil {
			st = api.TxnInBufferStats{Aborted: hd.Status == txn.Aborted}
		}
		md.ProducedPartitions[p] = st
	}
	for _, sr := range hd.Subscriptions {
		if md.AckedPartitions[sr.Topic] == nil {
			md.AckedPartitions[sr.Topic] = map[string]api.TxnInPendingAckStats{}
		}
		md.AckedPartitions[sr.Topic][sr.Subscription] = api.TxnInPendingAckStats{}
	}
	return md
}

// TransactionInBufferStats is transaction id as topic's buffer sees it.
func (h *Host) TransactionInBufferStats(ctx context.Context, topicName string, id txn.ID) (api.TxnInBufferStats, error) {
	if err := h.on(); err != nil {
		return api.TxnInBufferStats{}, err
	}
	t, err := h.b.AdminTopic(ctx, topicName)
	if err != nil {
		return api.TxnInBufferStats{}, err
	}
	start, aborted, err := t.TxnInBuffer(ctx, id)
	if err != nil {
		return api.TxnInBufferStats{}, err
	}
	out := api.TxnInBufferStats{Aborted: aborted}
	if start != nil {
		p := start.String()
		out.StartPosition = &p
	}
	return out, nil
}

// TransactionBufferStats returns topic's transaction buffer statistics.
func (h *Host) TransactionBufferStats(ctx context.Context, topicName string) (api.TxnBufferStats, error) {
	if err := h.on(); err != nil {
		return api.TxnBufferStats{}, err
	}
	t, err := h.b.AdminTopic(ctx, topicName)
	if err != nil {
		return api.TxnBufferStats{}, err
	}
	st, err := t.TxnBufferStats(ctx)
	if err != nil {
		return api.TxnBufferStats{}, err
	}
	out := api.TxnBufferStats{State: st.State, LastStored: st.LastStored.String(), Watermark: st.Watermark.String(),
		OngoingTxnSize: st.Open, AbortedTxnSize: st.Aborted, HeldSends: st.HeldSends, MaxReadPositionLag: st.MaxReadLag}
	if st.MaxRead != nil {
		p := st.MaxRead.String()
		out.MaxReadPosition = &p
	}
	return out, nil
}

// PendingAckStats returns subscription sub's pending acknowledgements.
func (h *Host) PendingAckStats(ctx context.Context, topicName, sub string) (api.PendingAckStats, error) {
	if err := h.on(); err != nil {
		return api.PendingAckStats{}, err
	}
	t, err := h.b.AdminTopic(ctx, topicName)
	if err != nil {
		return api.PendingAckStats{}, err
	}
	st, err := t.PendingAckStats(ctx, sub)
	if err != nil {
		return api.PendingAckStats{}, err
	}
	lw := map[string]int{}
	return api.PendingAckStats{State: st.State, Error: st.Err, LowWaterMarks: lw, OngoingTxnSize: st.Txns,
		LockedPositions: st.Positions, ReplayFailures: st.Attempts}, nil
}

// TransactionInPendingAckStats is transaction id as subscription sub's pending acks see it.
func (h *Host) TransactionInPendingAckStats(ctx context.Context, topicName, sub string, id txn.ID) (api.TxnInPendingAckStats, error) {
	if err := h.on(); err != nil {
		return api.TxnInPendingAckStats{}, err
	}
	t, err := h.b.AdminTopic(ctx, topicName)
	if err != nil {
		return api.TxnInPendingAckStats{}, err
	}
	if _, err := t.PendingAckStats(ctx, sub); err != nil {
		return api.TxnInPendingAckStats{}, err
	}
	// Transactional acknowledgements are individual (no transactional cumulative acks).
	return api.TxnInPendingAckStats{}, nil
}

// SlowTransactions returns the open transactions older than age, of coordinator tc or of
// every coordinator (nil).
func (h *Host) SlowTransactions(ctx context.Context, age time.Duration, tc *uint64) (map[string]api.TxnMetadata, error) {
	if err := h.on(); err != nil {
		return nil, err
	}
	now := time.Now().UnixMilli()
	out := map[string]api.TxnMetadata{}
	for _, tcID := range h.all(tc) {
		c, err := h.Coordinator(ctx, tcID)
		if err != nil {
			return nil, err
		}
		in, err := c.Describe(ctx)
		if err != nil {
			return nil, err
		}
		for _, seq := range slowSeqs(in, now, age) {
			id := txn.ID{Most: tcID, Least: seq}
			out[id.String()] = h.describe(ctx, id, in.Txns[seq])
		}
	}
	return out, nil
}

// slowSeqs returns, in order, the sequences of in's open transactions opened at least age
// before now (milliseconds).
func slowSeqs(in txn.Info, now int64, age time.Duration) []uint64 {
	seqs := make([]uint64, 0, len(in.Txns))
	for seq, hd := range in.Txns {
		if hd.Status == txn.Open && now-hd.OpenedMs >= age.Milliseconds() {
			seqs = append(seqs, seq)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs
}
