package metadata_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// TestSplit: with a configuration store apart from the local store, the configuration
// records (cluster records, tenants, namespaces, partitioned topics) are read and written
// in the configuration store and everything else in the local one; what would span both
// (a listing or watch of "/admin/", a mixed commit) is refused; and a Follower with a
// RevisionKey follows a configuration prefix from the configuration store's revision,
// however far ahead the local store's is.
func TestSplit(t *testing.T) {
	local := metadatatest.OpenStore(t, metadatatest.Embedded(t), "")
	conf := metadatatest.OpenStore(t, metadatatest.Embedded(t), "")
	if metadata.NewSplit(local, nil) != metadata.Store(local) || metadata.NewSplit(local, local) != metadata.Store(local) {
		t.Fatal("NewSplit without a store apart is not the local store itself")
	}
	sp := metadata.NewSplit(local, conf)
	ctx := ctxT(t)

	confKeys := []string{metadata.ClusterKey("c1"), metadata.TenantKey("t"), metadata.NamespaceKey("t", "ns"),
		metadata.PartitionedTopicKey("t", "ns", "persistent", "p")}
	localKeys := []string{metadata.TopicKey("t", "ns", "persistent", "p-partition-0"), metadata.ManagedLedgerKey("t/ns/persistent/x"),
		metadata.BundleOwnerKey("t", "ns", "0x00000000_0xffffffff"), metadata.SchemaKey("t", "ns", "x", 0), "/admin/local-policies/t/ns"}
	for _, k := range append(append([]string{}, confKeys...), localKeys...) {
		mustPut(t, sp, k, "v", metadata.NotExists)
	}
	for _, k := range confKeys {
		if _, err := conf.Get(ctx, k); err != nil {
			t.Errorf("%s not in the configuration store: %v", k, err)
		}
		if _, err := local.Get(ctx, k); !errors.Is(err, metadata.ErrNotFound) {
			t.Errorf("%s in the local store: %v", k, err)
		}
		if kv, err := sp.Get(ctx, k); err != nil || string(kv.Value) != "v" {
			t.Errorf("Get %s through the split: %v %v", k, kv, err)
		}
	}
	for _, k := range localKeys {
		if _, err := local.Get(ctx, k); err != nil {
			t.Errorf("%s not in the local store: %v", k, err)
		}
		if _, err := conf.Get(ctx, k); !errors.Is(err, metadata.ErrNotFound) {
			t.Errorf("%s in the configuration store: %v", k, err)
		}
	}
	if kvs, _, err := sp.List(ctx, metadata.PrefixNamespaces); err != nil || len(kvs) != 1 {
		t.Errorf("List namespaces: %v %v", kvs, err)
	}
	if kvs, err := sp.Range(ctx, metadata.PrefixTenants, metadata.PrefixTenants+"\xff", 0); err != nil || len(kvs) != 1 {
		t.Errorf("Range in the tenants: %v %v", kvs, err)
	}

	// What would span the two stores.
	for _, p := range []string{"", "/", "/admin/", "/admin/c"} {
		if _, _, err := sp.List(ctx, p); !errors.Is(err, metadata.ErrSpansStores) {
			t.Errorf("List %q: %v, want ErrSpansStores", p, err)
		}
		w := sp.Watch(ctx, p, 0)
		for range w.C {
			t.Errorf("Watch %q delivered events", p)
		}
		if !errors.Is(w.Err(), metadata.ErrSpansStores) {
			t.Errorf("Watch %q: %v, want ErrSpansStores", p, w.Err())
		}
	}
	if _, err := sp.Range(ctx, "/admin/a", "/admin/z", 0); !errors.Is(err, metadata.ErrSpansStores) {
		t.Errorf("Range over both: %v", err)
	}
	mixed := []metadata.Op{{Key: metadata.TenantKey("t2"), Value: []byte("v")}, {Key: metadata.TopicKey("t2", "ns", "persistent", "x"), Value: []byte("v")}}
	if _, err := sp.Commit(ctx, mixed); !errors.Is(err, metadata.ErrSpansStores) {
		t.Errorf("mixed Commit: %v", err)
	}
	if _, err := conf.Get(ctx, metadata.TenantKey("t2")); !errors.Is(err, metadata.ErrNotFound) {
		t.Errorf("a refused commit wrote: %v", err)
	}
	if _, err := sp.Commit(ctx, []metadata.Op{{Key: metadata.TenantKey("t2"), Value: []byte("v"), Expected: metadata.NotExists},
		{Key: metadata.TenantKey("t3"), Value: []byte("v"), Expected: metadata.NotExists}}); err != nil {
		t.Fatal(err)
	}
	if kvs, _, err := conf.List(ctx, metadata.PrefixTenants); err != nil || len(kvs) != 3 {
		t.Errorf("a commit of configuration records: %v %v", kvs, err)
	}

	// Counters and sessions are the local store's.
	if _, err := sp.NextID(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := local.Get(ctx, metadata.CounterKey("x")); err != nil {
		t.Errorf("counter not in the local store: %v", err)
	}
	sess, err := sp.NewSession(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.Put(ctx, metadata.BrokerKey("b1"), []byte("v"), metadata.NotExists); err != nil {
		t.Fatal(err)
	}
	if _, err := local.Get(ctx, metadata.BrokerKey("b1")); err != nil {
		t.Errorf("ephemeral key not in the local store: %v", err)
	}

	// The local store's revision far ahead of the configuration store's: a follower of
	// the namespaces still sees a change made after its listing.
	for i := range 50 {
		mustPut(t, local, fmt.Sprintf("/busy/%d", i), "v", metadata.AnyVersion)
	}
	ups := metadata.Follower{Store: sp, Prefix: metadata.PrefixNamespaces, RevisionKey: metadata.RevisionKey}.Chan(ctx)
	if u := <-ups; u.Kind != metadata.Listed {
		t.Fatalf("first update %v, want a listing", u.Kind)
	}
	mustPut(t, sp, metadata.NamespaceKey("t", "ns2"), "v", metadata.NotExists)
	for u := range ups {
		if u.Kind == metadata.Changed && len(u.Events) == 1 && u.Events[0].KV.Key == metadata.NamespaceKey("t", "ns2") {
			return
		}
		t.Fatalf("update %v %v before the namespace's creation", u.Kind, u.Events)
	}
	t.Fatal("the follower ended without seeing the namespace's creation")
}
