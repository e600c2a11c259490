package broker_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

// sharedConfig is two clusters, east and west, each with its own local etcd and its own
// storage, sharing a third etcd as their configuration store (Pulsar's
// configurationMetadataStoreUrl). The stores are opened without a key prefix, as the
// commands open them.
type sharedConfig struct {
	eastLocal, westLocal, shared metadata.Store
	eastLogs, westLogs           *topictest.Store
}

func newSharedConfig(t *testing.T) *sharedConfig {
	t.Helper()
	open := func() metadata.Store { return metadatatest.OpenStore(t, metadatatest.Embedded(t), "") }
	sc := &sharedConfig{eastLocal: open(), westLocal: open(), shared: open(),
		eastLogs: topictest.NewStore(), westLogs: topictest.NewStore()}
	// A local store's revision runs far ahead of the configuration store's (ledgers,
	// cursors and ownership change all the time): a watch of the configuration store from
	// a local revision would miss the changes until the configuration store caught up.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, st := range []metadata.Store{sc.eastLocal, sc.westLocal} {
		for i := range 300 {
			if _, err := st.Put(ctx, fmt.Sprintf("/test-revisions/%d", i), nil, metadata.AnyVersion); err != nil {
				t.Fatal(err)
			}
		}
	}
	return sc
}

// start starts a broker of cluster ("east" or "west") with id on its local store and the
// shared configuration store; listen "" picks a free port.
func (sc *sharedConfig) start(t *testing.T, cluster, id, listen string) *broker.Service {
	t.Helper()
	local, logs := sc.eastLocal, sc.eastLogs
	if cluster == "west" {
		local, logs = sc.westLocal, sc.westLogs
	}
	return startServiceWith(t, local, logs, id, func(c *broker.Config) {
		c.Cluster, c.ConfigStore = cluster, sc.shared
		if listen != "" {
			c.Listen = listen
		}
	})
}

