package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

func TestBundleKeysAndNames(t *testing.T) {
	bs, err := NamespaceBundles("t/n", api.NamespacePolicies{}, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		got, err := bundleFromKey(bundleKey(b))
		if err != nil || got != b {
			t.Errorf("key %s: %v %v, want %v", bundleKey(b), got, err, b)
		}
		if got, err := ParseBundleName(b.String()); err != nil || got != b {
			t.Errorf("name %s: %v %v", b, got, err)
		}
	}
	if _, err := bundleFromKey(metadata.PrefixBundleOwners + "t/0x00000000_0x40000000"); !errors.Is(err, api.ErrInvalidArgument) {
		t.Errorf("short key: %v, want ErrInvalidArgument", err)
	}
	if _, err := ParseBundleName("0x00000000_0x40000000"); !errors.Is(err, api.ErrInvalidArgument) {
		t.Errorf("name without namespace: %v, want ErrInvalidArgument", err)
	}
	// The last bundle holds the top of the hash space; the others exclude their upper end.
	if !bs[3].Contains(LastBoundary) || bs[0].Contains(0x40000000) || !bs[1].Contains(0x40000000) {
		t.Errorf("range ends: %v %v", bs[0], bs[3])
	}
	if b := FindBundle(bs, LastBoundary); b != bs[3] {
		t.Errorf("FindBundle(0xffffffff) = %v", b)
	}
	// A bundle too narrow to halve, and one not among the namespace's bundles, are refused.
	narrow := Bundle{Namespace: "t/n", Lower: 7, Upper: 8}
	if _, err := SplitBoundaries(bs, narrow); !errors.Is(err, api.ErrNotAllowed) {
		t.Errorf("split narrow: %v, want ErrNotAllowed", err)
	}
	other := Bundle{Namespace: "t/n", Lower: 0, Upper: 0x20000000}
	if _, err := SplitBoundaries(bs, other); !errors.Is(err, api.ErrBundleNotFound) {
		t.Errorf("split unknown: %v, want ErrBundleNotFound", err)
	}
}

// fakeBroker is a broker with a session of its own and no topics; closed records the
// CloseTopics calls' redirects.
type fakeBroker struct {
	info   api.BrokerInfo
	sess   metadata.Session
	mu     sync.Mutex
	closed []*topic.Redirect
	// slowClose, if set, is called before CloseTopics returns (a slow unload).
	slowClose func()
}

