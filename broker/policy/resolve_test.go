package policy

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/mledger"
)

func rec(t *testing.T, kv ...any) Record {
	t.Helper()
	r := Record{}
	for i := 0; i < len(kv); i += 2 {
		b, err := json.Marshal(kv[i+1])
		if err != nil {
			t.Fatal(err)
		}
		r[kv[i].(string)] = b
	}
	return r
}

func testResolver() *Resolver {
	return &Resolver{
		Defaults: Defaults{
			TTLDurationDefaultInSeconds: 600, MaxProducersPerTopic: 7,
			MaxPublishRatePerTopicInMessages: 1000,
			BacklogQuotaDefaultLimitBytes:    1 << 30,
		}.WithDefaults(),
		Cluster: "c1", MaxMessageSize: 5 << 20,
		ManagedLedger: mledger.Config{RetentionTime: 2 * time.Hour, RetentionSize: 3 << 20, Ensemble: 2, WriteQuorum: 2, AckQuorum: 1},
	}
}

// TestResolveLevels is the resolution order, one row per policy shape: the topic's value
// wins over the namespace's, which wins over the broker's default; per-cluster namespace
// values are read for the resolver's cluster only.
func TestResolveLevels(t *testing.T) {
	n, err := topicname.Parse("persistent://t/ns/x")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		tr, nr Record
		check  func(t *testing.T, r Resolved)
	}{
		{"broker defaults", Record{}, Record{}, func(t *testing.T, r Resolved) {
			if r.TTL != 600 || r.Topic.MaxProducers != 7 || r.Topic.PublishRateMsgs != 1000 {
				t.Fatalf("ttl %d producers %d rate %d", r.TTL, r.Topic.MaxProducers, r.Topic.PublishRateMsgs)
			}
			if r.Retention != (api.RetentionPolicies{RetentionTimeInMinutes: 120, RetentionSizeInMB: 3}) {
				t.Fatalf("retention %+v", r.Retention)
			}
			if r.Persist.BookkeeperEnsemble != 2 || r.Persist.BookkeeperAckQuorum != 1 {
				t.Fatalf("persistence %+v", r.Persist)
			}
			if q, ok := r.Quotas[api.QuotaDestinationStorage]; !ok || q.LimitSize != 1<<30 || q.Policy != api.QuotaProducerRequestHold {
				t.Fatalf("quota %+v %v", q, ok)
			}
			if r.Topic.Dedup == nil || !*r.Topic.Dedup {
				t.Fatalf("dedup %v: the broker's default is on", r.Topic.Dedup)
			}
		}},
		{"namespace over broker", Record{}, rec(t, "message_ttl_in_seconds", 30, "max_producers_per_topic", 3), func(t *testing.T, r Resolved) {
			if r.TTL != 30 || r.Topic.MaxProducers != 3 {
				t.Fatalf("ttl %d producers %d", r.TTL, r.Topic.MaxProducers)
			}
		}},
		{"topic over namespace", rec(t, "messageTTLInSeconds", 5, "maxProducerPerTopic", 1), rec(t, "message_ttl_in_seconds", 30, "max_producers_per_topic", 3), func(t *testing.T, r Resolved) {
			if r.TTL != 5 || r.Topic.MaxProducers != 1 {
				t.Fatalf("ttl %d producers %d", r.TTL, r.Topic.MaxProducers)
			}
		}},
		{"per-cluster namespace rate, this cluster", Record{}, rec(t, "publishMaxMessageRate", map[string]api.PublishRate{"c1": {PublishThrottlingRateInMsg: 10}, "c2": {PublishThrottlingRateInMsg: 99}}), func(t *testing.T, r Resolved) {
			if r.Topic.PublishRateMsgs != 10 {
				t.Fatalf("rate %d, want c1's 10", r.Topic.PublishRateMsgs)
			}
		}},
		{"per-cluster namespace rate, other cluster only", Record{}, rec(t, "publishMaxMessageRate", map[string]api.PublishRate{"c2": {PublishThrottlingRateInMsg: 99}}), func(t *testing.T, r Resolved) {
			if r.Topic.PublishRateMsgs != 1000 {
				t.Fatalf("rate %d, want the broker's 1000", r.Topic.PublishRateMsgs)
			}
		}},
		{"dispatch rate per period", rec(t, "dispatchRate", api.DispatchRate{DispatchThrottlingRateInMsg: 100, RatePeriodInSecond: 10}), Record{}, func(t *testing.T, r Resolved) {
			if r.Topic.DispatchRateMsgs != 10 {
				t.Fatalf("dispatch %d/s, want 10", r.Topic.DispatchRateMsgs)
			}
		}},
		{"backlog quotas merge per type", rec(t, "backLogQuotaMap", map[string]api.BacklogQuota{api.QuotaMessageAge: {LimitTime: 60, Policy: api.QuotaProducerException}}), Record{}, func(t *testing.T, r Resolved) {
			if q := r.Quotas[api.QuotaMessageAge]; q.LimitTime != 60 || r.Topic.BacklogQuotaLimitTime != 60 {
				t.Fatalf("message age %+v", q)
			}
			if q := r.Quotas[api.QuotaDestinationStorage]; q.LimitSize != 1<<30 {
				t.Fatalf("storage %+v: the broker's default applies to the other type", q)
			}
		}},
		{"maxMessageSize only lowers the broker's", rec(t, "maxMessageSize", 10<<20), Record{}, func(t *testing.T, r Resolved) {
			if r.Topic.MaxMessageSize != 0 {
				t.Fatalf("max message size %d: above the broker's limit must not apply", r.Topic.MaxMessageSize)
			}
		}},
		{"dedup off at topic level", rec(t, "deduplicationEnabled", false), rec(t, "deduplicationEnabled", true), func(t *testing.T, r Resolved) {
			if r.Topic.Dedup == nil || *r.Topic.Dedup {
				t.Fatalf("dedup %v", r.Topic.Dedup)
			}
		}},
		{"auto partitioned creation", Record{}, rec(t, "autoTopicCreationOverride", api.AutoTopicCreationOverride{AllowAutoTopicCreation: true, TopicType: "partitioned", DefaultNumPartitions: new(4)}), func(t *testing.T, r Resolved) {
			if r.AutoCreate == nil || !*r.AutoCreate || r.AutoPartitions != 4 {
				t.Fatalf("auto create %v partitions %d", r.AutoCreate, r.AutoPartitions)
			}
		}},
	}
	pr := testResolver()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.check(t, pr.Resolve(c.tr, c.nr, n)) })
	}
}

