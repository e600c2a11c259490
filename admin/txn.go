package admin

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/txn"
)

// TxnService is the transaction part of the broker API (Pulsar's /admin/v3/transactions).
// The routes are served only if the Service implements it.
type TxnService interface {
	CoordinatorStats(ctx context.Context, tc *uint64) (map[string]api.CoordinatorStats, error)
	TransactionMetadata(ctx context.Context, id txn.ID) (api.TxnMetadata, error)
	TransactionInBufferStats(ctx context.Context, topic string, id txn.ID) (api.TxnInBufferStats, error)
	TransactionBufferStats(ctx context.Context, topic string) (api.TxnBufferStats, error)
	PendingAckStats(ctx context.Context, topic, sub string) (api.PendingAckStats, error)
	TransactionInPendingAckStats(ctx context.Context, topic, sub string, id txn.ID) (api.TxnInPendingAckStats, error)
	SlowTransactions(ctx context.Context, age time.Duration, tc *uint64) (map[string]api.TxnMetadata, error)
}

// txnRoutes registers the transaction endpoints on route.
func (h *handler) txnRoutes(ts TxnService, route routeFunc,
	topicScope func(*http.Request) scope) {
	const v3 = "/admin/v3/transactions"
	const tp = "{tenant}/{ns}/{topic}"
	route("GET "+v3+"/coordinatorStats", func(w http.ResponseWriter, r *http.Request) error {
		tc, err := optCoordinator(r)
		if err != nil {
			return err
		}
		st, err := ts.CoordinatorStats(r.Context(), tc)
		if err != nil {
			return err
		}
		if tc != nil {
			return ok(w, st[strconv.FormatUint(*tc, 10)])
		}
		return ok(w, st)
	}, topicScope)
	route("GET "+v3+"/transactionMetadata/{most}/{least}", func(w http.ResponseWriter, r *http.Request) error {
		id, err := txnID(r)
		if err != nil {
			return err
		}
		md, err := ts.TransactionMetadata(r.Context(), id)
		if err != nil {
			return err
		}
		return ok(w, md)
	}, topicScope)
	route("GET "+v3+"/slowTransactions/{timeout}", func(w http.ResponseWriter, r *http.Request) error {
		ms, err := strconv.ParseInt(r.PathValue("timeout"), 10, 64)
		if err != nil || ms < 0 {
			return restErr(http.StatusBadRequest, "timeout must be a non-negative number of milliseconds, got %q", r.PathValue("timeout"))
		}
		tc, err := optCoordinator(r)
		if err != nil {
			return err
		}
		out, err := ts.SlowTransactions(r.Context(), time.Duration(ms)*time.Millisecond, tc)
		if err != nil {
			return err
		}
		return ok(w, out)
	}, topicScope)
	route("GET "+v3+"/transactionInBufferStats/"+tp+"/{most}/{least}", func(w http.ResponseWriter, r *http.Request) error {
		id, err := txnID(r)
		if err != nil {
			return err
		}
		st, err := ts.TransactionInBufferStats(r.Context(), fullName(r), id)
		if err != nil {
			return err
		}
		return ok(w, st)
	}, topicScope)
	route("GET "+v3+"/transactionBufferStats/"+tp, func(w http.ResponseWriter, r *http.Request) error {
		st, err := ts.TransactionBufferStats(r.Context(), fullName(r))
		if err != nil {
			return err
		}
		return ok(w, st)
	}, topicScope)
	route("GET "+v3+"/pendingAckStats/"+tp+"/{sub}", func(w http.ResponseWriter, r *http.Request) error {
		st, err := ts.PendingAckStats(r.Context(), fullName(r), r.PathValue("sub"))
		if err != nil {
			return err
		}
		return ok(w, st)
	}, topicScope)
	route("GET "+v3+"/transactionInPendingAckStats/"+tp+"/{sub}/{most}/{least}", func(w http.ResponseWriter, r *http.Request) error {
		id, err := txnID(r)
		if err != nil {
			return err
		}
		st, err := ts.TransactionInPendingAckStats(r.Context(), fullName(r), r.PathValue("sub"), id)
		if err != nil {
			return err
		}
		return ok(w, st)
	}, topicScope)
}

func txnID(r *http.Request) (txn.ID, error) {
	most, err1 := strconv.ParseUint(r.PathValue("most"), 10, 64)
	least, err2 := strconv.ParseUint(r.PathValue("least"), 10, 64)
	if err1 != nil || err2 != nil {
		return txn.ID{}, restErr(http.StatusBadRequest, "transaction id must be two unsigned numbers, got %q/%q",
			r.PathValue("most"), r.PathValue("least"))
	}
	return txn.ID{Most: most, Least: least}, nil
}

func optCoordinator(r *http.Request) (*uint64, error) {
	v := r.URL.Query().Get("coordinatorId")
	if v == "" {
		return nil, nil
	}
	tc, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return nil, restErr(http.StatusBadRequest, "coordinatorId must be an unsigned number, got %q", v)
	}
	return &tc, nil
}
