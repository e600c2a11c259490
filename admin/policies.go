package admin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/magnetar-io/magnetar/admin/jsonbody"
	"github.com/magnetar-io/magnetar/broker/policy"
)

// PolicyService is the namespace and topic policies part of the broker API (retention,
// backlog quotas, message TTL, rates, limits, lifecycle, properties). *broker.Service
// implements it; a Service that does not has no policy paths.
//
//	GET    /admin/v2/namespaces/{t}/{ns}/<policy>              the value (not set: 204, no body)
//	POST   /admin/v2/namespaces/{t}/{ns}/<policy>              set (PUT too)
//	DELETE /admin/v2/namespaces/{t}/{ns}/<policy>              remove
//	GET    /admin/v2/persistent/{t}/{ns}/{topic}/<policy>[?applied=true]
//	POST|PUT|DELETE /admin/v2/persistent/{t}/{ns}/{topic}/<policy>
//	GET …/backlogQuotaMap; POST|DELETE …/backlogQuota?backlogQuotaType=destination_storage|message_age
//	POST …/{topic}/messageTTL?messageTTL=N (the topic form takes a query parameter)
//	POST …/{topic}/subscription/{sub}/expireMessages/{seconds}
//	POST …/{topic}/all_subscription/expireMessages/{seconds}
type PolicyService interface {
	NamespacePolicy(ctx context.Context, ns, path string) (json.RawMessage, error)
	SetNamespacePolicy(ctx context.Context, ns, path, qualifier string, body []byte) error
	RemoveNamespacePolicy(ctx context.Context, ns, path, qualifier string) error
	TopicPolicy(ctx context.Context, topic, path string, applied bool) (json.RawMessage, error)
	SetTopicPolicy(ctx context.Context, topic, path, qualifier string, body []byte) error
	RemoveTopicPolicy(ctx context.Context, topic, path, qualifier string) error
	ExpireMessages(ctx context.Context, topic, sub string, seconds int64) error
}

// policyLevel is the namespace or the topic level of the policy paths.
type policyLevel struct {
	prefix string
	paths  []string
	scope  func(r *http.Request) scope
	name   func(r *http.Request) (string, error)
	get    func(ctx context.Context, name, path string, applied bool) (json.RawMessage, error)
	set    func(ctx context.Context, name, path, qualifier string, body []byte) error
	remove func(ctx context.Context, name, path, qualifier string) error
}

func (h *handler) policyRoutes(route routeFunc, nsScope, topicScope func(r *http.Request) scope) {
	ps, isPolicy := h.svc.(PolicyService)
	if !isPolicy {
		return
	}
	const tp = "/admin/v2/persistent/{tenant}/{ns}/{topic}/"
	levels := []policyLevel{
		{prefix: "/admin/v2/namespaces/{tenant}/{ns}/", paths: policy.NamespacePaths(), scope: nsScope, name: checkNamespace,
			get: func(ctx context.Context, ns, path string, _ bool) (json.RawMessage, error) {
				return ps.NamespacePolicy(ctx, ns, path)
			},
			set: ps.SetNamespacePolicy, remove: ps.RemoveNamespacePolicy},
		{prefix: tp, paths: policy.TopicPaths(), scope: topicScope,
			name: func(r *http.Request) (string, error) {
				n, err := checkTopic(r)
				return n.String(), err
			},
			get: ps.TopicPolicy, set: ps.SetTopicPolicy, remove: ps.RemoveTopicPolicy},
	}
	for _, lv := range levels {
		for _, path := range lv.paths {
			if lv.prefix == tp && path == topicPropertiesPath {
				continue // Pulsar's topic properties: their own routes (topicprops.go)
			}
			getPath := path
			if path == "backlogQuota" {
				getPath = "backlogQuotaMap"
			}
			route("GET "+lv.prefix+getPath, func(w http.ResponseWriter, r *http.Request) error {
				name, err := lv.name(r)
				if err != nil {
					return err
				}
				applied, err := boolQuery(r, "applied")
				if err != nil {
					return err
				}
				v, err := lv.get(r.Context(), name, path, applied)
				if err != nil {
					return err
				}
				if string(v) == "null" && !applied {
					// Not set: Pulsar answers its null with 204 and no body, which its
					// clients read as "not configured" (a "null" body would be a value).
					// An applied read answers what applies, as before: Pulsar's falls
					// back to the broker's defaults and always has a body.
					return noContent(w)
				}
				return ok(w, v)
			}, lv.scope)
			change := func(w http.ResponseWriter, r *http.Request) error {
				name, err := lv.name(r)
				if err != nil {
					return err
				}
				q := r.URL.Query().Get("backlogQuotaType")
				if r.Method == http.MethodDelete {
					err = lv.remove(r.Context(), name, path, q)
				} else {
					var body []byte
					if body, err = readBody(r); err != nil {
						return err
					}
					if ttl := r.URL.Query().Get("messageTTL"); path == "messageTTL" && len(body) == 0 && ttl != "" {
						body = []byte(ttl) // the topic form takes a query parameter
					}
					if path == "autoTopicCreation" {
						if err := h.checkAutoPartitions(body); err != nil {
							return err
						}
					}
					err = lv.set(r.Context(), name, path, q, body)
				}
				if err != nil {
					return err
				}
				return noContent(w)
			}
			for _, m := range []string{"POST ", "PUT ", "DELETE "} {
				route(m+lv.prefix+path, change, lv.scope)
			}
		}
	}
	h.topicPropertyRoutes(ps, route, topicScope)
	route("POST "+tp+"subscription/{sub}/expireMessages/{seconds}", h.expire(ps), topicScope)
	route("POST "+tp+"all_subscription/expireMessages/{seconds}", h.expire(ps), topicScope)
}

// checkAutoPartitions refuses an autoTopicCreation override whose defaultNumPartitions is
// above the partition limit, as Pulsar does (406): auto-creation would write that many
// partition records. A body that does not read is left to the policy's own check.
func (h *handler) checkAutoPartitions(body []byte) error {
	var o struct {
		DefaultNumPartitions int64 `json:"defaultNumPartitions"`
	}
	if jsonbody.Decode(body, &o) == nil && o.DefaultNumPartitions > int64(h.maxPartitions) {
		return restErr(http.StatusNotAcceptable, "Number of partitions should be less than or equal to %d", h.maxPartitions)
	}
	return nil
}

// expire answers expire-messages (one subscription, or all of them), on every partition of
// a partitioned topic.
func (h *handler) expire(ps PolicyService) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		n, err := checkTopic(r)
		if err != nil {
			return err
		}
		secs, err := strconv.ParseInt(r.PathValue("seconds"), 10, 64)
		if err != nil || secs < 0 {
			return restErr(http.StatusBadRequest, "invalid expireTimeInSeconds %q", r.PathValue("seconds"))
		}
		sub := r.PathValue("sub")
		parts, err := h.partitions(r, n)
		if err != nil {
			return err
		}
		if parts > 0 {
			err = eachPartition(n, parts, func(_ int, name string) error { return ps.ExpireMessages(r.Context(), name, sub, secs) })
		} else {
			err = ps.ExpireMessages(r.Context(), n.String(), sub, secs)
		}
		if err != nil {
			return err
		}
		return noContent(w)
	}
}

// readBody reads a request body (bounded), trimmed.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, restErr(http.StatusBadRequest, "reading the body: %v", err)
	}
	if len(b) > maxBody {
		return nil, restErr(http.StatusRequestEntityTooLarge, "body larger than %d bytes", maxBody)
	}
	return []byte(strings.TrimSpace(string(b))), nil
}
