package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/admin/jsonbody"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// checkTopic validates the topic of the path and returns its full name.
func checkTopic(r *http.Request) (topicname.Name, error) {
	n, err := topicname.Parse(fullName(r))
	if err != nil {
		return topicname.Name{}, restErr(http.StatusPreconditionFailed, "Topic name is not valid")
	}
	return n, nil
}

// partitions returns the partition count of a topic (0: not partitioned, or a partition).
func (h *handler) partitions(r *http.Request, n topicname.Name) (int, error) {
	if n.IsPartition() {
		return 0, nil
	}
	md, err := h.svc.PartitionedTopicMetadata(r.Context(), n.String())
	if err != nil {
		return 0, err
	}
	return md.Partitions, nil
}

// eachPartition calls f for every partition of a partitioned topic, in order.
func eachPartition(n topicname.Name, count int, f func(i int, name string) error) error {
	for i := range count {
		if err := f(i, n.String()+"-partition-"+strconv.Itoa(i)); err != nil {
			return err
		}
	}
	return nil
}

func (h *handler) createTopic(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	var props map[string]string // optional topic properties (topicprops.go)
	if _, err := readJSON(r, &props); err != nil {
		return err
	}
	if err := h.checkTopicCount(r.Context(), n, 1); err != nil {
		return err
	}
	if err := h.svc.CreateTopic(r.Context(), n.String()); err != nil {
		return err
	}
	if err := h.createdWithProperties(r, n.String(), props); err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) deleteTopic(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	force, err := boolQuery(r, "force")
	if err != nil {
		return err
	}
	if err := h.svc.DeleteTopic(r.Context(), n.String(), force); err != nil {
		return err
	}
	return noContent(w)
}

// partitionCountBody reads PUT/POST …/partitions bodies: a bare number (application/json)
// or {"partitions": N, "properties": {…}} (application/vnd.partitioned-topic-metadata+json),
// whose properties it returns too.
func partitionCountBody(r *http.Request) (int, map[string]string, error) {
	var raw json.RawMessage
	has, err := readJSON(r, &raw)
	if err != nil {
		return 0, nil, err
	}
	if !has {
		return 0, nil, restErr(http.StatusBadRequest, "the number of partitions is required")
	}
	var n int
	if err := jsonbody.Decode(raw, &n); err == nil {
		return n, nil, nil
	}
	var md struct {
		Partitions *int              `json:"partitions"`
		Properties map[string]string `json:"properties"`
	}
	if err := jsonbody.Decode(raw, &md); err != nil || md.Partitions == nil {
		return 0, nil, restErr(http.StatusBadRequest, "invalid number of partitions: %s", raw)
	}
	return *md.Partitions, md.Properties, nil
}

func (h *handler) createPartitioned(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	if strings.Contains(n.Local, "-partition-") {
		return restErr(http.StatusPreconditionFailed, "Partitioned Topic Name should not contain '-partition-'")
	}
	count, props, err := partitionCountBody(r)
	if err != nil {
		return err
	}
	if err := h.checkPartitionCount(count); err != nil {
		return err
	}
	if err := h.checkTopicCount(r.Context(), n, count); err != nil {
		return err
	}
	if err := h.svc.CreatePartitionedTopic(r.Context(), n.String(), count); err != nil {
		return err
	}
	if err := h.createdWithProperties(r, n.String(), props); err != nil {
		return err
	}
	return noContent(w)
}

// checkPartitionCount refuses, before anything is written, a partition count Pulsar
// refuses (406 with its reasons): not positive, or above maxNumPartitionsPerPartitionedTopic
// (here Options.MaxPartitions, PartitionCeiling when unset).
func (h *handler) checkPartitionCount(count int) error {
	if count <= 0 {
		return restErr(http.StatusNotAcceptable, "Number of partitions should be more than 0")
	}
	if count > h.maxPartitions {
		return restErr(http.StatusNotAcceptable, "Number of partitions should be less than or equal to %d", h.maxPartitions)
	}
	return nil
}

