package topicreg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
)

// managedLedgerConfig is the managed-ledger configuration of a topic under r: the broker's
// template with the retention and persistence policies.
func (reg *Registry) managedLedgerConfig(r policy.Resolved) mledger.Config {
	cfg := reg.cfg.ManagedLedger
	cfg.RetentionTime, cfg.RetentionSize = policy.RetentionOf(r.Retention)
	if p := r.Persist; p.BookkeeperAckQuorum > 0 {
		cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = p.BookkeeperEnsemble, p.BookkeeperWriteQuorum, p.BookkeeperAckQuorum
		// As in Pulsar, a persistence policy's rate replaces the broker's default (0: unlimited).
		cfg.MaxMarkDeleteRate = p.ManagedLedgerMaxMarkDeleteRate
	}
	return cfg
}

// checkTopicCount refuses a new topic in a namespace at its max_topics_per_namespace.
func (reg *Registry) checkTopicCount(ctx context.Context, n topicname.Name, r policy.Resolved) error {
	if r.MaxTopics <= 0 {
		return nil
	}
	ts, err := reg.res.DomainTopics(ctx, n.Tenant, n.Namespace, n.Domain)
	if err != nil {
		return err
	}
	if len(ts) >= r.MaxTopics {
		return fmt.Errorf("%w: Exceed maximum number of topics in namespace %s/%s", api.ErrNotAllowed, n.Tenant, n.Namespace)
	}
	return nil
}

// PartitionsAutoCreate is partitionsAutoCreate for the admin API's HTTP lookup of
// partitioned metadata (checkAllowAutoCreation=true).
func (reg *Registry) PartitionsAutoCreate(ctx context.Context, topic string) (int, error) {
	if n, err := topicname.Parse(topic); err == nil {
		if _, err := reg.res.CachedPolicies(ctx, n.Tenant, n.Namespace); err != nil {
			return 0, err
		}
	}
	return reg.ClientPartitions(ctx, topic)
}

// partitionsAutoCreate answers a client's partitioned-metadata request: the topic's
// partition count, after creating it as a partitioned topic if it does not exist and its
// namespace auto-creates partitioned topics (Pulsar's
// fetchPartitionedTopicMetadataCheckAllowAutoCreationAsync).
func (reg *Registry) ClientPartitions(ctx context.Context, topic string) (int, error) {
	parts, err := reg.Partitions(ctx, topic)
	if err != nil || parts > 0 {
		return parts, err
	}
	n, err := topicname.Parse(topic)
	if err != nil || n.IsPartition() || reg.LoadedTopic(n.String()) != nil {
		return 0, err
	}
	// First from the cached namespace record: a lookup of a topic that exists, or of a
	// namespace that does not auto-create partitioned topics, reads nothing more (and
	// answers as before when the store is unreachable).
	pol, err := reg.res.CachedPolicies(ctx, n.Tenant, n.Namespace)
	if err != nil {
		return 0, nil //nolint:nilerr // the partition count answered stands
	}
	nr, err := policy.RecordOf(pol)
	if err != nil {
		return 0, nil //nolint:nilerr // as above
	}
	if auto, parts := reg.pol.AutoTopicCreation(policy.Record{}, nr); parts <= 0 || !reg.pol.AutoCreateAllowed(pol, policy.Resolved{AutoCreate: auto}) {
		return 0, nil
	}
	r, err := reg.resolve(ctx, n)
	if err != nil || r.AutoPartitions <= 0 || !reg.pol.AutoCreateAllowed(pol, r) {
		return 0, err
	}
	if exists, err := reg.res.TopicExists(ctx, n); err != nil || exists {
		return 0, err
	}
	if err := reg.checkTopicCount(ctx, n, r); err != nil {
		return 0, err
	}
	switch err := reg.res.CreatePartitioned(ctx, n.String(), r.AutoPartitions); {
	case errors.Is(err, api.ErrAlreadyExists): // created meanwhile, partitioned or not
		return reg.Partitions(ctx, topic)
	case err != nil:
		return 0, err
	}
	reg.log.Info("auto-created partitioned topic", "topic", n.String(), "partitions", r.AutoPartitions)
	return r.AutoPartitions, nil
}

// retentionSetter is the managed-ledger binding's live retention change.
type retentionSetter interface {
	SetRetention(ctx context.Context, d time.Duration, size int64) error
}

// persistenceSetter is the managed-ledger binding's change of the quorums of new ledgers.
type persistenceSetter interface {
	SetPersistence(ctx context.Context, e, wq, aq int) error
}

