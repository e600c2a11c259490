package topicreg_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/ownership"
	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/broker/topicreg"
)

// fakeRecords holds the records in maps: topics that exist, partitioned topics, topic
// policy records. Namespaces: only public/default exists.
type fakeRecords struct {
	mu      sync.Mutex
	topics  map[string]bool
	parts   map[string]int
	tpols   map[string]map[string]json.RawMessage
	created atomic.Int32 // CreateTopicRecord calls
}

func newFakeRecords() *fakeRecords {
	return &fakeRecords{topics: map[string]bool{}, parts: map[string]int{}, tpols: map[string]map[string]json.RawMessage{}}
}

func (f *fakeRecords) ns(tenant, ns string) error {
	if tenant+"/"+ns != "public/default" {
		return api.ErrNamespaceNotFound
	}
	return nil
}

func (f *fakeRecords) NamespacePolicies(_ context.Context, t, ns string) (api.NamespacePolicies, error) {
	return api.NamespacePolicies{}, f.ns(t, ns)
}
func (f *fakeRecords) CachedPolicies(ctx context.Context, t, ns string) (api.NamespacePolicies, error) {
	return f.NamespacePolicies(ctx, t, ns)
}
func (f *fakeRecords) CachedPartitions(ctx context.Context, n topicname.Name) (int, error) {
	return f.PartitionCount(ctx, n)
}
func (f *fakeRecords) CheckNamespace(_ context.Context, t, ns string) error { return f.ns(t, ns) }
func (f *fakeRecords) SetNamespaceSeen(context.Context, string, api.NamespacePolicies) error {
	return nil
}
func (f *fakeRecords) DeleteNamespace(context.Context, string, string) error { return nil }
func (f *fakeRecords) Topics(context.Context, string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ts []string
	for t := range f.topics {
		ts = append(ts, t)
	}
	return ts, nil
}
func (f *fakeRecords) DomainTopics(ctx context.Context, _, _, _ string) ([]string, error) {
	return f.Topics(ctx, "")
}
func (f *fakeRecords) PartitionedTopics(context.Context, string) ([]string, error) { return nil, nil }
func (f *fakeRecords) TopicExists(_ context.Context, n topicname.Name) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.topics[n.String()], nil
}
func (f *fakeRecords) CreateTopicRecord(_ context.Context, n topicname.Name) error {
	f.created.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.topics[n.String()] = true
	return nil
}
func (f *fakeRecords) DeleteTopicRecord(_ context.Context, n topicname.Name) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.topics, n.String())
	return nil
}
func (f *fakeRecords) PartitionCount(_ context.Context, n topicname.Name) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parts[n.String()], nil
}
func (f *fakeRecords) CreatePartitioned(context.Context, string, int) error { return nil }
func (f *fakeRecords) DeletePartitioned(context.Context, topicname.Name) error {
	return nil
}
func (f *fakeRecords) TopicPolicies(_ context.Context, n topicname.Name) (map[string]json.RawMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := map[string]json.RawMessage{}
	for k, v := range f.tpols[n.Base().String()] {
		r[k] = v
	}
	return r, nil
}
func (f *fakeRecords) UpdateTopicPolicies(ctx context.Context, n topicname.Name, change func(map[string]json.RawMessage) error) error {
	r, _ := f.TopicPolicies(ctx, n)
	if err := change(r); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tpols[n.Base().String()] = r
	return nil
}

// fakeOwner owns every bundle unless owner is set (another broker's); serving says whether
// an acquired bundle is still served when a load completes.
type fakeOwner struct {
	acquired atomic.Int32
	serving  atomic.Bool
	owner    *api.BrokerInfo
	// gate, if set, holds AcquireTopic until closed (concurrent loads).
	gate chan struct{}
}

