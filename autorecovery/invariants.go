package autorecovery

import (
	"errors"

	"github.com/magnetar-io/magnetar/internal/invariants"
)

// ErrIllegalTransition: a state machine was asked to take an edge it does not have, or an
// impossible state was reached. It signals a bug.
var ErrIllegalTransition = errors.New("autorecovery: illegal state transition")

// panicOnAssert makes assertionFailedf panic: with the "invariants" build tag, and in this
// package's tests. Production builds return the error instead.
var panicOnAssert = invariants.Switch(invariants.Enabled)

// assertionFailedf reports an impossible state: it panics in tests (and under the
// "invariants" build tag) and returns an error wrapping ErrIllegalTransition otherwise.
func assertionFailedf(format string, args ...any) error {
	return panicOnAssert.Failedf(ErrIllegalTransition, format, args...)
}
