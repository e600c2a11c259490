package admin

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// ScalableService is the scalable-topic part of the broker API. *broker.Service
// implements it; a Service that does not answers these paths with 501. Calls that need the
// topic's controller leader answer *broker.NotOwnerError (307 to the leader) elsewhere; the
// Segment* calls answer it (307) on a broker that does not serve the segment.
type ScalableService interface {
	CreateScalableTopic(ctx context.Context, topic string, segments int) error
	DeleteScalableTopic(ctx context.Context, topic string) error
	ScalableTopics(ctx context.Context, ns string) ([]string, error)
	ScalableLayout(ctx context.Context, topic string) (layout.Layout, error)
	SplitScalableSegment(ctx context.Context, topic string, seg uint64, at uint16) error
	MergeScalableSegments(ctx context.Context, topic string, a, b uint64) error
	CreateScalableSubscription(ctx context.Context, topic, sub string) error
	ScalableTopicStats(ctx context.Context, topic string) (api.ScalableStats, error)
	RegisterStreamConsumer(ctx context.Context, topic, sub, consumer string, session uint64) error
	UnregisterStreamConsumer(ctx context.Context, topic, sub, consumer string) error
	StreamAssignment(ctx context.Context, topic, sub, consumer string, after uint64) (scalable.Assignment, error)
	SeekScalableSubscription(ctx context.Context, topic, sub string, seg uint64, to api.MessageID) error

	SegmentCreate(ctx context.Context, segment string, subs []string) error
	SegmentSeal(ctx context.Context, segment string) error
	SegmentDelete(ctx context.Context, segment string) error
	SegmentDrained(ctx context.Context, segment, sub string) (bool, error)
	SegmentFence(ctx context.Context, segment, sub string, term, version uint64) error
	SegmentReset(ctx context.Context, segment, sub string, term uint64, to api.MessageID) error
	TopicStats(ctx context.Context, topic string) (api.TopicStats, error)
}

// maxAssignmentWait bounds an assignment poll's wait (?wait=ms).
const maxAssignmentWait = 30 * time.Second

// scalableRoutes mounts /admin/v2/scalable/... (docs/TOOLS.md lists them): upstream's
// PIP-460/468 admin paths were not found, so this is Magnetar's own family.
func (h *handler) scalableRoutes(route routeFunc) {
	sc := func(r *http.Request) scope {
		s := scope{tenant: r.PathValue("tenant"), namespace: r.PathValue("tenant") + "/" + r.PathValue("ns"), sub: r.PathValue("sub")}
		if r.PathValue("topic") != "" { // authorized as the persistent topic of the same name
			s.topic = "persistent://" + r.PathValue("tenant") + "/" + r.PathValue("ns") + "/" + r.PathValue("topic")
		}
		return s
	}
	const ns = "/admin/v2/scalable/{tenant}/{ns}"
	const p = ns + "/{topic}"
	route("GET "+ns, h.listScalable, sc)
	route("PUT "+p, h.createScalable, sc)
	route("DELETE "+p, h.deleteScalable, sc)
	route("GET "+p, h.scalableLayout, sc)
	route("GET "+p+"/stats", h.scalableStats, sc)
	route("POST "+p+"/split/{segment}", h.splitSegment, sc)
	route("POST "+p+"/merge/{a}/{b}", h.mergeSegments, sc)
	route("GET "+p+"/subscriptions", h.scalableSubscriptions, sc)
	route("PUT "+p+"/subscription/{sub}", h.createScalableSubscription, sc)
	const c = p + "/subscription/{sub}/consumers/{consumer}"
	route("PUT "+c, h.registerConsumer, sc)
	route("DELETE "+c, h.unregisterConsumer, sc)
	route("GET "+c+"/assignment", h.assignment, sc)
	route("POST "+p+"/subscription/{sub}/seek", h.seekScalable, sc)
	// The controller leader's effects on a segment, run by the broker serving it.
	const s = p + "/segments/{segment}"
	route("POST "+s+"/create", h.segmentCreate, sc)
	route("POST "+s+"/seal", h.segmentSeal, sc)
	route("POST "+s+"/delete", h.segmentDelete, sc)
	route("POST "+s+"/drained", h.segmentDrained, sc)
	route("POST "+s+"/reset", h.segmentReset, sc)
	route("POST "+s+"/fence", h.segmentFence, sc)
	route("POST "+s+"/stats", h.segmentStats, sc)
	route("GET "+s+"/stats", h.segmentStats, sc)
}

func scalableName(r *http.Request) string {
	return layout.Topic{Tenant: r.PathValue("tenant"), Namespace: r.PathValue("ns"), Name: r.PathValue("topic")}.String()
}

func (h *handler) scalable() (ScalableService, error) {
	svc, ok := h.svc.(ScalableService)
	if !ok {
		return nil, restErr(http.StatusNotImplemented, "scalable topics are not served")
	}
	return svc, nil
}

// scalableWrite runs fn on the scalable service and answers 204.
func (h *handler) scalableWrite(w http.ResponseWriter, fn func(ScalableService) error) error {
	svc, err := h.scalable()
	if err != nil {
		return err
	}
	if err := fn(svc); err != nil {
		return err
	}
	return noContent(w)
}

