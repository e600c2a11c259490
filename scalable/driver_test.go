package scalable

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// memSegments is an in-memory Segments: topics with their cursors, terminated flags and
// term fences. sealGate, if set, blocks the first Seal until closed (or its ctx ends);
// sealEntered is closed when that Seal starts.
type memSegments struct {
	mu struct {
		sync.Mutex
		topics map[SegmentID]*memTopic
		seals  int
	}
	sealGate    chan struct{}
	sealEntered chan struct{}
}

type memTopic struct {
	subs       []string
	terminated bool
	deleted    bool
	maxTerm    uint64
}

func newMemSegments() *memSegments {
	m := &memSegments{}
	m.mu.topics = map[SegmentID]*memTopic{}
	return m
}

func (m *memSegments) Create(_ context.Context, _ layout.Topic, seg layout.Segment, subs []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.mu.topics[seg.ID]
	if t == nil {
		t = &memTopic{}
		m.mu.topics[seg.ID] = t
	}
	for _, s := range subs {
		if !slices.Contains(t.subs, s) {
			t.subs = append(t.subs, s)
		}
	}
	return nil
}

func (m *memSegments) Seal(ctx context.Context, _ layout.Topic, seg layout.Segment) error {
	m.mu.Lock()
	m.mu.seals++
	first := m.mu.seals == 1
	m.mu.Unlock()
	if first && m.sealGate != nil {
		close(m.sealEntered)
		select {
		case <-m.sealGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.mu.topics[seg.ID]; t != nil {
		t.terminated = true
	}
	return nil
}

func (m *memSegments) Delete(_ context.Context, _ layout.Topic, seg layout.Segment) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.mu.topics[seg.ID]; t != nil {
		t.deleted = true
	}
	return nil
}

func (m *memSegments) term(seg SegmentID, term uint64) error {
	t := m.mu.topics[seg]
	if t == nil {
		return errors.New("mem: no topic")
	}
	if term < t.maxTerm {
		return errors.New("mem: stale term")
	}
	t.maxTerm = term
	return nil
}

func (m *memSegments) Drained(_ context.Context, _ layout.Topic, term uint64, _ string, seg layout.Segment) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.term(seg.ID, term); err != nil {
		return false, err
	}
	return m.mu.topics[seg.ID].terminated, nil // no messages: drained once terminated
}

func (m *memSegments) Fence(_ context.Context, _ layout.Topic, term uint64, _ string, segs []layout.Segment, _ uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range segs {
		if err := m.term(s.ID, term); err != nil {
			return err
		}
	}
	return nil
}

func (m *memSegments) Reset(_ context.Context, _ layout.Topic, term uint64, _ string, seg layout.Segment, _ mledger.Position) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.term(seg.ID, term)
}

func (m *memSegments) topic(id SegmentID) memTopic {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.mu.topics[id]; t != nil {
		return *t
	}
	return memTopic{}
}

var driverTopic = layout.Topic{Tenant: "t", Namespace: "ns", Name: "orders"}

// published is a layout a controller published; events collects them from every
// controller of a test (buffered: Listener methods must not block).
type published struct {
	broker string
	l      layout.Layout
}

type chanListener struct {
	broker string
	ch     chan published
}

func (l chanListener) Layout(x layout.Layout) {
	select {
	case l.ch <- published{l.broker, x}:
	default:
		panic("test listener full")
	}
}

func (chanListener) Assignment(Assignment) {}

