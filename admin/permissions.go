package admin

import (
	"context"
	"net/http"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
)

// PermissionService is implemented by services that keep permission grants
// (*broker.Service does); the permission endpoints exist only for them.
type PermissionService interface {
	NamespacePermissions(ctx context.Context, ns string) (map[string][]auth.Action, error)
	GrantNamespacePermission(ctx context.Context, ns, role string, acts []auth.Action) error
	RevokeNamespacePermission(ctx context.Context, ns, role string) error
	TopicPermissions(ctx context.Context, topic string) (map[string][]auth.Action, error)
	GrantTopicPermission(ctx context.Context, topic, role string, acts []auth.Action) error
	RevokeTopicPermission(ctx context.Context, topic, role string) error
}

// SubscriptionPermissionService is implemented by services that keep a namespace's
// subscription roles (Pulsar's auth_policies.subscription_auth_roles; *broker.Service does):
// the roles that alone may consume through a subscription once its list is set (package
// broker/access).
type SubscriptionPermissionService interface {
	SubscriptionPermissions(ctx context.Context, ns string) (map[string][]string, error)
	GrantSubscriptionPermission(ctx context.Context, ns, sub string, roles []string) error
	RevokeSubscriptionPermission(ctx context.Context, ns, sub, role string) error
}

// ClusterService is implemented by services that keep cluster records (*broker.Service
// does): GET /admin/v2/clusters/{cluster} answers the record.
type ClusterService interface {
	Cluster(ctx context.Context, name string) (api.ClusterData, error)
}

// permissionRoutes mounts Pulsar's permission endpoints:
//
//	GET    /admin/v2/namespaces/{tenant}/{ns}/permissions            {"role": ["produce", ...]}
//	POST   /admin/v2/namespaces/{tenant}/{ns}/permissions/{role}     ["produce", "consume"]
//	DELETE /admin/v2/namespaces/{tenant}/{ns}/permissions/{role}
//	GET    /admin/v2/persistent/{tenant}/{ns}/{topic}/permissions     (namespace and topic grants)
//	POST   /admin/v2/persistent/{tenant}/{ns}/{topic}/permissions/{role}
//	DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}/permissions/{role}
//
// and, with a SubscriptionPermissionService, the subscription roles:
//
//	GET    /admin/v2/namespaces/{tenant}/{ns}/permissions/subscription        {"sub": ["role", ...]}
//	POST   /admin/v2/namespaces/{tenant}/{ns}/permissions/subscription/{sub}  ["role", ...] (added)
//	DELETE /admin/v2/namespaces/{tenant}/{ns}/permissions/{sub}/{role}
func (h *handler) permissionRoutes(route routeFunc, nsScope, topicScope func(r *http.Request) scope) {
	if cs, isCS := h.svc.(ClusterService); isCS {
		route("GET /admin/v2/clusters/{cluster}", func(w http.ResponseWriter, r *http.Request) error {
			name, err := checkCluster(r) // replication.go
			if err != nil {
				return err
			}
			cd, err := cs.Cluster(r.Context(), name)
			if err != nil {
				return err
			}
			return ok(w, cd)
		}, func(r *http.Request) scope { return scope{cluster: r.PathValue("cluster")} })
	}
	ps, isPS := h.svc.(PermissionService)
	if !isPS {
		return
	}
	ns := func(r *http.Request) string { return r.PathValue("tenant") + "/" + r.PathValue("ns") }
	const np = "/admin/v2/namespaces/{tenant}/{ns}/permissions"
	route("GET "+np, func(w http.ResponseWriter, r *http.Request) error {
		m, err := ps.NamespacePermissions(r.Context(), ns(r))
		if err != nil {
			return err
		}
		return ok(w, m)
	}, nsScope)
	route("POST "+np+"/{role}", func(w http.ResponseWriter, r *http.Request) error {
		acts, err := readActions(r)
		if err != nil {
			return err
		}
		if err := ps.GrantNamespacePermission(r.Context(), ns(r), r.PathValue("role"), acts); err != nil {
			return err
		}
		return noContent(w)
	}, nsScope)
	route("DELETE "+np+"/{role}", func(w http.ResponseWriter, r *http.Request) error {
		if err := ps.RevokeNamespacePermission(r.Context(), ns(r), r.PathValue("role")); err != nil {
			return err
		}
		return noContent(w)
	}, nsScope)
	if ss, isSS := h.svc.(SubscriptionPermissionService); isSS {
		h.subscriptionPermissionRoutes(ss, route, nsScope)
	}
	const tp = "/admin/v2/persistent/{tenant}/{ns}/{topic}/permissions"
	route("GET "+tp, func(w http.ResponseWriter, r *http.Request) error {
		m, err := ps.TopicPermissions(r.Context(), fullName(r))
		if err != nil {
			return err
		}
		return ok(w, m)
	}, topicScope)
	route("POST "+tp+"/{role}", func(w http.ResponseWriter, r *http.Request) error {
		acts, err := readActions(r)
		if err != nil {
			return err
		}
		if err := ps.GrantTopicPermission(r.Context(), fullName(r), r.PathValue("role"), acts); err != nil {
			return err
		}
		return noContent(w)
	}, topicScope)
	route("DELETE "+tp+"/{role}", func(w http.ResponseWriter, r *http.Request) error {
		if err := ps.RevokeTopicPermission(r.Context(), fullName(r), r.PathValue("role")); err != nil {
			return err
		}
		return noContent(w)
	}, topicScope)
}

// readActions reads a grant's body: a JSON array of actions.
func readActions(r *http.Request) ([]auth.Action, error) {
	var ss []string
	if _, err := readJSON(r, &ss); err != nil {
		return nil, err
	}
	acts, err := auth.ParseActions(ss)
	if err != nil {
		return nil, restErr(http.StatusBadRequest, "%v", err)
	}
	return acts, nil
}

func (h *handler) subscriptionPermissionRoutes(ss SubscriptionPermissionService, route routeFunc, nsScope func(r *http.Request) scope) {
	const np = "/admin/v2/namespaces/{tenant}/{ns}/permissions"
	route("GET "+np+"/subscription", func(w http.ResponseWriter, r *http.Request) error {
		ns, err := checkNamespace(r)
		if err != nil {
			return err
		}
		m, err := ss.SubscriptionPermissions(r.Context(), ns)
		if err != nil {
			return err
		}
		return ok(w, m)
	}, nsScope)
	route("POST "+np+"/subscription/{sub}", func(w http.ResponseWriter, r *http.Request) error {
		ns, err := checkNamespace(r)
		if err != nil {
			return err
		}
		var roles []string
		if has, err := readJSON(r, &roles); err != nil {
			return err
		} else if !has || len(roles) == 0 {
			return restErr(http.StatusBadRequest, "a list of roles is required")
		}
		if err := ss.GrantSubscriptionPermission(r.Context(), ns, r.PathValue("sub"), roles); err != nil {
			return err
		}
		return noContent(w)
	}, nsScope)
	route("DELETE "+np+"/{sub}/{role}", func(w http.ResponseWriter, r *http.Request) error {
		ns, err := checkNamespace(r)
		if err != nil {
			return err
		}
		if err := ss.RevokeSubscriptionPermission(r.Context(), ns, r.PathValue("sub"), r.PathValue("role")); err != nil {
			return err
		}
		return noContent(w)
	}, nsScope)
}