// scalableRead answers fn's value as JSON.
func scalableRead[T any](h *handler, w http.ResponseWriter, fn func(ScalableService) (T, error)) error {
	svc, err := h.scalable()
	if err != nil {
		return err
	}
	v, err := fn(svc)
	if err != nil {
		return err
	}
	return ok(w, v)
}

func (h *handler) listScalable(w http.ResponseWriter, r *http.Request) error {
	return scalableRead(h, w, func(svc ScalableService) ([]string, error) {
		return svc.ScalableTopics(r.Context(), r.PathValue("tenant")+"/"+r.PathValue("ns"))
	})
}

func (h *handler) createScalable(w http.ResponseWriter, r *http.Request) error {
	n := 1
	if v := r.URL.Query().Get("segments"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			return restErr(http.StatusBadRequest, "segments %q is not a number", v)
		}
	}
	if topicname.CheckNamespace(r.PathValue("tenant"), r.PathValue("ns")) != nil || topicname.CheckLocal(r.PathValue("topic")) != nil {
		return restErr(http.StatusPreconditionFailed, "Topic name is not valid")
	}
	return h.scalableWrite(w, func(svc ScalableService) error { return svc.CreateScalableTopic(r.Context(), scalableName(r), n) })
}

func (h *handler) deleteScalable(w http.ResponseWriter, r *http.Request) error {
	return h.scalableWrite(w, func(svc ScalableService) error { return svc.DeleteScalableTopic(r.Context(), scalableName(r)) })
}

func (h *handler) scalableLayout(w http.ResponseWriter, r *http.Request) error {
	return scalableRead(h, w, func(svc ScalableService) (layout.Layout, error) {
		return svc.ScalableLayout(r.Context(), scalableName(r))
	})
}

func (h *handler) scalableStats(w http.ResponseWriter, r *http.Request) error {
	return scalableRead(h, w, func(svc ScalableService) (api.ScalableStats, error) {
		return svc.ScalableTopicStats(r.Context(), scalableName(r))
	})
}

func pathUint(r *http.Request, name string) (uint64, error) {
	v, err := strconv.ParseUint(r.PathValue(name), 10, 64)
	if err != nil {
		return 0, restErr(http.StatusBadRequest, "%s %q is not a segment id", name, r.PathValue(name))
	}
	return v, nil
}

func (h *handler) splitSegment(w http.ResponseWriter, r *http.Request) error {
	seg, err := pathUint(r, "segment")
	if err != nil {
		return err
	}
	var at uint64
	if v := r.URL.Query().Get("at"); v != "" {
		if at, err = strconv.ParseUint(v, 16, 16); err != nil || at == 0 {
			return restErr(http.StatusBadRequest, "at %q is not a hash 0001-ffff (hex)", v)
		}
	}
	return h.scalableWrite(w, func(svc ScalableService) error {
		return svc.SplitScalableSegment(r.Context(), scalableName(r), seg, uint16(at))
	})
}

func (h *handler) mergeSegments(w http.ResponseWriter, r *http.Request) error {
	a, err := pathUint(r, "a")
	if err != nil {
		return err
	}
	b, err := pathUint(r, "b")
	if err != nil {
		return err
	}
	return h.scalableWrite(w, func(svc ScalableService) error { return svc.MergeScalableSegments(r.Context(), scalableName(r), a, b) })
}

func (h *handler) scalableSubscriptions(w http.ResponseWriter, r *http.Request) error {
	return scalableRead(h, w, func(svc ScalableService) ([]string, error) {
		l, err := svc.ScalableLayout(r.Context(), scalableName(r))
		if l.Subscriptions == nil {
			l.Subscriptions = []string{}
		}
		return l.Subscriptions, err
	})
}

func (h *handler) createScalableSubscription(w http.ResponseWriter, r *http.Request) error {
	return h.scalableWrite(w, func(svc ScalableService) error {
		return svc.CreateScalableSubscription(r.Context(), scalableName(r), r.PathValue("sub"))
	})
}

func (h *handler) registerConsumer(w http.ResponseWriter, r *http.Request) error {
	session, err := strconv.ParseUint(r.URL.Query().Get("session"), 10, 64)
	if err != nil {
		return restErr(http.StatusBadRequest, "session %q is not a number", r.URL.Query().Get("session"))
	}
	return h.scalableWrite(w, func(svc ScalableService) error {
		return svc.RegisterStreamConsumer(r.Context(), scalableName(r), r.PathValue("sub"), r.PathValue("consumer"), session)
	})
}

func (h *handler) unregisterConsumer(w http.ResponseWriter, r *http.Request) error {
	return h.scalableWrite(w, func(svc ScalableService) error {
		return svc.UnregisterStreamConsumer(r.Context(), scalableName(r), r.PathValue("sub"), r.PathValue("consumer"))
	})
}

