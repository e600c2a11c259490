package txnhost

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/txn"
)

// memStore is an in-memory metadata.Store with what the coordinators and the tracker use
// (Get, Put, Delete, List, Commit, Watch); a watch delivers nothing and ends with its ctx.
type memStore struct {
	metadata.Store // the rest: unused (nil, panics)
	mu             sync.Mutex
	rev            int64
	kvs            map[string]metadata.KV
}

func newMemStore() *memStore { return &memStore{kvs: map[string]metadata.KV{}} }

func (m *memStore) Get(_ context.Context, key string) (metadata.KV, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	kv, ok := m.kvs[key]
	if !ok {
		return metadata.KV{}, metadata.ErrNotFound
	}
	return kv, nil
}

func (m *memStore) checkLocked(key string, expected metadata.Version) error {
	kv, ok := m.kvs[key]
	switch {
	case expected == metadata.AnyVersion:
	case expected == metadata.NotExists && ok, expected != metadata.NotExists && (!ok || kv.Version != expected):
		return metadata.ErrBadVersion
	}
	return nil
}

func (m *memStore) Put(_ context.Context, key string, value []byte, expected metadata.Version) (metadata.Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked(key, expected); err != nil {
		return 0, err
	}
	m.rev++
	m.kvs[key] = metadata.KV{Key: key, Value: append([]byte(nil), value...), Version: metadata.Version(m.rev)}
	return metadata.Version(m.rev), nil
}

func (m *memStore) Delete(_ context.Context, key string, expected metadata.Version) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked(key, expected); err != nil {
		return err
	}
	m.rev++
	delete(m.kvs, key)
	return nil
}

func (m *memStore) List(_ context.Context, prefix string) ([]metadata.KV, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []metadata.KV
	for k, kv := range m.kvs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, kv)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, m.rev, nil
}

func (m *memStore) Commit(_ context.Context, ops []metadata.Op) ([]metadata.Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, op := range ops {
		if err := m.checkLocked(op.Key, op.Expected); err != nil {
			return nil, err
		}
	}
	m.rev++
	vs := make([]metadata.Version, len(ops))
	for i, op := range ops {
		switch {
		case op.Check:
		case op.Delete:
			delete(m.kvs, op.Key)
		default:
			m.kvs[op.Key] = metadata.KV{Key: op.Key, Value: append([]byte(nil), op.Value...), Version: metadata.Version(m.rev)}
			vs[i] = metadata.Version(m.rev)
		}
	}
	return vs, nil
}

func (m *memStore) Watch(ctx context.Context, _ string, _ int64) *metadata.Watch {
	ch := make(chan metadata.WatchBatch)
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return &metadata.Watch{C: ch, Err: ctx.Err}
}

// fakeTopic records the transaction outcomes it is told of.
type fakeTopic struct {
	name  topicname.Name
	lag   int64
	mu    sync.Mutex
	ended []string // "id/sub"
}

func (t *fakeTopic) Name() topicname.Name { return t.name }
func (t *fakeTopic) TxnEnded(id txn.ID, sub string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended = append(t.ended, id.String()+"/"+sub)
}
func (t *fakeTopic) TxnInBuffer(context.Context, txn.ID) (*topic.Position, bool, error) {
	return &topic.Position{LedgerID: 3, EntryID: 4}, false, nil
}
func (t *fakeTopic) TxnBufferStats(context.Context) (topic.TxnBufferStats, error) {
	return topic.TxnBufferStats{MaxReadLag: t.lag}, nil
}
func (t *fakeTopic) PendingAckStats(context.Context, string) (topic.PendingAckStats, error) {
	return topic.PendingAckStats{}, nil
}

// fakeBroker owns the assignment partitions not in refuse; acquired counts the
// acquisitions by partition, and gate (if set) holds them until it is closed.
type fakeBroker struct {
	refuse   map[int]bool
	gate     chan struct{}
	topics   map[string]*fakeTopic
	mu       sync.Mutex
	acquired map[int]int
	created  map[string]int
}

func newFakeBroker() *fakeBroker {
	return &fakeBroker{refuse: map[int]bool{}, topics: map[string]*fakeTopic{}, acquired: map[int]int{},
		created: map[string]int{}}
}

func (b *fakeBroker) ID() string { return "broker-1" }

