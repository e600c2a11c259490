package topicreg

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/compaction"
	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// Topic compaction (package broker/compaction): every loaded persistent topic has a
// compaction.Manager (Service.compactors), made in openTopic and closed with the topic. The
// admin API triggers and watches it; the compaction monitor triggers it when the bytes after
// the horizon exceed the topic's compaction threshold.

// compactedLogName names the logs of a topic's compacted generations:
// "tenant/ns/compacted/<local, path-escaped>", apart from every topic's managed ledger.
func compactedLogName(n topicname.Name) string {
	return n.Tenant + "/" + n.Namespace + "/compacted/" + url.PathEscape(n.Local)
}

// openCompactedLog opens (creating) the log of one compacted generation. It has no cursor,
// so it keeps its ledgers forever (until the generation is deleted).
func (reg *Registry) openCompactedLog(ctx context.Context, name string) (topic.Log, error) {
	if reg.cfg.OpenLog != nil {
		return reg.cfg.OpenLog(ctx, name)
	}
	cfg := reg.cfg.ManagedLedger
	cfg.RetentionTime, cfg.RetentionSize = -1, -1
	ml, err := reg.cfg.Factory.Open(ctx, name, cfg)
	if err != nil {
		return nil, err
	}
	return newMLog(ml), nil
}

// compactionSub is the durable subscription that holds a compacted topic's entries after
// the horizon until they are compacted (as Pulsar's __compaction cursor); it sits right
// after the horizon, so retention may trim what is below.
const compactionSub = "__compaction"

// newCompactor makes the compaction manager of persistent topic name over its log.
func (reg *Registry) newCompactor(name topicname.Name, log topic.Log) *compaction.Manager {
	committed := func(ctx context.Context, st compaction.State) error {
		t, err := reg.AdminTopic(ctx, name.String())
		if err != nil {
			return err
		}
		h := st.Horizon()
		return t.ResetCursor(ctx, compactionSub, topic.MessageID{LedgerID: h.LedgerID, EntryID: h.EntryID + 1, BatchIndex: -1})
	}
	m := compaction.NewManager(compaction.Config{Log: log, Name: compactedLogName(name), Open: reg.openCompactedLog,
		MaxMessageSize: reg.cfg.MaxMessageSize, Logger: reg.log, BeforeCommit: reg.cfg.CompactionBeforeCommit, Committed: committed})
	reg.compactors.Store(name.String(), m)
	return m
}

// dropCompactor closes m and forgets it (its topic closed).
func (reg *Registry) dropCompactor(name topicname.Name, m *compaction.Manager) {
	reg.compactors.CompareAndDelete(name.String(), m)
	m.Close()
}

// compactor returns a persistent topic loaded here and its compaction manager.
func (reg *Registry) compactor(ctx context.Context, topicName string) (*topic.Topic, *compaction.Manager, error) {
	t, err := reg.AdminTopic(ctx, topicName)
	if err != nil {
		return nil, nil, err
	}
	if !t.Name().IsPersistent() {
		return nil, nil, fmt.Errorf("%w: non-persistent topics are not compacted", api.ErrNotAllowed)
	}
	m, ok := reg.compactors.Load(t.Name().String())
	if !ok {
		return nil, nil, fmt.Errorf("%w: topic %s is closing", api.ErrServiceNotReady, t.Name())
	}
	return t, m.(*compaction.Manager), nil
}

// Compact starts a compaction of a topic (api.ErrCompactionRunning if one is in progress). The
// returned channel is closed when it ends (its outcome: api.CompactionStatus).
func (reg *Registry) Compact(ctx context.Context, topicName string) (<-chan struct{}, error) {
	t, m, err := reg.compactor(ctx, topicName)
	if err != nil {
		return nil, err
	}
	return triggerCompaction(ctx, t, m)
}

