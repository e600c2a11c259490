package invariants

import "fmt"

// Switch is one component's assertion switch: while it is on, Fail and Failedf panic.
type Switch bool

// Fail reports the impossible state err: it panics with err if s is on and returns err
// otherwise.
func (s Switch) Fail(err error) error {
	if s {
		panic(err)
	}
	return err
}

// Failedf is Fail of an error wrapping category, with the message category: format (args
// formatted as by fmt.Errorf; a nil category gives just the formatted message).
func (s Switch) Failedf(category error, format string, args ...any) error {
	if category == nil {
		return s.Fail(fmt.Errorf(format, args...))
	}
	return s.Fail(fmt.Errorf("%w: "+format, append([]any{category}, args...)...))
}
