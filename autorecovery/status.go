package autorecovery

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/magnetar-io/magnetar/metadata"
)

// Status is a snapshot of auto-recovery: the active auditor, the registered workers and the
// under-replicated ledgers.
type Status struct {
	Auditor *AuditorInfo   `json:"auditor"` // nil: none elected
	Workers []WorkerInfo   `json:"workers"`
	Ledgers []LedgerStatus `json:"underReplicated"`
}

// LedgerStatus is one under-replicated ledger.
type LedgerStatus struct {
	LedgerID int64 `json:"ledgerId"`
	Mark
	// LockedBy is the worker re-replicating it now ("" if none).
	LockedBy string `json:"lockedBy,omitempty"`
}

// ReadStatus reads the status from the store.
func ReadStatus(ctx context.Context, store metadata.Store) (Status, error) {
	st := Status{Workers: []WorkerInfo{}, Ledgers: []LedgerStatus{}}
	kv, err := store.Get(ctx, metadata.KeyAuditor)
	switch {
	case err == nil:
		var a AuditorInfo
		if json.Unmarshal(kv.Value, &a) == nil {
			st.Auditor = &a
		}
	case !errors.Is(err, metadata.ErrNotFound):
		return st, err
	}
	ws, _, err := store.List(ctx, metadata.PrefixRecoveryWorkers)
	if err != nil {
		return st, err
	}
	for _, kv := range ws {
		var w WorkerInfo
		if json.Unmarshal(kv.Value, &w) == nil {
			st.Workers = append(st.Workers, w)
		}
	}
	locks, _, err := store.List(ctx, metadata.PrefixReplicationLocks)
	if err != nil {
		return st, err
	}
	lockedBy := map[int64]string{}
	for _, kv := range locks {
		if id, err := metadata.LedgerIDFromSuffix(kv.Key, metadata.PrefixReplicationLocks); err == nil {
			lockedBy[id] = string(kv.Value)
		}
	}
	marks, _, err := store.List(ctx, metadata.PrefixUnderReplicated)
	if err != nil {
		return st, err
	}
	for _, kv := range marks {
		id, err := metadata.LedgerIDFromSuffix(kv.Key, metadata.PrefixUnderReplicated)
		if err != nil {
			continue
		}
		m, _ := decodeMark(kv.Value)
		st.Ledgers = append(st.Ledgers, LedgerStatus{LedgerID: id, Mark: m, LockedBy: lockedBy[id]})
	}
	return st, nil
}
