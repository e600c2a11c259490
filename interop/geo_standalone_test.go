package interop

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/itest"
)

// TestGeoStandaloneScript: scripts/geo-standalone.sh starts two standalones, east and west,
// on free ports and replicates geo/ns between them; a message published in east with
// pulsar-client-go reaches a consumer in west, and one published in west reaches east.
// Running start again on the same directory (both up) is harmless, and stop stops both.
func TestGeoStandaloneScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(filepath.Dir(file)), "scripts", "geo-standalone.sh")
	dir := t.TempDir()
	// PORT_BASE+0..3 and +10..13: ports reserved for the test, 14 in a row.
	base := freePortRange(t, 14)
	env := append(os.Environ(), "MAGNETAR="+itest.Binary(t), "PORT_BASE="+strconv.Itoa(base))
	script1 := func(arg string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", script, arg, dir)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if _, err := script1("stop"); err != nil {
			// The script could not stop them: kill the processes it started, by their pids.
			for _, n := range []string{"east", "west"} {
				if b, err := os.ReadFile(filepath.Join(dir, n, "standalone.pid")); err == nil {
					if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
						syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // best effort
					}
				}
			}
		}
		if t.Failed() {
			for _, n := range []string{"east", "west"} {
				b, _ := os.ReadFile(filepath.Join(dir, n, "standalone.log"))
				t.Logf("--- %s's log ---\n%s", n, tailStr(string(b), 8000))
			}
		}
	})
	out, err := script1("start")
	if err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	t.Logf("start:\n%s", out)
	if out, err := script1("start"); err != nil {
		t.Fatalf("start again: %v\n%s", err, out)
	}

	east := &geoSite{t: t, name: "east", url: fmt.Sprintf("pulsar://127.0.0.1:%d", base+2)}
	west := &geoSite{t: t, name: "west", url: fmt.Sprintf("pulsar://127.0.0.1:%d", base+12)}
	ctx := ctxT(t, 2*time.Minute)
	topic := "persistent://geo/ns/script"
	for _, dir := range [][2]*geoSite{{east, west}, {west, east}} {
		from, to := dir[0], dir[1]
		cons, err := to.client().Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "from-" + from.name,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		p, err := from.client().CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		want := "hello from " + from.name
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(want)}); err != nil {
			t.Fatal(err)
		}
		pname := p.Name()
		p.Close()
		for {
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatalf("%s → %s: %v", from.name, to.name, err)
			}
			if string(m.Payload()) == want {
				if m.ProducerName() != pname {
					t.Errorf("%s → %s: producer name %q, want the original %q", from.name, to.name, m.ProducerName(), pname)
				}
				break
			}
		}
		cons.Close()
	}
	out, err = script1("stop")
	if err != nil || !strings.Contains(out, "east stopped") || !strings.Contains(out, "west stopped") {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	if out, _ := script1("status"); strings.Contains(out, "running") {
		t.Fatalf("after stop: %s", out)
	}
}

// freePortRange returns the first port of n consecutive free ports of 127.0.0.1, each
// reserved for t as itest.FreeAddr reserves one (a script takes a base port and counts
// from it).
func freePortRange(t *testing.T, n int) int {
	t.Helper()
	for try := 0; try < 50; try++ {
		first := itest.FreeAddr(t)
		_, ps, _ := strings.Cut(first, ":")
		base, _ := strconv.Atoi(ps)
		if base+n > 65000 {
			continue
		}
		ok := true
		for p := base + 1; p < base+n && ok; p++ {
			ok = reservePortAt(t, p)
		}
		if ok {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// reservePortAt reserves port p of 127.0.0.1 for t (as itest.FreeAddr does: a socket bound
// with SO_REUSEADDR, never listening; Linux refuses the bind while another socket listens
// on p); false if it is taken.
func reservePortAt(t *testing.T, p int) bool {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	if syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1) != nil ||
		syscall.Bind(fd, &syscall.SockaddrInet4{Port: p, Addr: [4]byte{127, 0, 0, 1}}) != nil {
		syscall.Close(fd)
		return false
	}
	t.Cleanup(func() { syscall.Close(fd) })
	return true
}
