package mledger

import (
	"errors"

	"github.com/magnetar-io/magnetar/internal/invariants"
)

// Errors. Callers test them with errors.Is.
var (
	// ErrTerminated: the managed ledger is terminated (or terminating); it takes no more adds.
	// An add that fails with it is not in the log.
	ErrTerminated = errors.New("mledger: managed ledger terminated")
	// ErrFenced: another owner opened the managed ledger (its record names another owner, or a
	// ledger of ours was recovered by someone else). This instance can write nothing more;
	// close it.
	ErrFenced = errors.New("mledger: managed ledger fenced by another owner")
	// ErrClosed: the managed ledger or cursor is closed (or closing).
	ErrClosed = errors.New("mledger: closed")
	// ErrNoMoreEntries: a read reached the end of a terminated managed ledger.
	ErrNoMoreEntries = errors.New("mledger: no more entries")
	// ErrNotFound: the managed ledger does not exist (Open with MustExist, Delete).
	ErrNotFound = errors.New("mledger: managed ledger not found")
	// ErrCursorNotFound: no cursor of that name.
	ErrCursorNotFound = errors.New("mledger: cursor not found")
	// ErrInvalidArgument: a bad position, count or option.
	ErrInvalidArgument = errors.New("mledger: invalid argument")
	// ErrBadRecord: a metadata record or cursor entry could not be decoded.
	ErrBadRecord = errors.New("mledger: bad record")
	// ErrLedgerCreate: the ledger layer could not create a ledger (the managed ledger went
	// WriteFailed; the next add tries again). It wraps the ledger layer's error.
	ErrLedgerCreate = errors.New("mledger: create ledger")
	// ErrIllegalTransition: a state machine was asked to take an edge it does not have. It
	// signals a bug.
	ErrIllegalTransition = errors.New("mledger: illegal state transition")

	// ErrOffloadRead: a read from tiered storage (an offloaded ledger's objects) failed. It is
	// retryable: the entries are not skipped, the read can be made again (with backoff).
	ErrOffloadRead = errors.New("mledger: read from tiered storage failed")
	// ErrOffloadDisabled: an offload was requested of a managed ledger with no Offloader.
	ErrOffloadDisabled = errors.New("mledger: offload is not configured")
	// ErrOffloadInProgress: an offload was requested while another request runs (Pulsar
	// answers 409).
	ErrOffloadInProgress = errors.New("mledger: an offload is already in progress")

	// ErrLedgerFenced is the ledger-layer error category (returned by Ledgers
	// implementations) for "this ledger was fenced or recovered by another client": a writer
	// that sees it has lost ownership.
	ErrLedgerFenced = errors.New("mledger: ledger fenced")
	// ErrNoSuchLedger is the ledger-layer error category for a ledger that does not exist.
	ErrNoSuchLedger = errors.New("mledger: no such ledger")

	// errStale aborts a queued metadata operation whose reason is gone (internal).
	errStale = errors.New("mledger: stale operation")
	// errCancelled is the result of a cancelled read (internal; callers see ctx.Err()).
	errCancelled = errors.New("mledger: cancelled")
)

// panicOnAssert makes assertionFailedf panic: with the "invariants" build tag, and in this
// package's tests (invariants_test.go sets it). Production builds return the error instead.
var panicOnAssert = invariants.Switch(invariants.Enabled)

// assertionFailedf reports an impossible state: it panics in tests (and under the
// "invariants" build tag) and returns an error wrapping ErrIllegalTransition in production.
func assertionFailedf(format string, args ...any) error {
	return panicOnAssert.Failedf(ErrIllegalTransition, format, args...)
}