// markDeleteRateSetter is the managed-ledger binding's live change of the mark-delete rate.
type markDeleteRateSetter interface {
	SetMarkDeleteRate(ctx context.Context, rate float64) error
}

// applyPolicies resolves and applies the policies of loaded topic t (an event for its
// goroutine; retention and persistence go to its managed ledger).
func (reg *Registry) applyPolicies(ctx context.Context, t *topic.Topic, r policy.Resolved) {
	t.SetPolicies(r.Topic)
	reg.applied.Store(t.Name().String(), r)
	if rs, ok := t.Log().(retentionSetter); ok {
		d, size := policy.RetentionOf(r.Retention)
		if err := rs.SetRetention(ctx, d, size); err != nil && !errors.Is(err, mledger.ErrClosed) {
			reg.log.Debug("apply retention", "topic", t.Name().String(), "err", err)
		}
	}
	if ps, ok := t.Log().(persistenceSetter); ok {
		if cfg := reg.managedLedgerConfig(r); cfg.AckQuorum > 0 {
			if err := ps.SetPersistence(ctx, cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum); err != nil && !errors.Is(err, mledger.ErrClosed) {
				reg.log.Debug("apply persistence", "topic", t.Name().String(), "err", err)
			}
		}
	}
	if ms, ok := t.Log().(markDeleteRateSetter); ok {
		if err := ms.SetMarkDeleteRate(ctx, reg.managedLedgerConfig(r).MaxMarkDeleteRate); err != nil && !errors.Is(err, mledger.ErrClosed) {
			reg.log.Debug("apply mark-delete rate", "topic", t.Name().String(), "err", err)
		}
	}
	reg.applyOffload(ctx, t, r)
	if reg.cfg.OnPolicies != nil {
		reg.cfg.OnPolicies(ctx, t, r)
	}
}

// reapply resolves and applies the policies of the loaded topics match selects, before it
// returns (an admin change is in force on the topics here when its answer goes out).
func (reg *Registry) reapply(ctx context.Context, match func(topicname.Name) bool) {
	for _, t := range reg.LoadedTopics() {
		if !match(t.Name()) {
			continue
		}
		if r, err := reg.resolve(ctx, t.Name()); err == nil {
			reg.applyPolicies(ctx, t, r)
		}
	}
}

// ReapplyAll resolves and applies the policies of every loaded topic again: after the
// broker's own defaults changed (the dynamic configuration, policy.Resolver.SetDynamic).
func (reg *Registry) ReapplyAll(ctx context.Context) {
	reg.reapply(ctx, func(topicname.Name) bool { return true })
}

func (reg *Registry) reapplyNamespace(ctx context.Context, ns string) {
	reg.reapply(ctx, func(n topicname.Name) bool { return n.Tenant+"/"+n.Namespace == ns })
}

func (reg *Registry) reapplyTopic(ctx context.Context, base topicname.Name) {
	reg.reapply(ctx, func(n topicname.Name) bool { return n.Base() == base })
}

// loadedTopics lists the topics loaded now.
func (reg *Registry) LoadedTopics() []*topic.Topic {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	var ts []*topic.Topic
	for _, e := range reg.mu.topics {
		select {
		case <-e.ready:
			if e.t != nil {
				ts = append(ts, e.t)
			}
		default:
		}
	}
	return ts
}

// policyMonitor watches the policy records (a change made through another broker reaches
// the topics loaded here) and runs the periodic policy checks: backlog quotas, message TTL
// and inactive topics.
func (reg *Registry) policyMonitor() {
	defer reg.wg.Done()
	d := reg.cfg.Policies
	for _, prefix := range []string{metadata.PrefixNamespaces, metadata.PrefixTopicFeatures} {
		reg.wg.Add(1) // while this goroutine holds its own count: Close waits for both
		go func() {
			defer reg.wg.Done()
			reg.watchPolicies(prefix)
		}()
	}
	quota, expiry, inactive := time.NewTicker(d.BacklogQuotaCheckInterval), time.NewTicker(d.MessageExpiryCheckInterval),
		time.NewTicker(d.InactiveTopicCheckInterval)
	subExpiry := time.NewTicker(d.SubscriptionExpiryCheckInterval)
	defer quota.Stop()
	defer expiry.Stop()
	defer inactive.Stop()
	defer subExpiry.Stop()
	idle := map[string]time.Time{}    // topic → inactive since
	subIdle := map[string]time.Time{} // topic NUL subscription → without consumers since
	for {
		var check func(ctx context.Context, t *topic.Topic, r policy.Resolved)
		select {
		case <-reg.ctx.Done():
			return
		case <-quota.C:
			check = reg.checkBacklogQuota
		case <-expiry.C:
			check = reg.expireTTL
		case <-inactive.C:
			check = func(ctx context.Context, t *topic.Topic, r policy.Resolved) { reg.checkInactive(ctx, t, r, idle) }
		case <-subExpiry.C:
			check = func(ctx context.Context, t *topic.Topic, r policy.Resolved) {
				reg.expireSubscriptions(ctx, t, r, subIdle)
			}
		}
		loaded := map[string]bool{}
		for _, t := range reg.LoadedTopics() {
			loaded[t.Name().String()] = true
			if !t.Name().IsPersistent() {
				continue
			}
			v, ok := reg.applied.Load(t.Name().String())
			if !ok {
				continue
			}
			ctx, cancel := context.WithTimeout(reg.ctx, 30*time.Second)
			check(ctx, t, v.(policy.Resolved))
			cancel()
		}
		forgetUnloaded(idle, loaded)
		forgetUnloaded(subIdle, loaded)
	}
}

