package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/admin/jsonbody"
	"github.com/magnetar-io/magnetar/broker/access"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/internal/ratelog"
)

// Options configures the handler. Zero values take the documented defaults.
type Options struct {
	// Logger receives server-side failures (5xx) and, rate-limited, the audit lines of
	// refused authorizations (package broker/access). Default slog.Default().
	Logger *slog.Logger
	// RequestTimeout bounds each request's work. Default 30s.
	RequestTimeout time.Duration
	// MaxPartitions is Pulsar's maxNumPartitionsPerPartitionedTopic: the most partitions a
	// partitioned topic may be created with or grown to (406 above it). 0 (Pulsar's
	// default, unlimited) is PartitionCeiling here.
	MaxPartitions int
	// MaxTopicsPerNamespace is Pulsar's maxTopicsPerNamespace, the broker's default of a
	// namespace's max_topics_per_namespace (0: unlimited): a topic or partitioned topic
	// whose creation would pass it is refused with 412.
	MaxTopicsPerNamespace int
}

// PartitionCeiling bounds a partitioned topic's partitions when Options.MaxPartitions is
// unset. Pulsar has no bound then; here every partition is a metadata record written before
// the request is answered, so a count in the millions would write for minutes (and leave
// what it wrote when the request times out). Ten thousand partitions is more than any
// topic needs and is written in seconds.
const PartitionCeiling = 10_000

// maxBody bounds a request body: admin bodies are small JSON documents.
const maxBody = 1 << 20

type handler struct {
	svc           Service
	log           *slog.Logger
	audit         *access.Audit
	timeout       time.Duration
	maxPartitions int // > 0
	maxTopics     int // the broker's default; 0: unlimited
}

// Handler returns the admin REST API (Pulsar's /admin/v2 and /lookup/v2 paths) over svc.
// Mount it at the root of the HTTP server: it only answers under /admin/ and /lookup/.
func Handler(svc Service, opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 30 * time.Second
	}
	if opts.MaxPartitions <= 0 {
		opts.MaxPartitions = PartitionCeiling
	}
	h := &handler{svc: svc, log: opts.Logger, audit: access.NewAudit(opts.Logger, ratelog.Options{}), timeout: opts.RequestTimeout,
		maxPartitions: opts.MaxPartitions, maxTopics: opts.MaxTopicsPerNamespace}
	mux := http.NewServeMux()
	route := func(pattern string, f func(w http.ResponseWriter, r *http.Request) error, sc func(r *http.Request) scope) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
			defer cancel()
			r = r.WithContext(ctx)
			if err := h.authorize(r, pattern, sc(r)); err != nil { // authz.go
				writeError(w, r, err, sc(r), h.log)
				return
			}
			if err := f(w, r); err != nil {
				writeError(w, r, err, sc(r), h.log)
			}
		})
	}
	tenantScope := func(r *http.Request) scope { return scope{tenant: r.PathValue("tenant")} }
	nsScope := func(r *http.Request) scope {
		return scope{tenant: r.PathValue("tenant"), namespace: r.PathValue("tenant") + "/" + r.PathValue("ns")}
	}
	topicScope := func(r *http.Request) scope {
		s := nsScope(r)
		s.topic = fullName(r)
		s.partitioned = strings.HasSuffix(r.URL.Path, "/partitions")
		s.sub = r.PathValue("sub")
		return s
	}

	route("GET /admin/v2/clusters", h.clusters, tenantScope)
	route("GET /admin/v2/brokers/health", h.health, tenantScope)

	route("GET /admin/v2/tenants", h.listTenants, tenantScope)
	route("GET /admin/v2/tenants/{tenant}", h.getTenant, tenantScope)
	route("PUT /admin/v2/tenants/{tenant}", h.createTenant, tenantScope)
	route("POST /admin/v2/tenants/{tenant}", h.updateTenant, tenantScope)
	route("DELETE /admin/v2/tenants/{tenant}", h.deleteTenant, tenantScope)

	route("GET /admin/v2/namespaces/{tenant}", h.listNamespaces, tenantScope)
	route("GET /admin/v2/namespaces/{tenant}/{ns}", h.getNamespace, nsScope)
	route("PUT /admin/v2/namespaces/{tenant}/{ns}", h.createNamespace, nsScope)
	route("POST /admin/v2/namespaces/{tenant}/{ns}", h.setNamespace, nsScope)
	route("DELETE /admin/v2/namespaces/{tenant}/{ns}", h.deleteNamespace, nsScope)
	route("GET /admin/v2/namespaces/{tenant}/{ns}/topics", h.namespaceTopics, nsScope)

	route("GET /admin/v2/persistent/{tenant}/{ns}", h.listTopics, nsScope)
	route("GET /admin/v2/persistent/{tenant}/{ns}/partitioned", h.listPartitioned, nsScope)
	route("GET /admin/v2/non-persistent/{tenant}/{ns}", h.listNonPersistent, nsScope)
	route("GET /admin/v2/non-persistent/{tenant}/{ns}/partitioned", h.listPartitioned, nsScope)

	const p = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
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
	route("GET "+p+"/lastMessageId", h.lastMessageID, topicScope)
	route("PUT "+p+"/unload", h.unload, topicScope)
	route("POST "+p+"/terminate", h.terminate, topicScope)
	route("POST "+p+"/terminate/partitions", h.terminatePartitions, topicScope)
	route("GET "+p+"/subscriptions", h.subscriptions, topicScope)
	route("PUT "+p+"/subscription/{sub}", h.createSubscription, topicScope)
	route("DELETE "+p+"/subscription/{sub}", h.deleteSubscription, topicScope)
	route("POST "+p+"/subscription/{sub}/resetcursor/{timestamp}", h.resetCursorToTime, topicScope)
	route("POST "+p+"/subscription/{sub}/resetcursor", h.resetCursor, topicScope)
	route("POST "+p+"/subscription/{sub}/skip/{n}", h.skip, topicScope)
	route("POST "+p+"/subscription/{sub}/skip_all", h.skipAll, topicScope)

	if cs, isCluster := svc.(BrokersService); isCluster { // cluster.go
		route("GET /lookup/v2/topic/persistent/{tenant}/{ns}/{topic}", func(w http.ResponseWriter, r *http.Request) error {
			return h.lookupAssigned(cs, w, r)
		}, topicScope)
		h.clusterRoutes(cs, route, nsScope, topicScope)
	} else {
		route("GET /lookup/v2/topic/persistent/{tenant}/{ns}/{topic}", h.lookup, topicScope)
	}
	if ts, isTxn := svc.(TxnService); isTxn {
		h.txnRoutes(ts, route, topicScope)
	}
	h.schemaRoutes(route, nsScope, topicScope)
	h.inspectRoutes(route, topicScope)
	h.nonPersistentRoutes(route, topicScope)
	h.compactionRoutes(route, nsScope, topicScope)
	h.permissionRoutes(route, nsScope, topicScope)  // permissions.go
	h.policyRoutes(route, nsScope, topicScope)      // policies.go
	h.replicationRoutes(route, nsScope, topicScope) // replication.go
	h.offloadRoutes(route, nsScope, topicScope)     // offload.go
	h.scalableRoutes(route)                         // scalable.go
	h.dynamicConfigRoutes(route)                    // dynconfig.go

	// Unknown paths answer 404; known paths with another method answer 405 (the catch-all
	// patterns below would otherwise hide net/http's own 405).
	notFound := func(w http.ResponseWriter, r *http.Request) {
		var allowed []string
		for _, m := range []string{"GET", "PUT", "POST", "DELETE"} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "/admin/" && pattern != "/lookup/" {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"reason": "Method Not Allowed"})
			return
		}
		writeJSON(w, http.StatusNotFound, map[string]string{"reason": "Not Found: " + r.Method + " " + r.URL.Path})
	}
	mux.HandleFunc("/admin/", notFound)
	mux.HandleFunc("/lookup/", notFound)
	return mux
}

