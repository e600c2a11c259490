package metadata

import (
	"context"
	"time"
)

// WithSleep returns f waiting through sleep instead of backoff.Sleep.
func (f Follower) WithSleep(sleep func(ctx context.Context, d time.Duration) bool) Follower {
	f.sleep = sleep
	return f
}
