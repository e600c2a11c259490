package schema

import (
	"fmt"
	"strings"
)

// Strategy is a schema compatibility strategy (Pulsar's SchemaCompatibilityStrategy).
type Strategy int

// The strategies, with Pulsar's names (String).
const (
	// Undefined: not set at this level; the next level decides (topic → namespace → broker).
	Undefined Strategy = iota
	// AlwaysIncompatible refuses every new schema once the topic has one.
	AlwaysIncompatible
	// AlwaysCompatible accepts every new schema.
	AlwaysCompatible
	// Backward: the new schema can read data written with the latest schema.
	Backward
	// Forward: the latest schema can read data written with the new schema.
	Forward
	// Full: both Backward and Forward.
	Full
	// BackwardTransitive: Backward against every schema of the topic.
	BackwardTransitive
	// ForwardTransitive: Forward against every schema of the topic.
	ForwardTransitive
	// FullTransitive: Full against every schema of the topic.
	FullTransitive
)

var strategyNames = [...]string{
	Undefined:          "UNDEFINED",
	AlwaysIncompatible: "ALWAYS_INCOMPATIBLE",
	AlwaysCompatible:   "ALWAYS_COMPATIBLE",
	Backward:           "BACKWARD",
	Forward:            "FORWARD",
	Full:               "FULL",
	BackwardTransitive: "BACKWARD_TRANSITIVE",
	ForwardTransitive:  "FORWARD_TRANSITIVE",
	FullTransitive:     "FULL_TRANSITIVE",
}

// String returns Pulsar's name of the strategy.
func (s Strategy) String() string {
	if s < 0 || int(s) >= len(strategyNames) {
		return fmt.Sprintf("Strategy(%d)", int(s))
	}
	return strategyNames[s]
}

// Transitive reports whether the strategy checks every version rather than the latest.
func (s Strategy) Transitive() bool {
	return s == BackwardTransitive || s == ForwardTransitive || s == FullTransitive
}

// ParseStrategy reads a strategy by Pulsar's name ("BACKWARD_TRANSITIVE"), case-insensitive,
// also in the CamelCase form of the older schema_auto_update_compatibility_strategy policy
// ("BackwardTransitive"). "" is Undefined; an unknown name wraps ErrInvalid.
func ParseStrategy(s string) (Strategy, error) {
	if s == "" {
		return Undefined, nil
	}
	norm := strings.ToUpper(s)
	if !strings.Contains(s, "_") && strings.ToUpper(s) != s {
		// CamelCase → SNAKE_CASE: an underscore before every inner upper-case letter.
		var b strings.Builder
		for i, r := range s {
			if i > 0 && r >= 'A' && r <= 'Z' {
				b.WriteByte('_')
			}
			b.WriteRune(r)
		}
		norm = strings.ToUpper(b.String())
	}
	for i, n := range strategyNames {
		if n == norm {
			return Strategy(i), nil
		}
	}
	return Undefined, fmt.Errorf("%w: unknown schema compatibility strategy %q", ErrInvalid, s)
}
