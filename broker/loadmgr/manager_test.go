package loadmgr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitFor bounds every wait of these tests.
const waitFor = 20 * time.Second

// waitUntil waits until cond holds, re-checking it on every token of changed.
func waitUntil(t *testing.T, changed <-chan struct{}, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// fakeStats is a broker's bundle stats, set by the test.
type fakeStats struct {
	mu      sync.Mutex
	bundles map[string]BundleLoad
}

func (f *fakeStats) set(b map[string]BundleLoad) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bundles = b
}

func (f *fakeStats) get() map[string]BundleLoad {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]BundleLoad, len(f.bundles))
	for k, v := range f.bundles {
		out[k] = v
	}
	return out
}

func fixedResources(time.Time) Resources {
	return Resources{CPU: Usage{Usage: 10, Limit: 200}, Memory: Usage{Usage: 100, Limit: 1000}}
}

// registerBroker writes broker id's registration as the broker does (ephemeral).
func registerBroker(t *testing.T, store metadata.Store, b Broker) metadata.Session {
	t.Helper()
	ctx := context.Background()
	sess, err := store.NewSession(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	v, _ := json.Marshal(b)
	if _, err := sess.Put(ctx, metadata.BrokerKey(b.ID), v, metadata.NotExists); err != nil {
		t.Fatal(err)
	}
	return sess
}

func startManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	m, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func readReport(t *testing.T, store metadata.Store, id string) *Report {
	t.Helper()
	kv, err := store.Get(context.Background(), metadata.LoadReportKey(id))
	if errors.Is(err, metadata.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	r := &Report{}
	if err := json.Unmarshal(kv.Value, r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReporter: the report is written at start, rewritten on a change over the threshold,
// not on a smaller one, and vanishes with the manager's session.
func TestReporter(t *testing.T) {
	eps := metadatatest.Embedded(t)
	store := metadatatest.NewStore(t, eps)
	stats := &fakeStats{}
	b1 := "tenant/ns/0x00000000_0x40000000"
	stats.set(map[string]BundleLoad{b1: {MsgRateIn: 1000, MsgRateOut: 500, MsgThroughputIn: 1e6, Topics: 3, Producers: 2}})
	changed := make(chan struct{}, 1)
	self := Broker{ID: "b1", ServiceURL: "pulsar://h:6650", WebServiceURL: "http://h:8080"}
	m := startManager(t, Config{Store: store, Self: self, ReportInterval: 20 * time.Millisecond,
		SheddingInterval: time.Hour, BundleStats: stats.get, Resources: fixedResources, changed: changed})

	waitUntil(t, changed, "the first report", func() bool { return readReport(t, store, "b1") != nil })
	r := readReport(t, store, "b1")
	if r.MsgRateIn != 1000 || r.MsgRateOut != 500 || r.Topics != 3 || r.Producers != 2 || r.BundleCount != 1 ||
		r.WebServiceURL != self.WebServiceURL || r.CPU.Limit != 200 || r.Bundles[b1].MsgThroughputIn != 1e6 {
		t.Fatalf("report %+v", r)
	}
	kv, _ := store.Get(context.Background(), metadata.LoadReportKey("b1"))
	if kv.Lease == 0 {
		t.Fatal("load report is not ephemeral")
	}

	// 5% more: under the 10% threshold, nothing is written over several report ticks.
	stats.set(map[string]BundleLoad{b1: {MsgRateIn: 1050, MsgRateOut: 525, MsgThroughputIn: 1.05e6, Topics: 3, Producers: 2}})
	unchanged := func() float64 { return counterValue(t, m.cfg.Metrics.reports.WithLabelValues("unchanged")) }
	base := unchanged()
	waitUntil(t, changed, "three unchanged report ticks", func() bool { return unchanged() >= base+3 })
	if got := readReport(t, store, "b1"); got == nil || got.MsgRateIn != 1000 {
		t.Fatalf("a 5%% change was written: msgRateIn %v", got.MsgRateIn)
	}
	// 50% more: written.
	stats.set(map[string]BundleLoad{b1: {MsgRateIn: 1500, MsgRateOut: 750, Topics: 3, Producers: 2}})
	waitUntil(t, changed, "the changed report", func() bool {
		r := readReport(t, store, "b1")
		return r != nil && r.MsgRateIn == 1500
	})

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if r := readReport(t, store, "b1"); r != nil {
		t.Fatalf("report still there after Close: %+v", r)
	}
}

// TestLeaderElection: of three managers exactly one leads; when its session dies (revoked
// behind its back, as etcd does when keep-alives stop) a leader is elected again under a
// live session, and when the leader closes, another takes over.
func TestLeaderElection(t *testing.T) {
	eps := metadatatest.Embedded(t)
	ns := metadatatest.RandomNamespace()
	changed := make(chan struct{}, 1)
	var ms []*Manager
	for i := range 3 {
		store := metadatatest.OpenStore(t, eps, ns)
		ms = append(ms, startManager(t, Config{Store: store, Self: Broker{ID: fmt.Sprintf("b%d", i+1)},
			SessionTTL: 2 * time.Second, ReportInterval: 20 * time.Millisecond, SheddingInterval: time.Hour,
			Resources: fixedResources, changed: changed}))
	}
	store := metadatatest.OpenStore(t, eps, ns)
	leaders := func() []*Manager {
		var ls []*Manager
		for _, m := range ms {
			if m.Role() == RoleLeader {
				ls = append(ls, m)
			}
		}
		return ls
	}
	leaderKey := func() (Broker, int64) {
		kv, err := store.Get(context.Background(), metadata.LoadBalanceLeaderKey)
		if err != nil {
			return Broker{}, 0
		}
		var b Broker
		_ = json.Unmarshal(kv.Value, &b)
		return b, kv.Lease
	}
	oneLeader := func() bool {
		ls := leaders()
		b, _ := leaderKey()
		return len(ls) == 1 && b.ID == ls[0].cfg.Self.ID
	}
	waitUntil(t, changed, "one leader", oneLeader)
	first := leaders()[0]
	_, lease := leaderKey()

	raw, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Revoke(context.Background(), clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, changed, "a leader under a new session", func() bool {
		_, l := leaderKey()
		return oneLeader() && l != 0 && l != lease
	})

	cur := leaders()[0]
	if err := cur.Close(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, changed, "another leader after Close", func() bool {
		ls := leaders()
		b, _ := leaderKey()
		return len(ls) == 1 && ls[0] != cur && b.ID == ls[0].cfg.Self.ID
	})
	// Every manager left knows the new leader (the brokers send it the lookups of unowned
	// bundles).
	next := leaders()[0].cfg.Self.ID
	waitUntil(t, changed, "the new leader known to all", func() bool {
		for _, m := range ms {
			if ld, ok := m.Leader(); m != cur && (!ok || ld.ID != next) {
				return false
			}
		}
		return true
	})
	t.Logf("leaders: %s, after revocation %s, after close %s", first.cfg.Self.ID, cur.cfg.Self.ID, next)
}

// TestDisabledLeads: with load balancing off (loadBalancerEnabled=false) the manager still
// takes the leader key, as Pulsar elects a leader whatever the setting, and writes no load
// report.
func TestDisabledLeads(t *testing.T) {
	eps := metadatatest.Embedded(t)
	store := metadatatest.NewStore(t, eps)
	changed := make(chan struct{}, 1)
	m := startManager(t, Config{Store: store, Self: Broker{ID: "b1"}, Disabled: true, ReportInterval: 20 * time.Millisecond,
		SheddingInterval: time.Hour, Resources: fixedResources, changed: changed})
	waitUntil(t, changed, "the disabled manager leading", func() bool {
		kv, err := store.Get(context.Background(), metadata.LoadBalanceLeaderKey)
		return err == nil && m.Role() == RoleLeader && strings.Contains(string(kv.Value), `"b1"`)
	})
	if r := readReport(t, store, "b1"); r != nil {
		t.Fatalf("a disabled manager wrote a load report: %+v", r)
	}
}

// TestSelectBroker: an unowned bundle goes to the least loaded registered broker, and a
// burst of assignments spreads before any report shows them.
func TestSelectBroker(t *testing.T) {
	eps := metadatatest.Embedded(t)
	ns := metadatatest.RandomNamespace()
	store := metadatatest.OpenStore(t, eps, ns)
	for _, id := range []string{"b1", "b2", "b3"} {
		registerBroker(t, store, Broker{ID: id})
	}
	busy := map[string]BundleLoad{"t/n/0x00000000_0x80000000": {MsgRateIn: 5000}}
	changed := make(chan struct{}, 1)
	m := startManager(t, Config{Store: store, Self: Broker{ID: "b1"}, ReportInterval: 20 * time.Millisecond,
		SheddingInterval: time.Hour, BundleStats: func() map[string]BundleLoad { return busy },
		Resources: fixedResources, changed: changed})
	waitUntil(t, changed, "b1's report seen by its manager", func() bool {
		rs, err := m.Reports(context.Background())
		return err == nil && rs["b1"] != nil
	})
	got := map[string]int{}
	for i := range 4 {
		id, err := m.SelectBroker(context.Background(), fmt.Sprintf("t/n/0x%08x_0x%08x", 0x80000000+i*0x100, 0x80000000+(i+1)*0x100))
		if err != nil {
			t.Fatal(err)
		}
		got[id]++
	}
	if got["b1"] != 0 || got["b2"] != 2 || got["b3"] != 2 {
		t.Fatalf("assignments %v: want 2 on b2, 2 on b3 and none on the busy b1", got)
	}
	if _, err := m.SelectBroker(context.Background(), "not-a-bundle"); err == nil {
		t.Fatal("SelectBroker accepted a malformed bundle name")
	}
	_ = m.Close()
	if _, err := m.SelectBroker(context.Background(), "t/n/0x00000000_0x80000000"); !errors.Is(err, ErrStopped) {
		t.Fatalf("SelectBroker after Close: %v, want ErrStopped", err)
	}
}

// TestReportSurvivesSessionLoss: when the manager's lease is revoked behind its back, it makes
// a new session and writes its report again under it.
func TestReportSurvivesSessionLoss(t *testing.T) {
	eps := metadatatest.Embedded(t)
	store := metadatatest.NewStore(t, eps)
	changed := make(chan struct{}, 1)
	startManager(t, Config{Store: store, Self: Broker{ID: "b1"}, ReportInterval: 20 * time.Millisecond,
		SheddingInterval: time.Hour, Resources: fixedResources, changed: changed})
	lease := func() int64 {
		kv, err := store.Get(context.Background(), metadata.LoadReportKey("b1"))
		if err != nil {
			return 0
		}
		return kv.Lease
	}
	waitUntil(t, changed, "the first report", func() bool { return lease() != 0 })
	old := lease()
	raw, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Revoke(context.Background(), clientv3.LeaseID(old)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, changed, "the report under a new session", func() bool { l := lease(); return l != 0 && l != old })
}

// endingStore ends every watch it started when end is closed (as a compaction or a store
// failure does), to test the manager's resync.
type endingStore struct {
	metadata.Store
	mu  sync.Mutex
	end chan struct{} // guarded by mu
}

// endAll ends the running watches; later ones run on.
func (s *endingStore) endAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.end)
	s.end = make(chan struct{})
}

func (s *endingStore) Watch(ctx context.Context, prefix string, fromRev int64) *metadata.Watch {
	ctx, cancel := context.WithCancel(ctx)
	w := s.Store.Watch(ctx, prefix, fromRev)
	out := make(chan metadata.WatchBatch)
	s.mu.Lock()
	ended := s.end
	s.mu.Unlock()
	go func() {
		defer close(out)
		defer cancel()
		for {
			select {
			case <-ended:
				return
			case b, ok := <-w.C:
				if !ok {
					return
				}
				select {
				case out <- b:
				case <-ended:
					return
				}
			}
		}
	}()
	return &metadata.Watch{C: out, Err: w.Err}
}

// TestResyncAfterWatchEnds: when the watches end, the manager lists again and sees a broker
// registered meanwhile.
func TestResyncAfterWatchEnds(t *testing.T) {
	eps := metadatatest.Embedded(t)
	ns := metadatatest.RandomNamespace()
	store := &endingStore{Store: metadatatest.OpenStore(t, eps, ns), end: make(chan struct{})}
	registerBroker(t, store, Broker{ID: "b1"})
	busy := map[string]BundleLoad{"t/n/0x00000000_0x80000000": {MsgRateIn: 5000}}
	changed := make(chan struct{}, 1)
	m := startManager(t, Config{Store: store, Self: Broker{ID: "b1"}, ReportInterval: 20 * time.Millisecond,
		SheddingInterval: time.Hour, BundleStats: func() map[string]BundleLoad { return busy },
		Resources: fixedResources, changed: changed})
	store.endAll()
	registerBroker(t, metadatatest.OpenStore(t, eps, ns), Broker{ID: "b2"})
	n := 0
	waitUntil(t, changed, "b2 selected after the resync", func() bool {
		n++ // a new bundle each time: a bundle assigned once keeps its broker
		id, err := m.SelectBroker(context.Background(), fmt.Sprintf("t/n/0x%08x_0x%08x", 0x80000000+n, 0x80000001+n))
		return err == nil && id == "b2"
	})
}