// checkTopicCount refuses, as Pulsar does (412), creating adding persistent topics (a
// partitioned topic's partitions) in n's namespace past its max_topics_per_namespace (unset:
// Options.MaxTopicsPerNamespace; 0: unlimited). The topics counted are the namespace's
// persistent ones, partitions included; a namespace that cannot be read is left to the
// creation's own answer.
func (h *handler) checkTopicCount(ctx context.Context, n topicname.Name, adding int) error {
	if n.Domain != topicname.Persistent {
		return nil
	}
	limit := h.maxTopics
	if pol, err := h.svc.Namespace(ctx, n.NamespaceName()); err != nil {
		return nil //nolint:nilerr // the creation answers (404 for a namespace that does not exist)
	} else if rec, err := policy.RecordOf(pol); err == nil {
		if raw, set := rec["max_topics_per_namespace"]; set {
			var v *int
			if json.Unmarshal(raw, &v) == nil && v != nil {
				limit = *v
			}
		}
	}
	if limit <= 0 {
		return nil
	}
	ts, err := h.svc.Topics(ctx, n.NamespaceName())
	if err != nil {
		return nil //nolint:nilerr // as above
	}
	if len(ts)+adding > limit {
		return restErr(http.StatusPreconditionFailed, "Exceed maximum number of topics in namespace.")
	}
	return nil
}

func (h *handler) updatePartitioned(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	count, _, err := partitionCountBody(r)
	if err != nil {
		return err
	}
	if err := h.checkPartitionCount(count); err != nil {
		return err
	}
	if cur, err := h.partitions(r, n); err == nil && count > cur {
		if err := h.checkTopicCount(r.Context(), n, count-cur); err != nil {
			return err
		}
	}
	if err := h.svc.UpdatePartitionedTopic(r.Context(), n.String(), count); err != nil {
		if errors.Is(err, api.ErrInvalidArgument) {
			return restErr(http.StatusUnprocessableEntity, "%s", reasonOf(err))
		}
		return err
	}
	return noContent(w)
}

func (h *handler) getPartitions(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	auto, err := boolQuery(r, "checkAllowAutoCreation")
	if err != nil {
		return err
	}
	var count int
	if ac, can := h.svc.(partitionsAutoCreator); auto && can && !n.IsPartition() {
		count, err = ac.PartitionsAutoCreate(r.Context(), n.String())
	} else {
		count, err = h.partitions(r, n)
	}
	if err != nil {
		return err
	}
	return ok(w, api.PartitionedTopicMetadata{Partitions: count})
}

// partitionsAutoCreator answers a client's partitioned-metadata lookup over HTTP
// (checkAllowAutoCreation=true): a topic that does not exist, in a namespace that
// auto-creates partitioned topics, is created partitioned (broker.Service).
type partitionsAutoCreator interface {
	PartitionsAutoCreate(ctx context.Context, topic string) (int, error)
}

func (h *handler) deletePartitioned(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	force, err := boolQuery(r, "force")
	if err != nil {
		return err
	}
	if err := h.svc.DeletePartitionedTopic(r.Context(), n.String(), force); err != nil {
		return err
	}
	return noContent(w)
}

// PartitionStatsService is implemented by services that fetch a partition's stats from the
// broker serving it (*broker.Service does): partitioned-stats then aggregates on the
// broker asked, as Pulsar's does, instead of redirecting for each partition.
type PartitionStatsService interface {
	PartitionStats(ctx context.Context, topic string) (api.TopicStats, error)
}

// PartitionedTopicStats is the answer of …/partitioned-stats (and of …/stats for a
// partitioned topic): the partitions' stats summed, as Pulsar's PartitionedTopicStatsImpl.
type PartitionedTopicStats struct {
	api.TopicStats
	Metadata   api.PartitionedTopicMetadata `json:"metadata"`
	Partitions map[string]api.TopicStats    `json:"partitions,omitempty"`
}