// keysUnder lists the keys of st under prefix.
func keysUnder(ctx context.Context, t *testing.T, st metadata.Store, prefix string) []string {
	t.Helper()
	kvs, _, err := st.List(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range kvs {
		out = append(out, kv.Key)
	}
	return out
}

// TestConfigStoreShared: what is created through cluster east's broker — cluster records,
// a tenant, a namespace with its replication clusters, a partitioned topic — is in the
// shared configuration store, nowhere in either local store, and west's broker sees it;
// each broker's own records (its registration, topics) stay in its local store. The
// replication clusters, set once, replicate east's and west's messages both ways, and a
// namespace whose replication is set after both clusters loaded a topic starts
// replicating both ways too (each broker follows the namespace records in the
// configuration store). West's broker restarted keeps everything.
func TestConfigStoreShared(t *testing.T) {
	sc := newSharedConfig(t)
	east := sc.start(t, "east", "east-1", "")
	west := sc.start(t, "west", "west-1", "")
	westAddr := west.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	for name, b := range map[string]*broker.Service{"east": east, "west": west} {
		if err := east.CreateCluster(ctx, name, broker.ClusterData{BrokerServiceURL: "pulsar://" + b.Addr().String()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := east.CreateTenant(ctx, "geo", broker.TenantInfo{AllowedClusters: []string{"east", "west"}}); err != nil {
		t.Fatal(err)
	}
	if err := east.CreateNamespace(ctx, "geo/ns", broker.NamespacePolicies{ReplicationClusters: []string{"east", "west"}}); err != nil {
		t.Fatal(err)
	}
	if err := east.CreatePartitionedTopic(ctx, "geo/ns/parts", 2); err != nil {
		t.Fatal(err)
	}

	// West sees what east created.
	if ts, err := west.Tenants(ctx); err != nil || !slices.Contains(ts, "geo") {
		t.Fatalf("west's tenants %v %v: east's tenant is not there", ts, err)
	}
	if p, err := west.Namespace(ctx, "geo/ns"); err != nil || !slices.Equal(p.ReplicationClusters, []string{"east", "west"}) {
		t.Fatalf("west's geo/ns %+v %v", p, err)
	}
	if cd, err := west.Cluster(ctx, "east"); err != nil || cd.BrokerServiceURL != "pulsar://"+east.Addr().String() {
		t.Fatalf("west's record of east %+v %v", cd, err)
	}
	if md, err := west.PartitionedTopicMetadata(ctx, "persistent://geo/ns/parts"); err != nil || md.Partitions != 2 {
		t.Fatalf("west's partitioned topic %+v %v", md, err)
	}
	// West's broker may not create what exists: the records are the same ones.
	if err := west.CreateTenant(ctx, "geo", broker.TenantInfo{}); err == nil {
		t.Fatal("west created tenant geo again")
	}

	// Where the records are.
	for _, p := range metadata.ConfigStorePrefixes {
		for name, st := range map[string]metadata.Store{"east": sc.eastLocal, "west": sc.westLocal} {
			if ks := keysUnder(ctx, t, st, p); len(ks) != 0 {
				t.Errorf("%s's local store holds configuration records: %v", name, ks)
			}
		}
	}
	for _, k := range []string{metadata.TenantKey("geo"), metadata.NamespaceKey("geo", "ns"), metadata.ClusterKey("west"),
		metadata.PartitionedTopicKey("geo", "ns", "persistent", "parts")} {
		if _, err := sc.shared.Get(ctx, k); err != nil {
			t.Errorf("configuration store: %s: %v", k, err)
		}
	}
	if ks := keysUnder(ctx, t, sc.shared, metadata.PrefixBrokers); len(ks) != 0 {
		t.Errorf("brokers registered in the configuration store: %v", ks)
	}
	for name, st := range map[string]metadata.Store{"east": sc.eastLocal, "west": sc.westLocal} {
		if ks := keysUnder(ctx, t, st, metadata.PrefixBrokers); len(ks) != 1 || !strings.HasSuffix(ks[0], name+"-1") {
			t.Errorf("%s's local store: brokers %v, want its own only", name, ks)
		}
	}

	// Replication both ways, set once in the shared namespace record.
	exchange(ctx, t, east, west, "persistent://geo/ns/both", 20)
	for name, st := range map[string]metadata.Store{"east": sc.eastLocal, "west": sc.westLocal} {
		if ks := keysUnder(ctx, t, st, metadata.TopicPrefix("geo", "ns")); !slices.Contains(ks, metadata.TopicKey("geo", "ns", "persistent", "both")) {
			t.Errorf("%s's local store has no record of the topic: %v", name, ks)
		}
	}
	if ks := keysUnder(ctx, t, sc.shared, metadata.PrefixTopics); len(ks) != 0 {
		t.Errorf("topic records in the configuration store: %v", ks)
	}

	// A namespace replicated only once both clusters serve its topic: each broker learns
	// of the change through its watch of the configuration store.
	if err := east.CreateNamespace(ctx, "geo/late", broker.NamespacePolicies{}); err != nil {
		t.Fatal(err)
	}
	const late = "persistent://geo/late/t"
	for _, b := range []*broker.Service{east, west} {
		if err := b.CreateTopic(ctx, late); err != nil {
			t.Fatalf("%s: %v", b.Info().Cluster, err)
		}
	}
	if err := east.SetNamespaceReplicationClusters(ctx, "geo/late", []string{"east", "west"}); err != nil {
		t.Fatal(err)
	}
	exchange(ctx, t, east, west, late, 5)

	// A split in east changes east's bundles only: west's, and the shared namespace
	// record's, stay as created.
	eb, err := east.NamespaceBundles(ctx, "geo/ns")
	if err != nil {
		t.Fatal(err)
	}
	wb, err := west.NamespaceBundles(ctx, "geo/ns")
	if err != nil || !slices.Equal(wb.Boundaries, eb.Boundaries) {
		t.Fatalf("west's bundles %v %v, east's %v", wb, err, eb)
	}
	if err := east.SplitBundle(ctx, "geo/ns", eb.Boundaries[0]+"_"+eb.Boundaries[1], false, ""); err != nil {
		t.Fatal(err)
	}
	if got, err := east.NamespaceBundles(ctx, "geo/ns"); err != nil || got.NumBundles != eb.NumBundles+1 {
		t.Fatalf("east's bundles after its split: %v %v", got, err)
	}
	if got, err := west.NamespaceBundles(ctx, "geo/ns"); err != nil || !slices.Equal(got.Boundaries, wb.Boundaries) {
		t.Fatalf("west's bundles after east's split: %v %v, want %v", got, err, wb)
	}
	if ks := keysUnder(ctx, t, sc.eastLocal, metadata.PrefixLocalPolicies); !slices.Equal(ks, []string{metadata.LocalPoliciesKey("geo", "ns")}) {
		t.Errorf("east's local policies: %v", ks)
	}
	exchange(ctx, t, east, west, "persistent://geo/ns/after-split", 5)

	// West's broker restarts on the same stores and address: everything is there, and
	// replication from east resumes.
	west.Close()
	west = sc.start(t, "west", "west-2", westAddr)
	if p, err := west.Namespace(ctx, "geo/ns"); err != nil || !slices.Equal(p.ReplicationClusters, []string{"east", "west"}) {
		t.Fatalf("restarted west's geo/ns %+v %v", p, err)
	}
	if ts, err := west.Topics(ctx, "geo/ns"); err != nil || !slices.Contains(ts, "persistent://geo/ns/both") {
		t.Fatalf("restarted west's topics %v %v", ts, err)
	}
	if cs, err := west.Clusters(ctx); err != nil || !slices.Contains(cs, "east") {
		t.Fatalf("restarted west's clusters %v %v", cs, err)
	}
	if got, err := west.NamespaceBundles(ctx, "geo/ns"); err != nil || !slices.Equal(got.Boundaries, wb.Boundaries) {
		t.Fatalf("restarted west's bundles: %v %v, want %v", got, err, wb)
	}
	exchange(ctx, t, east, west, "persistent://geo/ns/after-restart", 5)
}

// exchange publishes n messages in each of east and west on topic and checks that a
// consumer in each cluster receives both producers' messages exactly once, in order per
// producer.
func exchange(ctx context.Context, t *testing.T, east, west *broker.Service, topic string, n int) {
	t.Helper()
	sides := []*broker.Service{east, west}
	cons := make([]*pulsarclient.Consumer, len(sides))
	for i, b := range sides {
		c, err := client(t, b).Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "x",
			InitialPosition: pulsarclient.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		cons[i] = c
	}
	for _, b := range sides {
		name := topic + "@" + b.Info().Cluster
		prod, err := client(t, b).CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: topic, Name: name, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := prod.Send(ctx, &pulsarclient.ProducerMessage{Payload: []byte(strconv.Itoa(i))}); err != nil {
				t.Fatalf("%s: send %d: %v", name, i, err)
			}
		}
	}
	for i, c := range cons {
		next := map[string]int{}
		for range 2 * n {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatalf("%s in %s: receive after %v: %v", topic, sides[i].Info().Cluster, next, err)
			}
			if got, want := string(m.Payload), strconv.Itoa(next[m.ProducerName]); got != want {
				t.Fatalf("%s in %s: message %q of %s, want %q: lost, duplicated or reordered", topic,
					sides[i].Info().Cluster, got, m.ProducerName, want)
			}
			next[m.ProducerName]++
			_ = c.Ack(m)
		}
		for _, b := range sides {
			if p := topic + "@" + b.Info().Cluster; next[p] != n {
				t.Fatalf("%s in %s: %d messages of %s, want %d (got %v)", topic, sides[i].Info().Cluster, next[p], p, n,
					fmt.Sprint(next))
			}
		}
	}
}