// fullName is the topic named by a request's path (not validated): in the non-persistent
// domain under /admin/v2/non-persistent/, else persistent.
func fullName(r *http.Request) string {
	if r.PathValue("topic") == "" {
		return ""
	}
	return pathDomain(r) + "://" + r.PathValue("tenant") + "/" + r.PathValue("ns") + "/" + r.PathValue("topic")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func ok(w http.ResponseWriter, v any) error {
	writeJSON(w, http.StatusOK, v)
	return nil
}

func noContent(w http.ResponseWriter) error {
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// readJSON decodes an optional JSON body into v as Pulsar reads it (package jsonbody: the
// one decoder of every admin body); it reports whether there was one.
func readJSON(r *http.Request, v any) (bool, error) {
	b, err := readBody(r)
	if err != nil {
		return false, err
	}
	if len(b) == 0 {
		return false, nil
	}
	if err := jsonbody.Decode(b, v); err != nil {
		return false, restErr(http.StatusBadRequest, "invalid JSON body: %v", err)
	}
	return true, nil
}

// boolQuery reads a boolean query parameter (absent: false).
func boolQuery(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, restErr(http.StatusBadRequest, "invalid value %q for query parameter %s", v, name)
	}
	return b, nil
}

func (h *handler) clusters(w http.ResponseWriter, r *http.Request) error {
	if cs, isCS := h.svc.(ClusterAdminService); isCS {
		l, err := cs.Clusters(r.Context())
		if err != nil {
			return err
		}
		return ok(w, nonNil(l))
	}
	return ok(w, []string{h.svc.Info().Cluster})
}

func (h *handler) health(w http.ResponseWriter, r *http.Request) error {
	if cs, isCluster := h.svc.(BrokersService); isCluster {
		if err := cs.Healthy(r.Context()); err != nil {
			return err
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	_, err := io.WriteString(w, "ok")
	return err
}

// Tenants.

func checkTenant(r *http.Request) (string, error) {
	t := r.PathValue("tenant")
	if topicname.CheckTenant(t) != nil {
		return "", restErr(http.StatusPreconditionFailed, "Tenant name is not valid")
	}
	return t, nil
}

func (h *handler) listTenants(w http.ResponseWriter, r *http.Request) error {
	ts, err := h.svc.Tenants(r.Context())
	if err != nil {
		return err
	}
	return ok(w, nonNil(ts))
}

func (h *handler) getTenant(w http.ResponseWriter, r *http.Request) error {
	t, err := checkTenant(r)
	if err != nil {
		return err
	}
	info, err := h.svc.Tenant(r.Context(), t)
	if err != nil {
		return err
	}
	return ok(w, info)
}

func (h *handler) tenantInfo(r *http.Request) (api.TenantInfo, error) {
	info := api.TenantInfo{AdminRoles: []string{}, AllowedClusters: []string{h.svc.Info().Cluster}}
	if _, err := readJSON(r, &info); err != nil {
		return info, err
	}
	if info.AdminRoles == nil {
		info.AdminRoles = []string{}
	}
	if len(info.AllowedClusters) == 0 {
		info.AllowedClusters = []string{h.svc.Info().Cluster}
	}
	return info, nil
}

func (h *handler) createTenant(w http.ResponseWriter, r *http.Request) error {
	t, err := checkTenant(r)
	if err != nil {
		return err
	}
	info, err := h.tenantInfo(r)
	if err != nil {
		return err
	}
	if err := h.svc.CreateTenant(r.Context(), t, info); err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) updateTenant(w http.ResponseWriter, r *http.Request) error {
	t, err := checkTenant(r)
	if err != nil {
		return err
	}
	info, err := h.tenantInfo(r)
	if err != nil {
		return err
	}
	if err := h.svc.UpdateTenant(r.Context(), t, info); err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) deleteTenant(w http.ResponseWriter, r *http.Request) error {
	t, err := checkTenant(r)
	if err != nil {
		return err
	}
	if err := h.svc.DeleteTenant(r.Context(), t); err != nil {
		return err
	}
	return noContent(w)
}

// Namespaces.

func (h *handler) listNamespaces(w http.ResponseWriter, r *http.Request) error {
	t, err := checkTenant(r)
	if err != nil {
		return err
	}
	nss, err := h.svc.Namespaces(r.Context(), t)
	if err != nil {
		return err
	}
	return ok(w, nonNil(nss))
}

// checkNamespace validates the {tenant}/{ns} of the path and returns "tenant/ns".
func checkNamespace(r *http.Request) (string, error) {
	t, ns := r.PathValue("tenant"), r.PathValue("ns")
	if topicname.CheckNamespace(t, ns) != nil {
		return "", restErr(http.StatusPreconditionFailed, "Namespace name is not valid")
	}
	return t + "/" + ns, nil
}

func (h *handler) createNamespace(w http.ResponseWriter, r *http.Request) error {
	ns, err := checkNamespace(r)
	if err != nil {
		return err
	}
	var p api.NamespacePolicies
	if _, err := readPolicies(r, &p); err != nil {
		return err
	}
	if err := h.svc.CreateNamespace(r.Context(), ns, p); err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) setNamespace(w http.ResponseWriter, r *http.Request) error {
	ns, err := checkNamespace(r)
	if err != nil {
		return err
	}
	var p api.NamespacePolicies
	if has, err := readPolicies(r, &p); err != nil {
		return err
	} else if !has {
		return restErr(http.StatusBadRequest, "namespace policies are required")
	}
	if err := h.svc.SetNamespacePolicies(r.Context(), ns, p); err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) deleteNamespace(w http.ResponseWriter, r *http.Request) error {
	ns, err := checkNamespace(r)
	if err != nil {
		return err
	}
	force, err := boolQuery(r, "force")
	if err != nil {
		return err
	}
	if err := h.svc.DeleteNamespace(r.Context(), ns, force); err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) namespaceTopics(w http.ResponseWriter, r *http.Request) error {
	ns, err := checkNamespace(r)
	if err != nil {
		return err
	}
	mode := strings.ToUpper(r.URL.Query().Get("mode"))
	if mode == "NON_PERSISTENT" {
		ts, err := h.nonPersistentTopics(r, ns)
		if err != nil {
			return err
		}
		return ok(w, nonNil(ts))
	}
	ts, err := h.svc.Topics(r.Context(), ns)
	if err != nil {
		return err
	}
	if mode == "ALL" {
		np, err := h.nonPersistentTopics(r, ns)
		if err != nil {
			return err
		}
		ts = append(ts, np...)
	}
	return ok(w, nonNil(ts))
}

func (h *handler) listTopics(w http.ResponseWriter, r *http.Request) error {
	return h.namespaceTopics(w, r)
}

func (h *handler) listPartitioned(w http.ResponseWriter, r *http.Request) error {
	ns, err := checkNamespace(r)
	if err != nil {
		return err
	}
	ts, err := h.svc.PartitionedTopics(r.Context(), ns)
	if err != nil {
		return err
	}
	return ok(w, ofDomain(ts, pathDomain(r)))
}

func (h *handler) listNonPersistent(w http.ResponseWriter, r *http.Request) error {
	ns, err := checkNamespace(r)
	if err != nil {
		return err
	}
	ts, err := h.nonPersistentTopics(r, ns)
	if err != nil {
		return err
	}
	return ok(w, nonNil(ts))
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
