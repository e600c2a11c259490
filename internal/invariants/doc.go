// Package invariants is the assertion switch of the owner-loop components: one build tag
// that turns every impossible-state report into a panic, and the per-package switch their
// tests turn on.
//
// A component reports an impossible state (a state machine asked for an edge it does not
// have, a reply that cannot match its request) with a Switch:
//
//	// panicOnAssert makes assertionFailedf panic: with the "invariants" build tag, and in
//	// this package's tests (a _test.go file sets it).
//	var panicOnAssert = invariants.Switch(invariants.Enabled)
//
//	func assertionFailedf(format string, args ...any) error {
//		return panicOnAssert.Failedf(ErrIllegalTransition, format, args...)
//	}
//
// In production (no tag, switch off) the report is an error wrapping the component's
// category, which the caller returns or logs: a bug fails one operation instead of the
// process. Under `go test` or `-tags invariants` it panics where the bug is.
//
// Production code never imports package testing for this: a package's tests turn its switch
// on (func init() { panicOnAssert = true } in a _test.go file).
//
// Goroutines: none. A Switch is a plain value; set it before the goroutines that read it
// start (in init or at the top of a test).
package invariants
