package admin

import (
	"context"
	"net/http"
	"strings"

	"github.com/magnetar-io/magnetar/broker/api"
)

// Authorizer is implemented by services that authorize admin requests (*broker.Service
// does, with the principal the authentication middleware put in the request's context).
type Authorizer interface {
	AuthorizeAdmin(ctx context.Context, op api.AdminOp, tenant, ns, topic string) error
}

// authorize checks a request against what its route needs (requiredOp).
func (h *handler) authorize(r *http.Request, pattern string, sc scope) error {
	az, ok := h.svc.(Authorizer)
	if !ok {
		return nil
	}
	return az.AuthorizeAdmin(r.Context(), requiredOp(pattern), sc.tenant, sc.namespace, sc.topic)
}

// requiredOp is what a route needs, as Pulsar's admin resources check it: the cluster list
// any authenticated role, a cluster's record and its changes superusers; the tenant list
// and tenant changes superusers;
// stats, partitions metadata and lookups whoever may produce or consume the topic;
// subscription operations whoever may consume it; everything else a tenant admin.
func requiredOp(pattern string) api.AdminOp {
	method, path, _ := strings.Cut(pattern, " ")
	switch {
	case path == "/admin/v2/clusters", path == "/admin/v2/brokers/health":
		return api.OpAuthenticated
	case path == "/admin/v2/clusters/{cluster}", path == "/admin/v2/clusters/{cluster}/peers":
		return api.OpSuperUser
	case path == "/admin/v2/tenants", path == "/admin/v2/tenants/{tenant}" && method != "GET":
		return api.OpSuperUser
	case strings.HasPrefix(path, "/lookup/"):
		return api.OpLookup
	case strings.HasSuffix(path, "/permissions"), strings.HasSuffix(path, "/permissions/{role}"):
		return api.OpTenantAdmin
	case strings.Contains(path, "/subscription/"), strings.HasSuffix(path, "/subscriptions"):
		return api.OpConsume
	}
	if method == "GET" && (strings.HasPrefix(path, "/admin/v2/persistent/{tenant}/{ns}/{topic}") ||
		strings.HasPrefix(path, "/admin/v2/scalable/{tenant}/{ns}/{topic}")) {
		return api.OpLookup // stats, internal stats, last message id, partitions, layouts
	}
	return api.OpTenantAdmin
}
