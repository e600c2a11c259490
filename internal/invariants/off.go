//go:build !invariants

package invariants

// Enabled is true in binaries built with the "invariants" tag: every Switch starts on.
const Enabled = false
