//go:build !invariants

package ledger

// invariantsEnabled makes assertionFailedf panic (build with -tags invariants).
const invariantsEnabled = false
