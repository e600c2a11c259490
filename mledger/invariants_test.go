package mledger

// Impossible states panic in this package's tests (production builds return an error).
func init() { panicOnAssert = true }
