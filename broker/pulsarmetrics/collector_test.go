package pulsarmetrics_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/pulsarmetrics"
	"github.com/magnetar-io/magnetar/broker/topic"
)

// fakeSource serves fixed topic statistics.
type fakeSource []fakeTopic

type fakeTopic struct {
	name string
	wq   int
	st   api.TopicStats
}

func (f fakeSource) ScrapeTopics(_ context.Context, fn func(string, int, api.TopicStats)) {
	for _, t := range f {
		fn(t.name, t.wq, t.st)
	}
}

// source has two topics in public/default (one persistent with two subscriptions and write
// quorum 2, one non-persistent) and one in t1/ns1.
func source() fakeSource {
	return fakeSource{
		{name: "persistent://public/default/a", wq: 2, st: api.TopicStats{
			MsgRateIn: 10, MsgThroughputIn: 1000, MsgRateOut: 4, MsgThroughputOut: 400, MsgInCounter: 100, BytesInCounter: 10000,
			MsgOutCounter: 40, BytesOutCounter: 4000, AverageMsgSize: 100, StorageSize: 5000,
			Publishers:            []api.PublisherStats{{ProducerName: "p"}},
			BacklogQuotaLimitSize: -1, BacklogQuotaLimitTime: -1, PublishRateLimitedTimes: 3,
			Subscriptions: map[string]api.SubscriptionStats{
				"s1": {MsgRateOut: 4, MsgThroughputOut: 400, MsgOutCounter: 40, BytesOutCounter: 4000, MsgBacklog: 60,
					MsgBacklogNoDelayed: 58, MsgDelayed: 2, BacklogSize: 6000, UnackedMessages: 5, MessageAckRate: 3,
					BlockedSubscriptionOnUnackedMsgs: true, Consumers: []api.ConsumerStats{{}, {}}},
				"s2": {MsgBacklog: 100, BacklogSize: 10000},
			}}},
		{name: "non-persistent://public/default/b", st: api.TopicStats{MsgRateIn: 1, MsgInCounter: 7,
			Subscriptions: map[string]api.SubscriptionStats{"r": {MsgDropRate: 0.5, Consumers: []api.ConsumerStats{{}}}}}},
		{name: "persistent://t1/ns1/c", wq: 1, st: api.TopicStats{MsgRateIn: 2, StorageSize: 300}},
	}
}

func gather(t *testing.T, c prometheus.Collector) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err) // help, type and duplicate checks across the label sets
	}
	return mfs
}

// value returns the sample of name whose labels are exactly labels ("k=v" pairs).
func value(mfs []*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, l.GetName()+"="+l.GetValue())
			}
			if strings.Join(got, ",") != strings.Join(labels, ",") { // both sorted by label name
				continue
			}
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			}
		}
	}
	return 0, false
}

func want(t *testing.T, mfs []*dto.MetricFamily, v float64, name string, labels ...string) {
	t.Helper()
	got, ok := value(mfs, name, labels...)
	if !ok {
		t.Errorf("%s{%s}: no sample", name, strings.Join(labels, ","))
	} else if math.Abs(got-v) > 1e-9 {
		t.Errorf("%s{%s} = %v, want %v", name, strings.Join(labels, ","), got, v)
	}
}

// withLabel counts the samples of name that have label l.
func withLabel(mfs []*dto.MetricFamily, name, l string) int {
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == l {
					n++
				}
			}
		}
	}
	return n
}

