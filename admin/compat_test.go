package admin

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

// Tests of what pulsar-client-go's own integration tests (pulsaradmin) expect of Pulsar's
// admin API, each against a real broker.

var (
	_ SubscriptionPermissionService = (*broker.Service)(nil)
	_ DynamicConfigService          = (*broker.Service)(nil)
)

// TestUnsetPolicyNoContent: a namespace or topic policy that is not set is answered 204
// without a body (Pulsar's null), which pulsaradmin reads as "not configured"; once set it
// is its JSON; removed, 204 again. The bookie affinity group and the topic-level
// schemaValidationEnforced are policies too.
func TestUnsetPolicyNoContent(t *testing.T) {
	rb := startRealBroker(t)
	const ns = "/admin/v2/namespaces/public/default"
	const tp = "/admin/v2/persistent/public/default/unset"
	noBody := func(method, path string) {
		t.Helper()
		if code, body := do(t, method, rb.http.URL+path, "", ""); code != 204 || body != "" {
			t.Fatalf("%s %s: %d %q, want 204 without a body", method, path, code, body)
		}
	}
	for _, p := range []string{"/autoTopicCreation", "/persistence", "/persistence/bookieAffinity", "/retention"} {
		noBody("GET", ns+p)
	}
	runSteps(t, rb.http.URL, []step{
		{"PUT", tp, "", 204, ""},
		{"POST", ns + "/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"non-partitioned"}`, 204, ""},
		{"GET", ns + "/autoTopicCreation", "", 200, `"topicType":"non-partitioned"`},
		{"DELETE", ns + "/autoTopicCreation", "", 204, ""},
		{"POST", ns + "/persistence", `{"bookkeeperEnsemble":1,"bookkeeperWriteQuorum":1,"bookkeeperAckQuorum":1,"managedLedgerMaxMarkDeleteRate":10}`, 204, ""},
		{"GET", ns + "/persistence", "", 200, `"bookkeeperEnsemble":1`},
		{"DELETE", ns + "/persistence", "", 204, ""},
		{"POST", ns + "/persistence/bookieAffinity", `{"bookkeeperAffinityGroupPrimary":"primary-group","bookkeeperAffinityGroupSecondary":"secondary-group"}`, 204, ""},
		{"GET", ns + "/persistence/bookieAffinity", "", 200, `"bookkeeperAffinityGroupSecondary":"secondary-group"`},
		{"POST", ns + "/persistence/bookieAffinity", `{"bookkeeperAffinityGroupSecondary":"s"}`, 400, "bookkeeperAffinityGroupPrimary"},
		{"DELETE", ns + "/persistence/bookieAffinity", "", 204, ""},
		{"POST", tp + "/schemaValidationEnforced", `true`, 204, ""},
		{"GET", tp + "/schemaValidationEnforced", "", 200, "true"},
		{"DELETE", tp + "/schemaValidationEnforced", "", 204, ""},
	})
	for _, p := range []string{ns + "/autoTopicCreation", ns + "/persistence", ns + "/persistence/bookieAffinity", tp + "/schemaValidationEnforced"} {
		noBody("GET", p)
	}
}

// TestAutoTopicCreationReasons: an autoTopicCreation override Pulsar refuses is refused
// with its 412 and reason (pulsaradmin compares them whole), and is not stored; one that
// does not allow creation is not checked.
func TestAutoTopicCreationReasons(t *testing.T) {
	rb := startRealBroker(t)
	const ns = "/admin/v2/namespaces/public/default/autoTopicCreation"
	const prefix = "Invalid configuration for autoTopicCreationOverride. the detail is "
	runSteps(t, rb.http.URL, []step{
		{"POST", ns, `{"allowAutoTopicCreation":true,"topicType":"partitioned"}`, 412,
			`"reason":"` + prefix + `[defaultNumPartitions] cannot be null when the type is partitioned."`},
		{"POST", ns, `{"allowAutoTopicCreation":true,"topicType":"partitioned","defaultNumPartitions":-1}`, 412,
			`"reason":"` + prefix + `[defaultNumPartitions] cannot be less than 1 for partition type."`},
		{"POST", ns, `{"allowAutoTopicCreation":true,"topicType":"non-partitioned","defaultNumPartitions":3}`, 412,
			`"reason":"` + prefix + `[defaultNumPartitions] is not allowed to be set when the type is non-partition."`},
		{"POST", ns, `{"allowAutoTopicCreation":true,"topicType":"sometimes"}`, 412, "Unknown topic type [sometimes]"},
		{"POST", ns, `{"allowAutoTopicCreation":false}`, 204, ""},
		{"GET", ns, "", 200, `"allowAutoTopicCreation":false`},
	})
}

// TestTopicProperties: Pulsar's topic properties: given at creation (a non-partitioned
// topic's body, a partitioned topic's metadata), merged by PUT …/properties, one key
// removed by DELETE …/properties?key=.
func TestTopicProperties(t *testing.T) {
	rb := startRealBroker(t)
	const p = "/admin/v2/persistent/public/default/"
	runSteps(t, rb.http.URL, []step{
		{"PUT", p + "plain", `{"key1":"value1"}`, 204, ""},
		{"GET", p + "plain/properties", "", 200, `{"key1":"value1"}`},
		{"PUT", p + "plain/properties", `{"key1":"value1-updated","key2":"value2"}`, 204, ""},
		{"PUT", p + "plain/properties", `{"key3":"value3"}`, 204, ""},
		{"GET", p + "plain/properties", "", 200, `{"key1":"value1-updated","key2":"value2","key3":"value3"}`},
		{"DELETE", p + "plain/properties?key=key1", "", 204, ""},
		{"GET", p + "plain/properties", "", 200, `{"key2":"value2","key3":"value3"}`},
		{"DELETE", p + "plain/properties", "", 400, "key"},
		{"PUT", p + "parted/partitions", `{"partitions":4,"properties":{"key1":"value1"}}`, 204, ""},
		{"GET", p + "parted/partitions", "", 200, `"partitions":4`},
		{"GET", p + "parted/properties", "", 200, `{"key1":"value1"}`},
		{"PUT", p + "bare", "", 204, ""},
		{"GET", p + "bare/properties", "", 200, `{}`},
	})
}

// TestStatsExclusions: excludePublishers and excludeConsumers empty those lists in topic
// and partitioned-topic stats (Pulsar's GetStatsOptions); without them they are there. The
// subscription and consumer fields pulsaradmin's tests read are Pulsar's.
func TestStatsExclusions(t *testing.T) {
	rb := startRealBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const p = "/admin/v2/persistent/public/default/"
	runSteps(t, rb.http.URL, []step{{"PUT", p + "pt/partitions", "2", 204, ""}})
	for _, topic := range []string{"persistent://public/default/np", "persistent://public/default/pt"} {
		prod, err := rb.client.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close(ctx)
		cons, err := rb.client.Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "s"})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close(ctx)
	}
	for _, path := range []string{p + "np/stats", p + "pt/partitioned-stats?perPartition=true", p + "pt/stats"} {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		var all, none PartitionedTopicStats
		rb.get(t, path, &all)
		rb.get(t, path+sep+"excludePublishers=true&excludeConsumers=true", &none)
		if len(all.Publishers) == 0 || len(all.Subscriptions["s"].Consumers) == 0 {
			t.Fatalf("%s: %d publishers, %d consumers of s; want some", path, len(all.Publishers), len(all.Subscriptions["s"].Consumers))
		}
		if none.Publishers == nil || len(none.Publishers) != 0 || len(none.Subscriptions["s"].Consumers) != 0 {
			t.Fatalf("%s excluding them: publishers %v, consumers of s %v; want empty lists", path, none.Publishers,
				none.Subscriptions["s"].Consumers)
		}
		for name, ps := range none.Partitions {
			if len(ps.Publishers) != 0 || len(ps.Subscriptions["s"].Consumers) != 0 {
				t.Fatalf("%s excluding them: partition %s still lists publishers or consumers", path, name)
			}
		}
	}
	// Pulsar's subscription and consumer fields that pulsaradmin reads: empty maps, not
	// absent, and the time of the consumer's last FLOW.
	var st PartitionedTopicStats
	rb.get(t, p+"np/stats", &st)
	s := st.Subscriptions["s"]
	if s.SubscriptionProperties == nil || s.ConsumersAfterMarkDeletePosition == nil || len(s.Consumers) != 1 ||
		s.Consumers[0].LastConsumedFlowTimestamp <= 0 {
		t.Fatalf("subscription stats %+v: want {} properties and consumersAfterMarkDeletePosition, a FLOW time", s)
	}
	if code, body := do(t, "GET", rb.http.URL+p+"np/stats?excludePublishers=maybe", "", ""); code != 400 {
		t.Fatalf("a bad excludePublishers: %d %s, want 400", code, body)
	}
}

