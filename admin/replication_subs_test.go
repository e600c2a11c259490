package admin

import (
	"testing"

	"github.com/magnetar-io/magnetar/broker"
)

var _ ReplicatedSubscriptionService = (*broker.Service)(nil)

// TestReplicatedSubscriptionStatus: Pulsar's POST …/replicatedSubscriptionStatus with a JSON
// boolean marks a subscription replicated (its stats say isReplicated) and unmarks it; a
// body that is not a boolean is refused, and an unknown subscription is 404.
func TestReplicatedSubscriptionStatus(t *testing.T) {
	rb := startRealBroker(t)
	p := "/admin/v2/persistent/public/default/rs"
	runSteps(t, rb.http.URL, []step{
		{"PUT", p, "", 204, ""},
		{"PUT", p + "/subscription/s", "", 204, ""},
		{"GET", p + "/stats", "", 200, `"isReplicated":false`},
		{"POST", p + "/subscription/s/replicatedSubscriptionStatus", "true", 204, ""},
		{"GET", p + "/stats", "", 200, `"isReplicated":true`},
		{"POST", p + "/subscription/s/replicatedSubscriptionStatus", "false", 204, ""},
		{"GET", p + "/stats", "", 200, `"isReplicated":false`},
		{"POST", p + "/subscription/s/replicatedSubscriptionStatus", `"yes"`, 400, ""},
		{"POST", p + "/subscription/s/replicatedSubscriptionStatus", "", 400, ""},
		{"POST", p + "/subscription/nope/replicatedSubscriptionStatus", "true", 404, ""},
	})
}