// forgetUnloaded drops the inactivity records (keyed by topic, or topic NUL subscription)
// of the topics no longer loaded here.
func forgetUnloaded(idle map[string]time.Time, loaded map[string]bool) {
	for k := range idle {
		topic, _, _ := strings.Cut(k, "\x00")
		if !loaded[topic] {
			delete(idle, k)
		}
	}
}

// watchPolicies reapplies the policies of the loaded topics whose records change under
// prefix (namespace records or topic policy records), until the broker closes; a watch that
// fails is started again after a second (metadata.Follower, from the store's revision then).
func (reg *Registry) watchPolicies(prefix string) {
	metadata.Follower{Store: reg.cfg.Store, Prefix: prefix, RevisionKey: metadata.RevisionKey, PauseAfterWatch: true,
		Log: reg.log}.Run(reg.ctx, func(u metadata.Update) {
		for _, ev := range u.Events {
			parts := strings.Split(strings.TrimPrefix(ev.KV.Key, prefix), "/")
			switch {
			case prefix == metadata.PrefixNamespaces && len(parts) == 2:
				reg.reapplyNamespace(reg.ctx, parts[0]+"/"+parts[1])
			case prefix == metadata.PrefixTopicFeatures && len(parts) == 3:
				if n, err := topicname.Parse("persistent://" + strings.Join(parts, "/")); err == nil {
					reg.reapplyTopic(reg.ctx, n)
				}
			}
		}
	})
}

// checkBacklogQuota enforces topic t's backlog quotas: beyond one, consumer_backlog_eviction
// moves the slowest subscriptions' cursors past their oldest backlog, the producer policies
// refuse producers (the topic closes those connected) until the backlog is back under it.
func (reg *Registry) checkBacklogQuota(ctx context.Context, t *topic.Topic, r policy.Resolved) {
	block := topic.QuotaOK
	if len(r.Quotas) > 0 {
		st, err := t.Stats(ctx)
		if err != nil {
			return
		}
		if q, ok := r.Quotas[api.QuotaDestinationStorage]; ok && q.LimitSize > 0 {
			for name, ss := range st.Subscriptions {
				if ss.BacklogSize <= q.LimitSize {
					continue
				}
				if q.Policy != api.QuotaConsumerBacklogEviction {
					block = max(block, quotaBlock(q.Policy))
					continue
				}
				if ss.MsgBacklog > 0 {
					per := max(ss.BacklogSize/ss.MsgBacklog, 1)
					skip := int((ss.BacklogSize - q.LimitSize + per - 1) / per)
					if err := t.Skip(ctx, name, skip); err == nil {
						reg.m.backlogEvictions.Inc()
					}
				}
			}
		}
		if q, ok := r.Quotas[api.QuotaMessageAge]; ok && q.LimitTime > 0 {
			cutoff := time.Now().UnixMilli() - q.LimitTime*1000
			for name := range st.Subscriptions {
				oldest, err := t.OldestBacklogPublishTime(ctx, name)
				if err != nil || oldest == 0 || oldest >= cutoff {
					continue
				}
				if q.Policy != api.QuotaConsumerBacklogEviction {
					block = max(block, quotaBlock(q.Policy))
					continue
				}
				if moved, err := t.ExpireMessages(ctx, name, cutoff); err == nil && moved {
					reg.m.backlogEvictions.Inc()
				}
			}
		}
	}
	t.SetQuotaBlock(block)
}

func quotaBlock(policy string) topic.QuotaBlock {
	if policy == api.QuotaProducerException {
		return topic.QuotaException
	}
	return topic.QuotaHold
}

