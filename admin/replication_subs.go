package admin

import (
	"context"
	"net/http"
)

// ReplicatedSubscriptionService sets whether a subscription is replicated (package
// replication/replsub). *broker.Service implements it; a Service that does not answers the
// path with 501.
type ReplicatedSubscriptionService interface {
	SetReplicatedSubscriptionStatus(ctx context.Context, topic, sub string, on bool) error
}

// replicatedSubscriptionRoutes: Pulsar's POST …/subscription/{sub}/replicatedSubscriptionStatus
// with a JSON boolean body, on a topic or every partition of a partitioned one.
func (h *handler) replicatedSubscriptionRoutes(route routeFunc, topicScope func(r *http.Request) scope) {
	const p = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
	route("POST "+p+"/subscription/{sub}/replicatedSubscriptionStatus", h.setReplicatedSubscriptionStatus, topicScope)
}

func (h *handler) setReplicatedSubscriptionStatus(w http.ResponseWriter, r *http.Request) error {
	svc, isRS := h.svc.(ReplicatedSubscriptionService)
	if !isRS {
		return restErr(http.StatusNotImplemented, "replicated subscriptions are not served")
	}
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	sub := r.PathValue("sub")
	var on bool
	if got, err := readJSON(r, &on); err != nil {
		return err
	} else if !got {
		return restErr(http.StatusBadRequest, "the body must be true or false")
	}
	count, err := h.partitions(r, n)
	if err != nil {
		return err
	}
	if count > 0 {
		err = eachPartition(n, count, func(_ int, name string) error {
			return svc.SetReplicatedSubscriptionStatus(r.Context(), name, sub, on)
		})
	} else {
		err = svc.SetReplicatedSubscriptionStatus(r.Context(), n.String(), sub, on)
	}
	if err != nil {
		return err
	}
	return noContent(w)
}
