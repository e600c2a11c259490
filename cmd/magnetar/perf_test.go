package main

import (
	"strings"
	"testing"
)

// TestPerfIoTFlags: `perf iot` is e2e with the IoT shape's defaults, and the new flags of the
// Pulsar perf tools are checked before anything connects.
func TestPerfIoTFlags(t *testing.T) {
	c := newPerfIoTCmd()
	for name, want := range map[string]string{"producers": "500", "size": "128", "disable-batching": "true",
		"consumers": "20", "type": "Key_Shared", "clients": "one", "window": "10s", "max-pending": "1000"} {
		if f := c.Flags().Lookup(name); f == nil || f.Value.String() != want || f.DefValue != want {
			t.Errorf("perf iot --%s: %v, want default %s", name, f, want)
		}
	}
	if f := newPerfE2ECmd().Flags().Lookup("clients"); f == nil || f.DefValue != "each" {
		t.Errorf("perf e2e --clients: %v, want default each", f)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"perf", "e2e", "t", "--clients", "two"}, "--clients must be each, one or separate"},
		{[]string{"perf", "iot", "t", "--clients", "many"}, "--clients must be each, one or separate"},
		{[]string{"perf", "produce", "t", "--keys", "-1"}, "--keys must not be negative"},
		{[]string{"perf", "produce", "t", "--window", "10ms"}, "--window must be at least 1s"},
	} {
		var code int
		stderr := captureStderr(t, func() { code = run(tc.args) })
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with %q", tc.args, code, firstLine(stderr), tc.want)
		}
	}
}
