package itest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/metadata"
)

// portBase returns a PORT_BASE for scripts/local-cluster.sh whose ports (base+0..2, +10..12,
// +100..102, +110..112, +200..202, +210..212) are all free a moment ago. The range lies
// below Linux's ephemeral ports (32768 and up), where the other tests' listeners on port 0 and
// their outgoing connections take theirs: a port probed free here stays free until the
// script binds it (CI saw one taken in between when the bases reached 59000).
func portBase(t *testing.T) int {
	t.Helper()
	for range 50 {
		base := 10000 + 1000*rand.IntN(22)
		free := true
		for _, off := range []int{0, 10, 100, 110, 200, 210} {
			for i := range 3 {
				ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+off+i))
				if err != nil {
					free = false
					break
				}
				ln.Close()
			}
		}
		if free {
			return base
		}
	}
	t.Fatal("no free port range for the local cluster")
	return 0
}

// TestLocalClusterScript: scripts/local-cluster.sh starts 3 etcd members, 3 bookies and 3
// brokers; all register, each broker takes a message; stop ends every process (each within the stop bound) and start again on the same
// directory brings the cluster back.
func TestLocalClusterScript(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(filepath.Dir(file)), "scripts", "local-cluster.sh")
	bin := Binary(t)
	dir := filepath.Join(t.TempDir(), "cluster")
	base := portBase(t)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(script, args...)
		cmd.Env = append(cmd.Environ(), "MAGNETAR="+bin, fmt.Sprintf("PORT_BASE=%d", base))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", script, args, err, out)
		}
		return string(out)
	}
	t.Cleanup(func() { exec.Command(script, "stop", dir).Run() })

	for round := range 2 {
		out := run("start", dir)
		m := regexp.MustCompile(`metadata: (\S+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("start printed no metadata URL:\n%s", out)
		}
		if _, err := exec.LookPath("etcd"); err == nil && strings.Count(m[1], ",") != 2 {
			t.Fatalf("metadata URL %s: want 3 etcd members", m[1])
		}
		store := openStore(t, m[1])
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		infos, err := bookie.ListBookies(ctx, store, false)
		if err != nil || len(infos) != 3 {
			t.Fatalf("round %d: bookies %+v (%v), want 3", round, infos, err)
		}
		waitKeys(t, store, metadata.PrefixBrokers, 3, 30*time.Second)
		cancel()
		// Each broker serves (magnetar produce takes one host; multi-host service URLs are
		// the Pulsar clients' business).
		for i := range 3 {
			url := fmt.Sprintf("pulsar://127.0.0.1:%d", base+200+i)
			topic := fmt.Sprintf("persistent://public/default/local-%d-%d", round, i)
			if out, errs, code := runTool(t, "produce", "--url", url, topic, "-m", "hello"); code != 0 {
				t.Fatalf("produce through %s: exit %d: %s%s", url, code, out, errs)
			}
		}
		store.Close()

		start := time.Now()
		out = run("stop", dir)
		t.Logf("round %d: stop took %v:\n%s", round, time.Since(start).Round(time.Millisecond), out)
		if n := strings.Count(out, "stopped in"); n < 7 || strings.Contains(out, "SIGKILL") {
			t.Fatalf("stop output:\n%s", out)
		}
		if st := run("status", dir); strings.Contains(st, "running") {
			t.Fatalf("after stop:\n%s", st)
		}
	}
}
