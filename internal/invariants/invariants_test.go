package invariants

import (
	"errors"
	"testing"
)

var errCategory = errors.New("comp: illegal state transition")

// TestSwitchOff: a switch that is off returns the error, wrapping the category.
func TestSwitchOff(t *testing.T) {
	var s Switch
	err := s.Failedf(errCategory, "writer: %v → %v", "Open", 7)
	if !errors.Is(err, errCategory) {
		t.Fatalf("error %v does not wrap the category", err)
	}
	if want := "comp: illegal state transition: writer: Open → 7"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	err = s.Failedf(nil, "journal: assertion failed: %d", 3)
	if want := "journal: assertion failed: 3"; err == nil || err.Error() != want {
		t.Fatalf("uncategorised error %v, want %q", err, want)
	}
	plain := errors.New("x")
	if got := s.Fail(plain); got != plain {
		t.Fatalf("Fail returned %v, want its argument", got)
	}
}

// TestSwitchOn: a switch that is on panics with the error it would have returned.
func TestSwitchOn(t *testing.T) {
	s := Switch(true)
	defer func() {
		r := recover()
		err, ok := r.(error)
		if !ok || !errors.Is(err, errCategory) {
			t.Fatalf("recovered %v, want an error wrapping the category", r)
		}
	}()
	_ = s.Failedf(errCategory, "impossible")
	t.Fatal("Failedf returned with the switch on")
}

// TestEnabledStartsSwitches: Enabled is what the build tag says, and a switch declared from
// it panics exactly when it is set.
func TestEnabledStartsSwitches(t *testing.T) {
	s := Switch(Enabled)
	panicked := func() (p bool) {
		defer func() { p = recover() != nil }()
		_ = s.Fail(errCategory)
		return false
	}()
	if panicked != Enabled {
		t.Fatalf("panicked %v with Enabled %v", panicked, Enabled)
	}
}