// aggregate adds one partition's stats to the partitioned topic's.
func (p *PartitionedTopicStats) aggregate(s api.TopicStats) {
	a := &p.TopicStats
	a.MsgRateIn += s.MsgRateIn
	a.MsgThroughputIn += s.MsgThroughputIn
	a.MsgRateOut += s.MsgRateOut
	a.MsgThroughputOut += s.MsgThroughputOut
	a.BytesInCounter += s.BytesInCounter
	a.MsgInCounter += s.MsgInCounter
	a.BytesOutCounter += s.BytesOutCounter
	a.MsgOutCounter += s.MsgOutCounter
	a.StorageSize += s.StorageSize
	a.BacklogSize += s.BacklogSize
	a.WaitingPublishers += s.WaitingPublishers
	a.Publishers = append(a.Publishers, s.Publishers...)
	a.LastPublishTimestamp = max(a.LastPublishTimestamp, s.LastPublishTimestamp)
	a.Terminated = a.Terminated || s.Terminated
	if a.DeduplicationStatus == "" {
		a.DeduplicationStatus = s.DeduplicationStatus
	}
	if a.MsgInCounter > 0 {
		a.AverageMsgSize = float64(a.BytesInCounter) / float64(a.MsgInCounter)
	}
	aggregateReplication(a.Replication, s.Replication)
	for name, ss := range s.Subscriptions {
		t, seen := a.Subscriptions[name]
		if !seen {
			a.Subscriptions[name] = ss
			continue
		}
		t.MsgRateOut += ss.MsgRateOut
		t.MsgThroughputOut += ss.MsgThroughputOut
		t.BytesOutCounter += ss.BytesOutCounter
		t.MsgOutCounter += ss.MsgOutCounter
		t.MsgRateRedeliver += ss.MsgRateRedeliver
		t.MessageAckRate += ss.MessageAckRate
		t.MsgBacklog += ss.MsgBacklog
		t.MsgBacklogNoDelayed += ss.MsgBacklogNoDelayed
		t.BacklogSize += ss.BacklogSize
		t.MsgDelayed += ss.MsgDelayed
		t.UnackedMessages += ss.UnackedMessages
		t.Consumers = append(t.Consumers, ss.Consumers...)
		t.LastAckedTimestamp = max(t.LastAckedTimestamp, ss.LastAckedTimestamp)
		t.LastConsumedTimestamp = max(t.LastConsumedTimestamp, ss.LastConsumedTimestamp)
		t.NonContiguousDeletedMessagesRanges += ss.NonContiguousDeletedMessagesRanges
		a.Subscriptions[name] = t
	}
}

func (h *handler) partitionedStatsOf(r *http.Request, n topicname.Name, count int, perPartition bool) (*PartitionedTopicStats, error) {
	ps := &PartitionedTopicStats{Metadata: api.PartitionedTopicMetadata{Partitions: count}}
	ps.Publishers = []api.PublisherStats{}
	ps.Subscriptions = map[string]api.SubscriptionStats{}
	ps.Replication = map[string]any{}
	if perPartition {
		ps.Partitions = map[string]api.TopicStats{}
	}
	stats := h.svc.TopicStats
	if pss, ok := h.svc.(PartitionStatsService); ok {
		stats = pss.PartitionStats
	}
	excluded, err := statsExclusions(r)
	if err != nil {
		return nil, err
	}
	err = eachPartition(n, count, func(_ int, name string) error {
		s, err := stats(r.Context(), name)
		if errors.Is(err, api.ErrTopicNotFound) {
			return nil // a partition not created yet: no stats
		}
		if err != nil {
			return err
		}
		s = excluded(s)
		ps.aggregate(s)
		if perPartition {
			ps.Partitions[name] = s
		}
		return nil
	})
	return ps, err
}

