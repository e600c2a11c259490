package admin

import (
	"testing"
)

// TestPoliciesAdmin sets, reads and removes namespace and topic policies, checks that
// applied=true resolves topic > namespace > broker default, and that bad values, unknown
// names and malformed bodies are 400 with a JSON reason and change nothing.
func TestPoliciesAdmin(t *testing.T) {
	rb := startRealBroker(t)
	const ns = "/admin/v2/namespaces/public/default"
	const tp = "/admin/v2/persistent/public/default/pol"
	runSteps(t, rb.http.URL, []step{
		{"PUT", tp, "", 204, ""},
		// Retention at both levels; applied follows the precedence.
		{"GET", ns + "/retention", "", 204, ""},
		{"GET", tp + "/retention?applied=true", "", 200, `"retentionTimeInMinutes":0`},
		{"POST", ns + "/retention", `{"retentionTimeInMinutes":60,"retentionSizeInMB":-1}`, 204, ""},
		{"GET", ns + "/retention", "", 200, `"retentionTimeInMinutes":60`},
		{"GET", tp + "/retention", "", 204, ""},
		{"GET", tp + "/retention?applied=true", "", 200, `"retentionTimeInMinutes":60`},
		{"POST", tp + "/retention", `{"retentionTimeInMinutes":5,"retentionSizeInMB":10}`, 204, ""},
		{"GET", tp + "/retention?applied=true", "", 200, `"retentionTimeInMinutes":5`},
		{"DELETE", tp + "/retention", "", 204, ""},
		{"GET", tp + "/retention?applied=true", "", 200, `"retentionTimeInMinutes":60`},
		// Bad values change nothing.
		{"POST", ns + "/retention", `{"retentionTimeInMinutes":-5,"retentionSizeInMB":1}`, 400, `"reason"`},
		{"POST", ns + "/retention", `{"retentionTimeInMinutes":`, 400, "invalid body"},
		{"POST", ns + "/retention", `"sixty"`, 400, "invalid body"},
		{"GET", ns + "/retention", "", 200, `"retentionTimeInMinutes":60`},
		// Backlog quotas by type.
		{"POST", ns + "/backlogQuota?backlogQuotaType=destination_storage", `{"limitSize":1024,"policy":"producer_exception"}`, 204, ""},
		{"POST", ns + "/backlogQuota?backlogQuotaType=message_age", `{"limitTime":30,"policy":"consumer_backlog_eviction"}`, 204, ""},
		{"POST", ns + "/backlogQuota", `{"limitSize":1,"policy":"drop_everything"}`, 400, "unknown backlog quota policy"},
		{"POST", ns + "/backlogQuota?backlogQuotaType=weight", `{"limitSize":1,"policy":"producer_exception"}`, 400, "unknown backlogQuotaType"},
		{"POST", ns + "/backlogQuota", `{"limitSize":-7,"policy":"producer_exception"}`, 400, "reason"},
		{"GET", ns + "/backlogQuotaMap", "", 200, `"destination_storage":{"limitSize":1024,"limitTime":0,"policy":"producer_exception"}`},
		{"GET", ns + "/backlogQuotaMap", "", 200, `"message_age":{"limitSize":0,"limitTime":30,"policy":"consumer_backlog_eviction"}`},
		{"POST", tp + "/backlogQuota", `{"limit":2048,"policy":"producer_request_hold"}`, 204, ""},
		{"GET", tp + "/backlogQuotaMap?applied=true", "", 200, `"destination_storage":{"limitSize":2048,"limitTime":0,"policy":"producer_request_hold"}`},
		{"GET", tp + "/backlogQuotaMap?applied=true", "", 200, `"message_age":{"limitSize":0,"limitTime":30`},
		{"DELETE", ns + "/backlogQuota?backlogQuotaType=message_age", "", 204, ""},
		{"GET", ns + "/backlogQuotaMap", "", 200, `{"destination_storage":{"limitSize":1024,"limitTime":0,"policy":"producer_exception"}}`},
		// TTL: the topic form takes a query parameter.
		{"POST", ns + "/messageTTL", `120`, 204, ""},
		{"POST", tp + "/messageTTL?messageTTL=30", "", 204, ""},
		{"GET", tp + "/messageTTL", "", 200, "30"},
		{"POST", tp + "/messageTTL?messageTTL=-1", "", 400, "messageTTL must be 0 or more"},
		{"GET", tp + "/messageTTL", "", 200, "30"},
		{"DELETE", tp + "/messageTTL", "", 204, ""},
		{"GET", tp + "/messageTTL?applied=true", "", 200, "120"},
		// Limits and rates.
		{"POST", ns + "/maxProducersPerTopic", `3`, 204, ""},
		{"GET", tp + "/maxProducers?applied=true", "", 200, "3"},
		{"POST", tp + "/maxProducers", `-1`, 400, "maxProducers must be 0 or more"},
		{"POST", tp + "/maxProducers", ``, 400, "a body is required"},
		{"POST", tp + "/publishRate", `{"publishThrottlingRateInMsg":100,"publishThrottlingRateInByte":-1}`, 204, ""},
		{"GET", tp + "/publishRate", "", 200, `"publishThrottlingRateInMsg":100`},
		{"POST", ns + "/publishRate", `{"publishThrottlingRateInMsg":-3,"publishThrottlingRateInByte":0}`, 400, "reason"},
		// Rates kept by cluster at namespace level; the same record keys at both levels.
		{"POST", ns + "/subscriptionDispatchRate", `{"dispatchThrottlingRateInMsg":7,"dispatchThrottlingRateInByte":-1,"ratePeriodInSecond":1}`, 204, ""},
		{"GET", ns + "/subscriptionDispatchRate", "", 200, `"dispatchThrottlingRateInMsg":7`},
		{"GET", tp + "/subscriptionDispatchRate?applied=true", "", 200, `"dispatchThrottlingRateInMsg":7`},
		{"POST", tp + "/subscriptionDispatchRate", `{"dispatchThrottlingRateInMsg":5,"dispatchThrottlingRateInByte":-1,"ratePeriodInSecond":1}`, 204, ""},
		{"GET", tp + "/subscriptionDispatchRate", "", 200, `"dispatchThrottlingRateInMsg":5`},
		{"GET", tp + "/subscriptionDispatchRate?applied=true", "", 200, `"dispatchThrottlingRateInMsg":5`},
		{"GET", ns, "", 200, `"subscriptionDispatchRate":{"standalone":{`},
		{"POST", ns + "/inactiveTopicPolicies", `{"inactiveTopicDeleteMode":"sometimes","maxInactiveDurationSeconds":5,"deleteWhileInactive":true}`, 400, "unknown inactiveTopicDeleteMode"},
		{"POST", ns + "/persistence", `{"bookkeeperEnsemble":1,"bookkeeperWriteQuorum":2,"bookkeeperAckQuorum":1}`, 400, "an ensemble of at least the write quorum"},
		{"POST", ns + "/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"partitioned"}`, 412, "defaultNumPartitions"},
		{"PUT", tp + "/properties", `{"owner":"team-a"}`, 204, ""},
		{"GET", tp + "/properties", "", 200, `{"owner":"team-a"}`},
		// Unknown policy paths are not routes.
		{"POST", ns + "/maxBananasPerTopic", `3`, 404, ""},
		{"GET", ns + "/nope/retention", "", 404, ""},
	})
}
