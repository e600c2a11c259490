package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
)

// restError is an HTTP error answer: Pulsar's admin API writes {"reason": "..."} with a
// 4xx/5xx status.
type restError struct {
	status int
	reason string
}

func (e *restError) Error() string { return fmt.Sprintf("%d %s", e.status, e.reason) }

func restErr(status int, format string, args ...any) *restError {
	return &restError{status: status, reason: fmt.Sprintf(format, args...)}
}

// scope names what a request was about, so that an error gets Pulsar's wording.
type scope struct {
	cluster           string // a cluster record's operation
	tenant, namespace string // namespace is "tenant/ns"
	topic             string // fully qualified
	partitioned       bool   // a partitioned-topic operation (…/partitions)
	sub               string
}

// toREST maps a service error to Pulsar's status and reason. This is the one table:
//
//	tenant/namespace/topic/subscription/bundle not found  404
//	cluster not found                                404
//	already exists                                   409
//	precondition failed (cluster checks)             412 with Pulsar's reason
//	cluster not allowed in a replication list        403 with Pulsar's reason
//	peer clusters in one replication list            409
//	tenant or namespace not empty                    409
//	topic or subscription with connected clients     412 (Pulsar's PRECONDITION_FAILED)
//	invalid name                                     412
//	schema or message not found                      404
//	incompatible schema, compaction in progress      409
//	invalid schema definition or strategy name       422
//	invalid argument                                 400
//	not authenticated                                401
//	not authorized                                   403
//	not allowed / terminated                         405
//	another broker serves the topic                  307 (handled by the caller)
//	service not ready, timeouts                      503
//	anything else                                    500
func toREST(err error, sc scope) *restError {
	var re *restError
	if errors.As(err, &re) {
		return re
	}
	switch {
	case errors.Is(err, api.ErrClusterNotFound):
		return restErr(http.StatusNotFound, "Cluster does not exist")
	case errors.Is(err, api.ErrBundleNotFound):
		return restErr(http.StatusNotFound, "%s", reasonOf(err))
	case errors.Is(err, api.ErrTenantNotFound):
		return restErr(http.StatusNotFound, "Tenant does not exist")
	case errors.Is(err, api.ErrTransactionNotFound):
		return restErr(http.StatusNotFound, "%v", err)
	case errors.Is(err, api.ErrNamespaceNotFound):
		return restErr(http.StatusNotFound, "Namespace does not exist")
	case errors.Is(err, api.ErrSubscriptionNotFound), errors.Is(err, topic.ErrSubscriptionNotFound):
		return restErr(http.StatusNotFound, "Subscription %s not found for topic %s", sc.sub, sc.topic)
	case errors.Is(err, api.ErrTopicNotFound):
		if sc.partitioned {
			return restErr(http.StatusNotFound, "Partitioned Topic %s not found", sc.topic)
		}
		return restErr(http.StatusNotFound, "Topic %s not found", sc.topic)
	case errors.Is(err, api.ErrAlreadyExists), errors.Is(err, topic.ErrAlreadyExists):
		switch {
		case sc.cluster != "":
			return restErr(http.StatusConflict, "Cluster already exists")
		case sc.sub != "":
			return restErr(http.StatusConflict, "Subscription already exists for topic")
		case sc.topic != "" && sc.partitioned:
			return restErr(http.StatusConflict, "This topic already exists")
		case sc.topic != "":
			return restErr(http.StatusConflict, "This topic already exists")
		case sc.namespace != "":
			return restErr(http.StatusConflict, "Namespace already exists")
		default:
			return restErr(http.StatusConflict, "Tenant already exists")
		}
	case errors.Is(err, api.ErrNotEmpty), errors.Is(err, topic.ErrNotEmpty):
		switch {
		case sc.sub != "":
			return restErr(http.StatusPreconditionFailed, "Subscription has active connected consumers")
		case sc.topic != "":
			return restErr(http.StatusPreconditionFailed, "Topic has active producers/subscriptions")
		case sc.namespace != "":
			return restErr(http.StatusConflict, "Cannot delete non empty namespace")
		default:
			return restErr(http.StatusConflict, "The tenant still has active namespaces")
		}
	case errors.Is(err, api.ErrInvalidName):
		switch {
		case sc.cluster != "":
			return restErr(http.StatusPreconditionFailed, "Cluster name is not valid")
		case sc.topic != "":
			return restErr(http.StatusPreconditionFailed, "Topic name is not valid")
		case sc.namespace != "":
			return restErr(http.StatusPreconditionFailed, "Namespace name is not valid")
		default:
			return restErr(http.StatusPreconditionFailed, "Tenant name is not valid")
		}
	case errors.Is(err, api.ErrPreconditionFailed):
		return restErr(http.StatusPreconditionFailed, "%s", reasonAfter(err, api.ErrPreconditionFailed))
	case errors.Is(err, api.ErrClusterNotAllowed):
		return restErr(http.StatusForbidden, "%s", reasonAfter(err, api.ErrClusterNotAllowed))
	case errors.Is(err, api.ErrClusterConflict):
		return restErr(http.StatusConflict, "%s", reasonAfter(err, api.ErrClusterConflict))
	case errors.Is(err, api.ErrCompactionRunning):
		return restErr(http.StatusConflict, "Compaction already in progress")
	case errors.Is(err, api.ErrMessageNotFound):
		return restErr(http.StatusNotFound, "Message not found")
	case errors.Is(err, api.ErrSchemaNotFound):
		return restErr(http.StatusNotFound, "Schema not found")
	case errors.Is(err, api.ErrIncompatibleSchema):
		return restErr(http.StatusConflict, "%s", reasonOf(err))
	case errors.Is(err, api.ErrInvalidSchema):
		return restErr(http.StatusUnprocessableEntity, "%s", reasonOf(err))
	case errors.Is(err, api.ErrInvalidArgument), errors.Is(err, topic.ErrInvalid):
		return restErr(http.StatusBadRequest, "%s", reasonAfter(err, api.ErrInvalidArgument))
	case errors.Is(err, auth.ErrAuthentication):
		return restErr(http.StatusUnauthorized, "%s", reasonOf(err))
	case errors.Is(err, auth.ErrNotAuthorized):
		return restErr(http.StatusForbidden, "%s", reasonOf(err))
	case errors.Is(err, api.ErrTopicTerminated):
		return restErr(http.StatusMethodNotAllowed, "Topic %s is terminated", sc.topic)
	case errors.Is(err, api.ErrNotAllowed), errors.Is(err, topic.ErrNotAllowed):
		return restErr(http.StatusMethodNotAllowed, "%s", reasonOf(err))
	case errors.Is(err, api.ErrServiceNotReady), errors.Is(err, topic.ErrClosed), errors.Is(err, topic.ErrFenced),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, api.ErrNotOwner):
		return restErr(http.StatusServiceUnavailable, "%s", reasonOf(err))
	}
	return restErr(http.StatusInternalServerError, "%s", reasonOf(err))
}