func (o *fakeOwner) AcquireTopic(ctx context.Context, n topicname.Name) (*ownership.OwnedBundle, error) {
	o.acquired.Add(1)
	if o.gate != nil {
		select {
		case <-o.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if o.owner != nil {
		return nil, &api.NotOwnerError{Topic: n.String(), Owner: *o.owner}
	}
	return &ownership.OwnedBundle{}, nil
}
func (o *fakeOwner) Serving(*ownership.OwnedBundle) bool { return o.serving.Load() }
func (o *fakeOwner) BundleOf(_ context.Context, n topicname.Name) (ownership.Bundle, error) {
	return ownership.Bundle{Namespace: n.Tenant + "/" + n.Namespace}, nil
}
func (o *fakeOwner) BundleOwner(context.Context, ownership.Bundle) error {
	if o.owner != nil {
		return &api.NotOwnerError{Owner: *o.owner}
	}
	return nil
}

func newRegistry(t *testing.T, rec *fakeRecords, own *fakeOwner) *topicreg.Registry {
	t.Helper()
	mem := topictest.NewStore()
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	r := topicreg.New(ctx, topicreg.Config{Cluster: "c", MaxMessageSize: 1 << 20, DeduplicationSnapshotInterval: 1000,
		MaxPendingPublishBytesPerTopic: 1 << 20, Policies: policy.Defaults{}.WithDefaults(), CompactionCheckInterval: -1,
		OpenLog: func(_ context.Context, name string) (topic.Log, error) { return mem.Open(name), nil },
		Records: rec, Owner: own, Resolver: &policy.Resolver{Defaults: policy.Defaults{}.WithDefaults(), Cluster: "c"},
		TopicMetrics: topic.NewMetrics(reg), Registerer: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		r.RefuseLoads()
		r.UnloadAll(cctx)
		cancel()
	})
	return r
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestLoadChecksTheBundleIsStillServed: a load that completes after its bundle was
// released (Owner.Serving false) fails with ErrServiceNotReady, registers nothing and
// leaves the topic closed; the next load, with the bundle served, succeeds.
func TestLoadChecksTheBundleIsStillServed(t *testing.T) {
	ctx := testCtx(t)
	rec, own := newFakeRecords(), &fakeOwner{}
	r := newRegistry(t, rec, own)
	n := topicname.MustParse("persistent://public/default/a")
	_, err := r.Topic(ctx, n, true, false)
	if !errors.Is(err, api.ErrServiceNotReady) {
		t.Fatalf("load of a released bundle: %v, want ErrServiceNotReady", err)
	}
	if r.LoadedTopic(n.String()) != nil || len(r.LoadedTopics()) != 0 {
		t.Fatal("a topic whose bundle was released is registered")
	}
	own.serving.Store(true)
	tp, err := r.Topic(ctx, n, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.LoadedTopic(n.String()) != tp {
		t.Fatal("the loaded topic is not the registered one")
	}
}

// TestConcurrentLoadsShareOneOpen: callers asking for a topic being loaded wait for the
// same load, which acquires the bundle once.
func TestConcurrentLoadsShareOneOpen(t *testing.T) {
	ctx := testCtx(t)
	rec, own := newFakeRecords(), &fakeOwner{gate: make(chan struct{})}
	own.serving.Store(true)
	r := newRegistry(t, rec, own)
	n := topicname.MustParse("persistent://public/default/b")
	const callers = 4
	got := make(chan *topic.Topic, callers)
	for range callers {
		go func() {
			tp, err := r.Topic(ctx, n, true, false)
			if err != nil {
				t.Error(err)
			}
			got <- tp
		}()
	}
	for own.acquired.Load() == 0 { // the first load reached AcquireTopic
		select {
		case <-ctx.Done():
			t.Fatal("no load started")
		case <-time.After(time.Millisecond):
		}
	}
	close(own.gate)
	first := <-got
	for range callers - 1 {
		if tp := <-got; tp != first {
			t.Fatal("two topics for one name")
		}
	}
	if a := own.acquired.Load(); a != 1 {
		t.Fatalf("%d acquisitions for one topic, want 1", a)
	}
	if c := rec.created.Load(); c != 1 {
		t.Fatalf("%d topic records created, want 1", c)
	}
}

// TestCreateRules: without create a missing topic is ErrTopicNotFound; a segment is
// created only with force (by its controller); a partitioned topic's base name is refused;
// RefuseLoads fails every later load.
func TestCreateRules(t *testing.T) {
	ctx := testCtx(t)
	rec, own := newFakeRecords(), &fakeOwner{}
	own.serving.Store(true)
	r := newRegistry(t, rec, own)
	missing := topicname.MustParse("persistent://public/default/missing")
	if _, err := r.Topic(ctx, missing, false, false); !errors.Is(err, api.ErrTopicNotFound) {
		t.Fatalf("load without create: %v, want ErrTopicNotFound", err)
	}
	if rec.created.Load() != 0 {
		t.Fatal("a load without create wrote a topic record")
	}
	rec.parts["persistent://public/default/p"] = 3
	if _, err := r.Topic(ctx, topicname.MustParse("persistent://public/default/p"), true, false); !errors.Is(err, api.ErrNotAllowed) {
		t.Fatalf("load of a partitioned topic's base name: %v, want ErrNotAllowed", err)
	}
	if err := r.CreateTopic(ctx, "persistent://public/default/c"); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateTopic(ctx, "persistent://public/default/c"); !errors.Is(err, api.ErrAlreadyExists) {
		t.Fatalf("second create: %v, want ErrAlreadyExists", err)
	}
	r.RefuseLoads()
	if _, err := r.Topic(ctx, topicname.MustParse("persistent://public/default/d"), true, false); !errors.Is(err, api.ErrServiceNotReady) {
		t.Fatalf("load after RefuseLoads: %v, want ErrServiceNotReady", err)
	}
}

// TestUnloadRedirectsToTheOwner: unloading a topic not loaded here whose bundle another
// broker owns answers *NotOwnerError naming the topic; nobody owning it is nothing to do.
func TestUnloadRedirectsToTheOwner(t *testing.T) {
	ctx := testCtx(t)
	other := api.BrokerInfo{ID: "other", HTTPURL: "http://other"}
	r := newRegistry(t, newFakeRecords(), &fakeOwner{owner: &other})
	err := r.Unload(ctx, "persistent://public/default/x")
	var no *api.NotOwnerError
	if !errors.As(err, &no) || no.Owner.ID != "other" || no.Topic != "persistent://public/default/x" {
		t.Fatalf("unload of a topic another broker owns: %v", err)
	}
	r2 := newRegistry(t, newFakeRecords(), &fakeOwner{})
	if err := r2.Unload(ctx, "persistent://public/default/x"); err != nil {
		t.Fatalf("unload of a topic loaded nowhere: %v", err)
	}
}

// TestTopicPolicyAppliedAtOnce: a topic policy set through the registry is in force on
// the loaded topic when the call returns (applied value), and removing it brings back the
// broker's default.
func TestTopicPolicyAppliedAtOnce(t *testing.T) {
	ctx := testCtx(t)
	rec, own := newFakeRecords(), &fakeOwner{}
	own.serving.Store(true)
	r := newRegistry(t, rec, own)
	const name = "persistent://public/default/pol"
	if err := r.CreateTopic(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := r.SetTopicPolicy(ctx, name, "messageTTL", "", []byte("120")); err != nil {
		t.Fatal(err)
	}
	v, err := r.TopicPolicy(ctx, name, "messageTTL", true)
	if err != nil || string(v) != "120" {
		t.Fatalf("applied messageTTL = %s, %v; want 120", v, err)
	}
	if err := r.SetTopicPolicy(ctx, name, "messageTTL", "", []byte(`"x"`)); !errors.Is(err, api.ErrInvalidArgument) {
		t.Fatalf("bad body: %v, want ErrInvalidArgument", err)
	}
	if v, _ := r.TopicPolicy(ctx, name, "messageTTL", false); string(v) != "120" {
		t.Fatalf("a refused change changed the record: %s", v)
	}
	if err := r.RemoveTopicPolicy(ctx, name, "messageTTL", ""); err != nil {
		t.Fatal(err)
	}
	if v, _ := r.TopicPolicy(ctx, name, "messageTTL", false); string(v) != "null" {
		t.Fatalf("removed messageTTL reads %s, want null", v)
	}
}
