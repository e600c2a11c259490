package bk

import (
	"errors"
	"fmt"
)

// Status errors. Status.Err maps each non-OK Status to exactly one of these (see statusTable);
// callers test them with errors.Is.
var (
	// ErrNoSuchEntry: the bookie has the ledger but not the entry (StatusNoSuchEntry).
	ErrNoSuchEntry = errors.New("bk: no such entry")
	// ErrNoSuchLedger: the bookie has never seen the ledger (StatusNoSuchLedger).
	ErrNoSuchLedger = errors.New("bk: no such ledger")
	// ErrFenced: a non-recovery add was refused because the ledger is fenced (StatusFenced).
	ErrFenced = errors.New("bk: ledger fenced")
	// ErrUnauthorized: the master key does not match the ledger's (StatusUnauthorized).
	ErrUnauthorized = errors.New("bk: unauthorized")
	// ErrReadOnly: the bookie is read-only and refuses adds (StatusReadOnly).
	ErrReadOnly = errors.New("bk: bookie read-only")
	// ErrBadRequest: the bookie found the request's fields inconsistent (StatusBadRequest).
	ErrBadRequest = errors.New("bk: bad request")
	// ErrTimeout: a long poll ended without a LAC advance (StatusTimeout).
	ErrTimeout = errors.New("bk: long poll timeout")
	// ErrServer: the bookie failed with an I/O or internal error (StatusServerError).
	ErrServer = errors.New("bk: server error")
	// ErrTooLarge: the entry is larger than the bookie accepts (StatusTooLarge).
	ErrTooLarge = errors.New("bk: entry too large")
	// ErrShuttingDown: the bookie is stopping (StatusShuttingDown).
	ErrShuttingDown = errors.New("bk: bookie shutting down")
)

// statusInfo describes one wire status.
type statusInfo struct {
	name string
	err  error // nil only for StatusOK
	// retriable: the status is no definite answer about the ledger or entry, and sending the
	// same request again later (to this bookie, or to the bookie that replaces it) may
	// succeed.
	retriable bool
}

// statusTable is the single table of wire statuses, their errors and their retry class.
var statusTable = [...]statusInfo{
	StatusOK: {"OK", nil, false},
	// Definite answer: recovery counts it toward "entry not written" (WQ-AQ+1 rule).
	StatusNoSuchEntry: {"NoSuchEntry", ErrNoSuchEntry, false},
	// Definite answer, counted like NoSuchEntry by recovery.
	StatusNoSuchLedger: {"NoSuchLedger", ErrNoSuchLedger, false},
	// Permanent: someone else recovers the ledger; the writer must stop.
	StatusFenced: {"Fenced", ErrFenced, false},
	// Permanent: wrong password; retrying with the same key cannot succeed.
	StatusUnauthorized: {"Unauthorized", ErrUnauthorized, false},
	// Not retriable: the bytes are corrupt. A reader moves to another replica, which is a
	// placement decision, not a retry of this request.
	StatusDigestMismatch: {"DigestMismatch", ErrDigest, false},
	// Retriable: the bookie may become writable again; the writer normally replaces it
	// (ensemble change) and resends the add to the replacement.
	StatusReadOnly: {"ReadOnly", ErrReadOnly, true},
	// Permanent: the same request is malformed every time.
	StatusBadRequest: {"BadRequest", ErrBadRequest, false},
	// Retriable: a long poll simply expired; the reader polls again.
	StatusTimeout: {"Timeout", ErrTimeout, true},
	// Retriable: transient I/O or internal failure.
	StatusServerError: {"ServerError", ErrServer, true},
	// Permanent: the entry will never fit.
	StatusTooLarge: {"TooLarge", ErrTooLarge, false},
	// Retriable: resend after reconnecting, or to a replacement bookie.
	StatusShuttingDown: {"ShuttingDown", ErrShuttingDown, true},
}

// Valid reports whether s is a defined status.
func (s Status) Valid() bool { return int(s) < len(statusTable) }

// String returns the status name, or "Status(n)" for an undefined value.
func (s Status) String() string {
	if !s.Valid() {
		return fmt.Sprintf("Status(%d)", uint8(s))
	}
	return statusTable[s].name
}

// Err returns nil for StatusOK and the status's sentinel error otherwise. An undefined status
// (which DecodeResponse never produces) yields a non-retriable error.
func (s Status) Err() error {
	if !s.Valid() {
		return fmt.Errorf("bk: undefined status %d", uint8(s))
	}
	return statusTable[s].err
}

// IsRetriable reports whether err is a transient failure after which sending the same
// request again may succeed. It is the single retry classifier for bookie requests:
//   - status errors are classified by statusTable;
//   - an error in whose chain some error has a `Retriable() bool` method (such as a broken
//     connection from bookie/client) is classified by that method;
//   - everything else (ErrMalformed, ErrFrameTooLarge, context errors, nil) is not retriable.
func IsRetriable(err error) bool {
	if err == nil {
		return false
	}
	for _, si := range statusTable {
		if si.err != nil && errors.Is(err, si.err) {
			return si.retriable
		}
	}
	var r interface{ Retriable() bool }
	if errors.As(err, &r) {
		return r.Retriable()
	}
	return false
}

// opNames indexes Op values.
var opNames = [...]string{
	OpAddEntry:    "AddEntry",
	OpReadEntry:   "ReadEntry",
	OpWriteLAC:    "WriteLAC",
	OpReadLAC:     "ReadLAC",
	OpLongPoll:    "LongPoll",
	OpForce:       "Force",
	OpListEntries: "ListEntries",
}

// Valid reports whether o is a defined op.
func (o Op) Valid() bool { return o >= OpAddEntry && int(o) < len(opNames) }

// String returns the op name, or "Op(n)" for an undefined value.
func (o Op) String() string {
	if !o.Valid() {
		return fmt.Sprintf("Op(%d)", uint8(o))
	}
	return opNames[o]
}