// TestTopicLevel: per topic and per subscription, with Pulsar's labels and aggregation
// rules; the broker-wide zeros; topics per namespace; the managed ledgers per namespace.
func TestTopicLevel(t *testing.T) {
	mfs := gather(t, pulsarmetrics.New(pulsarmetrics.Config{Cluster: "c1", Source: source()}))
	cl, ns := "cluster=c1", "namespace=public/default"
	ta := "topic=persistent://public/default/a"
	want(t, mfs, 0, "pulsar_rate_in", cl)
	want(t, mfs, 0, "pulsar_msg_backlog", cl)
	want(t, mfs, 10, "pulsar_rate_in", cl, ns, ta)
	want(t, mfs, 400, "pulsar_throughput_out", cl, ns, ta)
	want(t, mfs, 2, "pulsar_subscriptions_count", cl, ns, ta)
	want(t, mfs, 1, "pulsar_producers_count", cl, ns, ta)
	want(t, mfs, 2, "pulsar_consumers_count", cl, ns, ta)
	want(t, mfs, 10000, "pulsar_storage_size", cl, ns, ta) // two replicas
	want(t, mfs, 5000, "pulsar_storage_logical_size", cl, ns, ta)
	want(t, mfs, 160, "pulsar_msg_backlog", cl, ns, ta)            // summed over the subscriptions
	want(t, mfs, 10000, "pulsar_storage_backlog_size", cl, ns, ta) // the slowest subscription's
	want(t, mfs, 3, "pulsar_publish_rate_limit_times", cl, ns, ta)
	want(t, mfs, -1, "pulsar_storage_backlog_quota_limit", cl, ns, ta)
	want(t, mfs, 100, "pulsar_in_messages_total", cl, ns, ta)
	want(t, mfs, 10000, "pulsar_in_bytes_total", cl, ns, ta)
	s1 := "subscription=s1"
	want(t, mfs, 60, "pulsar_subscription_back_log", cl, ns, s1, ta)
	want(t, mfs, 58, "pulsar_subscription_back_log_no_delayed", cl, ns, s1, ta)
	want(t, mfs, 1, "pulsar_subscription_blocked_on_unacked_messages", cl, ns, s1, ta)
	want(t, mfs, 4, "pulsar_subscription_msg_rate_out", cl, ns, s1, ta)
	want(t, mfs, 40, "pulsar_out_messages_total", cl, ns, s1, ta)
	want(t, mfs, 2, "pulsar_subscription_consumers_count", cl, ns, s1, ta)
	want(t, mfs, 0.5, "pulsar_subscription_msg_drop_rate", cl, ns, "subscription=r", "topic=non-persistent://public/default/b")
	want(t, mfs, 2, "pulsar_topics_count", cl, ns)
	want(t, mfs, 1, "pulsar_topics_count", cl, "namespace=t1/ns1")
	// Managed ledgers: persistent topics only, by Pulsar's managed-ledger namespace.
	want(t, mfs, 2, "pulsar_ml_count", cl)
	mlns := "namespace=public/default/persistent"
	want(t, mfs, 1000, "pulsar_ml_AddEntryBytesRate", cl, mlns)
	want(t, mfs, 2000, "pulsar_ml_AddEntryWithReplicasBytesRate", cl, mlns)
	want(t, mfs, 10, "pulsar_ml_AddEntryMessagesRate", cl, mlns)
	want(t, mfs, 160, "pulsar_ml_NumberOfMessagesInBacklog", cl, mlns)
	want(t, mfs, 10000, "pulsar_ml_StoredMessagesSize", cl, mlns)
	want(t, mfs, 300, "pulsar_ml_StoredMessagesSize", cl, "namespace=t1/ns1/persistent")
	// The broker's sums.
	want(t, mfs, 3, "pulsar_broker_topics_count", cl)
	want(t, mfs, 13, "pulsar_broker_rate_in", cl)
	want(t, mfs, 3, "pulsar_broker_consumers_count", cl)
	want(t, mfs, 160, "pulsar_broker_msg_backlog", cl)
	want(t, mfs, 10300, "pulsar_broker_storage_size", cl)
	want(t, mfs, 5300, "pulsar_broker_storage_logical_size", cl)
	if _, ok := value(mfs, "pulsar_rate_in", cl, ns); ok {
		t.Error("topic level: a namespace-level pulsar_rate_in as well")
	}
	for _, mf := range mfs {
		if n := mf.GetName(); strings.HasPrefix(n, "pulsar_in_") && mf.GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s is a %v, want a counter", n, mf.GetType())
		}
	}
}

// TestNamespaceLevel: exposeTopicLevelMetricsInPrometheus=false sums the topics per
// namespace and exports no topic label.
func TestNamespaceLevel(t *testing.T) {
	mfs := gather(t, pulsarmetrics.New(pulsarmetrics.Config{Cluster: "c1", NamespaceLevel: true, Source: source()}))
	cl, ns := "cluster=c1", "namespace=public/default"
	want(t, mfs, 11, "pulsar_rate_in", cl, ns)
	want(t, mfs, 2, "pulsar_topics_count", cl, ns)
	want(t, mfs, 3, "pulsar_subscriptions_count", cl, ns)
	want(t, mfs, 3, "pulsar_consumers_count", cl, ns)
	want(t, mfs, 107, "pulsar_in_messages_total", cl, ns)
	want(t, mfs, 40, "pulsar_out_messages_total", cl, ns)
	want(t, mfs, 3, "pulsar_consumer_msg_ack_rate", cl, ns)
	want(t, mfs, 2, "pulsar_subscription_delayed", cl, ns)
	want(t, mfs, 160, "pulsar_msg_backlog", cl, ns, "remote_cluster=local")
	want(t, mfs, 2, "pulsar_rate_in", cl, "namespace=t1/ns1")
	want(t, mfs, 0, "pulsar_rate_in", cl)
	for _, n := range []string{"pulsar_rate_in", "pulsar_msg_backlog", "pulsar_subscription_back_log", "pulsar_out_bytes_total"} {
		if k := withLabel(mfs, n, "topic"); k != 0 {
			t.Errorf("namespace level: %d samples of %s have a topic label", k, n)
		}
	}
}