func (b *fakeBroker) Acquire(ctx context.Context, n topicname.Name) error {
	if b.gate != nil {
		select {
		case <-b.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.acquired[n.Partition]++
	if b.refuse[n.Partition] || n.Base().String() != AssignTopic {
		return &api.NotOwnerError{Topic: n.String()}
	}
	return nil
}

func (b *fakeBroker) acquisitions(p int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acquired[p]
}

func (b *fakeBroker) CreatePartitioned(_ context.Context, topic string, n int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.created[topic]; ok {
		return api.ErrAlreadyExists
	}
	b.created[topic] = n
	return nil
}

func (b *fakeBroker) LoadedTopic(name string) Topic {
	if t, ok := b.topics[name]; ok {
		return t
	}
	return nil
}

func (b *fakeBroker) LoadedTopics() []Topic {
	var out []Topic
	for _, t := range b.topics {
		out = append(out, t)
	}
	return out
}

func (b *fakeBroker) AdminTopic(_ context.Context, name string) (Topic, error) {
	if t, ok := b.topics[name]; ok {
		return t, nil
	}
	return nil, api.ErrTopicNotFound
}

func (b *fakeBroker) addTopic(name string, lag int64) *fakeTopic {
	t := &fakeTopic{name: topicname.MustParse(name), lag: lag}
	b.topics[name] = t
	return t
}

// newHost returns a host of n coordinators over a fresh memStore; its life ends and it
// closes at the test's end.
func newHost(t *testing.T, n int, b *fakeBroker) (*Host, *prometheus.Registry) {
	t.Helper()
	life, cancel := context.WithCancel(context.Background())
	reg := prometheus.NewRegistry()
	h := New(life, Config{Store: newMemStore(), Registry: reg, Cluster: "c1", Coordinators: n}, b)
	t.Cleanup(func() {
		cancel()
		h.Close()
	})
	return h, reg
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCoordinatorOutOfRange(t *testing.T) {
	b := newFakeBroker()
	h, _ := newHost(t, 2, b)
	_, err := h.Coordinator(testCtx(t), 2)
	if !errors.Is(err, ErrNoCoordinator) {
		t.Fatalf("coordinator 2 of 2: %v, want ErrNoCoordinator", err)
	}
	if n := b.acquisitions(2); n != 0 {
		t.Fatalf("partition 2 acquired %d times for a coordinator that does not exist", n)
	}
}

// A coordinator whose assignment partition another broker owns is not found, and the
// refusal is not cached: the next call tries to acquire it again (and gets it once the
// broker may own it).
func TestCoordinatorNotOwnedIsRetried(t *testing.T) {
	b := newFakeBroker()
	b.refuse[1] = true
	h, _ := newHost(t, 2, b)
	ctx := testCtx(t)
	for i := 1; i <= 2; i++ {
		if _, err := h.Coordinator(ctx, 1); !errors.Is(err, ErrNoCoordinator) {
			t.Fatalf("call %d: %v, want ErrNoCoordinator", i, err)
		}
		if n := b.acquisitions(1); n != i {
			t.Fatalf("after call %d: %d acquisitions of partition 1", i, n)
		}
	}
	b.mu.Lock()
	b.refuse[1] = false
	b.mu.Unlock()
	c, err := h.Coordinator(ctx, 1)
	if err != nil || c == nil {
		t.Fatalf("owned now: %v", err)
	}
}

// Concurrent callers share one load: one acquisition, one coordinator.
func TestCoordinatorLoadsOnce(t *testing.T) {
	b := newFakeBroker()
	b.gate = make(chan struct{})
	h, _ := newHost(t, 1, b)
	ctx := testCtx(t)
	const callers = 5
	got := make(chan *txn.Coordinator, callers)
	errs := make(chan error, callers)
	for range callers {
		go func() {
			c, err := h.Coordinator(ctx, 0)
			errs <- err
			got <- c
		}()
	}
	close(b.gate)
	var first *txn.Coordinator
	for i := range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		c := <-got
		if i == 0 {
			first = c
		} else if c != first {
			t.Fatalf("caller %d got another coordinator", i)
		}
	}
	if n := b.acquisitions(0); n != 1 {
		t.Fatalf("%d acquisitions of partition 0, want 1", n)
	}
}

// The sweep loads every coordinator whose partition this broker can own, and tries the
// others; Close waits for it and then refuses.
func TestSweepLoadsOwnableCoordinators(t *testing.T) {
	b := newFakeBroker()
	b.refuse[1] = true
	h, _ := newHost(t, 3, b)
	loaded := make(chan uint64, 3)
	start := h.start
	h.start = func(ctx context.Context, tc uint64) (*txn.Coordinator, error) {
		c, err := start(ctx, tc)
		loaded <- tc
		return c, err
	}
	h.Start()
	deadline := time.After(20 * time.Second)
	got := map[uint64]bool{}
	for len(got) < 2 {
		select {
		case tc := <-loaded:
			got[tc] = true
		case <-deadline:
			t.Fatalf("sweep loaded %v, want 0 and 2", got)
		}
	}
	if !got[0] || !got[2] {
		t.Fatalf("sweep loaded %v, want 0 and 2", got)
	}
	if n := b.acquisitions(1); n == 0 {
		t.Fatal("the sweep never tried coordinator 1")
	}
	h.Close()
	if _, err := h.Coordinator(testCtx(t), 0); !errors.Is(err, api.ErrServiceNotReady) {
		t.Fatalf("after Close: %v, want ErrServiceNotReady", err)
	}
	select {
	case tc := <-loaded:
		if tc == 1 {
			t.Fatal("coordinator 1 was started without its partition")
		}
	default:
	}
}

func TestCoordinatorStatsOfLoaded(t *testing.T) {
	b := newFakeBroker()
	h, _ := newHost(t, 1, b)
	ctx := testCtx(t)
	c, err := h.Coordinator(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []txn.ID
	for range 3 {
		done := make(chan error, 1)
		c.NewTxn(time.Minute, func(id txn.ID, err error) {
			ids = append(ids, id)
			done <- err
		})
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	st, err := h.CoordinatorStats(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	s0 := st["0"]
	if s0.OngoingTxnSize != 3 || s0.LeastSigBits != ids[2].Least || s0.LowWaterMark != ids[0].Least-1 {
		t.Fatalf("stats %+v, txns %v", s0, ids)
	}
	one := uint64(1)
	if _, err := h.CoordinatorStats(ctx, &one); !errors.Is(err, api.ErrTransactionNotFound) {
		t.Fatalf("coordinator 1 of 1: %v", err)
	}
	slow, err := h.SlowTransactions(ctx, 0, nil)
	if err != nil || len(slow) != 3 {
		t.Fatalf("slow transactions (age 0): %d, %v", len(slow), err)
	}
	if md := slow[ids[1].String()]; md.Status != "OPEN" || md.Owner != "broker-1" {
		t.Fatalf("metadata of %v: %+v", ids[1], md)
	}
	if slow, err := h.SlowTransactions(ctx, time.Hour, nil); err != nil || len(slow) != 0 {
		t.Fatalf("slow transactions (age 1h): %d, %v", len(slow), err)
	}
}

func TestCoordinatorStatsWatermark(t *testing.T) {
	for _, tc := range []struct {
		name    string
		txns    map[uint64]txn.Status
		last    uint64
		low     uint64
		ongoing int
	}{
		{"none", map[uint64]txn.Status{}, 0, 0, 0},
		{"all settled", map[uint64]txn.Status{1: txn.Committed, 2: txn.Aborted}, 2, 2, 0},
		{"oldest open", map[uint64]txn.Status{3: txn.Open, 4: txn.Committed, 5: txn.Open}, 5, 2, 2},
		{"open after settled", map[uint64]txn.Status{1: txn.Committed, 7: txn.Open}, 7, 6, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := txn.Info{Txns: map[uint64]txn.Header{}}
			for seq, s := range tc.txns {
				in.Txns[seq] = txn.Header{Status: s}
				if s == txn.Open {
					in.Open++
				}
			}
			st := coordinatorStats(in)
			if st.LeastSigBits != tc.last || st.LowWaterMark != tc.low || st.OngoingTxnSize != tc.ongoing {
				t.Fatalf("got %+v, want last %d low %d ongoing %d", st, tc.last, tc.low, tc.ongoing)
			}
		})
	}
}

func TestSlowSeqs(t *testing.T) {
	in := txn.Info{Txns: map[uint64]txn.Header{
		5: {Status: txn.Open, OpenedMs: 1000},
		2: {Status: txn.Open, OpenedMs: 500},
		3: {Status: txn.Committed, OpenedMs: 0},
		9: {Status: txn.Open, OpenedMs: 9500},
	}}
	got := slowSeqs(in, 10000, 9*time.Second)
	if fmt.Sprint(got) != "[2 5]" {
		t.Fatalf("slow at 10s, age 9s: %v, want [2 5] (open, opened by 1s, in order)", got)
	}
}

// An ended transaction reaches its loaded participants (topics and subscriptions), not
// the ones loaded elsewhere.
func TestEndedReachesLoadedParticipants(t *testing.T) {
	b := newFakeBroker()
	p := b.addTopic("persistent://t/ns/a", 0)
	s := b.addTopic("persistent://t/ns/b", 0)
	h, _ := newHost(t, 1, b)
	id := txn.ID{Most: 0, Least: 7}
	h.ended(id, txn.Header{Status: txn.Committed, Partitions: []string{"persistent://t/ns/a", "persistent://t/ns/elsewhere"},
		Subscriptions: []txn.SubRef{{Topic: "persistent://t/ns/b", Subscription: "sub"}}})
	if fmt.Sprint(p.ended) != "["+id.String()+"/]" || fmt.Sprint(s.ended) != "["+id.String()+"/sub]" {
		t.Fatalf("told: a %v, b %v", p.ended, s.ended)
	}
}

func TestMaxReadLagMetric(t *testing.T) {
	b := newFakeBroker()
	b.addTopic("persistent://t/ns/held", 4)
	b.addTopic("persistent://t/ns/free", 0)
	_, reg := newHost(t, 1, b)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() == "magnetar_txn_buffer_max_read_lag_entries" {
			got = mf.GetMetric()
		}
	}
	if len(got) != 1 || got[0].GetLabel()[0].GetValue() != "persistent://t/ns/held" || got[0].GetGauge().GetValue() != 4 {
		t.Fatalf("lag metric: %v, want only the held topic at 4", got)
	}
}

func TestEnsureDefaults(t *testing.T) {
	b := newFakeBroker()
	h, _ := newHost(t, 4, b)
	ctx := testCtx(t)
	for i := range 2 { // the second time everything exists
		if err := h.EnsureDefaults(ctx); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if n := b.created[AssignTopic]; n != 4 {
		t.Fatalf("assignment topic created with %d partitions, want 4", n)
	}
	for _, key := range []string{metadata.TenantKey("pulsar"), metadata.NamespaceKey("pulsar", "system")} {
		if _, err := h.cfg.Store.Get(ctx, key); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
	}
}

// A nil host is transactions off.
func TestNilHostIsOff(t *testing.T) {
	var h *Host
	ctx := testCtx(t)
	if _, err := h.Coordinator(ctx, 0); !errors.Is(err, topic.ErrTxnDisabled) {
		t.Fatalf("Coordinator: %v", err)
	}
	if _, err := h.CoordinatorStats(ctx, nil); !errors.Is(err, api.ErrNotAllowed) {
		t.Fatalf("CoordinatorStats: %v", err)
	}
	if _, err := h.TransactionBufferStats(ctx, "t"); !errors.Is(err, api.ErrNotAllowed) {
		t.Fatalf("TransactionBufferStats: %v", err)
	}
	if h.TopicConfig(nil) != nil {
		t.Fatal("TopicConfig of a nil host")
	}
	h.Start()
	h.Close()
}

func TestAdminTopicCalls(t *testing.T) {
	b := newFakeBroker()
	b.addTopic("persistent://t/ns/a", 2)
	h, _ := newHost(t, 1, b)
	ctx := testCtx(t)
	in, err := h.TransactionInBufferStats(ctx, "persistent://t/ns/a", txn.ID{Least: 1})
	if err != nil || in.StartPosition == nil || *in.StartPosition != "3:4" {
		t.Fatalf("in buffer: %+v, %v", in, err)
	}
	st, err := h.TransactionBufferStats(ctx, "persistent://t/ns/a")
	if err != nil || st.MaxReadPositionLag != 2 {
		t.Fatalf("buffer stats: %+v, %v", st, err)
	}
	if _, err := h.PendingAckStats(ctx, "persistent://t/ns/missing", "s"); !errors.Is(err, api.ErrTopicNotFound) {
		t.Fatalf("missing topic: %v", err)
	}
}