// reasonOf is an error's text without the package prefixes of our sentinels.
func reasonOf(err error) string {
	s := err.Error()
	for _, p := range []string{"broker: ", "topic: ", "topicname: ", "schema: incompatible schema: ",
		"schema: invalid schema definition: "} {
		s = strings.ReplaceAll(s, p, "")
	}
	return s
}

// reasonAfter is err's text after its sentinel's ("precondition failed: Clusters do not
// exist" reads "Clusters do not exist").
func reasonAfter(err, sentinel error) string {
	s := err.Error()
	if i := strings.Index(s, sentinel.Error()+": "); i >= 0 {
		return s[i+len(sentinel.Error())+2:]
	}
	return reasonOf(err)
}

// writeError answers err: a redirect to the owner for a topic another broker serves (its
// https:// URL for a request that came over TLS, if it has one; else the one it has), else
// the status and {"reason": …} of toREST.
func writeError(w http.ResponseWriter, r *http.Request, err error, sc scope, log *slog.Logger) {
	var no *api.NotOwnerError
	if errors.As(err, &no) && no.Owner.AdminURL(r.TLS != nil) != "" {
		http.Redirect(w, r, strings.TrimSuffix(no.Owner.AdminURL(r.TLS != nil), "/")+r.URL.RequestURI(), http.StatusTemporaryRedirect)
		return
	}
	re := toREST(err, sc)
	if re.status >= 500 {
		log.Warn("admin: request failed", "method", r.Method, "path", r.URL.Path, "status", re.status, "err", err)
	}
	writeJSON(w, re.status, map[string]string{"reason": re.reason})
}
