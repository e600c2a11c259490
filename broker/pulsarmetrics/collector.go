package pulsarmetrics

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// Source walks the broker's loaded topics (package broker/topicreg implements it).
type Source interface {
	// ScrapeTopics calls fn, on the caller's goroutine, with every loaded topic's name, the
	// write quorum of its ledgers (0 for a non-persistent topic) and its statistics. A
	// topic whose statistics cannot be read before ctx ends is left out.
	ScrapeTopics(ctx context.Context, fn func(name string, writeQuorum int, st api.TopicStats))
}

// Config configures a Collector.
type Config struct {
	// Cluster is the value of every sample's cluster label.
	Cluster string
	// NamespaceLevel aggregates the topic metrics per namespace (Pulsar's
	// exposeTopicLevelMetricsInPrometheus=false); false exports them per topic.
	NamespaceLevel bool
	// Source lists the loaded topics and their statistics.
	Source Source
	// Latency, if set, is the broker's publish-latency histogram (usually a *Tap).
	Latency LatencySource
	// StatsPeriod is the window of the latency buckets (Pulsar's
	// statsUpdateFrequencyInSecs); 0 means 60 s.
	StatsPeriod time.Duration
	// ScrapeTimeout bounds the reading of the topics' statistics in one scrape; 0 means
	// 10 s.
	ScrapeTimeout time.Duration
	// Now is the clock of the stats periods (nil: time.Now).
	Now func() time.Time
}

// Collector is a prometheus.Collector of Pulsar's metric names, computed at scrape time.
// It is safe for concurrent use.
type Collector struct {
	cfg   Config
	descs descCache

	mu struct {
		sync.Mutex // guards the fields below
		latency    *window
	}
}

