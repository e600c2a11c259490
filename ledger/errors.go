package ledger

import (
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/internal/invariants"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// Errors. Callers test them with errors.Is.
var (
	// ErrFenced: another client has started recovering the ledger (its metadata is
	// IN_RECOVERY or a bookie answered "fenced"); this writer can add nothing more.
	ErrFenced = errors.New("ledger: fenced")
	// ErrClosed: the ledger (or the handle) is closed; no more adds.
	ErrClosed = errors.New("ledger: closed")
	// ErrNotEnoughBookies: placement could not find enough writable bookies.
	ErrNotEnoughBookies = errors.New("ledger: not enough bookies")
	// ErrTooManyEnsembleChanges: the writer replaced bookies more often than allowed.
	ErrTooManyEnsembleChanges = errors.New("ledger: too many ensemble changes")
	// ErrRecoveryIncomplete: recovery could not decide the end of the ledger with the bookies
	// that answered (too many errors); retry later.
	ErrRecoveryIncomplete = errors.New("ledger: recovery incomplete")
	// ErrUnauthorized: a bookie rejected the ledger password, or it does not match the
	// metadata.
	ErrUnauthorized = errors.New("ledger: unauthorized")
	// ErrBadMetadata: a metadata record is malformed or inconsistent.
	ErrBadMetadata = errors.New("ledger: bad metadata")
	// ErrMetadataConflict: a compare-and-swap on the metadata found another version. Drivers
	// return it to the cores together with the current record.
	ErrMetadataConflict = errors.New("ledger: metadata version conflict")
	// ErrNoSuchLedger: the ledger does not exist.
	ErrNoSuchLedger = errors.New("ledger: no such ledger")
	// ErrNoSuchEntry: no bookie of the write set has the entry.
	ErrNoSuchEntry = errors.New("ledger: no such entry")
	// ErrReadBeyondLAC: a read asked for entries past the last add confirmed of an open ledger
	// (or past the last entry of a closed one).
	ErrReadBeyondLAC = errors.New("ledger: read beyond last add confirmed")
	// ErrDigest: an entry failed its digest or header check on every bookie that returned it.
	ErrDigest = errors.New("ledger: digest mismatch")
	// ErrInvalidConfig: bad quorum sizes, digest or options.
	ErrInvalidConfig = errors.New("ledger: invalid configuration")
	// ErrInvalidArgument: a bad entry range or entry id.
	ErrInvalidArgument = errors.New("ledger: invalid argument")
	// ErrStopped: the handle's owner goroutine has stopped.
	ErrStopped = errors.New("ledger: handle stopped")
	// ErrIllegalTransition: a state machine was asked to take an edge it does not have. It
	// signals a bug.
	ErrIllegalTransition = errors.New("ledger: illegal state transition")
)

// BookieError is a failed request to one bookie.
type BookieError struct {
	Bookie string
	Status bk.Status // set when the bookie answered
	Err    error     // transport error, when it did not
}

func (e *BookieError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("ledger: bookie %s: %v", e.Bookie, e.Err)
	}
	return fmt.Sprintf("ledger: bookie %s: status %d", e.Bookie, e.Status)
}

// Unwrap returns the transport error.
func (e *BookieError) Unwrap() error { return e.Err }

// panicOnAssert makes assertionFailedf panic: with the "invariants" build tag, and in this
// package's tests (invariants_test.go sets it). Production builds return the error instead.
var panicOnAssert = invariants.Switch(invariants.Enabled)

// assertionFailedf reports an impossible state: it panics in tests (and under the
// "invariants" build tag) and returns an error wrapping ErrIllegalTransition in production.
func assertionFailedf(format string, args ...any) error {
	return panicOnAssert.Failedf(ErrIllegalTransition, format, args...)
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func errorsIsConflict(err error) bool { return errors.Is(err, ErrMetadataConflict) }