// assignment answers the consumer's newest assignment once newer than ?after (waiting up
// to ?wait ms, default 0).
func (h *handler) assignment(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var after, wait uint64
	var err error
	if v := q.Get("after"); v != "" {
		if after, err = strconv.ParseUint(v, 10, 64); err != nil {
			return restErr(http.StatusBadRequest, "after %q is not a version", v)
		}
	}
	if v := q.Get("wait"); v != "" {
		if wait, err = strconv.ParseUint(v, 10, 32); err != nil {
			return restErr(http.StatusBadRequest, "wait %q is not a number of milliseconds", v)
		}
	}
	return scalableRead(h, w, func(svc ScalableService) (scalable.Assignment, error) {
		ctx, cancel := context.WithTimeout(r.Context(), min(time.Duration(wait)*time.Millisecond, maxAssignmentWait))
		defer cancel()
		a, err := svc.StreamAssignment(ctx, scalableName(r), r.PathValue("sub"), r.PathValue("consumer"), after)
		if a.Segments == nil {
			a.Segments = []layout.SegmentID{}
		}
		return a, err
	})
}

// segmentName is the segment:// name of the request's segment descriptor.
func segmentName(r *http.Request) string {
	return "segment://" + r.PathValue("tenant") + "/" + r.PathValue("ns") + "/" + r.PathValue("topic") + "/" + r.PathValue("segment")
}

func (h *handler) segmentCreate(w http.ResponseWriter, r *http.Request) error {
	return h.scalableWrite(w, func(svc ScalableService) error {
		return svc.SegmentCreate(r.Context(), segmentName(r), r.URL.Query()["sub"])
	})
}

func (h *handler) segmentSeal(w http.ResponseWriter, r *http.Request) error {
	return h.scalableWrite(w, func(svc ScalableService) error { return svc.SegmentSeal(r.Context(), segmentName(r)) })
}

func (h *handler) segmentDelete(w http.ResponseWriter, r *http.Request) error {
	return h.scalableWrite(w, func(svc ScalableService) error { return svc.SegmentDelete(r.Context(), segmentName(r)) })
}

func (h *handler) segmentDrained(w http.ResponseWriter, r *http.Request) error {
	return scalableRead(h, w, func(svc ScalableService) (bool, error) {
		return svc.SegmentDrained(r.Context(), segmentName(r), r.URL.Query().Get("sub"))
	})
}

func (h *handler) segmentReset(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	l, err1 := strconv.ParseInt(q.Get("ledger"), 10, 64)
	e, err2 := strconv.ParseInt(q.Get("entry"), 10, 64)
	term, err3 := strconv.ParseUint(q.Get("term"), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return restErr(http.StatusBadRequest, "want ?sub=S&term=T&ledger=L&entry=E")
	}
	id := api.MessageID{LedgerID: l, EntryID: e, Partition: -1, BatchIndex: -1}
	return h.scalableWrite(w, func(svc ScalableService) error {
		return svc.SegmentReset(r.Context(), segmentName(r), q.Get("sub"), term, id)
	})
}

func (h *handler) segmentFence(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	term, err1 := strconv.ParseUint(q.Get("term"), 10, 64)
	version, err2 := strconv.ParseUint(q.Get("version"), 10, 64)
	if err1 != nil || err2 != nil || q.Get("sub") == "" {
		return restErr(http.StatusBadRequest, "want ?sub=S&term=T&version=V")
	}
	return h.scalableWrite(w, func(svc ScalableService) error {
		return svc.SegmentFence(r.Context(), segmentName(r), q.Get("sub"), term, version)
	})
}

// seekScalable rewinds a subscription on one segment through the controller:
// ?segment=ID and either ?ledger=L&entry=E (a message id of the segment) or ?earliest.
// The segment's descendants are withdrawn from the stream consumers until it is drained
// again; the answer comes once the cursor is reset.
func (h *handler) seekScalable(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	seg, err := strconv.ParseUint(q.Get("segment"), 10, 64)
	if err != nil {
		return restErr(http.StatusBadRequest, "want ?segment=ID")
	}
	id := api.MessageID{LedgerID: -1, EntryID: -1, Partition: -1, BatchIndex: -1}
	switch _, earliest := q["earliest"]; {
	case earliest && (q.Has("ledger") || q.Has("entry")):
		return restErr(http.StatusBadRequest, "give either ?earliest or ?ledger=L&entry=E")
	case !earliest:
		l, err1 := strconv.ParseInt(q.Get("ledger"), 10, 64)
		e, err2 := strconv.ParseInt(q.Get("entry"), 10, 64)
		if err1 != nil || err2 != nil || l < 0 || e < 0 {
			return restErr(http.StatusBadRequest, "want ?earliest or ?ledger=L&entry=E (non-negative)")
		}
		id.LedgerID, id.EntryID = l, e
	}
	return h.scalableWrite(w, func(svc ScalableService) error {
		return svc.SeekScalableSubscription(r.Context(), scalableName(r), r.PathValue("sub"), seg, id)
	})
}

func (h *handler) segmentStats(w http.ResponseWriter, r *http.Request) error {
	return scalableRead(h, w, func(svc ScalableService) (api.TopicStats, error) {
		return svc.TopicStats(r.Context(), segmentName(r))
	})
}
