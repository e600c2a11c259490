package topicreg

import (
	"context"
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/mledger"
)

// Tiered storage on the topics: the resolved offload policy (policy.Resolved.Offload) goes
// to each loaded topic's managed ledger, and the admin API's offload trigger and status
// (Pulsar's PUT and GET …/{topic}/offload) reach it through the log binding.

// offloadLog is the managed-ledger binding's tiered-storage part.
type offloadLog interface {
	SetOffloadPolicy(ctx context.Context, p mledger.OffloadPolicy) error
	Offload(ctx context.Context, p mledger.Position) (mledger.OffloadStatus, error)
	OffloadStatus(ctx context.Context) (mledger.OffloadStatus, error)
}

var _ offloadLog = mlog{}

// SetOffloadPolicy changes the managed ledger's offload policy live.
func (l mlog) SetOffloadPolicy(ctx context.Context, p mledger.OffloadPolicy) error {
	return l.ml.SetOffloadPolicy(ctx, p)
}

// Offload starts offloading the closed ledgers before p.
func (l mlog) Offload(ctx context.Context, p mledger.Position) (mledger.OffloadStatus, error) {
	return l.ml.Offload(ctx, p)
}

// OffloadStatus is the status of the last requested offload.
func (l mlog) OffloadStatus(ctx context.Context) (mledger.OffloadStatus, error) {
	return l.ml.OffloadStatus(ctx)
}

// applyOffload gives loaded topic t's managed ledger the offload policy in force.
func (reg *Registry) applyOffload(ctx context.Context, t *topic.Topic, r policy.Resolved) {
	ol, ok := t.Log().(offloadLog)
	if !ok {
		return
	}
	if err := ol.SetOffloadPolicy(ctx, r.Offload); err != nil && !errors.Is(err, mledger.ErrClosed) {
		reg.log.Debug("apply offload policy", "topic", t.Name().String(), "err", err)
	}
}

// OffloadProcessStatus is Pulsar's OffloadProcessStatus JSON: the state of the last
// requested offload (NOT_RUN, RUNNING, SUCCESS or ERROR), its error, and the first message
// not offloaded.
type OffloadProcessStatus struct {
	Status                  string        `json:"status"`
	LastError               string        `json:"lastError"`
	FirstUnoffloadedMessage api.MessageID `json:"firstUnoffloadedMessage"`
}

// offloadTopic returns the offload binding of a persistent topic (api.ErrNotAllowed for a
// topic without a managed ledger).
func (reg *Registry) offloadTopic(ctx context.Context, name string) (*topic.Topic, offloadLog, error) {
	t, err := reg.AdminTopic(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	ol, ok := t.Log().(offloadLog)
	if !ok {
		return nil, nil, fmt.Errorf("%w: topic %s has no managed ledger to offload", api.ErrNotAllowed, name)
	}
	return t, ol, nil
}

// TriggerOffload starts offloading the closed ledgers of topic (one partition or a
// non-partitioned topic) that lie entirely before message id (Pulsar's PUT …/offload) and
// returns at once. It fails with mledger.ErrOffloadInProgress while an earlier request runs
// and mledger.ErrOffloadDisabled when the broker has no offloader.
func (reg *Registry) TriggerOffload(ctx context.Context, topicName string, id api.MessageID) error {
	_, ol, err := reg.offloadTopic(ctx, topicName)
	if err != nil {
		return err
	}
	_, err = ol.Offload(ctx, mledger.Position{LedgerID: id.LedgerID, EntryID: id.EntryID})
	return err
}

// OffloadStatus returns the status of topic's last requested offload (Pulsar's GET
// …/offload).
func (reg *Registry) OffloadStatus(ctx context.Context, topicName string) (OffloadProcessStatus, error) {
	t, ol, err := reg.offloadTopic(ctx, topicName)
	if err != nil {
		return OffloadProcessStatus{}, err
	}
	st, err := ol.OffloadStatus(ctx)
	if err != nil {
		return OffloadProcessStatus{}, err
	}
	part := -1
	if t.Name().IsPartition() {
		part = t.Name().Partition
	}
	return OffloadProcessStatus{Status: st.State.String(), LastError: st.LastError,
		FirstUnoffloadedMessage: api.MessageID{LedgerID: st.FirstUnoffloaded.LedgerID, EntryID: st.FirstUnoffloaded.EntryID,
			Partition: int32(part), BatchIndex: -1}}, nil
}
