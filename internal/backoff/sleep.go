package backoff

import (
	"context"
	"time"
)

// Sleep waits d or until ctx ends; it reports whether the full wait happened.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