func (h *handler) stats(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	count, err := h.partitions(r, n)
	if err != nil {
		return err
	}
	if count > 0 {
		ps, err := h.partitionedStatsOf(r, n, count, false)
		if err != nil {
			return err
		}
		return ok(w, ps)
	}
	excluded, err := statsExclusions(r)
	if err != nil {
		return err
	}
	s, err := h.svc.TopicStats(r.Context(), n.String())
	if err != nil {
		return err
	}
	return ok(w, excluded(s))
}

// statsExclusions reads the stats requests' excludePublishers and excludeConsumers
// parameters (Pulsar's GetStatsOptions) and returns what removes those lists from a topic's
// stats: the publishers, and every subscription's consumers (empty lists, as Pulsar's).
func statsExclusions(r *http.Request) (func(api.TopicStats) api.TopicStats, error) {
	noPublishers, err := boolQuery(r, "excludePublishers")
	if err != nil {
		return nil, err
	}
	noConsumers, err := boolQuery(r, "excludeConsumers")
	if err != nil {
		return nil, err
	}
	return func(s api.TopicStats) api.TopicStats {
		if noPublishers {
			s.Publishers = []api.PublisherStats{}
		}
		if noConsumers {
			subs := make(map[string]api.SubscriptionStats, len(s.Subscriptions))
			for name, ss := range s.Subscriptions {
				ss.Consumers = []api.ConsumerStats{}
				subs[name] = ss
			}
			s.Subscriptions = subs
		}
		return s
	}, nil
}

func (h *handler) partitionedStats(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	perPartition := true
	if v := r.URL.Query().Get("perPartition"); v != "" {
		if perPartition, err = strconv.ParseBool(v); err != nil {
			return restErr(http.StatusBadRequest, "invalid value %q for query parameter perPartition", v)
		}
	}
	count, err := h.partitions(r, n)
	if err != nil {
		return err
	}
	if count == 0 {
		return restErr(http.StatusNotFound, "Partitioned Topic %s not found", n)
	}
	ps, err := h.partitionedStatsOf(r, n, count, perPartition)
	if err != nil {
		return err
	}
	return ok(w, ps)
}

// PartitionedInternalStats is the answer of …/partitioned-internalStats.
type PartitionedInternalStats struct {
	Metadata   api.PartitionedTopicMetadata `json:"metadata"`
	Partitions map[string]api.InternalStats `json:"partitions"`
}

func (h *handler) partitionedInternal(r *http.Request, n topicname.Name, count int) (*PartitionedInternalStats, error) {
	out := &PartitionedInternalStats{Metadata: api.PartitionedTopicMetadata{Partitions: count},
		Partitions: map[string]api.InternalStats{}}
	err := eachPartition(n, count, func(_ int, name string) error {
		s, err := h.svc.InternalStats(r.Context(), name)
		if errors.Is(err, api.ErrTopicNotFound) {
			return nil
		}
		out.Partitions[name] = s
		return err
	})
	return out, err
}

func (h *handler) internalStats(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	count, err := h.partitions(r, n)
	if err != nil {
		return err
	}
	if count > 0 {
		out, err := h.partitionedInternal(r, n, count)
		if err != nil {
			return err
		}
		return ok(w, out)
	}
	s, err := h.svc.InternalStats(r.Context(), n.String())
	if err != nil {
		return err
	}
	return ok(w, s)
}

func (h *handler) partitionedInternalStats(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	count, err := h.partitions(r, n)
	if err != nil {
		return err
	}
	if count == 0 {
		return restErr(http.StatusNotFound, "Partitioned Topic %s not found", n)
	}
	out, err := h.partitionedInternal(r, n, count)
	if err != nil {
		return err
	}
	return ok(w, out)
}

// notOnPartitioned refuses an operation on a partitioned topic's base name, as Pulsar does.
func (h *handler) notOnPartitioned(r *http.Request, n topicname.Name, what string) error {
	count, err := h.partitions(r, n)
	if err != nil {
		return err
	}
	if count > 0 {
		return restErr(http.StatusMethodNotAllowed, "%s on a partitioned topic is not allowed", what)
	}
	return nil
}

