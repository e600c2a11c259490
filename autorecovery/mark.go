package autorecovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Mark is the durable under-replication mark of a ledger, stored as JSON at
// metadata.UnderReplicatedKey. The auditor and decommission create or extend it (compare-and-
// swap); a worker updates its retry fields and deletes it, at the version it read, once no
// fragment of the ledger references a lost bookie.
type Mark struct {
	// Missing lists the bookies whose replicas are missing (lost, or found lacking entries
	// by the full check), sorted.
	Missing []string `json:"missing"`
	// Reason is why the ledger was marked first: "lost-bookie", "check" or "decommission".
	Reason string `json:"reason,omitempty"`
	// Created is when the mark was created (Unix milliseconds).
	Created int64 `json:"created"`
	// OpenLAC and OpenSince record a deferral: the ledger was not CLOSED and a fragment with a
	// lost bookie lay beyond the LAC OpenLAC, first seen at OpenSince (Unix milliseconds; 0:
	// never deferred). If the LAC has not moved for the grace period the writer is taken as
	// gone and the worker recovers (fences and closes) the ledger.
	OpenLAC   int64 `json:"openLac,omitempty"`
	OpenSince int64 `json:"openSince,omitempty"`
	// Failures counts consecutive failed attempts; RetryAt (Unix milliseconds) is when a
	// worker may try again (bounded exponential backoff shared by all workers).
	Failures int   `json:"failures,omitempty"`
	RetryAt  int64 `json:"retryAt,omitempty"`
}

// errBadMark reports a mark that does not decode.
var errBadMark = errors.New("autorecovery: bad under-replication mark")

func decodeMark(b []byte) (Mark, error) {
	var m Mark
	if err := json.Unmarshal(b, &m); err != nil {
		return Mark{}, fmt.Errorf("%w: %v", errBadMark, err)
	}
	return m, nil
}

func (m Mark) encode() []byte {
	b, _ := json.Marshal(m)
	return b
}

// withMissing returns m with bookies added to Missing, and whether anything changed.
func (m Mark) withMissing(bookies []string) (Mark, bool) {
	changed := false
	missing := slices.Clone(m.Missing)
	for _, b := range bookies {
		if !slices.Contains(missing, b) {
			missing = append(missing, b)
			changed = true
		}
	}
	slices.Sort(missing)
	m.Missing = missing
	return m, changed
}