// New returns a Collector; register it with prometheus.Registerer.MustRegister.
func New(cfg Config) *Collector {
	if cfg.StatsPeriod <= 0 {
		cfg.StatsPeriod = 60 * time.Second
	}
	if cfg.ScrapeTimeout <= 0 {
		cfg.ScrapeTimeout = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Collector{cfg: cfg}
	c.mu.latency = newWindow(cfg.Now(), cfg.StatsPeriod)
	return c
}

// Describe implements prometheus.Collector. It sends nothing: the Collector is unchecked,
// because Pulsar emits a name with more than one label set (see the package doc).
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Label sets.
var (
	lCluster    = []string{"cluster"}
	lNamespace  = []string{"cluster", "namespace"}
	lNSBacklog  = []string{"cluster", "namespace", "remote_cluster"}
	lTopic      = []string{"cluster", "namespace", "topic"}
	lSub        = []string{"cluster", "namespace", "topic", "subscription"}
	lMLQuantile = []string{"cluster", "quantile"}
)

// emitter sends samples to a Collect channel.
type emitter struct {
	c  *Collector
	ch chan<- prometheus.Metric
}

func (e emitter) emit(name string, labels []string, v float64, values ...string) {
	d := e.c.descs.get(name, labels)
	t := prometheus.GaugeValue
	if isCounter(name) {
		t = prometheus.CounterValue
	}
	e.ch <- prometheus.MustNewConstMetric(d, t, v, values...)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	e := emitter{c, ch}
	cl := c.cfg.Cluster
	for _, n := range brokerZeros {
		e.emit(n, lCluster, 0, cl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ScrapeTimeout)
	defer cancel()
	nss := map[string]*nsAgg{}
	all := &nsAgg{} // the broker's sums
	mls := map[string]*mlAgg{}
	mlCount := 0
	if c.cfg.Source != nil {
		c.cfg.Source.ScrapeTopics(ctx, func(name string, wq int, st api.TopicStats) {
			n, err := topicname.Parse(name)
			if err != nil {
				return
			}
			ns := n.Tenant + "/" + n.Namespace
			t := topicFigures(st, wq)
			a := nss[ns]
			if a == nil {
				a = &nsAgg{}
				nss[ns] = a
			}
			a.add(t, st)
			all.add(t, st)
			if n.IsPersistent() {
				mlCount++
				key := ns + "/persistent"
				m := mls[key]
				if m == nil {
					m = &mlAgg{}
					mls[key] = m
				}
				m.add(t)
			}
			rs := replicationOf(st)
			if a.repl == nil && len(rs) > 0 {
				a.repl = map[string]*replFigures{}
			}
			addRepl(a.repl, rs)
			if !c.cfg.NamespaceLevel {
				e.topic(cl, ns, n.String(), t, st)
				e.replication(lTopicRemote, rs, cl, ns, n.String())
			}
		})
	}
	for _, ns := range sortedKeys(nss) {
		a := nss[ns]
		if c.cfg.NamespaceLevel {
			e.namespace(cl, ns, a)
			e.replication(lNSRemote, a.repl, cl, ns)
		} else {
			e.emit("pulsar_topics_count", lNamespace, float64(a.topics), cl, ns)
		}
	}
	e.broker(cl, all)
	e.emit("pulsar_ml_count", lCluster, float64(mlCount), cl)
	for _, ns := range sortedKeys(mls) {
		e.managedLedger(cl, ns, mls[ns])
	}
	c.collectLatency(e)
}

// figures are one topic's values, as Pulsar's TopicStats aggregates them.
type figures struct {
	subscriptions, producers, consumers int
	rateIn, rateOut                     float64
	throughputIn, throughputOut         float64
	storageSize, logicalSize            int64
	backlog, backlogSize                int64
	ackRate, delayed                    float64
}

func topicFigures(st api.TopicStats, wq int) figures {
	if wq < 1 {
		wq = 1
	}
	f := figures{
		subscriptions: len(st.Subscriptions), producers: len(st.Publishers),
		rateIn: st.MsgRateIn, rateOut: st.MsgRateOut, throughputIn: st.MsgThroughputIn, throughputOut: st.MsgThroughputOut,
		storageSize: st.StorageSize * int64(wq), logicalSize: st.StorageSize,
	}
	for _, s := range st.Subscriptions {
		f.consumers += len(s.Consumers)
		f.backlog += s.MsgBacklog
		f.backlogSize = max(f.backlogSize, s.BacklogSize) // the slowest subscription's, as the managed ledger estimates it
		f.ackRate += s.MessageAckRate
		f.delayed += float64(s.MsgDelayed)
	}
	return f
}

// topic emits one topic's metrics and its subscriptions'.
func (e emitter) topic(cl, ns, tn string, f figures, st api.TopicStats) {
	g := func(name string, v float64) { e.emit(name, lTopic, v, cl, ns, tn) }
	g("pulsar_subscriptions_count", float64(f.subscriptions))
	g("pulsar_producers_count", float64(f.producers))
	g("pulsar_consumers_count", float64(f.consumers))
	g("pulsar_rate_in", f.rateIn)
	g("pulsar_rate_out", f.rateOut)
	g("pulsar_throughput_in", f.throughputIn)
	g("pulsar_throughput_out", f.throughputOut)
	g("pulsar_average_msg_size", st.AverageMsgSize)
	g("pulsar_storage_size", float64(f.storageSize))
	g("pulsar_storage_logical_size", float64(f.logicalSize))
	g("pulsar_msg_backlog", float64(f.backlog))
	g("pulsar_storage_write_rate", f.rateIn)
	g("pulsar_storage_read_rate", f.rateOut)
	g("pulsar_storage_backlog_size", float64(f.backlogSize))
	g("pulsar_publish_rate_limit_times", float64(st.PublishRateLimitedTimes))
	g("pulsar_storage_backlog_quota_limit", float64(st.BacklogQuotaLimitSize))
	g("pulsar_storage_backlog_quota_limit_time", float64(st.BacklogQuotaLimitTime))
	g("pulsar_in_bytes_total", float64(st.BytesInCounter))
	g("pulsar_in_messages_total", float64(st.MsgInCounter))
	for _, sn := range sortedKeys(st.Subscriptions) {
		s := st.Subscriptions[sn]
		sg := func(name string, v float64) { e.emit(name, lSub, v, cl, ns, tn, sn) }
		blocked := 0.0
		if s.BlockedSubscriptionOnUnackedMsgs {
			blocked = 1
		}
		sg("pulsar_subscription_back_log", float64(s.MsgBacklog))
		sg("pulsar_subscription_back_log_no_delayed", float64(s.MsgBacklogNoDelayed))
		sg("pulsar_subscription_delayed", float64(s.MsgDelayed))
		sg("pulsar_subscription_msg_rate_redeliver", s.MsgRateRedeliver)
		sg("pulsar_subscription_unacked_messages", float64(s.UnackedMessages))
		sg("pulsar_subscription_blocked_on_unacked_messages", blocked)
		sg("pulsar_subscription_msg_rate_out", s.MsgRateOut)
		sg("pulsar_subscription_msg_ack_rate", s.MessageAckRate)
		sg("pulsar_subscription_msg_throughput_out", s.MsgThroughputOut)
		sg("pulsar_out_bytes_total", float64(s.BytesOutCounter))
		sg("pulsar_out_messages_total", float64(s.MsgOutCounter))
		sg("pulsar_subscription_last_acked_timestamp", float64(s.LastAckedTimestamp))
		sg("pulsar_subscription_last_consumed_timestamp", float64(s.LastConsumedTimestamp))
		sg("pulsar_subscription_msg_drop_rate", s.MsgDropRate)
		sg("pulsar_subscription_consumers_count", float64(len(s.Consumers)))
	}
}

// nsAgg sums a namespace's topics (Pulsar's AggregatedNamespaceStats).
type nsAgg struct {
	topics                             int
	f                                  figures
	msgsIn, bytesIn, msgsOut, bytesOut int64
	repl                               map[string]*replFigures // by remote cluster (replication.go)
}

func (a *nsAgg) add(f figures, st api.TopicStats) {
	a.topics++
	a.f.subscriptions += f.subscriptions
	a.f.producers += f.producers
	a.f.consumers += f.consumers
	a.f.rateIn += f.rateIn
	a.f.rateOut += f.rateOut
	a.f.throughputIn += f.throughputIn
	a.f.throughputOut += f.throughputOut
	a.f.storageSize += f.storageSize
	a.f.logicalSize += f.logicalSize
	a.f.backlog += f.backlog
	a.f.backlogSize += f.backlogSize
	a.f.ackRate += f.ackRate
	a.f.delayed += f.delayed
	a.msgsIn += st.MsgInCounter
	a.bytesIn += st.BytesInCounter
	a.msgsOut += st.MsgOutCounter
	a.bytesOut += st.BytesOutCounter
}

// namespace emits a namespace's sums (Pulsar's printNamespaceStats).
func (e emitter) namespace(cl, ns string, a *nsAgg) {
	g := func(name string, v float64) { e.emit(name, lNamespace, v, cl, ns) }
	g("pulsar_topics_count", float64(a.topics))
	g("pulsar_subscriptions_count", float64(a.f.subscriptions))
	g("pulsar_producers_count", float64(a.f.producers))
	g("pulsar_consumers_count", float64(a.f.consumers))
	g("pulsar_rate_in", a.f.rateIn)
	g("pulsar_rate_out", a.f.rateOut)
	g("pulsar_throughput_in", a.f.throughputIn)
	g("pulsar_throughput_out", a.f.throughputOut)
	g("pulsar_consumer_msg_ack_rate", a.f.ackRate)
	g("pulsar_in_bytes_total", float64(a.bytesIn))
	g("pulsar_in_messages_total", float64(a.msgsIn))
	g("pulsar_out_bytes_total", float64(a.bytesOut))
	g("pulsar_out_messages_total", float64(a.msgsOut))
	g("pulsar_storage_size", float64(a.f.storageSize))
	g("pulsar_storage_logical_size", float64(a.f.logicalSize))
	g("pulsar_storage_backlog_size", float64(a.f.backlogSize))
	g("pulsar_storage_write_rate", a.f.rateIn)
	g("pulsar_storage_read_rate", a.f.rateOut)
	g("pulsar_subscription_delayed", a.f.delayed)
	e.emit("pulsar_msg_backlog", lNSBacklog, float64(a.f.backlog), cl, ns, "local")
}

// broker emits the broker's sums (Pulsar's AggregatedBrokerStats).
func (e emitter) broker(cl string, a *nsAgg) {
	g := func(name string, v float64) { e.emit(name, lCluster, v, cl) }
	g("pulsar_broker_topics_count", float64(a.topics))
	g("pulsar_broker_subscriptions_count", float64(a.f.subscriptions))
	g("pulsar_broker_producers_count", float64(a.f.producers))
	g("pulsar_broker_consumers_count", float64(a.f.consumers))
	g("pulsar_broker_rate_in", a.f.rateIn)
	g("pulsar_broker_rate_out", a.f.rateOut)
	g("pulsar_broker_throughput_in", a.f.throughputIn)
	g("pulsar_broker_throughput_out", a.f.throughputOut)
	g("pulsar_broker_storage_size", float64(a.f.storageSize))
	g("pulsar_broker_storage_logical_size", float64(a.f.logicalSize))
	g("pulsar_broker_storage_write_rate", a.f.rateIn)
	g("pulsar_broker_storage_read_rate", a.f.rateOut)
	g("pulsar_broker_msg_backlog", float64(a.f.backlog))
}

// mlAgg sums the managed ledgers of a namespace (Pulsar's ManagedLedgerMetrics).
type mlAgg struct {
	bytesIn, bytesInReplicas, msgsIn float64
	msgsOut, bytesOut, markDelete    float64
	backlog, stored                  int64
}

func (m *mlAgg) add(f figures) {
	m.bytesIn += f.throughputIn
	if f.logicalSize > 0 {
		m.bytesInReplicas += f.throughputIn * float64(f.storageSize) / float64(f.logicalSize)
	} else {
		m.bytesInReplicas += f.throughputIn
	}
	m.msgsIn += f.rateIn
	m.msgsOut += f.rateOut
	m.bytesOut += f.throughputOut
	m.markDelete += f.ackRate
	m.backlog += f.backlog
	m.stored += f.storageSize
}

func (e emitter) managedLedger(cl, ns string, m *mlAgg) {
	g := func(name string, v float64) { e.emit(name, lNamespace, v, cl, ns) }
	g("pulsar_ml_AddEntryBytesRate", m.bytesIn)
	g("pulsar_ml_AddEntryWithReplicasBytesRate", m.bytesInReplicas)
	g("pulsar_ml_AddEntryMessagesRate", m.msgsIn)
	g("pulsar_ml_ReadEntriesRate", m.msgsOut)
	g("pulsar_ml_ReadEntriesBytesRate", m.bytesOut)
	g("pulsar_ml_MarkDeleteRate", m.markDelete)
	g("pulsar_ml_NumberOfMessagesInBacklog", float64(m.backlog))
	g("pulsar_ml_StoredMessagesSize", float64(m.stored))
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// descCache keeps one Desc per name and label set. It is safe for concurrent use.
type descCache struct {
	mu sync.Mutex // guards m
	m  map[string]*prometheus.Desc
}

func (d *descCache) get(name string, labels []string) *prometheus.Desc {
	key := name
	for _, l := range labels {
		key += "\x00" + l
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]*prometheus.Desc{}
	}
	if v, ok := d.m[key]; ok {
		return v
	}
	v := prometheus.NewDesc(name, helpOf(name), labels, nil)
	d.m[key] = v
	return v
}
