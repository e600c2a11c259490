package bookie

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrDiskFailed marks the error that stopped a bookie whose disk failed (see Bookie.Err).
var ErrDiskFailed = errors.New("bookie: disk failed")

// A disk fault is handled as BookKeeper handles one: a full disk (ENOSPC, or usage over
// Config.DiskThreshold) turns the bookie read-only, so it keeps serving reads; any other
// failure of the journal, the storage or the data directory (EIO, the directory removed or
// unmounted) stops the bookie, as BookKeeper's diskFailed shuts the bookie down. Either way
// the bookie logs one error saying so ("bookie disk failed; stopping" or "bookie read-only
// until restarted: disk full"); the requests that fail meanwhile do not each log.

// isDiskFull reports whether err is a full disk (or a full quota).
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// checkDataDir reports a data directory that is gone or unreadable: the cookie, which lives
// there for the bookie's whole life, must still be there.
func checkDataDir(dataDir string) error {
	p := cookiePath(dataDir)
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("data directory %s removed or unmounted: %w", dataDir, err)
		}
		return fmt.Errorf("data directory %s: %w", dataDir, err)
	}
	return nil
}

// onDiskFault handles a failed journal, storage or data directory: read-only for good (until
// a restart) if the disk is full, else stop. Called on the registrar goroutine.
func (r *registrar) onDiskFault(what string, err error) {
	if isDiskFull(err) {
		if !r.readOnlyForGood {
			r.readOnlyForGood = true
			r.b.log.Error("bookie read-only until restarted: disk full", "failed", what, "err", err)
		}
		return
	}
	r.b.fail(fmt.Errorf("%w: %s: %w", ErrDiskFailed, what, err))
}

// fail stops the bookie because of err, once: it logs err, records it for Err and closes the
// bookie in the background (Close waits for the goroutine calling fail).
func (b *Bookie) fail(err error) {
	b.failOnce.Do(func() {
		b.failErr.Store(&err)
		b.log.Error("bookie disk failed; stopping", "err", err)
		go b.Close()
	})
}

// Done returns a channel closed once the bookie has stopped: after Close, or after a failed
// disk stopped it (then Err says why).
func (b *Bookie) Done() <-chan struct{} { return b.done }

// Err returns the failure that stopped the bookie (errors.Is ErrDiskFailed), or nil if it
// runs or was closed by its owner.
func (b *Bookie) Err() error {
	if p := b.failErr.Load(); p != nil {
		return *p
	}
	return nil
}
