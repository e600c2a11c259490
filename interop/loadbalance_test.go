package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/loadmgr"
)

// The tests below run the real Pulsar Go client against brokers whose load manager
// (broker/loadmgr) reports, assigns, sheds and splits with periods of seconds.

// fastLoadManager sets the load manager's periods to seconds for a test. The brokers share
// this process, so its CPU and memory are no broker's own: they are left out of the
// brokers' usage (weights 0), which is then their share of the message rate.
func fastLoadManager(cfg *broker.Config, tweak func(*loadmgr.Thresholds)) {
	th := loadmgr.DefaultThresholds()
	th.CPUWeight, th.MemoryWeight = 0, 0
	th.GracePeriod = 10 * time.Second // a bundle moved is left where it is for five shedding periods
	th.AutoSplitEnabled = false
	if tweak != nil {
		tweak(&th)
	}
	cfg.LoadManager = loadmgr.Config{Thresholds: th, ReportInterval: 500 * time.Millisecond,
		ReportMaxInterval: 5 * time.Second, SheddingInterval: 2 * time.Second}
}

// pollFor is waitFor for conditions that cost a round of requests: it checks every 100 ms.
func pollFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	waitEvery(t, d, 100*time.Millisecond, what, cond)
}

// reportedRates returns each running broker's message rate (in+out) in its own last load
// report, by broker id (0 if it has none yet).
func (m *multiBroker) reportedRates(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	for _, nd := range m.nodes {
		svc := nd.svc.Load()
		if svc == nil {
			continue
		}
		out[nd.id] = 0
		if r, err := svc.LoadReport(ctx); err == nil {
			out[nd.id] = r.MsgRate()
		}
	}
	return out
}

func sumMax(rates map[string]float64) (sum, mx float64) {
	for _, r := range rates {
		sum += r
		mx = max(mx, r)
	}
	return sum, mx
}

// topicsPerBundle returns n topic names for each bundle of public/default (of bundles), as
// svc hashes them.
func topicsPerBundle(t *testing.T, svc *broker.Service, bundles, n int) []string {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	per := map[string]int{}
	var out []string
	base := topicName(t)
	for i := 0; len(out) < bundles*n; i++ {
		if i > 100*bundles*n {
			t.Fatalf("%d topics over %v after %d names", len(out), per, i)
		}
		tp := fmt.Sprintf("%s-%d", base, i)
		b, err := svc.TopicBundle(ctx, tp)
		if err != nil {
			t.Fatal(err)
		}
		if per[b] < n {
			per[b]++
			out = append(out, tp)
		}
	}
	if len(per) != bundles {
		t.Fatalf("topics over %d bundles, want %d", len(per), bundles)
	}
	return out
}

