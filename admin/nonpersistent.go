package admin

import (
	"context"
	"net/http"
	"strings"

	"github.com/magnetar-io/magnetar/broker/topicname"
)

// NonPersistentService lists the non-persistent topics (Service.Topics lists the
// persistent ones). *broker.Service implements it; with a Service that does not, the
// non-persistent lists are empty.
type NonPersistentService interface {
	NonPersistentTopics(ctx context.Context, ns string) ([]string, error)
}

// nonPersistentRoutes serves the /admin/v2/non-persistent topic paths Pulsar has: create and
// delete, partitions, stats, internal stats, unload, subscriptions (list, delete) and lookup.
// Cursor operations (reset, skip), terminate and message inspection are persistent only.
func (h *handler) nonPersistentRoutes(route routeFunc, topicScope func(r *http.Request) scope) {
	const p = "/admin/v2/non-persistent/{tenant}/{ns}/{topic}"
	route("PUT "+p, h.createTopic, topicScope)
	route("DELETE "+p, h.deleteTopic, topicScope)
	route("PUT "+p+"/partitions", h.createPartitioned, topicScope)
	route("POST "+p+"/partitions", h.updatePartitioned, topicScope)
	route("GET "+p+"/partitions", h.getPartitions, topicScope)
	route("DELETE "+p+"/partitions", h.deletePartitioned, topicScope)
	route("GET "+p+"/stats", h.stats, topicScope)
	route("GET "+p+"/partitioned-stats", h.partitionedStats, topicScope)
	route("GET "+p+"/internalStats", h.internalStats, topicScope)
	route("GET "+p+"/partitioned-internalStats", h.partitionedInternalStats, topicScope)
	route("PUT "+p+"/unload", h.unload, topicScope)
	route("GET "+p+"/subscriptions", h.subscriptions, topicScope)
	route("DELETE "+p+"/subscription/{sub}", h.deleteSubscription, topicScope)
	route("GET /lookup/v2/topic/non-persistent/{tenant}/{ns}/{topic}", h.lookup, topicScope)
}

// pathDomain is the topic domain a request's path names.
func pathDomain(r *http.Request) string {
	if strings.HasPrefix(r.URL.Path, "/admin/v2/non-persistent/") || strings.HasPrefix(r.URL.Path, "/lookup/v2/topic/non-persistent/") {
		return topicname.NonPersistent
	}
	return topicname.Persistent
}

// nonPersistentTopics lists namespace ns's non-persistent topics (none if the service does
// not serve them).
func (h *handler) nonPersistentTopics(r *http.Request, ns string) ([]string, error) {
	if s, ok := h.svc.(NonPersistentService); ok {
		return s.NonPersistentTopics(r.Context(), ns)
	}
	if _, err := h.svc.Namespace(r.Context(), ns); err != nil {
		return nil, err
	}
	return []string{}, nil
}

// ofDomain keeps the names of one domain.
func ofDomain(names []string, domain string) []string {
	out := []string{}
	for _, n := range names {
		if strings.HasPrefix(n, domain+"://") {
			out = append(out, n)
		}
	}
	return out
}
