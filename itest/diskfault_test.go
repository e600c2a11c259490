package itest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/internal/disktest"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
)

// waitBookieState waits (on a watch, with a deadline) until bookie id is registered in state.
func waitBookieState(t *testing.T, store metadata.Store, d time.Duration, id, state string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	w := store.Watch(ctx, "/bookies/", 0)
	for {
		infos, err := bookie.ListBookies(ctx, store, false)
		for _, i := range infos {
			if err == nil && i.ID == id && i.State == state {
				return
			}
		}
		select {
		case <-w.C:
		case <-ctx.Done():
			t.Fatalf("bookie %s not %s within %v: %+v (err %v)", id, state, d, infos, err)
		}
	}
}

// ledgerMeta reads ledger id's metadata from the store.
func ledgerMeta(t *testing.T, ctx context.Context, store metadata.Store, id int64) *ledger.Metadata {
	t.Helper()
	kv, err := store.Get(ctx, metadata.LedgerKey(id))
	if err != nil {
		t.Fatal(err)
	}
	m, err := ledger.UnmarshalMetadata(kv.Value)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// recoverAndCheck kills nothing: it opens ledger id with recovery (fencing its writer) and
// checks that every entry in acked (the writer's acknowledged ids, in order) reads back byte
// for byte. It returns the recovered metadata.
func recoverAndCheck(t *testing.T, ctx context.Context, store metadata.Store, id int64, acked []int64) *ledger.Metadata {
	t.Helper()
	pool := client.NewPool(client.Options{})
	defer pool.Close()
	lc := ledger.NewClient(store, pool, ledger.Options{})
	defer lc.Close()
	h, err := lc.Open(ctx, id, ledger.OpenOptions{Recovery: true, Password: writerPassword})
	if err != nil {
		t.Fatalf("open with recovery: %v", err)
	}
	rm := h.Metadata()
	if rm.State != ledger.StateClosed {
		t.Fatalf("recovered ledger state %v", rm.State)
	}
	for i, e := range acked {
		if e != int64(i) {
			t.Fatalf("acks out of order at %d: %d", i, e)
		}
	}
	if last := int64(len(acked) - 1); rm.LastEntryID < last {
		t.Fatalf("recovered last entry %d < last acknowledged %d", rm.LastEntryID, last)
	}
	for from := int64(0); from <= rm.LastEntryID; from += 500 {
		to := min(from+499, rm.LastEntryID)
		es, err := h.Read(ctx, from, to)
		if err != nil {
			t.Fatalf("read %d..%d: %v", from, to, err)
		}
		for k, e := range es {
			if e.EntryID != from+int64(k) || !bytes.Equal(e.Payload, writerPayload(e.EntryID)) {
				t.Fatalf("entry %d: id %d payload %q", from+int64(k), e.EntryID, e.Payload)
			}
		}
	}
	return rm
}

// TestBookieDiskFaultsUnderLoad: etcd + 4 bookie processes and a writer process at E=3 WQ=2
// AQ=2 streaming adds; the disk of one of its bookies fails: its data directory is removed
// (as when a disk dies or is unmounted), or its file system fills up. The bookie stops with
// one error (directory gone) or turns read-only (disk full) within seconds, without a flood
// of log lines; the writer moves its writes to another bookie (ensemble change) and goes on;
// SIGTERM stops the bookie promptly; every acknowledged entry reads back after recovery.
func TestBookieDiskFaultsUnderLoad(t *testing.T) {
	for _, fault := range []string{"dir-removed", "disk-full"} {
		t.Run(fault, func(t *testing.T) { diskFaultUnderLoad(t, fault) })
	}
}

// startFaultBookies starts etcd and 4 bookies that check their disks every 200 ms, on small
// tmpfs mounts if full (root only: skipped otherwise); it returns the metadata URL, a store,
// the bookies and their data roots by address, and the addresses.
func startFaultBookies(t *testing.T, full bool) (string, metadata.Store, map[string]*Proc, map[string]string, []string) {
	t.Helper()
	if full && os.Geteuid() != 0 {
		t.Skip("mounting a small file system needs root")
	}
	_, metaURL := StartEtcd(t)
	store := openStore(t, metaURL)
	procs, dirs := map[string]*Proc{}, map[string]string{}
	var addrs []string
	for i := range 4 {
		addr := FreeAddr(t)
		addrs = append(addrs, addr)
		root := t.TempDir()
		if full {
			root = disktest.MountTmpfs(t, 48<<20)
		}
		dirs[addr] = root
		procs[addr] = Start(t, "bookie-"+addr, "bookie", "--metadata-url", metaURL,
			"--data-dir", filepath.Join(root, fmt.Sprint("b", i)), "--listen", addr, "--http", "",
			"--session-ttl", "2s", "--disk-check-interval", "200ms", "--journal-file-size", fmt.Sprint(4<<20))
	}
	waitBookies(t, store, 30*time.Second, addrs...)
	return metaURL, store, procs, dirs, addrs
}

func diskFaultUnderLoad(t *testing.T, fault string) {
	full := fault == "disk-full"
	metaURL, store, procs, dirs, _ := startFaultBookies(t, full)

	w := startWriter(t, metaURL)
	w.waitFor(t, 60*time.Second, "500 acks", func() bool { return len(w.acks) >= 500 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	meta := func() *ledger.Metadata { return ledgerMeta(t, ctx, store, w.id) }
	victim := meta().Ensembles[0].Bookies[0]
	vp := procs[victim]
	logBefore, _ := os.ReadFile(vp.Log)
	start := time.Now()
	if full {
		disktest.Fill(t, dirs[victim])
		waitBookieState(t, store, 15*time.Second, victim, "read-only")
		t.Logf("bookie read-only %v after its disk filled up", time.Since(start).Round(time.Millisecond))
	} else {
		if err := os.RemoveAll(dirs[victim]); err != nil {
			t.Fatal(err)
		}
		select {
		case <-vp.done:
		case <-time.After(15 * time.Second):
			t.Fatal("bookie still running 15 s after its data directory was removed")
		}
		t.Logf("bookie exited %v after its data directory was removed (exit code %d)",
			time.Since(start).Round(time.Millisecond), vp.cmd.ProcessState.ExitCode())
		if vp.cmd.ProcessState.ExitCode() == 0 {
			t.Fatal("bookie stopped by a failed disk exited 0")
		}
	}
	// Counted once the fault took effect: the writer acked on meanwhile.
	w.mu.Lock()
	atFault := len(w.acks)
	w.mu.Unlock()
	w.waitFor(t, 60*time.Second, "1000 acks after the disk fault", func() bool { return len(w.acks) >= atFault+1000 })
	if m := meta(); len(m.Ensembles) < 2 || slices.Contains(m.LastEnsemble().Bookies, victim) {
		t.Fatalf("no ensemble change away from bookie %s: %+v", victim, m.Ensembles)
	}
	if full {
		start := time.Now()
		// It exits 1 when its final flush fails for want of space (the journal, fsynced,
		// replays everything on restart); what matters here is that it stops.
		err := vp.Stop(40 * time.Second)
		if !vp.Exited() || (err != nil && vp.cmd.ProcessState.ExitCode() < 0) {
			t.Fatalf("SIGTERM of the bookie on a full disk: %v", err)
		}
		t.Logf("SIGTERM stopped the bookie on a full disk in %v (exit code %d)",
			time.Since(start).Round(time.Millisecond), vp.cmd.ProcessState.ExitCode())
	}
	logAll, _ := os.ReadFile(vp.Log)
	after := logAll[len(logBefore):]
	lines := bytes.Count(after, []byte("\n"))
	errLines := bytes.Count(after, []byte("level=ERROR"))
	t.Logf("bookie log after the fault: %d lines, %d errors", lines, errLines)
	if lines > 40 {
		t.Fatalf("%d log lines after the fault (not rate-limited?):\n%s", lines, after)
	}
	want := "bookie disk failed; stopping"
	if full {
		want = "read-only until restarted"
	}
	if !full || bytes.Contains(after, []byte("ENOSPC")) || bytes.Contains(after, []byte("no space")) {
		// The usage check (95 %) may turn it read-only before a write hits ENOSPC.
		if n := bytes.Count(after, []byte(want)); n > 1 || (!full && n != 1) {
			t.Fatalf("%d %q lines, want one:\n%s", n, want, after)
		}
	}

	w.cmd.Process.Kill()
	<-w.done
	w.mu.Lock()
	acked := slices.Clone(w.acks)
	w.mu.Unlock()
	rm := recoverAndCheck(t, ctx, store, w.id, acked)
	t.Logf("writer acknowledged %d entries (%d before the fault); recovered to %d over %d ensembles",
		len(acked), atFault, rm.LastEntryID, len(rm.Ensembles))
}