// TestResolveNonPersistentNoDedup: deduplication is never on for a non-persistent topic.
func TestResolveNonPersistentNoDedup(t *testing.T) {
	n, err := topicname.Parse("non-persistent://t/ns/x")
	if err != nil {
		t.Fatal(err)
	}
	r := testResolver().Resolve(rec(t, "deduplicationEnabled", true), Record{}, n)
	if r.Topic.Dedup == nil || *r.Topic.Dedup {
		t.Fatalf("dedup %v on a non-persistent topic", r.Topic.Dedup)
	}
}

// TestCheckChange: bad bodies and names are refused as invalid arguments; per-cluster
// namespace policies are qualified by the cluster.
func TestCheckChange(t *testing.T) {
	cases := []struct {
		path, qualifier, body string
		topic                 bool
		wantQ                 string
		ok                    bool
	}{
		{"messageTTL", "", "30", false, "", true},
		{"messageTTL", "", "-1", false, "", false},
		{"messageTTL", "", "", false, "", false},
		{"nonsense", "", "1", false, "", false},
		{"maxTopicsPerNamespace", "", "1", true, "", false}, // namespace only
		{"maxMessageSize", "", "1", false, "", false},       // topic only
		{"publishRate", "", `{"publishThrottlingRateInMsg":5}`, false, "c1", true},
		{"publishRate", "", `{"publishThrottlingRateInMsg":5}`, true, "", true},
		{"backlogQuota", "", `{"limitSize":10,"policy":"producer_request_hold"}`, false, api.QuotaDestinationStorage, true},
		{"backlogQuota", "nope", `{"limitSize":10,"policy":"producer_request_hold"}`, false, "", false},
	}
	for _, c := range cases {
		_, _, q, err := CheckChange(c.path, c.topic, c.qualifier, []byte(c.body), false, "c1")
		if (err == nil) != c.ok {
			t.Errorf("%s topic=%v %q: err %v, want ok=%v", c.path, c.topic, c.body, err, c.ok)
			continue
		}
		if err != nil && !errors.Is(err, api.ErrInvalidArgument) {
			t.Errorf("%s: %v is not ErrInvalidArgument", c.path, err)
		}
		if err == nil && q != c.wantQ {
			t.Errorf("%s: qualifier %q, want %q", c.path, q, c.wantQ)
		}
	}
}

// TestRecordSetValue: a qualified value lives in the map under its key, and removing the
// last one removes the key.
func TestRecordSetValue(t *testing.T) {
	p := For("publishRate")
	r := Record{}
	if err := r.Set(p, p.NSKey, "c1", api.PublishRate{PublishThrottlingRateInMsg: 3}); err != nil {
		t.Fatal(err)
	}
	var got api.PublishRate
	if err := json.Unmarshal(r.Value(p, p.NSKey, "c1"), &got); err != nil || got.PublishThrottlingRateInMsg != 3 {
		t.Fatalf("value %+v err %v", got, err)
	}
	if v := r.Value(p, p.NSKey, "c2"); v != nil {
		t.Fatalf("c2's value %s", v)
	}
	if err := r.Set(p, p.NSKey, "c1", nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := r[p.NSKey]; ok {
		t.Fatalf("key kept after its last value was removed: %s", r[p.NSKey])
	}
}

// TestResolveReplicationClusters: the topic's list wins over the namespace's, which wins
// over this cluster alone; an empty or malformed list counts as unset.
func TestResolveReplicationClusters(t *testing.T) {
	pr := testResolver()
	n, _ := topicname.Parse("persistent://t/ns/x")
	for _, tc := range []struct {
		name   string
		tr, nr Record
		want   []string
	}{
		{"none", Record{}, Record{}, []string{"c1"}},
		{"namespace", Record{}, rec(t, "replication_clusters", []string{"c1", "c2"}), []string{"c1", "c2"}},
		{"topic", rec(t, "replicationClusters", []string{"c1"}), rec(t, "replication_clusters", []string{"c1", "c2"}), []string{"c1"}},
		{"empty topic", rec(t, "replicationClusters", []string{}), rec(t, "replication_clusters", []string{"c1", "c3"}), []string{"c1", "c3"}},
		{"malformed", Record{"replicationClusters": json.RawMessage(`{"x":1}`)}, Record{}, []string{"c1"}},
	} {
		got := pr.Resolve(tc.tr, tc.nr, n).ReplicationClusters
		if len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}