func startController(t *testing.T, store metadata.Store, segs Segments, events chan published, id string) *Controller {
	t.Helper()
	c := Start(store, segs, chanListener{id, events}, DriverConfig{BrokerID: id, SessionTTL: 2 * time.Second,
		Core: Config{Topic: driverTopic, RetentionMs: 0, TickMs: 20, RetryMs: 20}})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// await waits, with a deadline, for a layout published by a broker that satisfies pred,
// and returns that broker.
func await(t *testing.T, events chan published, what string, pred func(broker string, l layout.Layout) bool) string {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case p := <-events:
			if pred(p.broker, p.l) {
				return p.broker
			}
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func storedLayout(t *testing.T, store metadata.Store) layout.Layout {
	t.Helper()
	kv, err := store.Get(context.Background(), metadata.ScalableLayoutKey(driverTopic.Tenant, driverTopic.Namespace, driverTopic.Name))
	if err != nil {
		t.Fatal(err)
	}
	l, err := layout.Unmarshal(kv.Value)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestDriverSplitMergeFailover: two brokers run the controller over a real etcd; one leads,
// splits and merges through it commit, the other refuses; when the leader closes, the other
// takes over and works on the same record; the GC prunes and deletes the sealed segments.
func TestDriverSplitMergeFailover(t *testing.T) {
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	segs := newMemSegments()
	ctx := context.Background()
	if err := CreateTopic(ctx, store, segs, driverTopic, 1, []string{"sub"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := CreateTopic(ctx, store, segs, driverTopic, 1, nil, time.Now()); !errors.Is(err, metadata.ErrBadVersion) {
		t.Fatalf("second create: %v", err)
	}
	events := make(chan published, 4096)
	cs := map[string]*Controller{"a": startController(t, store, segs, events, "a"), "b": startController(t, store, segs, events, "b")}
	leader := await(t, events, "a leader", func(string, layout.Layout) bool { return true })
	lead, other := cs[leader], cs["a"]
	if leader == "a" {
		other = cs["b"]
	}
	if !lead.Leading() || other.Leading() {
		t.Fatalf("leading: %s %v, the other %v", leader, lead.Leading(), other.Leading())
	}
	if err := other.Split(ctx, 0, 0); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("split through the follower: %v", err)
	}
	if err := lead.Split(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	l := storedLayout(t, store)
	if act := l.Active(); len(act) != 2 || act[0].ID != 1 || act[1].ID != 2 {
		t.Fatalf("after the split: %+v", l.Segments)
	}
	if p := segs.topic(0); !p.terminated || !slices.Contains(segs.topic(1).subs, "sub") || !slices.Contains(segs.topic(2).subs, "sub") {
		t.Fatalf("parent %+v, children %+v %+v", p, segs.topic(1), segs.topic(2))
	}
	if err := lead.Close(); err != nil {
		t.Fatal(err)
	}
	await(t, events, "the other broker to lead", func(b string, _ layout.Layout) bool { return b != leader })
	if err := other.Merge(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	l = storedLayout(t, store)
	if act := l.Active(); len(act) != 1 || act[0].ID != 3 || act[0].Range != layout.FullRange() {
		t.Fatalf("after the merge: %+v", l.Segments)
	}
	// With retention 0 and nothing to read, the GC prunes 0, then 1 and 2, and deletes them
	// before the record forgets them.
	await(t, events, "the GC", func(_ string, l layout.Layout) bool { return len(l.Segments) == 1 && len(l.Deleting) == 0 })
	for _, id := range []SegmentID{0, 1, 2} {
		if !segs.topic(id).deleted {
			t.Fatalf("segment %d pruned but its topic not deleted", id)
		}
	}
}

// TestDriverTakeoverMidSplit: the leader crashes (closes) with its split's intent recorded
// and the parent's seal stuck; the next leader completes the split.
func TestDriverTakeoverMidSplit(t *testing.T) {
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	segs := newMemSegments()
	segs.sealGate, segs.sealEntered = make(chan struct{}), make(chan struct{})
	ctx := context.Background()
	if err := CreateTopic(ctx, store, segs, driverTopic, 1, []string{"sub"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	events := make(chan published, 4096)
	a := startController(t, store, segs, events, "a")
	await(t, events, "a to lead", func(string, layout.Layout) bool { return true })
	sctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- a.Split(sctx, 0, 0x4000) }()
	await(t, events, "the intent", func(_ string, l layout.Layout) bool { return l.Pending != nil })
	select {
	case <-segs.sealEntered: // a is stuck sealing the parent, after creating the children
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for the seal")
	}
	b := startController(t, store, segs, events, "b")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-errc
	await(t, events, "b to complete the split", func(br string, l layout.Layout) bool {
		return br == "b" && l.Pending == nil && len(l.Active()) == 2
	})
	l := storedLayout(t, store)
	if act := l.Active(); act[0].Range != (layout.HashRange{Start: 0, End: 0x3fff}) || !segs.topic(0).terminated {
		t.Fatalf("after the takeover: %+v, parent %+v", act, segs.topic(0))
	}
	if !b.Leading() {
		t.Fatal("b does not lead")
	}
}
