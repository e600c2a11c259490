package resources_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/resources"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// downStore is a real store whose reads fail while down is set (an unreachable store).
type downStore struct {
	metadata.Store
	down atomic.Bool
}

var errDown = errors.New("test: store down")

func (s *downStore) Get(ctx context.Context, key string) (metadata.KV, error) {
	if s.down.Load() {
		return metadata.KV{}, errDown
	}
	return s.Store.Get(ctx, key)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestRecords: creates refuse what exists, lists are ordered, deletes refuse non-empty
// tenants, partitioned topics get a record per partition and only grow, and topic
// permissions merge the namespace's grants with the topic's.
func TestRecords(t *testing.T) {
	ctx := ctxT(t)
	r := resources.New(metadatatest.NewStore(t, metadatatest.Embedded(t)), "c1", nil)
	for range 2 {
		if err := r.EnsureDefaults(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.CreateTenant(ctx, "t1", api.TenantInfo{}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateTenant(ctx, "t1", api.TenantInfo{}); !errors.Is(err, api.ErrAlreadyExists) {
		t.Fatalf("second CreateTenant: %v, want ErrAlreadyExists", err)
	}
	if ti, err := r.Tenant(ctx, "t1"); err != nil || !slices.Equal(ti.AllowedClusters, []string{"c1"}) {
		t.Fatalf("Tenant = %+v, %v; want the broker's cluster allowed", ti, err)
	}
	if ts, err := r.Tenants(ctx); err != nil || !slices.Equal(ts, []string{topicname.DefaultTenant, "t1"}) {
		t.Fatalf("Tenants = %v, %v", ts, err)
	}
	for _, ns := range []string{"t1/b", "t1/a"} {
		if err := r.CreateNamespace(ctx, ns, api.NamespacePolicies{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Namespace(ctx, "t1/zz"); !errors.Is(err, api.ErrNamespaceNotFound) {
		t.Fatalf("Namespace of a missing one: %v, want ErrNamespaceNotFound", err)
	}
	if nss, err := r.Namespaces(ctx, "t1"); err != nil || !slices.Equal(nss, []string{"t1/a", "t1/b"}) {
		t.Fatalf("Namespaces = %v, %v", nss, err)
	}
	if err := r.DeleteTenant(ctx, "t1"); !errors.Is(err, api.ErrNotEmpty) {
		t.Fatalf("DeleteTenant with namespaces: %v, want ErrNotEmpty", err)
	}
	if err := r.CreatePartitioned(ctx, "persistent://t1/a/p", 3); err != nil {
		t.Fatal(err)
	}
	n, _ := topicname.Parse("persistent://t1/a/p")
	if c, err := r.PartitionCount(ctx, n); err != nil || c != 3 {
		t.Fatalf("PartitionCount = %d, %v; want 3", c, err)
	}
	if ts, err := r.Topics(ctx, "t1/a"); err != nil || len(ts) != 3 || ts[0] != n.PartitionName(0).String() {
		t.Fatalf("Topics = %v, %v; want the 3 partitions", ts, err)
	}
	if err := r.UpdatePartitioned(ctx, n.String(), 2); !errors.Is(err, api.ErrInvalidArgument) {
		t.Fatalf("shrinking: %v, want ErrInvalidArgument", err)
	}
	if err := r.GrantNamespacePermission(ctx, "t1/a", "r1", []auth.Action{auth.ActionProduce}); err != nil {
		t.Fatal(err)
	}
	if err := r.GrantTopicPermission(ctx, n.String(), "r1", []auth.Action{auth.ActionConsume}); err != nil {
		t.Fatal(err)
	}
	perms, err := r.TopicPermissions(ctx, n.PartitionName(1).String())
	if err != nil || len(perms["r1"]) != 2 {
		t.Fatalf("TopicPermissions of a partition = %v, %v; want r1's namespace and topic grants", perms, err)
	}
	if err := r.RevokeTopicPermission(ctx, n.String(), "r1"); err != nil {
		t.Fatal(err)
	}
	if perms, err := r.TopicPermissions(ctx, n.String()); err != nil || len(perms["r1"]) != 1 {
		t.Fatalf("TopicPermissions after revoke = %v, %v; want the namespace grant only", perms, err)
	}
}

// TestCachesAnswerWhileStoreDown: the watched caches follow the records (WaitNamespace sees a
// SetNamespace), and answer the cached reads while the store's reads fail.
func TestCachesAnswerWhileStoreDown(t *testing.T) {
	ctx, cancel := context.WithCancel(ctxT(t))
	s := &downStore{Store: metadatatest.NewStore(t, metadatatest.Embedded(t))}
	r := resources.New(s, "c1", nil)
	var wg sync.WaitGroup
	for _, c := range r.Caches() {
		wg.Go(func() { c.Run(ctx) })
	}
	defer func() { cancel(); wg.Wait() }()
	if err := r.CreateTenant(ctx, "t1", api.TenantInfo{}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateNamespace(ctx, "t1/a", api.NamespacePolicies{}); err != nil {
		t.Fatal(err)
	}
	v, err := r.SetNamespace(ctx, "t1/a", api.NamespacePolicies{Other: map[string]any{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WaitNamespace(ctx, "t1", "a", v); err != nil {
		t.Fatal(err)
	}
	if err := r.CreatePartitioned(ctx, "persistent://t1/a/p", 2); err != nil {
		t.Fatal(err)
	}
	n, _ := topicname.Parse("persistent://t1/a/p")
	for {
		ch := r.Caches()[1].Changed()
		if _, found, _ := r.Caches()[1].Get(metadata.PartitionedTopicKey("t1", "a", "persistent", "p")); found {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatal("the partitioned-topic cache never saw the record")
		}
	}
	s.down.Store(true)
	if _, err := r.NamespacePolicies(ctx, "t1", "a"); !errors.Is(err, errDown) {
		t.Fatalf("store read while down: %v, want the store's error", err)
	}
	if p, err := r.CachedPolicies(ctx, "t1", "a"); err != nil || p.Other["k"] != "v" {
		t.Fatalf("CachedPolicies while down = %+v, %v; want the cached record", p, err)
	}
	if c, err := r.CachedPartitions(ctx, n); err != nil || c != 2 {
		t.Fatalf("CachedPartitions while down = %d, %v; want 2 from the cache", c, err)
	}
	if _, err := r.CachedPolicies(ctx, "t1", "missing"); !errors.Is(err, errDown) {
		t.Fatalf("CachedPolicies of an uncached namespace while down: %v", err)
	}
}