// fakeLatency is a fixed cumulative histogram.
type fakeLatency struct{ h pulsarmetrics.Histogram }

func (f *fakeLatency) Histogram() (pulsarmetrics.Histogram, bool) { return f.h, true }

// TestLatencyBuckets: the broker's histogram becomes Pulsar's buckets of the last stats
// period, counted between Pulsar's bounds (interpolated within the source buckets).
func TestLatencyBuckets(t *testing.T) {
	now := time.Unix(1000, 0)
	lat := &fakeLatency{}
	c := pulsarmetrics.New(pulsarmetrics.Config{Cluster: "c1", Latency: lat, StatsPeriod: time.Minute,
		Now: func() time.Time { return now }})
	cl := "cluster=c1"
	// Bounds 0.4 ms, 0.6 ms, 2 ms, 1 s, 2 s: 10 adds ≤ 0.4 ms, 10 in (0.4, 0.6], 20 in
	// (0.6, 2], 4 in (2 ms, 1 s], none in (1 s, 2 s] and 6 beyond.
	lat.h = pulsarmetrics.Histogram{Bounds: []float64{0.0004, 0.0006, 0.002, 1, 2},
		Cumulative: []uint64{10, 20, 40, 44, 44}, Count: 50, Sum: 3.5}
	mfs := gather(t, c)
	want(t, mfs, 0, "pulsar_storage_write_latency_count", cl) // the first period has not ended
	want(t, mfs, 0, "pulsar_storage_write_latency_le_0_5", cl)

	now = now.Add(time.Minute)
	mfs = gather(t, c)
	want(t, mfs, 50, "pulsar_storage_write_latency_count", cl)
	want(t, mfs, 3.5e6, "pulsar_storage_write_latency_sum", cl) // microseconds
	want(t, mfs, 15, "pulsar_storage_write_latency_le_0_5", cl) // 10 + half of (0.4, 0.6]
	want(t, mfs, 11, "pulsar_storage_write_latency_le_1", cl)   // 20 + 20·0.4/1.4 ≈ 25.7 → 26, minus the 15 below
	want(t, mfs, 6, "pulsar_storage_write_latency_overflow", cl)
	want(t, mfs, 15.0/60, "pulsar_ml_AddEntryLatencyBuckets", cl, "quantile=0.0_0.5")
	want(t, mfs, 6.0/60, "pulsar_ml_AddEntryLatencyBuckets_OVERFLOW", cl)

	// The next period: only what was added since.
	lat.h.Cumulative = []uint64{12, 22, 42, 46, 46}
	lat.h.Count, lat.h.Sum = 52, 3.6
	now = now.Add(30 * time.Second)
	mfs = gather(t, c)
	want(t, mfs, 50, "pulsar_storage_write_latency_count", cl) // the period in progress is not shown
	now = now.Add(30 * time.Second)
	mfs = gather(t, c)
	want(t, mfs, 2, "pulsar_storage_write_latency_count", cl)
	want(t, mfs, 2, "pulsar_storage_write_latency_le_0_5", cl)
	want(t, mfs, 0, "pulsar_storage_write_latency_overflow", cl)
}

// TestTapKeepsPublishLatency: the tap keeps the publish-latency histogram the topics'
// metrics register (the name pulsarmetrics reads is the one broker/topic uses), and no
// other.
func TestTapKeepsPublishLatency(t *testing.T) {
	reg := prometheus.NewRegistry()
	tap := pulsarmetrics.NewTap(reg, pulsarmetrics.PublishLatencyName)
	if _, ok := tap.Histogram(); ok {
		t.Fatal("a histogram before any registration")
	}
	other := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "other_seconds", Help: "x"})
	tap.MustRegister(other)
	if _, ok := tap.Histogram(); ok {
		t.Fatal("the tap kept a histogram of another name")
	}
	topic.NewMetrics(tap)
	h, ok := tap.Histogram()
	if !ok || len(h.Bounds) == 0 || len(h.Bounds) != len(h.Cumulative) || h.Count != 0 {
		t.Fatalf("publish latency not kept: %+v, %v", h, ok)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == pulsarmetrics.PublishLatencyName
	}
	if !found {
		t.Fatal("the tap did not register the histogram on its registry")
	}
}
