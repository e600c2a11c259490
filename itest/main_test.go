package itest

import (
	"os"
	"testing"
)

// TestMain lets the test binary double as a child process: with MAGNETAR_ITEST_CHILD set it
// runs that role (see children) instead of the tests, so a test can kill -9 a real client.
func TestMain(m *testing.M) {
	if role := os.Getenv("MAGNETAR_ITEST_CHILD"); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}
