package admin

import (
	"context"
	"errors"
	"net/http"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicreg"
	"github.com/magnetar-io/magnetar/mledger"
)

// OffloadService is the tiered-storage part of the broker API. *broker.Service implements
// it; a Service that does not answers these paths with 501.
//
//	PUT    /admin/v2/persistent/{t}/{ns}/{topic}/offload   body: a MessageId; offloads the
//	       closed ledgers before it and answers 204 at once; 409 while an offload runs; 412
//	       when the broker has no offloader (managedLedgerOffloadDriver)
//	GET    /admin/v2/persistent/{t}/{ns}/{topic}/offload   OffloadProcessStatus
//	GET    /admin/v2/persistent/{t}/{ns}/{topic}/internal-info   the managed ledger's record
//	       (ledgers with isOffloaded and offloadedContextUuid)
//	DELETE /admin/v2/namespaces/{t}/{ns}/removeOffloadPolicies
//
// As in Pulsar, both act on one topic or one partition: a partitioned topic's base name is
// not a topic (404). The offload policies themselves are policies (policies.go).
type OffloadService interface {
	TriggerOffload(ctx context.Context, topic string, id api.MessageID) error
	OffloadStatus(ctx context.Context, topic string) (topicreg.OffloadProcessStatus, error)
	InternalInfo(ctx context.Context, topic string) (topicreg.ManagedLedgerInfo, error)
}

func (h *handler) offloadRoutes(route routeFunc, nsScope, topicScope func(r *http.Request) scope) {
	const p = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
	route("PUT "+p+"/offload", h.triggerOffload, topicScope)
	route("GET "+p+"/offload", h.offloadStatus, topicScope)
	route("GET "+p+"/internal-info", h.internalInfo, topicScope)
	if ps, isPolicy := h.svc.(PolicyService); isPolicy {
		// Pulsar's namespace removal path of the offload policies.
		route("DELETE /admin/v2/namespaces/{tenant}/{ns}/removeOffloadPolicies", func(w http.ResponseWriter, r *http.Request) error {
			ns, err := checkNamespace(r)
			if err != nil {
				return err
			}
			if err := ps.RemoveNamespacePolicy(r.Context(), ns, "offloadPolicies", ""); err != nil {
				return err
			}
			return noContent(w)
		}, nsScope)
	}
}

// offloadTopic validates the request's topic and returns the offload service.
func (h *handler) offloadTopic(r *http.Request) (OffloadService, string, error) {
	svc, ok := h.svc.(OffloadService)
	if !ok {
		return nil, "", restErr(http.StatusNotImplemented, "offload is not served")
	}
	n, err := checkTopic(r)
	if err != nil {
		return nil, "", err
	}
	return svc, n.String(), nil
}

// offloadErr maps the managed ledger's offload refusals to Pulsar's answers.
func offloadErr(err error) error {
	switch {
	case errors.Is(err, mledger.ErrOffloadInProgress):
		return restErr(http.StatusConflict, "Offload already running")
	case errors.Is(err, mledger.ErrOffloadDisabled):
		return restErr(http.StatusPreconditionFailed, "Offload is not configured on this broker (managedLedgerOffloadDriver)")
	}
	return err
}

func (h *handler) triggerOffload(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.offloadTopic(r)
	if err != nil {
		return err
	}
	var id api.MessageID
	has, err := readJSON(r, &id)
	if err != nil {
		return err
	}
	if !has {
		return restErr(http.StatusBadRequest, "a MessageId body is required")
	}
	if err := svc.TriggerOffload(r.Context(), t, id); err != nil {
		return offloadErr(err)
	}
	return noContent(w)
}

func (h *handler) offloadStatus(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.offloadTopic(r)
	if err != nil {
		return err
	}
	st, err := svc.OffloadStatus(r.Context(), t)
	if err != nil {
		return offloadErr(err)
	}
	return ok(w, st)
}

func (h *handler) internalInfo(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.offloadTopic(r)
	if err != nil {
		return err
	}
	info, err := svc.InternalInfo(r.Context(), t)
	if err != nil {
		return err
	}
	return ok(w, info)
}