// TestSubscriptionPermissions: Pulsar's subscription roles: granted (added to), listed,
// revoked role by role; while a subscription's list is set and not empty only its roles
// (and the tenant's admins and superusers) may consume through it, on the binary protocol.
func TestSubscriptionPermissions(t *testing.T) {
	sb := startSecureBroker(t)
	admin := sb.token(t, "admin")
	const ns = "/admin/v2/namespaces/acme/ns"
	for _, s := range []struct{ method, path, body string }{
		{"PUT", "/admin/v2/tenants/acme", `{"adminRoles":["tadmin"],"allowedClusters":["standalone"]}`},
		{"PUT", ns, ""},
		{"POST", ns + "/permissions/alice", `["consume"]`},
		{"POST", ns + "/permissions/bob", `["consume"]`},
		{"POST", ns + "/permissions/subscription/private", `["alice"]`},
		{"POST", ns + "/permissions/subscription/private", `["carol","alice"]`},
	} {
		if code, body := do(t, s.method, sb.url+s.path, admin, s.body); code != 204 {
			t.Fatalf("%s %s: %d %s", s.method, s.path, code, body)
		}
	}
	if code, body := do(t, "GET", sb.url+ns+"/permissions/subscription", admin, ""); code != 200 || body != `{"private":["alice","carol"]}`+"\n" {
		t.Fatalf("subscription permissions: %d %s", code, body)
	}
	checkRefusals(t, sb.url, sb.token(t, "alice"), []refusal{
		{"POST", ns + "/permissions/subscription/other", `["alice"]`, 403, "alice"},
		{"DELETE", ns + "/permissions/private/carol", "", 403, "alice"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	subscribe := func(role, sub string) error {
		t.Helper()
		tok := sb.token(t, role)
		cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + sb.svc.Addr().String(), Logger: testLogger(),
			Auth: &pulsarclient.Authentication{Method: "token", Data: func() ([]byte, error) { return []byte(tok), nil }}})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		c, err := cl.Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: "persistent://acme/ns/t", Subscription: sub})
		if err == nil {
			_ = c.Close(ctx)
		}
		return err
	}
	for _, tc := range []struct {
		role, sub string
		ok        bool
	}{{"alice", "private", true}, {"bob", "private", false}, {"bob", "other", true}, {"tadmin", "private", true}} {
		if err := subscribe(tc.role, tc.sub); (err == nil) != tc.ok {
			t.Errorf("%s subscribes through %s: %v, want allowed=%v", tc.role, tc.sub, err, tc.ok)
		}
	}
	for _, role := range []string{"alice", "carol"} {
		if code, body := do(t, "DELETE", sb.url+ns+"/permissions/private/"+role, admin, ""); code != 204 {
			t.Fatalf("revoke %s: %d %s", role, code, body)
		}
	}
	if code, body := do(t, "GET", sb.url+ns+"/permissions/subscription", admin, ""); code != 200 || body != `{"private":[]}`+"\n" {
		t.Fatalf("subscription permissions after the revocations: %d %s", code, body)
	}
	if err := subscribe("bob", "private"); err != nil {
		t.Errorf("bob subscribes through private once its list is empty: %v", err)
	}
}