// triggerCompaction makes sure the topic has its __compaction subscription (from the
// earliest entry, the first time) and starts a compaction.
func triggerCompaction(ctx context.Context, t *topic.Topic, m *compaction.Manager) (<-chan struct{}, error) {
	if err := t.CreateInitialSubscription(ctx, compactionSub); err != nil {
		return nil, err
	}
	return m.Trigger()
}

// api.CompactionStatus returns the status of a topic's latest compaction on this broker.
func (reg *Registry) CompactionStatus(ctx context.Context, topicName string) (api.CompactionStatus, error) {
	_, m, err := reg.compactor(ctx, topicName)
	if err != nil {
		return api.CompactionStatus{}, err
	}
	st, lastErr := m.Status()
	return api.CompactionStatus{Status: st.String(), LastError: lastErr}, nil
}

// compactionThreshold is the compaction threshold of a topic in bytes (0: none): the topic
// policy, else the namespace's compaction_threshold.
func (reg *Registry) compactionThreshold(ctx context.Context, n topicname.Name) (int64, error) {
	tp, err := reg.TopicRecord(ctx, n)
	if err != nil {
		return 0, err
	}
	if v := tp.CompactionThreshold(); v != nil {
		return *v, nil
	}
	pol, err := reg.res.NamespacePolicies(ctx, n.Tenant, n.Namespace)
	if err != nil {
		return 0, err
	}
	if v, ok := pol.Other["compaction_threshold"].(float64); ok {
		return int64(v), nil
	}
	return 0, nil
}

// TopicCompactionThreshold returns a topic's own compaction threshold (nil: none) or, if
// applied, the one in force (0: none).
func (reg *Registry) TopicCompactionThreshold(ctx context.Context, topicName string, applied bool) (*int64, error) {
	n, err := topicname.Parse(topicName)
	if err != nil {
		return nil, err
	}
	n = n.Base()
	if applied {
		v, err := reg.compactionThreshold(ctx, n)
		return &v, err
	}
	tp, err := reg.TopicRecord(ctx, n)
	return tp.CompactionThreshold(), err
}

// SetTopicCompactionThreshold sets (nil: removes) a topic's compaction threshold in bytes.
func (reg *Registry) SetTopicCompactionThreshold(ctx context.Context, topicName string, bytes *int64) error {
	n, err := topicname.Parse(topicName)
	if err != nil {
		return err
	}
	if bytes != nil && *bytes < 0 {
		return fmt.Errorf("%w: compaction threshold %d", api.ErrInvalidArgument, *bytes)
	}
	return reg.UpdateTopicRecord(ctx, n.Base(), func(r policy.Record) error {
		if bytes == nil {
			delete(r, policy.KeyCompactionThreshold)
			return nil
		}
		return r.Set(nil, policy.KeyCompactionThreshold, "", *bytes)
	})
}

// compactionMonitor checks the loaded topics every Config.CompactionCheckInterval and
// starts a compaction of those holding more than their threshold after the horizon.
func (reg *Registry) compactionMonitor() {
	defer reg.wg.Done()
	if reg.cfg.CompactionCheckInterval < 0 {
		return
	}
	tick := time.NewTicker(reg.cfg.CompactionCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-reg.ctx.Done():
			return
		case <-tick.C:
		}
		reg.compactors.Range(func(k, v any) bool {
			ctx, cancel := context.WithTimeout(reg.ctx, 10*time.Second)
			defer cancel()
			n := topicname.MustParse(k.(string))
			limit, err := reg.compactionThreshold(ctx, n.Base())
			if err != nil || limit <= 0 {
				return true
			}
			m := v.(*compaction.Manager)
			if b, err := m.BytesAfterHorizon(ctx); err == nil && b > limit {
				t, _, err := reg.compactor(ctx, n.String())
				if err == nil {
					_, err = triggerCompaction(ctx, t, m)
				}
				if err != nil && !errors.Is(err, compaction.ErrRunning) {
					reg.log.Debug("compaction threshold", "topic", n.String(), "err", err)
				}
			}
			return true
		})
	}
}
