//go:build !invariants

package journal

var invariantsEnabled = false