// TestDynamicConfiguration: Pulsar's dynamic broker configuration: the dynamic keys
// listed, a value stored (200) and listed, applied to the policy defaults (a topic's applied
// maxProducers, and a loaded topic's producer limit) and to the runtime values, any string
// for a boolean key (as Pulsar stores it, even with a '/'), removed (204); non-dynamic keys
// and bad values refused with Pulsar's 412 and reasons, storing nothing.
func TestDynamicConfiguration(t *testing.T) {
	rb := startRealBroker(t)
	const c = "/admin/v2/brokers/configuration"
	const tp = "/admin/v2/persistent/public/default/dyn"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p1, err := rb.client.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: "persistent://public/default/dyn"})
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Close(ctx)
	runSteps(t, rb.http.URL, []step{
		{"GET", c, "", 200, `"allowAutoSubscriptionCreation"`},
		{"GET", c + "/values", "", 200, `{}`},
		{"POST", c + "/maxProducersPerTopic/1", "", 200, ""},
		{"GET", c + "/values", "", 200, `{"maxProducersPerTopic":"1"}`},
		{"GET", c + "/runtime", "", 200, `"maxProducersPerTopic":"1"`},
		{"GET", tp + "/maxProducers?applied=true", "", 200, "1"},
		{"POST", c + "/brokerServicePort/6651", "", 412, `"reason":"Cannot update non-dynamic configuration"`},
		{"POST", c + "/maxProducersPerTopic/many", "", 412, `"reason":" Invalid dynamic-config value"`},
		{"DELETE", c + "/brokerServicePort", "", 412, `"reason":" Can't update non-dynamic configuration"`},
		{"GET", c + "/values", "", 200, `{"maxProducersPerTopic":"1"}`},
		{"POST", c + "/allowAutoSubscriptionCreation/" + url.PathEscape(`{"key/123":"https://example.com/"}`), "", 200, ""},
		{"GET", c + "/values", "", 200, `"allowAutoSubscriptionCreation":"{\"key/123\":\"https://example.com/\"}"`},
		{"POST", c + "/allowAutoSubscriptionCreation/true", "", 200, ""},
	})
	// The loaded topic takes the new limit (its policies are resolved again).
	deadline := time.Now().Add(20 * time.Second)
	for {
		p2, err := rb.client.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: "persistent://public/default/dyn"})
		if err != nil {
			break
		}
		_ = p2.Close(ctx)
		if time.Now().After(deadline) {
			t.Fatal("a second producer is still accepted 20 s after maxProducersPerTopic=1")
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
	runSteps(t, rb.http.URL, []step{
		{"DELETE", c + "/maxProducersPerTopic", "", 204, ""},
		{"GET", c + "/values", "", 200, `{"allowAutoSubscriptionCreation":"true"}`},
		{"GET", tp + "/maxProducers?applied=true", "", 200, "null"}, // what applies: no limit
	})
}

