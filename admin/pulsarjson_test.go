package admin

import "testing"

// TestPulsarJSON: admin bodies are read as Pulsar's Jackson reads them — numbers written as
// strings, unknown fields, the older field names, floats for integers — with bodies as
// pulsar-admin (Java) and pulsaradmin (Go) send them; what Jackson refuses is 400 with a JSON
// reason and changes nothing; GET of a namespace answers Pulsar's whole Policies object.
func TestPulsarJSON(t *testing.T) {
	rb := startRealBroker(t)
	const ns = "/admin/v2/namespaces/public/default"
	const tp = "/admin/v2/persistent/public/default/json"
	runSteps(t, rb.http.URL, []step{
		{"PUT", tp, "", 204, ""},
		// The body: the older name, the number as a string.
		{"POST", ns + "/backlogQuota", `{"limit": "10240", "policy": "producer_request_hold"}`, 204, ""},
		{"GET", ns + "/backlogQuotaMap", "", 200, `"destination_storage":{"limitSize":10240,"limitTime":0,"policy":"producer_request_hold"}`},
		// pulsar-admin's BacklogQuotaImpl (Java) sends both names and limitTime.
		{"POST", ns + "/backlogQuota?backlogQuotaType=destination_storage",
			`{"limit":2048,"limitSize":2048,"limitTime":-1,"policy":"producer_exception"}`, 204, ""},
		{"GET", ns + "/backlogQuotaMap", "", 200, `"destination_storage":{"limitSize":2048,"limitTime":-1,"policy":"producer_exception"}`},
		// pulsaradmin (Go) sends limitSize/limitTime/policy.
		{"POST", tp + "/backlogQuota", `{"limitSize":4096,"limitTime":0,"policy":"producer_request_hold"}`, 204, ""},
		{"GET", tp + "/backlogQuotaMap", "", 200, `"limitSize":4096`},
		// Unknown fields are ignored; strings and floats for numbers are numbers.
		{"POST", ns + "/retention", `{"retentionTimeInMinutes":"60","retentionSizeInMB":1024,"futureField":{"x":[1]}}`, 204, ""},
		{"GET", ns + "/retention", "", 200, `"retentionTimeInMinutes":60`},
		{"POST", ns + "/persistence", `{"bookkeeperEnsemble":1,"bookkeeperWriteQuorum":"1","bookkeeperAckQuorum":1,` +
			`"managedLedgerMaxMarkDeleteRate":0.0,"managedLedgerStorageClassName":null}`, 204, ""},
		{"GET", ns + "/persistence", "", 200, `"bookkeeperWriteQuorum":1`},
		{"POST", ns + "/messageTTL", `"120"`, 204, ""},
		{"GET", ns + "/messageTTL", "", 200, "120"},
		{"POST", tp + "/maxProducers", `7.0`, 204, ""},
		{"GET", tp + "/maxProducers", "", 200, "7"},
		{"POST", ns + "/deduplication", `"true"`, 204, ""},
		{"GET", ns + "/deduplication", "", 200, "true"},
		// What Jackson refuses: 400, a JSON reason, nothing changed.
		{"POST", ns + "/retention", `{"retentionTimeInMinutes":"sixty","retentionSizeInMB":1}`, 400, `"reason":"invalid body: retentionTimeInMinutes: want an integer`},
		{"POST", ns + "/retention", `{"retentionTimeInMinutes":{"m":1},"retentionSizeInMB":1}`, 400, "want an integer"},
		{"POST", ns + "/retention", `{"retentionTimeInMinutes":1,"retentionSizeInMB":1`, 400, "malformed JSON"},
		{"POST", ns + "/messageTTL", `[120]`, 400, "want an integer"},
		{"POST", ns + "/messageTTL", `99999999999999999999`, 400, "out of range"},
		{"GET", ns + "/retention", "", 200, `"retentionTimeInMinutes":60`},
		{"GET", ns + "/messageTTL", "", 200, "120"},
		// Tenants and partitions: the handlers' bodies go through the same decoder.
		{"PUT", "/admin/v2/tenants/jt", `{"adminRoles":["r"],"allowedClusters":["standalone"],"unknown":1}`, 204, ""},
		{"GET", "/admin/v2/tenants/jt", "", 200, `"adminRoles":["r"]`},
		{"PUT", "/admin/v2/tenants/jt2", `{"adminRoles":"r"}`, 400, "want an array"},
		{"PUT", "/admin/v2/persistent/public/default/jp/partitions", `"3"`, 204, ""},
		{"GET", "/admin/v2/persistent/public/default/jp/partitions", "", 200, `"partitions":3`},
		// GET of the namespace: Pulsar's whole Policies object, defaults included.
		{"GET", ns, "", 200, `"auth_policies":{`},
		{"GET", ns, "", 200, `"retentionTimeInMinutes":60`},
		{"GET", ns, "", 200, `"message_ttl_in_seconds":120`},
		{"GET", ns, "", 200, `"offload_threshold":-1`},
		{"GET", ns, "", 200, `"subscription_auth_mode":"None"`},
		{"GET", ns, "", 200, `"schema_compatibility_strategy":"UNDEFINED"`},
		{"GET", ns, "", 200, `"encryption_required":false`},
		{"GET", ns, "", 200, `"replication_clusters":[`},
		{"GET", ns, "", 200, `"bundles":{"boundaries":[`},
		// A whole Policies body (namespace creation) is read the same way; a refused one
		// creates nothing.
		{"PUT", "/admin/v2/namespaces/public/jsonns", `{"message_ttl_in_seconds":"30","deduplicationEnabled":"true",` +
			`"retention_policies":{"retentionTimeInMinutes":"5","retentionSizeInMB":-1},"bundles":{"numBundles":"2"},"someFutureMember":1}`, 204, ""},
		{"GET", "/admin/v2/namespaces/public/jsonns", "", 200, `"message_ttl_in_seconds":30`},
		{"GET", "/admin/v2/namespaces/public/jsonns", "", 200, `"deduplicationEnabled":true`},
		{"GET", "/admin/v2/namespaces/public/jsonns", "", 200, `"retentionTimeInMinutes":5`},
		{"GET", "/admin/v2/namespaces/public/jsonns/messageTTL", "", 200, "30"},
		{"PUT", "/admin/v2/namespaces/public/jsonbad", `{"message_ttl_in_seconds":"thirty"}`, 400, "message_ttl_in_seconds: want an integer"},
		{"GET", "/admin/v2/namespaces/public/jsonbad", "", 404, ""},
	})
}