// TestLoadBalanceSpread: all the load starts on one broker; two more join; within a few
// shedding periods the leader moves bundles (transfers: no send fails) until no broker's own
// load report carries more than 1.5× the mean message rate. MAGNETAR_RATE sets each topic's
// rate (msg/s, default 50; a topic in each of 12 bundles).
func TestLoadBalanceSpread(t *testing.T) {
	const bundles, perBundle = 12, 1
	m := newMultiBroker(t, 1, mbOpts{tweak: func(cfg *broker.Config) {
		cfg.DefaultNumberOfNamespaceBundles = bundles
		fastLoadManager(cfg, nil)
	}})
	first := m.nodes[0]
	topics := topicsPerBundle(t, first.svc.Load(), bundles, perBundle)
	rate := envInt("MAGNETAR_RATE", 50)
	offered := float64(rate * len(topics))
	cl := m.clientOf(first.url)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	stats := make([]*pubStats, len(topics))
	producers := make([]pulsar.Producer, len(topics))
	perrs := make([]error, len(topics))
	var created sync.WaitGroup
	for i, tp := range topics { // at once: the first lookups of a burst
		created.Add(1)
		go func() {
			defer created.Done()
			producers[i], perrs[i] = cl.CreateProducer(pulsar.ProducerOptions{Topic: tp, BatchingMaxPublishDelay: 5 * time.Millisecond})
		}()
	}
	created.Wait()
	for i, p := range producers {
		if perrs[i] != nil {
			t.Fatalf("producer %d: %v", i, perrs[i])
		}
		defer p.Close()
		stats[i] = newPubStats()
		wg.Add(1)
		go func() { defer wg.Done(); stats[i].run(ctx, p, rate, "m") }()
	}
	defer func() { stop(); wg.Wait() }()
	rctx := ctxT(t, 3*time.Minute)
	pollFor(t, 60*time.Second, "the first broker reporting the load", func() bool {
		return m.reportedRates(rctx)[first.id] >= 0.8*offered
	})

	joined := time.Now()
	m.addBroker()
	m.addBroker()
	// Balanced: the polls of two seconds in a row (four reports of each broker) find every
	// broker under 1.5× the mean, with the reports accounting for the load offered (a rate
	// window that began with a transfer's backlog overstates it).
	var rates map[string]float64
	var took, moved time.Duration
	held := 0
	pollFor(t, 90*time.Second, "the load spread over the three brokers", func() bool {
		if moved == 0 && ownedSpread(m, bundles) {
			moved = time.Since(joined)
		}
		rates = m.reportedRates(rctx)
		sum, mx := sumMax(rates)
		if len(rates) != 3 || sum < 0.8*offered || sum > 1.2*offered || mx > 1.5*sum/3 {
			held = 0
			return false
		}
		if held == 0 {
			took = time.Since(joined)
		}
		held++
		return held >= 20
	})
	sum, mx := sumMax(rates)
	owned := map[string]int{}
	for _, nd := range m.nodes {
		owned[nd.id] = len(nd.svc.Load().OwnedNamespaces(rctx))
	}
	t.Logf("offered %.0f msg/s over %d topics, %d bundles; after two brokers joined (shedding every 2s, reports every "+
		"0.5s, rates over 5s windows), the bundles spread in %v and the reports agree in %v: reported msg/s %v "+
		"(max/mean %.2f), bundles %v", offered, len(topics), bundles, moved.Round(100*time.Millisecond),
		took.Round(100*time.Millisecond), rates, mx/(sum/3), owned)
	// The same from the offered load: every bundle carries perBundle topics at rate.
	if mxOwned := max(owned["broker-1"], owned["broker-2"], owned["broker-3"]); float64(mxOwned) > 1.5*bundles/3 {
		t.Errorf("bundles per broker %v: the busiest carries %.2f× the mean", owned, float64(mxOwned)/(bundles/3))
	}

	// The broker's own HTTP report agrees (Pulsar's broker-stats/load-report).
	for _, nd := range m.nodes {
		code, body := httpDo(t, "GET", nd.httpURL+"/admin/v2/broker-stats/load-report")
		var r loadmgr.Report
		if code != 200 || json.Unmarshal([]byte(body), &r) != nil || r.BrokerID != nd.id || r.BundleCount == 0 {
			t.Errorf("load-report of %s: %d %s", nd.id, code, tailStr(body, 300))
		}
	}
	stop()
	wg.Wait()
	for i, s := range stats {
		s.mu.Lock()
		if s.failed > 0 {
			t.Errorf("topic %d: %d sends failed, last %v", i, s.failed, s.last)
		}
		s.mu.Unlock()
	}
	if got := counterSum(t, m, "magnetar_loadbalance_unloads_total", "done"); got == 0 {
		t.Error("no bundle unloaded by the load manager")
	}
}

// ownedSpread reports whether every running broker owns bundles and none more than 1.5×
// the mean of bundles.
func ownedSpread(m *multiBroker, bundles int) bool {
	for _, nd := range m.nodes {
		svc := nd.svc.Load()
		if svc == nil {
			return false
		}
		n := len(svc.OwnedNamespaces(context.Background()))
		if n == 0 || float64(n) > 1.5*float64(bundles)/float64(len(m.nodes)) {
			return false
		}
	}
	return true
}