func (f *fakeBroker) Info() api.BrokerInfo      { return f.info }
func (f *fakeBroker) Session() metadata.Session { return f.sess }
func (f *fakeBroker) CloseTopics(_ context.Context, match func(topicname.Name) bool, redirect *topic.Redirect) {
	if f.slowClose != nil {
		f.slowClose()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = append(f.closed, redirect)
}

type noNamespaces struct{}

func (noNamespaces) CachedPolicies(context.Context, string, string) (api.NamespacePolicies, error) {
	return api.NamespacePolicies{}, nil
}
func (noNamespaces) CachedBundlePolicies(context.Context, string, string) (api.NamespacePolicies, error) {
	return api.NamespacePolicies{}, nil
}
func (noNamespaces) SetBundles(context.Context, string, string, func(api.NamespacePolicies) (any, error)) (metadata.Version, error) {
	return 0, api.ErrNamespaceNotFound
}
func (noNamespaces) WaitBundles(context.Context, string, string, metadata.Version) error {
	return nil
}

// newBroker registers broker id on store and returns its running Manager.
func newBroker(t *testing.T, ctx context.Context, store metadata.Store, id string) (*Manager, *fakeBroker) {
	t.Helper()
	return newBrokerWith(t, ctx, store, id, 0)
}

// newBrokerWith is newBroker with Config.AcquireWait (0: the default).
func newBrokerWith(t *testing.T, ctx context.Context, store metadata.Store, id string, acquireWait time.Duration) (*Manager, *fakeBroker) {
	t.Helper()
	sess, err := store.NewSession(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	fb := &fakeBroker{info: api.BrokerInfo{ID: id, ServiceURL: "pulsar://" + id + ":6650"}, sess: sess}
	v, _ := json.Marshal(fb.info)
	if _, err := sess.Put(ctx, metadata.BrokerKey(id), v, metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	m := New(ctx, Config{Store: store, Namespaces: noNamespaces{}, SessionTTL: 10 * time.Second, AcquireWait: acquireWait}, fb)
	var wg sync.WaitGroup
	m.Start(ctx, &wg)
	m.StartTransfers(ctx, &wg)
	t.Cleanup(wg.Wait)
	return m, fb
}

// waitFor polls cond until it holds or 10s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// TestOwnershipAcrossBrokers: the default selector assigns an unowned bundle to the live
// broker owning the fewest, the owner answers lookups for itself and others redirect to
// it, a second broker cannot acquire an owned bundle, and a hand-over moves the bundle to
// the destination, which takes it without a lookup.
func TestOwnershipAcrossBrokers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	a, fa := newBroker(t, ctx, store, "a")
	b, fb := newBroker(t, ctx, store, "b")
	waitFor(t, "both brokers in both caches", func() bool { return len(a.LiveBrokers()) == 2 && len(b.LiveBrokers()) == 2 })

	bs, _ := NamespaceBundles("t/n", api.NamespacePolicies{}, DefaultBundles)
	// a owns one bundle: the selector then prefers b (fewest bundles; a tie would go to a,
	// the lower id), whoever asks.
	if _, err := a.Acquire(ctx, bs[1]); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Manager{b, a} {
		if id, err := m.selector().SelectBroker(ctx, bs[0].String()); err != nil || id != "b" {
			t.Fatalf("select %s: %q %v, want b", bs[0], id, err)
		}
	}
	n, _ := topicname.Parse("persistent://t/n/x")
	own := FindBundle(bs, TopicHash(n))
	if own == bs[1] {
		t.Fatalf("test topic falls in a's bundle; pick another name")
	}
	// A non-authoritative lookup at a of an unowned bundle redirects to the selected broker.
	r, err := a.Lookup(ctx, n.String(), false)
	if err != nil || r.Self || r.ID != "b" || !r.Assigned {
		t.Fatalf("lookup at a: %+v %v, want assigned to b", r, err)
	}
	// The redirected lookup at b takes the bundle.
	if r, err := b.Lookup(ctx, n.String(), true); err != nil || !r.Self {
		t.Fatalf("authoritative lookup at b: %+v %v", r, err)
	}
	waitFor(t, "a to see b's record", func() bool {
		rec, _, err := a.OwnerOf(ctx, own)
		return err == nil && rec != nil && rec.ID == "b"
	})
	if r, err := a.Lookup(ctx, n.String(), true); err != nil || r.Self || r.ID != "b" {
		t.Fatalf("lookup at a of b's bundle: %+v %v", r, err)
	}
	var no *api.NotOwnerError
	if _, err := a.Acquire(ctx, own); !errors.As(err, &no) || no.Owner.ID != "b" {
		t.Fatalf("a acquires b's bundle: %v, want NotOwnerError naming b", err)
	}
	if err := a.BundleOwner(ctx, own); !errors.As(err, &no) {
		t.Fatalf("BundleOwner at a: %v", err)
	}
	if err := b.BundleOwner(ctx, own); err != nil {
		t.Fatalf("BundleOwner at b: %v", err)
	}

	// Hand-over: b releases to a, which takes the bundle on its own.
	to := fa.info
	if err := b.Release(ctx, own, &to); err != nil {
		t.Fatal(err)
	}
	fb.mu.Lock()
	if len(fb.closed) != 1 || fb.closed[0] == nil || fb.closed[0].ServiceURL != to.ServiceURL {
		t.Errorf("b closed its topics with %v, want one redirect to %s", fb.closed, to.ServiceURL)
	}
	fb.mu.Unlock()
	waitFor(t, "a to take the handed-over bundle", func() bool { return a.Owned(own) != nil })
	if b.Owned(own) != nil {
		t.Fatal("b still serves the released bundle")
	}
	if got := a.OwnedNamespaces(ctx); len(got) != 2 {
		t.Errorf("a owns %v, want 2 bundles", got)
	}
	// Losing the session: every bundle is forgotten.
	a.DropAll()
	if len(a.OwnedBundles()) != 0 {
		t.Errorf("after DropAll a owns %v", a.OwnedBundles())
	}
}

// TestSlowHandOver: the destination of a hand-over whose owner takes longer than one
// acquisition (AcquireWait) to close the bundle's topics keeps waiting and takes the bundle
// once it is released, rather than leaving it unowned.
func TestSlowHandOver(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	a, fa := newBrokerWith(t, ctx, store, "a", 100*time.Millisecond)
	b, fb := newBroker(t, ctx, store, "b")
	waitFor(t, "both brokers in both caches", func() bool { return len(a.LiveBrokers()) == 2 && len(b.LiveBrokers()) == 2 })
	bs, _ := NamespaceBundles("t/n", api.NamespacePolicies{}, DefaultBundles)
	if _, err := b.Acquire(ctx, bs[0]); err != nil {
		t.Fatal(err)
	}
	// b's topics close only after a's first take-over attempt gave up waiting.
	fb.slowClose = func() {
		waitFor(t, "a to retry its take-over", func() bool { return counterValue(a.m.retries) >= 1 })
	}
	to := fa.info
	if err := b.Release(ctx, bs[0], &to); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a to take the slowly handed-over bundle", func() bool { return a.Owned(bs[0]) != nil })
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
