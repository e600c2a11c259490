package itest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/metadata"
)

// waitExit waits up to d for p to exit and returns its exit code.
func waitExit(t *testing.T, p *Proc, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s still running after %v", p.Name, d)
	}
	return p.cmd.ProcessState.ExitCode()
}

// waitKeys waits (on a watch, with a deadline) until exactly n keys are under prefix.
func waitKeys(t *testing.T, store metadata.Store, prefix string, n int, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	w := store.Watch(ctx, prefix, 0)
	for {
		kvs, _, err := store.List(ctx, prefix)
		if err == nil && len(kvs) == n {
			return
		}
		select {
		case <-w.C:
		case <-ctx.Done():
			t.Fatalf("%d keys under %s within %v, want %d (err %v)", len(kvs), prefix, d, n, err)
		}
	}
}

// TestSecondProcessOnHostFailsBeforeRegistering: a second bookie (and a second broker) on a
// host whose HTTP port another one holds exits at once with an error naming the flag; it
// never registers (the bookie writes no cookie either), and the first keeps running.
func TestSecondProcessOnHostFailsBeforeRegistering(t *testing.T) {
	_, metaURL := StartEtcd(t)
	store := openStore(t, metaURL)
	bookieHTTP, brokerHTTP := FreeAddr(t), FreeAddr(t)
	first, second := FreeAddr(t), FreeAddr(t)
	b1 := Start(t, "bookie-1", "bookie", "--metadata-url", metaURL, "--data-dir", t.TempDir(),
		"--listen", first, "--http", bookieHTTP, "--session-ttl", "2s", "--autorecovery=false")
	waitBookies(t, store, 30*time.Second, first)

	dir2 := t.TempDir()
	b2 := Start(t, "bookie-2", "bookie", "--metadata-url", metaURL, "--data-dir", dir2,
		"--listen", second, "--http", bookieHTTP, "--session-ttl", "2s")
	if code := waitExit(t, b2, 20*time.Second); code != 1 {
		t.Fatalf("second bookie exit code %d, want 1", code)
	}
	if !b2.LogContains("--http " + bookieHTTP + ": address already in use") {
		t.Fatal("second bookie's error does not name --http")
	}
	if _, err := os.Stat(filepath.Join(dir2, "current", "VERSION")); !os.IsNotExist(err) {
		t.Fatalf("second bookie wrote a cookie (stat: %v)", err)
	}
	infos, err := bookie.ListBookies(context.Background(), store, true)
	if err != nil || len(infos) != 1 || infos[0].ID != first {
		t.Fatalf("bookies after the second one failed: %+v %v", infos, err)
	}
	// Same protocol port, free HTTP port: named too.
	b3 := Start(t, "bookie-3", "bookie", "--metadata-url", metaURL, "--data-dir", t.TempDir(),
		"--listen", first, "--http", "", "--session-ttl", "2s")
	if code := waitExit(t, b3, 20*time.Second); code != 1 || !b3.LogContains("--listen "+first+": address already in use") {
		t.Fatalf("bookie on a taken --listen: exit code %d, error naming --listen: %v", code,
			b3.LogContains("--listen "+first))
	}
	if b1.Exited() {
		t.Fatal("the first bookie exited")
	}

	br1Addr, br2Addr := FreeAddr(t), FreeAddr(t)
	br1 := Start(t, "broker-1", "broker", "--metadata-url", metaURL, "--listen", br1Addr, "--http", brokerHTTP,
		"--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1")
	waitKeys(t, store, metadata.PrefixBrokers, 1, 30*time.Second)
	br2 := Start(t, "broker-2", "broker", "--metadata-url", metaURL, "--listen", br2Addr, "--http", brokerHTTP,
		"--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1")
	if code := waitExit(t, br2, 20*time.Second); code != 1 || !br2.LogContains("--http "+brokerHTTP+": address already in use") {
		t.Fatalf("second broker: exit code %d, error naming --http: %v", code, br2.LogContains("--http "+brokerHTTP))
	}
	kvs, _, err := store.List(context.Background(), metadata.PrefixBrokers)
	if err != nil || len(kvs) != 1 {
		t.Fatalf("registered brokers after the second one failed: %d (%v), want 1", len(kvs), err)
	}
	if br1.Exited() {
		t.Fatal("the first broker exited")
	}
}
