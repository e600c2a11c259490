package itest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// openStore connects to the metadata store of a test cluster.
func openStore(t *testing.T, url string) metadata.Store {
	t.Helper()
	eps, err := metadata.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := metadata.Open(ctx, metadata.Config{Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitBookies waits (on a watch, with a deadline) until exactly the given bookie ids are
// registered.
func waitBookies(t *testing.T, store metadata.Store, d time.Duration, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	w := store.Watch(ctx, "/bookies/", 0)
	for {
		infos, err := bookie.ListBookies(ctx, store, false)
		if err == nil && sameIDs(infos, ids) {
			return
		}
		select {
		case <-w.C:
		case <-ctx.Done():
			t.Fatalf("registered bookies = %+v, want %v (err %v)", infos, ids, err)
		}
	}
}

func sameIDs(infos []bookie.Info, ids []string) bool {
	if len(infos) != len(ids) {
		return false
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for _, i := range infos {
		if !want[i.ID] {
			return false
		}
	}
	return true
}

func startBookie(t *testing.T, metaURL, dir, addr string) *Proc {
	t.Helper()
	return Start(t, "bookie-"+addr, "bookie", "--metadata-url", metaURL, "--data-dir", dir, "--listen", addr,
		"--http", "", "--session-ttl", "2s")
}

// TestBookieKill9KeepsAcknowledged: etcd + 3 bookie processes; a client streams pipelined adds
// to all three; one bookie is killed with SIGKILL mid-stream; its registration vanishes within
// the session TTL; after a restart on the same data dir, every entry it acknowledged reads back
// byte for byte (and so do the others').
func TestBookieKill9KeepsAcknowledged(t *testing.T) {
	_, metaURL := StartEtcd(t)
	store := openStore(t, metaURL)
	var addrs []string
	var procs []*Proc
	for i := 0; i < 3; i++ {
		addr := FreeAddr(t)
		addrs = append(addrs, addr)
		procs = append(procs, startBookie(t, metaURL, filepath.Join(t.TempDir(), fmt.Sprint("b", i)), addr))
	}
	waitBookies(t, store, 30*time.Second, addrs...)

	key := bk.MasterKey([]byte("pw"))
	const ledger, total, window = 42, 3000, 128
	payload := func(e int64) []byte { return []byte(fmt.Sprintf("entry-%06d-%s", e, bytes.Repeat([]byte{'z'}, 200))) }
	entryBytes := func(e int64) []byte {
		return bk.AppendEntry(nil, ledger, e, e-1, 0, bk.DigestCRC32C, payload(e))
	}

	var mu sync.Mutex
	acked := make([]map[int64]bool, 3)
	killAt := make(chan struct{})
	var killOnce sync.Once
	var wg sync.WaitGroup
	for i, addr := range addrs {
		acked[i] = map[int64]bool{}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		conn, err := client.Dial(ctx, addr, client.Options{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem := make(chan struct{}, window)
			var inner sync.WaitGroup
			for e := int64(0); e < total; e++ {
				select {
				case sem <- struct{}{}:
				case <-conn.Done():
					inner.Wait()
					return
				}
				inner.Add(1)
				conn.Send(&bk.Request{Op: bk.OpAddEntry, LedgerID: ledger, EntryID: e, MasterKey: key,
					Digest: bk.DigestCRC32C, Body: entryBytes(e)}, func(r bk.Response, err error) {
					defer inner.Done()
					defer func() { <-sem }()
					if err == nil && r.Status == bk.StatusOK {
						mu.Lock()
						acked[i][e] = true
						if i == 0 && len(acked[0]) == total/3 {
							killOnce.Do(func() { close(killAt) })
						}
						mu.Unlock()
					}
				})
			}
			inner.Wait()
		}()
	}
	<-killAt
	procs[0].Kill()
	wg.Wait()

	mu.Lock()
	n0 := len(acked[0])
	mu.Unlock()
	if n0 < total/3 || n0 == total {
		t.Fatalf("bookie 0 acknowledged %d entries; the kill should land mid-stream", n0)
	}
	// The dead bookie's registration goes away within the session TTL (2s) plus slack.
	waitBookies(t, store, 10*time.Second, addrs[1], addrs[2])

	procs[0].Restart()
	waitBookies(t, store, 30*time.Second, addrs...)
	for i, addr := range addrs {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		conn, err := client.Dial(ctx, addr, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for e := range acked[i] {
			r, err := conn.Do(ctx, &bk.Request{Op: bk.OpReadEntry, LedgerID: ledger, EntryID: e})
			if err != nil {
				t.Fatalf("bookie %d entry %d: %v", i, e, err)
			}
			if !bytes.Equal(r.Body, entryBytes(e)) {
				t.Fatalf("bookie %d entry %d differs after restart", i, e)
			}
		}
		conn.Close()
		cancel()
		t.Logf("bookie %d: %d acknowledged entries verified", i, len(acked[i]))
	}
}

// TestBookieSIGTERMAndBadFlags: a bookie stops cleanly on SIGTERM (exit 0, registration
// removed) and bad flags exit 2.
func TestBookieSIGTERMAndBadFlags(t *testing.T) {
	_, metaURL := StartEtcd(t)
	store := openStore(t, metaURL)
	addr := FreeAddr(t)
	p := startBookie(t, metaURL, t.TempDir(), addr)
	waitBookies(t, store, 30*time.Second, addr)
	if err := p.Stop(20 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	infos, err := bookie.ListBookies(context.Background(), store, false)
	if err != nil || len(infos) != 0 {
		t.Fatalf("after SIGTERM: %+v %v", infos, err)
	}
	bad := Start(t, "bad-flags", "bookie", "--disk-threshold", "7", "--data-dir", t.TempDir())
	<-bad.done
	if code := bad.cmd.ProcessState.ExitCode(); code != 2 {
		t.Fatalf("bad flag exit code = %d, want 2", code)
	}
	unknown := Start(t, "unknown-flag", "bookie", "--no-such-flag")
	<-unknown.done
	if code := unknown.cmd.ProcessState.ExitCode(); code != 2 {
		t.Fatalf("unknown flag exit code = %d, want 2", code)
	}
}

// TestBookieListCommand: `magnetar bookie list -o json` prints the live bookies with id,
// address and state; --all adds a stopped one as "down".
func TestBookieListCommand(t *testing.T) {
	_, metaURL := StartEtcd(t)
	store := openStore(t, metaURL)
	a1, a2 := FreeAddr(t), FreeAddr(t)
	startBookie(t, metaURL, t.TempDir(), a1)
	p2 := startBookie(t, metaURL, t.TempDir(), a2)
	waitBookies(t, store, 30*time.Second, a1, a2)
	if err := p2.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	list := func(args ...string) []map[string]string {
		out, err := exec.Command(Binary(t), append([]string{"bookie", "list", "--metadata-url", metaURL, "-o", "json"}, args...)...).Output()
		if err != nil {
			t.Fatalf("bookie list: %v", err)
		}
		var v []map[string]string
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("bookie list output %q: %v", out, err)
		}
		return v
	}
	live := list()
	if len(live) != 1 || live[0]["id"] != a1 || live[0]["address"] != a1 || live[0]["state"] != "writable" {
		t.Fatalf("bookie list = %v", live)
	}
	all := list("--all")
	states := map[string]string{}
	for _, b := range all {
		states[b["id"]] = b["state"]
	}
	if len(all) != 2 || states[a1] != "writable" || states[a2] != "down" {
		t.Fatalf("bookie list --all = %v", all)
	}
}