func (h *handler) lastMessageID(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	if err := h.notOnPartitioned(r, n, "GetLastMessageId"); err != nil {
		return err
	}
	id, err := h.svc.LastMessageID(r.Context(), n.String())
	if err != nil {
		return err
	}
	return ok(w, id)
}

func (h *handler) unload(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	count, err := h.partitions(r, n)
	if err != nil {
		return err
	}
	if count > 0 {
		err = eachPartition(n, count, func(_ int, name string) error { return h.svc.Unload(r.Context(), name) })
	} else {
		err = h.svc.Unload(r.Context(), n.String())
	}
	if err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) terminate(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	if err := h.notOnPartitioned(r, n, "Termination"); err != nil {
		return err
	}
	id, err := h.svc.Terminate(r.Context(), n.String())
	if err != nil {
		return err
	}
	return ok(w, id)
}

func (h *handler) terminatePartitions(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	count, err := h.partitions(r, n)
	if err != nil {
		return err
	}
	if count == 0 {
		return restErr(http.StatusNotFound, "Partitioned Topic %s not found", n)
	}
	ids := map[string]api.MessageID{}
	err = eachPartition(n, count, func(i int, name string) error {
		id, err := h.svc.Terminate(r.Context(), name)
		ids[strconv.Itoa(i)] = id
		return err
	})
	if err != nil {
		return err
	}
	return ok(w, ids)
}

// Subscriptions.

