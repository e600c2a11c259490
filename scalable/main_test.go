package scalable

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind (the Controller's Close waits for
// all of its own).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
