package journal

import "fmt"

// assertionFailedf reports an impossible state: it panics when built with the
// "invariants" tag (and in this package's tests) and returns an error otherwise.
func assertionFailedf(format string, args ...any) error {
	err := fmt.Errorf("journal: assertion failed: "+format, args...)
	if invariantsEnabled {
		panic(err)
	}
	return err
}
