package broker_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// etcd's client and embedded server keep a few process-wide goroutines.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
	)
}

func startService(t *testing.T, store metadata.Store, mem *topictest.Store, id string) *broker.Service {
	t.Helper()
	return startServiceWith(t, store, mem, id, nil)
}

// startServiceWith starts a broker whose configuration tweak may change.
func startServiceWith(t *testing.T, store metadata.Store, mem *topictest.Store, id string, tweak func(*broker.Config)) *broker.Service {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := broker.Config{
		Store: store, Listen: "127.0.0.1:0", ID: id, HTTPURL: "http://" + id,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		OpenLog: func(_ context.Context, name string) (topic.Log, error) { return mem.Open(name), nil },
	}
	if tweak != nil {
		tweak(&cfg)
	}
	svc, err := broker.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

// TestServiceResources drives the exported API the admin layer uses.
func TestServiceResources(t *testing.T) {
	eps := metadatatest.Embedded(t)
	store := metadatatest.NewStore(t, eps)
	svc := startService(t, store, topictest.NewStore(), "b1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if ts, err := svc.Tenants(ctx); err != nil || !slices.Equal(ts, []string{"public"}) {
		t.Fatalf("tenants at first start: %v %v", ts, err)
	}
	if nss, err := svc.Namespaces(ctx, "public"); err != nil || !slices.Equal(nss, []string{"public/default"}) {
		t.Fatalf("namespaces at first start: %v %v", nss, err)
	}
	if err := svc.CreateTenant(ctx, "acme", broker.TenantInfo{}); err != nil {
		t.Fatal(err)
	}
	if err := svc.CreateTenant(ctx, "acme", broker.TenantInfo{}); !errors.Is(err, broker.ErrAlreadyExists) {
		t.Fatalf("second create: %v", err)
	}
	if err := svc.CreateNamespace(ctx, "acme/ns", broker.NamespacePolicies{}); err != nil {
		t.Fatal(err)
	}
	if err := svc.CreateNamespace(ctx, "nope/ns", broker.NamespacePolicies{}); !errors.Is(err, broker.ErrTenantNotFound) {
		t.Fatalf("namespace of a missing tenant: %v", err)
	}
	if err := svc.DeleteTenant(ctx, "acme"); !errors.Is(err, broker.ErrNotEmpty) {
		t.Fatalf("delete a tenant with namespaces: %v", err)
	}

	// Topics, partitioned topics.
	if err := svc.CreatePartitionedTopic(ctx, "acme/ns/pt", 3); err != nil {
		t.Fatal(err)
	}
	if md, err := svc.PartitionedTopicMetadata(ctx, "persistent://acme/ns/pt"); err != nil || md.Partitions != 3 {
		t.Fatalf("partitioned metadata: %v %v", md, err)
	}
	if err := svc.UpdatePartitionedTopic(ctx, "acme/ns/pt", 2); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Fatalf("shrinking: %v", err)
	}
	if err := svc.UpdatePartitionedTopic(ctx, "acme/ns/pt", 4); err != nil {
		t.Fatal(err)
	}
	if err := svc.CreateTopic(ctx, "acme/ns/plain"); err != nil {
		t.Fatal(err)
	}
	if err := svc.CreateTopic(ctx, "acme/ns/plain"); !errors.Is(err, broker.ErrAlreadyExists) {
		t.Fatalf("second create: %v", err)
	}
	topics, err := svc.Topics(ctx, "acme/ns")
	if err != nil || len(topics) != 5 || !slices.Contains(topics, "persistent://acme/ns/pt-partition-3") {
		t.Fatalf("topics %v %v", topics, err)
	}
	if pts, err := svc.PartitionedTopics(ctx, "acme/ns"); err != nil || !slices.Equal(pts, []string{"persistent://acme/ns/pt"}) {
		t.Fatalf("partitioned topics %v %v", pts, err)
	}
	if _, err := svc.TopicStats(ctx, "acme/ns/missing"); !errors.Is(err, broker.ErrTopicNotFound) {
		t.Fatalf("stats of a missing topic: %v", err)
	}

	// Subscriptions.
	if err := svc.CreateSubscription(ctx, "acme/ns/plain", "s", broker.Earliest); err != nil {
		t.Fatal(err)
	}
	if err := svc.CreateSubscription(ctx, "acme/ns/plain", "s", broker.Earliest); !errors.Is(err, broker.ErrAlreadyExists) {
		t.Fatalf("second subscription create: %v", err)
	}
	if subs, err := svc.Subscriptions(ctx, "acme/ns/plain"); err != nil || !slices.Equal(subs, []string{"s"}) {
		t.Fatalf("subscriptions %v %v", subs, err)
	}
	st, err := svc.TopicStats(ctx, "acme/ns/plain")
	if err != nil || st.Subscriptions["s"].Type == "" && st.Subscriptions["s"].MsgBacklog != 0 {
		t.Fatalf("stats %+v %v", st, err)
	}
	if _, ok := st.Subscriptions["s"]; !ok {
		t.Fatalf("stats without the subscription: %+v", st)
	}
	if _, err := svc.InternalStats(ctx, "acme/ns/plain"); err != nil {
		t.Fatal(err)
	}
	if err := svc.ResetCursor(ctx, "acme/ns/plain", "s", broker.Latest); err != nil {
		t.Fatal(err)
	}
	if err := svc.ClearBacklog(ctx, "acme/ns/plain", "s"); err != nil {
		t.Fatal(err)
	}
	if err := svc.DeleteSubscription(ctx, "acme/ns/plain", "missing", false); !errors.Is(err, broker.ErrSubscriptionNotFound) {
		t.Fatalf("delete a missing subscription: %v", err)
	}
	if err := svc.DeleteSubscription(ctx, "acme/ns/plain", "s", false); err != nil {
		t.Fatal(err)
	}
	if id, err := svc.LastMessageID(ctx, "acme/ns/plain"); err != nil || id.EntryID != -1 {
		t.Fatalf("last message id of an empty topic: %v %v", id, err)
	}
	if _, err := svc.Terminate(ctx, "acme/ns/plain"); err != nil {
		t.Fatal(err)
	}
	if err := svc.Unload(ctx, "acme/ns/plain"); err != nil {
		t.Fatal(err)
	}

	// Deleting.
	if err := svc.DeleteNamespace(ctx, "acme/ns", false); !errors.Is(err, broker.ErrNotEmpty) {
		t.Fatalf("delete a namespace with topics: %v", err)
	}
	if err := svc.DeletePartitionedTopic(ctx, "acme/ns/pt", false); err != nil {
		t.Fatal(err)
	}
	if err := svc.DeleteTopic(ctx, "acme/ns/plain", false); err != nil {
		t.Fatal(err)
	}
	if err := svc.DeleteNamespace(ctx, "acme/ns", false); err != nil {
		t.Fatal(err)
	}
	if err := svc.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// TestOwnership: a topic loaded on one broker is reported by another broker's lookup, and
// its admin calls there fail with *NotOwnerError; once the owner unloads it, the other
// broker can take it.
func TestOwnership(t *testing.T) {
	eps := metadatatest.Embedded(t)
	ns := metadatatest.RandomNamespace()
	mem := topictest.NewStore()
	b1 := startService(t, metadatatest.OpenStore(t, eps, ns), mem, "b1")
	b2 := startService(t, metadatatest.OpenStore(t, eps, ns), mem, "b2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b1.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	r, err := b2.Lookup(ctx, "t")
	if err != nil || r.Self || r.ID != "b1" || r.ServiceURL != b1.Info().ServiceURL {
		t.Fatalf("lookup on b2: %+v %v", r, err)
	}
	var no *broker.NotOwnerError
	if _, err := b2.TopicStats(ctx, "t"); !errors.As(err, &no) || no.Owner.HTTPURL != "http://b1" {
		t.Fatalf("stats on b2: %v", err)
	}
	// Ownership is per namespace bundle: hand t's bundle over to b2.
	bundle, err := b1.TopicBundle(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for { // b1's watched view of the live brokers may not show b2 yet
		err := b1.UnloadBundle(ctx, "public/default", bundle, "b2")
		if err == nil {
			break
		}
		if !errors.Is(err, broker.ErrInvalidArgument) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
	// b2 takes the bundle over asynchronously after the release (its own deadline: a loaded
	// machine).
	deadline = time.Now().Add(30 * time.Second)
	for {
		r, err = b2.Lookup(ctx, "t")
		if err == nil && r.Self {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lookup on b2 after the unload: %+v %v", r, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := b2.TopicStats(ctx, "t"); err != nil {
		t.Fatalf("stats on the new owner: %v", err)
	}
}
