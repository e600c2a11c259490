package fsm

import (
	"errors"
	"testing"
)

type light uint8

const (
	red light = iota + 1
	green
	yellow
	off
)

func (l light) String() string { return [...]string{"0", "Red", "Green", "Yellow", "Off"}[l] }

var lightEdges = Edges[light]{
	red:    {green, off},
	green:  {yellow, off},
	yellow: {red, off},
	off:    {},
}

// TestLegal: exactly the declared edges are legal; a final state and an undeclared one
// have none.
func TestLegal(t *testing.T) {
	all := []light{0, red, green, yellow, off}
	want := map[[2]light]bool{
		{red, green}: true, {red, off}: true, {green, yellow}: true, {green, off}: true,
		{yellow, red}: true, {yellow, off}: true,
	}
	for _, from := range all {
		for _, to := range all {
			if got := lightEdges.Legal(from, to); got != want[[2]light{from, to}] {
				t.Errorf("Legal(%v, %v) = %v, want %v", from, to, got, !got)
			}
		}
	}
}

// TestMust: Must returns the new state of a legal edge and panics with the Illegal error of
// any other.
func TestMust(t *testing.T) {
	cat := errors.New("light: illegal state transition")
	if got := lightEdges.Must(cat, "light", red, green); got != green {
		t.Fatalf("Must(red, green) = %v", got)
	}
	defer func() {
		err, ok := recover().(error)
		if !ok || !errors.Is(err, cat) || err.Error() != "light: illegal state transition: light Off -> Red" {
			t.Fatalf("recovered %v, want the Illegal error", err)
		}
	}()
	lightEdges.Must(cat, "light", off, red)
	t.Fatal("Must(off, red) returned")
}

// TestIllegal: the error names the component and the edge, and wraps the category.
func TestIllegal(t *testing.T) {
	cat := errors.New("topic: illegal state transition")
	err := Illegal(cat, "light corner", green, red)
	if !errors.Is(err, cat) {
		t.Fatalf("%v does not wrap the category", err)
	}
	if want := "topic: illegal state transition: light corner Green -> Red"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	if got := Illegal(errors.New("x"), "s", 1, 2).Error(); got != "x: s 1 -> 2" {
		t.Fatalf("plain values: %q", got)
	}
}

func TestName(t *testing.T) {
	type st uint8
	names := []string{1: "One", 2: "Two"}
	for _, tc := range []struct {
		s    st
		want string
	}{{1, "One"}, {2, "Two"}, {0, "st(0)"}, {3, "st(3)"}} {
		if got := Name(names, tc.s, "st"); got != tc.want {
			t.Errorf("Name(%d) = %q, want %q", tc.s, got, tc.want)
		}
	}
}
