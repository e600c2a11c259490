package admin

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
)

// Authorizer is implemented by services that authorize admin requests (*broker.Service
// does, with the principal the authentication middleware put in the request's context).
type Authorizer interface {
	AuthorizeAdmin(ctx context.Context, op api.AdminOp, tenant, ns, topic string) error
}

// authorize checks a request against what its route needs (requiredOp); a refusal is
// written to the audit log.
func (h *handler) authorize(r *http.Request, pattern string, sc scope) error {
	az, ok := h.svc.(Authorizer)
	if !ok {
		return nil
	}
	op := requiredOp(pattern)
	err := az.AuthorizeAdmin(r.Context(), op, sc.tenant, sc.namespace, sc.topic)
	if errors.Is(err, auth.ErrNotAuthorized) {
		p, _ := auth.FromContext(r.Context())
		h.audit.AuthorizationRefused("http", r.RemoteAddr, p.Role, pattern, requestResource(r, sc), err)
	}
	return err
}

// requestResource names what a request is about, for the audit log.
func requestResource(r *http.Request, sc scope) string {
	switch {
	case sc.topic != "":
		return sc.topic
	case sc.namespace != "" && sc.namespace != "/":
		return "namespace " + sc.namespace
	case sc.tenant != "":
		return "tenant " + sc.tenant
	}
	return r.URL.Path
}

// requiredOp is what a route needs, as Pulsar's admin resources check it: the cluster list,
// the health and readiness checks any authenticated role; the brokers, their load reports,
// a cluster's record and its changes, and the transaction coordinators superusers; the
// tenant list and tenant changes superusers; a transaction's metadata any authenticated
// role (Pulsar checks only that the coordinator is served here); a namespace's bookie
// affinity group superusers; stats, partitions metadata, lookups and a topic's transaction stats whoever may produce
// or consume the topic; subscription operations whoever may consume it; everything else a
// tenant admin. (A route about no tenant that falls to a tenant admin is the superusers':
// package broker/access.)
func requiredOp(pattern string) api.AdminOp {
	method, path, _ := strings.Cut(pattern, " ")
	switch {
	case path == "/admin/v2/clusters", path == "/admin/v2/brokers/health", path == "/admin/v2/brokers/ready":
		return api.OpAuthenticated
	case strings.HasPrefix(path, "/admin/v2/clusters/"), strings.HasPrefix(path, "/admin/v2/brokers"),
		strings.HasPrefix(path, "/admin/v2/broker-stats"):
		return api.OpSuperUser
	case strings.HasPrefix(path, "/admin/v3/transactions/transactionMetadata/"):
		return api.OpAuthenticated
	case strings.HasSuffix(path, "/persistence/bookieAffinity"):
		return api.OpSuperUser
	case strings.HasPrefix(path, "/admin/v3/transactions/"):
		if strings.Contains(path, "{topic}") {
			return api.OpLookup // Pulsar's GET_STATS topic operation
		}
		return api.OpSuperUser
	case path == "/admin/v2/tenants", path == "/admin/v2/tenants/{tenant}" && method != "GET":
		return api.OpSuperUser
	case strings.HasPrefix(path, "/lookup/"):
		return api.OpLookup
	case strings.Contains(path, "/permissions"):
		return api.OpTenantAdmin // grants, on topics and on subscriptions
	case strings.Contains(path, "/subscription/"), strings.HasSuffix(path, "/subscriptions"):
		return api.OpConsume
	}
	if method == "GET" && (strings.HasPrefix(path, "/admin/v2/persistent/{tenant}/{ns}/{topic}") ||
		strings.HasPrefix(path, "/admin/v2/scalable/{tenant}/{ns}/{topic}")) {
		return api.OpLookup // stats, internal stats, last message id, partitions, layouts
	}
	return api.OpTenantAdmin
}