// expireTTL expires the messages older than topic t's TTL from its subscriptions.
func (reg *Registry) expireTTL(ctx context.Context, t *topic.Topic, r policy.Resolved) {
	if r.TTL <= 0 {
		return
	}
	reg.expire(ctx, t, "", time.Now().UnixMilli()-r.TTL*1000) //nolint:errcheck // retried at the next check
}

// expire expires what was published before ms from subscription sub ("": every one).
func (reg *Registry) expire(ctx context.Context, t *topic.Topic, sub string, ms int64) error {
	subs := []string{sub}
	if sub == "" {
		var err error
		if subs, err = t.Subscriptions(ctx); err != nil {
			return err
		}
	}
	for _, name := range subs {
		if _, err := t.ExpireMessages(ctx, name, ms); err != nil {
			return err
		}
	}
	return nil
}

// ExpireMessages expires, on subscription sub of a topic ("": on every subscription), the
// messages published more than seconds ago (Pulsar's expire-messages and
// expire-messages-all-subscriptions).
func (reg *Registry) ExpireMessages(ctx context.Context, topicName, sub string, seconds int64) error {
	if seconds < 0 {
		return fmt.Errorf("%w: expireTimeInSeconds must be 0 or more", api.ErrInvalidArgument)
	}
	t, err := reg.AdminTopic(ctx, topicName)
	if err != nil {
		return err
	}
	return reg.expire(ctx, t, sub, time.Now().UnixMilli()-seconds*1000)
}

// checkInactive deletes topic t once it has been inactive (no producers and consumers,
// and no subscriptions or none with a backlog, by its mode) for the policy's duration.
func (reg *Registry) checkInactive(ctx context.Context, t *topic.Topic, r policy.Resolved, idle map[string]time.Time) {
	name := t.Name().String()
	// A scalable topic's segments live and die by its controller (garbage collection),
	// never by inactivity, as upstream excludes them.
	if !r.Inactive.DeleteWhileInactive || t.Name().IsSegment() {
		delete(idle, name)
		return
	}
	p, c, err := t.Counts(ctx)
	inactive := err == nil && p == 0 && c == 0
	if inactive {
		st, err := t.Stats(ctx)
		inactive = err == nil
		for _, ss := range st.Subscriptions {
			if r.Inactive.InactiveTopicDeleteMode != "delete_when_subscriptions_caught_up" || ss.MsgBacklog > 0 {
				inactive = false
			}
		}
	}
	if !inactive {
		delete(idle, name)
		return
	}
	since, seen := idle[name]
	if !seen {
		idle[name] = time.Now()
		return
	}
	if time.Since(since) < time.Duration(r.Inactive.MaxInactiveDurationSeconds)*time.Second {
		return
	}
	delete(idle, name)
	if err := reg.DeleteTopic(ctx, name, false); err != nil {
		reg.log.Debug("delete inactive topic", "topic", name, "err", err)
		return
	}
	reg.m.inactiveDeleted.Inc()
	reg.log.Info("deleted inactive topic", "topic", name)
}

// expireSubscriptions deletes topic t's subscriptions that have had no consumer for longer
// than its subscription expiration time (Pulsar's checkInactiveSubscriptions; as there,
// the time without consumers is known to this broker only since it loaded the topic). idle
// holds, by topic and subscription, since when each has been seen without consumers.
func (reg *Registry) expireSubscriptions(ctx context.Context, t *topic.Topic, r policy.Resolved, idle map[string]time.Time) {
	prefix := t.Name().String() + "\x00"
	if r.SubExpiry <= 0 {
		for k := range idle {
			if strings.HasPrefix(k, prefix) {
				delete(idle, k)
			}
		}
		return
	}
	st, err := t.Stats(ctx)
	if err != nil {
		return
	}
	now := reg.cfg.Policies.Clock()
	for k := range idle {
		if _, ok := st.Subscriptions[strings.TrimPrefix(k, prefix)]; strings.HasPrefix(k, prefix) && !ok {
			delete(idle, k) // gone
		}
	}
	for name, ss := range st.Subscriptions {
		key := prefix + name
		if len(ss.Consumers) > 0 || !ss.IsDurable || name == compactionSub {
			delete(idle, key)
			continue
		}
		since, seen := idle[key]
		if !seen {
			idle[key] = now
			continue
		}
		if now.Sub(since) <= r.SubExpiry {
			continue
		}
		delete(idle, key)
		if err := t.DeleteSubscription(ctx, name, false); err != nil {
			reg.log.Debug("delete expired subscription", "topic", t.Name().String(), "subscription", name, "err", err)
			continue
		}
		reg.m.subscriptionsExpired.Inc()
		reg.log.Info("deleted expired subscription", "topic", t.Name().String(), "subscription", name)
	}
}
