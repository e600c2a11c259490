//go:build !invariants

package autorecovery

// invariantsEnabled makes assertionFailedf panic (build with -tags invariants).
const invariantsEnabled = false
