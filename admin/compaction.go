package admin

import (
	"context"
	"net/http"

	"github.com/magnetar-io/magnetar/broker/api"
)

// CompactionService is the topic compaction part of the broker API. *broker.Service
// implements it; a Service that does not answers these paths with 501.
type CompactionService interface {
	Compact(ctx context.Context, topic string) (<-chan struct{}, error)
	CompactionStatus(ctx context.Context, topic string) (api.CompactionStatus, error)
	TopicCompactionThreshold(ctx context.Context, topic string, applied bool) (*int64, error)
	SetTopicCompactionThreshold(ctx context.Context, topic string, bytes *int64) error
}

func (h *handler) compactionRoutes(route routeFunc, nsScope, topicScope func(r *http.Request) scope) {
	const p = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
	route("PUT "+p+"/compaction", h.compact, topicScope)
	route("GET "+p+"/compaction", h.compactionStatus, topicScope)
	route("GET "+p+"/compactionThreshold", h.topicThreshold, topicScope)
	route("POST "+p+"/compactionThreshold", h.setTopicThreshold, topicScope)
	route("PUT "+p+"/compactionThreshold", h.setTopicThreshold, topicScope)
	route("DELETE "+p+"/compactionThreshold", h.removeTopicThreshold, topicScope)
	const ns = "/admin/v2/namespaces/{tenant}/{ns}/compactionThreshold"
	route("GET "+ns, h.nsThreshold, nsScope)
	route("PUT "+ns, h.setNSThreshold, nsScope)
	route("POST "+ns, h.setNSThreshold, nsScope)
	route("DELETE "+ns, h.removeNSThreshold, nsScope)
}

// compactionTopic validates the request's topic (not a partitioned topic's base name) and
// returns the compaction service.
func (h *handler) compactionTopic(r *http.Request) (CompactionService, string, error) {
	svc, ok := h.svc.(CompactionService)
	if !ok {
		return nil, "", restErr(http.StatusNotImplemented, "compaction is not served")
	}
	n, err := checkTopic(r)
	if err != nil {
		return nil, "", err
	}
	return svc, n.String(), nil
}

func (h *handler) compact(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.compactionTopic(r)
	if err != nil {
		return err
	}
	n, _ := checkTopic(r)
	if parts, err := h.partitions(r, n); err != nil {
		return err
	} else if parts > 0 {
		if err := eachPartition(n, parts, func(_ int, name string) error {
			_, err := svc.Compact(r.Context(), name)
			return err
		}); err != nil {
			return err
		}
		return noContent(w)
	}
	if _, err := svc.Compact(r.Context(), t); err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) compactionStatus(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.compactionTopic(r)
	if err != nil {
		return err
	}
	st, err := svc.CompactionStatus(r.Context(), t)
	if err != nil {
		return err
	}
	return ok(w, st)
}

func (h *handler) topicThreshold(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.compactionTopic(r)
	if err != nil {
		return err
	}
	applied, err := boolQuery(r, "applied")
	if err != nil {
		return err
	}
	v, err := svc.TopicCompactionThreshold(r.Context(), t, applied)
	if err != nil {
		return err
	}
	return ok(w, v)
}

// readThreshold reads a compaction threshold body: a non-negative number of bytes.
func readThreshold(r *http.Request) (int64, error) {
	var v int64
	if has, err := readJSON(r, &v); err != nil {
		return 0, err
	} else if !has || v < 0 {
		return 0, restErr(http.StatusPreconditionFailed, "compactionThreshold must be 0 or more")
	}
	return v, nil
}

func (h *handler) setTopicThreshold(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.compactionTopic(r)
	if err != nil {
		return err
	}
	v, err := readThreshold(r)
	if err != nil {
		return err
	}
	if err := svc.SetTopicCompactionThreshold(r.Context(), t, &v); err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) removeTopicThreshold(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.compactionTopic(r)
	if err != nil {
		return err
	}
	if err := svc.SetTopicCompactionThreshold(r.Context(), t, nil); err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) nsThreshold(w http.ResponseWriter, r *http.Request) error {
	ns, err := checkNamespace(r)
	if err != nil {
		return err
	}
	p, err := h.svc.Namespace(r.Context(), ns)
	if err != nil {
		return err
	}
	return ok(w, p.Other["compaction_threshold"])
}

func (h *handler) setNSThreshold(w http.ResponseWriter, r *http.Request) error {
	v, err := readThreshold(r)
	if err != nil {
		return err
	}
	if err := h.updateNamespace(r, func(p *api.NamespacePolicies) error {
		if p.Other == nil {
			p.Other = map[string]any{}
		}
		p.Other["compaction_threshold"] = float64(v)
		return nil
	}); err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) removeNSThreshold(w http.ResponseWriter, r *http.Request) error {
	if err := h.updateNamespace(r, func(p *api.NamespacePolicies) error {
		delete(p.Other, "compaction_threshold")
		return nil
	}); err != nil {
		return err
	}
	return noContent(w)
}