// TestDynamicConfigurationSuperusersOnly: only superusers read or change the dynamic
// configuration.
func TestDynamicConfigurationSuperusersOnly(t *testing.T) {
	sb := startSecureBroker(t)
	alice := sb.token(t, "alice")
	checkRefusals(t, sb.url, alice, []refusal{
		{"GET", "/admin/v2/brokers/configuration", "", 403, "alice"},
		{"GET", "/admin/v2/brokers/configuration/values", "", 403, "alice"},
		{"POST", "/admin/v2/brokers/configuration/maxProducersPerTopic/1", "", 403, "alice"},
		{"DELETE", "/admin/v2/brokers/configuration/maxProducersPerTopic", "", 403, "alice"},
		{"GET", "/admin/v2/namespaces/public/default/persistence/bookieAffinity", "", 403, "alice"},
	})
	if code, body := do(t, "GET", sb.url+"/admin/v2/brokers/configuration/values", sb.token(t, "admin"), ""); code != 200 || body != "{}\n" {
		t.Fatalf("the superuser reads the values: %d %s", code, body)
	}
}

// TestNamespaceStrategyBody: a namespace's schema compatibility strategy reads as Pulsar
// answers it, the JSON string alone (pulsaradmin removes the quotes and parses the rest
// whole: a trailing newline made every strategy unreadable).
func TestNamespaceStrategyBody(t *testing.T) {
	rb := startRealBroker(t)
	const ns = "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy"
	runSteps(t, rb.http.URL, []step{{"PUT", ns, `"FULL"`, 204, ""}})
	if code, body := do(t, "GET", rb.http.URL+ns, "", ""); code != 200 || body != `"FULL"` {
		t.Fatalf("GET the strategy: %d %q, want 200 %q", code, body, `"FULL"`)
	}
}
