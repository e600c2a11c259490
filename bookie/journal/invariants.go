package journal

import "github.com/magnetar-io/magnetar/internal/invariants"

// panicOnAssert makes assertionFailedf panic: with the "invariants" build tag, and in this
// package's tests (helpers_test.go sets it).
var panicOnAssert = invariants.Switch(invariants.Enabled)

// assertionFailedf reports an impossible state: it panics when built with the
// "invariants" tag (and in this package's tests) and returns an error otherwise.
func assertionFailedf(format string, args ...any) error {
	return panicOnAssert.Failedf(nil, "journal: assertion failed: "+format, args...)
}