// counterSum sums a counter over the running brokers' registries (label value: any label
// equal to it; "" for every series).
func counterSum(t *testing.T, m *multiBroker, name, label string) float64 {
	t.Helper()
	var sum float64
	for _, nd := range m.nodes {
		svc := nd.svc.Load()
		if svc == nil {
			continue
		}
		mfs, err := svc.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, mt := range mf.GetMetric() {
				match := label == ""
				for _, lp := range mt.GetLabel() {
					match = match || lp.GetValue() == label
				}
				if match {
					sum += mt.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// TestLoadBalanceLookupBurst: on a fresh cluster of three brokers, producers of topics in
// every bundle are created all at once through one service URL listing the brokers; the
// lookups of the unowned bundles are sent to the load manager's leader, whose placement
// counts each assignment as it makes it, so the bundles spread evenly.
//
// The leader can only place bundles on brokers its load manager has seen (through its watches
// of the registrations and the load reports), so the burst starts once it has every broker's
// report: a broker's report is written after its registration. Waiting only for every broker
// to name the same leader, as read from the store, can let a burst on a busy machine start
// before the leader's watches delivered the other two brokers; the leader, seeing only
// itself, then takes every bundle (24/0/0).
func TestLoadBalanceLookupBurst(t *testing.T) {
	const bundles = 24
	m := newMultiBroker(t, 3, mbOpts{tweak: func(cfg *broker.Config) {
		cfg.DefaultNumberOfNamespaceBundles = bundles
		fastLoadManager(cfg, nil)
	}})
	ctx := ctxT(t, 90*time.Second)
	var leader string
	var leaderSvc *broker.Service
	waitFor(t, 30*time.Second, "a load manager leader every broker knows, which has every broker's load report", func() bool {
		ids := map[string]bool{}
		for _, nd := range m.nodes {
			bi, err := nd.svc.Load().LeaderBroker(ctx)
			if err != nil {
				return false
			}
			ids[bi.ID], leader = true, bi.ID
		}
		if len(ids) != 1 {
			return false
		}
		for _, nd := range m.nodes {
			if nd.id == leader {
				leaderSvc = nd.svc.Load()
			}
		}
		reports, err := leaderSvc.LoadReports(ctx)
		return err == nil && len(reports) == len(m.nodes)
	})
	topics := topicsPerBundle(t, m.nodes[0].svc.Load(), bundles, 2)
	cl := m.clientOf(m.serviceURL())
	var wg sync.WaitGroup
	errs := make(chan error, len(topics))
	for _, tp := range topics {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: tp})
			if err != nil {
				errs <- fmt.Errorf("%s: %w", tp, err)
				return
			}
			defer p.Close()
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
				errs <- fmt.Errorf("%s: send: %w", tp, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	owned := map[string]int{}
	total := 0
	for _, nd := range m.nodes {
		owned[nd.id] = len(nd.svc.Load().OwnedNamespaces(ctx))
		total += owned[nd.id]
	}
	counts := make([]int, 0, 3)
	for _, n := range owned {
		counts = append(counts, n)
	}
	sort.Ints(counts)
	t.Logf("%d topics over %d bundles looked up at once: bundles per broker %v (leader %s)", len(topics), bundles, owned, leader)
	if reports, err := leaderSvc.LoadReports(ctx); err == nil {
		for id, r := range reports {
			t.Logf("the leader's view of %s: %d bundles, %.1f msg/s", id, len(r.Bundles), r.MsgRate())
		}
	}
	if total != bundles {
		t.Fatalf("%d bundles owned, want %d: %v", total, bundles, owned)
	}
	// The leader assigns in turn: counts differ by at most one; allow one more for a lookup
	// that raced the leader's election news.
	if counts[2]-counts[0] > 2 {
		t.Errorf("bundles per broker %v: want an even spread (%d each)", owned, bundles/3)
	}
}

// TestLoadBalanceAutoSplit: a bundle with more topics than
// loadBalancerNamespaceBundleMaxTopics is split by the leader until no bundle has more.
func TestLoadBalanceAutoSplit(t *testing.T) {
	m := newMultiBroker(t, 1, mbOpts{tweak: func(cfg *broker.Config) {
		fastLoadManager(cfg, func(th *loadmgr.Thresholds) {
			th.AutoSplitEnabled, th.MaxBundleTopics, th.GracePeriod = true, 2, 0
		})
	}})
	svc := m.nodes[0].svc.Load()
	ctx := ctxT(t, 60*time.Second)
	// Six topics in one of the four bundles.
	var topics []string
	var first string
	base := topicName(t)
	for i := 0; len(topics) < 6; i++ {
		tp := fmt.Sprintf("%s-%d", base, i)
		b, err := svc.TopicBundle(ctx, tp)
		if err != nil {
			t.Fatal(err)
		}
		if first == "" {
			first = b
		}
		if b == first {
			topics = append(topics, tp)
		}
	}
	cl := m.clientOf(m.nodes[0].url)
	var ps []pulsar.Producer
	for _, tp := range topics {
		p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: tp})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ps = append(ps, p)
	}
	pollFor(t, 45*time.Second, "the hot bundle split", func() bool {
		per := map[string]int{}
		for _, tp := range topics {
			b, err := svc.TopicBundle(ctx, tp)
			if err != nil {
				t.Fatal(err)
			}
			per[b]++
		}
		for _, n := range per {
			if n > 2 {
				return false
			}
		}
		return true
	})
	bd, err := svc.NamespaceBundles(ctx, "public/default")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bundles after the splits: %d (%s)", bd.NumBundles, strings.Join(bd.Boundaries, " "))
	if got := counterSum(t, m, "magnetar_loadbalance_splits_total", "done"); got == 0 {
		t.Error("no split counted")
	}
	for i, p := range ps { // the producers still publish, on the halves
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
			t.Errorf("producer %d after the split: %v", i, err)
		}
	}
}
