package fsm

import "fmt"

// Edges lists a state machine's legal transitions: Edges[from] are the states it may move to
// from from. Any other transition is a bug.
type Edges[S comparable] map[S][]S

// Legal reports whether from → to is an edge.
func (e Edges[S]) Legal(from, to S) bool {
	for _, s := range e[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Must returns to if from → to is an edge, and otherwise panics with Illegal(category,
// what, from, to): for the pure cores, where an illegal edge is a bug that must not go on.
func (e Edges[S]) Must(category error, what string, from, to S) S {
	if !e.Legal(from, to) {
		panic(Illegal(category, what, from, to))
	}
	return to
}

// Illegal returns the error of the transition from → to that what (a component, perhaps
// with its name: "topic public/default/t") does not have. It wraps category, the
// component's sentinel for such bugs, and reads "category: what from -> to".
func Illegal(category error, what string, from, to any) error {
	return fmt.Errorf("%w: %s %v -> %v", category, what, from, to)
}

// Name is the String method of a state type whose values index names: names[s], or
// "typ(s)" for a value without a name.
func Name[S ~uint8 | ~uint16 | ~uint32 | ~int](names []string, s S, typ string) string {
	if i := int(s); i >= 0 && i < len(names) && names[i] != "" {
		return names[i]
	}
	return fmt.Sprintf("%s(%d)", typ, int(s))
}
