package topicreg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

// Tiered-storage metrics of the loaded topics, read from their managed ledgers' stats when
// scraped (labels: namespace and topic, as Pulsar's topic-level metrics). The counters
// count since the topic was loaded here.
var (
	descOffloadedSize = prometheus.NewDesc("pulsar_storage_offloaded_size",
		"Bytes of the topic's ledgers in tiered storage (complete offloaded copies).", []string{"namespace", "topic"}, nil)
	descOffloadErrors = prometheus.NewDesc("pulsar_ledgeroffloader_offload_error",
		"Failed offload steps (uploads, object and bookie deletes).", []string{"namespace", "topic"}, nil)
	descReadErrors = prometheus.NewDesc("pulsar_ledgeroffloader_read_offload_error",
		"Failed reads from tiered storage.", []string{"namespace", "topic"}, nil)
	descOffloadedBytes = prometheus.NewDesc("magnetar_ledgeroffloader_offloaded_bytes_total",
		"Bytes of ledgers whose offload completed.", []string{"namespace", "topic"}, nil)
	descOffloadReads = prometheus.NewDesc("magnetar_ledgeroffloader_reads_total",
		"Reads served from tiered storage.", []string{"namespace", "topic"}, nil)
	descBookieDeleted = prometheus.NewDesc("magnetar_ledgeroffloader_bookie_deleted_total",
		"Bookie copies deleted after their offload (deletion lag).", []string{"namespace", "topic"}, nil)
)

// offloadCollector collects the tiered-storage metrics of the registry's loaded topics.
type offloadCollector struct{ reg *Registry }

// registerOffloadMetrics registers the collector on r (nil: none).
func (reg *Registry) registerOffloadMetrics(r prometheus.Registerer) {
	if r != nil {
		r.MustRegister(offloadCollector{reg})
	}
}

// Describe implements prometheus.Collector.
func (c offloadCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOffloadedSize, descOffloadErrors, descReadErrors, descOffloadedBytes, descOffloadReads, descBookieDeleted} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one stats read per loaded persistent topic with
// offload configured or anything offloaded (bounded by a short timeout each).
func (c offloadCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.reg.LoadedTopics() {
		if _, ok := t.Log().(offloadLog); !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := t.Log().Stats(ctx)
		cancel()
		if err != nil {
			continue
		}
		n := t.Name()
		ns, topic := n.Tenant+"/"+n.Namespace, n.String()
		oc := st.OffloadCounters
		ch <- prometheus.MustNewConstMetric(descOffloadedSize, prometheus.GaugeValue, float64(st.OffloadedSize), ns, topic)
		ch <- prometheus.MustNewConstMetric(descOffloadErrors, prometheus.CounterValue, float64(oc.Errors), ns, topic)
		ch <- prometheus.MustNewConstMetric(descReadErrors, prometheus.CounterValue, float64(oc.ReadErrors), ns, topic)
		ch <- prometheus.MustNewConstMetric(descOffloadedBytes, prometheus.CounterValue, float64(oc.OffloadedBytes), ns, topic)
		ch <- prometheus.MustNewConstMetric(descOffloadReads, prometheus.CounterValue, float64(oc.Reads), ns, topic)
		ch <- prometheus.MustNewConstMetric(descBookieDeleted, prometheus.CounterValue, float64(oc.BookieDeleted), ns, topic)
	}
}

// ManagedLedgerInfo is Pulsar's GET …/{topic}/internal-info: the managed ledger's record,
// with each ledger's tiered-storage state.
type ManagedLedgerInfo struct {
	Ledgers            []ManagedLedgerInfoLedger `json:"ledgers"`
	TerminatedPosition *api.MessageID            `json:"terminatedPosition,omitempty"`
	Properties         map[string]string         `json:"properties"`
}

// ManagedLedgerInfoLedger is one ledger of ManagedLedgerInfo (timestamp: when it closed, Unix
// ms; 0 for the open one).
type ManagedLedgerInfoLedger struct {
	LedgerID             int64  `json:"ledgerId"`
	Entries              int64  `json:"entries"`
	Size                 int64  `json:"size"`
	Timestamp            int64  `json:"timestamp"`
	IsOffloaded          bool   `json:"isOffloaded"`
	OffloadedContextUUID string `json:"offloadedContextUuid,omitempty"`
}

// InternalInfo returns topic's managed-ledger record (Pulsar's GET …/internal-info): a
// ledger is offloaded when its offloaded copy is complete; offloadedContextUuid names that
// copy's attempt (the prefix of its objects).
func (reg *Registry) InternalInfo(ctx context.Context, topicName string) (ManagedLedgerInfo, error) {
	t, _, err := reg.offloadTopic(ctx, topicName)
	if err != nil {
		return ManagedLedgerInfo{}, err
	}
	st, err := t.Log().Stats(ctx)
	if err != nil {
		return ManagedLedgerInfo{}, err
	}
	info := ManagedLedgerInfo{Ledgers: []ManagedLedgerInfoLedger{}, Properties: st.Properties}
	if info.Properties == nil {
		info.Properties = map[string]string{}
	}
	for _, l := range st.Ledgers {
		li := ManagedLedgerInfoLedger{LedgerID: l.ID, Entries: l.Entries, Size: l.Size, Timestamp: l.Closed}
		if oc := l.Offload; oc != nil && oc.Complete {
			li.IsOffloaded, li.OffloadedContextUUID = true, oc.UUID
		}
		info.Ledgers = append(info.Ledgers, li)
	}
	if p := st.Terminated; p != nil {
		info.TerminatedPosition = &api.MessageID{LedgerID: p.LedgerID, EntryID: p.EntryID, Partition: -1, BatchIndex: -1}
	}
	return info, nil
}
