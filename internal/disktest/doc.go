// Package disktest holds test helpers for disk faults: a small file system of its own
// (tmpfs, root only) and filling it up. Only tests import it.
//
// # Usage
//
//	dir := disktest.MountTmpfs(t, 16<<20) // skips the test unless root
//	disktest.Fill(t, dir)                 // writes until ENOSPC
//
// # Concurrency
//
// The helpers run on the calling test's goroutine; no goroutines.
package disktest