func (h *handler) subscriptions(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	count, err := h.partitions(r, n)
	if err != nil {
		return err
	}
	if count == 0 {
		subs, err := h.svc.Subscriptions(r.Context(), n.String())
		if err != nil {
			return err
		}
		return ok(w, nonNil(subs))
	}
	seen := map[string]bool{}
	all := []string{}
	err = eachPartition(n, count, func(_ int, name string) error {
		subs, err := h.svc.Subscriptions(r.Context(), name)
		if errors.Is(err, api.ErrTopicNotFound) {
			return nil
		}
		for _, s := range subs {
			if !seen[s] {
				seen[s] = true
				all = append(all, s)
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	return ok(w, all)
}

// messageIDBody is Pulsar's ResetCursorData / MessageIdImpl JSON.
type messageIDBody struct {
	LedgerID       *int64 `json:"ledgerId"`
	EntryID        *int64 `json:"entryId"`
	PartitionIndex *int32 `json:"partitionIndex"`
	BatchIndex     *int32 `json:"batchIndex"`
	IsExcluded     bool   `json:"isExcluded"`
}

// messageID reads an optional message id body; def when there is none.
func messageIDFromBody(r *http.Request, def api.MessageID) (api.MessageID, error) {
	var b messageIDBody
	has, err := readJSON(r, &b)
	if err != nil || !has {
		return def, err
	}
	if b.LedgerID == nil || b.EntryID == nil {
		return def, restErr(http.StatusBadRequest, "a message id needs ledgerId and entryId")
	}
	id := api.MessageID{LedgerID: *b.LedgerID, EntryID: *b.EntryID, Partition: -1, BatchIndex: -1}
	if b.PartitionIndex != nil {
		id.Partition = *b.PartitionIndex
	}
	if b.BatchIndex != nil {
		id.BatchIndex = *b.BatchIndex
	}
	special := id.LedgerID == api.Earliest.LedgerID || id.LedgerID == api.Latest.LedgerID
	if b.IsExcluded && !special {
		// Start after the message: the next batch index, or the next entry.
		if id.BatchIndex >= 0 {
			id.BatchIndex++
		} else {
			id.EntryID++
		}
	}
	return id, nil
}

func (h *handler) createSubscription(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	sub := r.PathValue("sub")
	at, err := messageIDFromBody(r, api.Latest)
	if err != nil {
		return err
	}
	count, err := h.partitions(r, n)
	if err != nil {
		return err
	}
	if count > 0 {
		err = eachPartition(n, count, func(_ int, name string) error {
			return h.svc.CreateSubscription(r.Context(), name, sub, at)
		})
	} else {
		err = h.svc.CreateSubscription(r.Context(), n.String(), sub, at)
	}
	if err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) deleteSubscription(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	force, err := boolQuery(r, "force")
	if err != nil {
		return err
	}
	sub := r.PathValue("sub")
	count, err := h.partitions(r, n)
	if err != nil {
		return err
	}
	if count > 0 {
		err = eachPartition(n, count, func(_ int, name string) error {
			return h.svc.DeleteSubscription(r.Context(), name, sub, force)
		})
	} else {
		err = h.svc.DeleteSubscription(r.Context(), n.String(), sub, force)
	}
	if err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) resetCursorToTime(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	ms, err := strconv.ParseInt(r.PathValue("timestamp"), 10, 64)
	if err != nil || ms < 0 {
		return restErr(http.StatusBadRequest, "invalid timestamp %q: want milliseconds since the epoch", r.PathValue("timestamp"))
	}
	at, sub := time.UnixMilli(ms), r.PathValue("sub")
	count, err := h.partitions(r, n)
	if err != nil {
		return err
	}
	if count > 0 {
		err = eachPartition(n, count, func(_ int, name string) error {
			return h.svc.ResetCursorToTime(r.Context(), name, sub, at)
		})
	} else {
		err = h.svc.ResetCursorToTime(r.Context(), n.String(), sub, at)
	}
	if err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) resetCursor(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	var none api.MessageID
	id, err := messageIDFromBody(r, none)
	if err != nil {
		return err
	}
	if id == none {
		return restErr(http.StatusBadRequest, "a message id body is required")
	}
	if err := h.notOnPartitioned(r, n, "Reset-cursor at a message id"); err != nil {
		return err
	}
	if err := h.svc.ResetCursor(r.Context(), n.String(), r.PathValue("sub"), id); err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) skip(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	count, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || count < 0 {
		return restErr(http.StatusBadRequest, "invalid number of messages %q", r.PathValue("n"))
	}
	if err := h.notOnPartitioned(r, n, "Skip messages"); err != nil {
		return err
	}
	if err := h.svc.SkipMessages(r.Context(), n.String(), r.PathValue("sub"), count); err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) skipAll(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	sub := r.PathValue("sub")
	count, err := h.partitions(r, n)
	if err != nil {
		return err
	}
	if count > 0 {
		err = eachPartition(n, count, func(_ int, name string) error { return h.svc.ClearBacklog(r.Context(), name, sub) })
	} else {
		err = h.svc.ClearBacklog(r.Context(), n.String(), sub)
	}
	if err != nil {
		return err
	}
	return noContent(w)
}

// LookupData is the answer of /lookup/v2/topic/…, as the Go client's HTTP lookup reads it.
type LookupData struct {
	BrokerURL    string `json:"brokerUrl"`
	BrokerURLTLS string `json:"brokerUrlTls"`
	HTTPURL      string `json:"httpUrl"`
	HTTPURLTLS   string `json:"httpUrlTls"`
	NativeURL    string `json:"nativeUrl"`
}

// listenerName is the advertised listener an HTTP lookup names: Pulsar's listenerName
// query parameter, else its X-Pulsar-ListenerName header ("": the internal listener).
func listenerName(r *http.Request) string {
	if n := r.URL.Query().Get("listenerName"); n != "" {
		return n
	}
	return r.Header.Get("X-Pulsar-ListenerName")
}

func (h *handler) lookup(w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	res, err := h.svc.Lookup(r.Context(), n.String())
	if err != nil {
		return err
	}
	if res.BrokerInfo, err = res.BrokerInfo.ForListener(listenerName(r)); err != nil {
		return err
	}
	return ok(w, LookupData{BrokerURL: res.ServiceURL, BrokerURLTLS: res.ServiceURLTLS, HTTPURL: res.HTTPURL,
		HTTPURLTLS: res.HTTPURLTLS, NativeURL: res.ServiceURL})
}
