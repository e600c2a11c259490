package itest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/autorecovery"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
)

var arPassword = []byte("itest-ar")

func arPayload(ledgerID, entry int64) []byte {
	return []byte(fmt.Sprintf("L%d-E%06d-%s", ledgerID, entry, strings.Repeat("x", int(entry*37%900))))
}

// TestAutoRecoveryDecommission: etcd + 5 bookie processes (each with its embedded
// auto-recovery: auditor candidate and replication worker); 20 ledgers at E=3 WQ=2 AQ=2,
// 12 closed and 8 still open with a live writer; kill -9 one bookie; `magnetar bookie
// decommission` it: the command completes (exit 0), no ledger references the bookie, and
// every entry of every ledger reads back byte-identical with a replica on each of the WQ
// bookies of its write set (checked with ListEntries against each bookie).
func TestAutoRecoveryDecommission(t *testing.T) {
	start := time.Now()
	_, metaURL := StartEtcd(t)
	store := openStore(t, metaURL)
	procs := map[string]*Proc{}
	var addrs []string
	for i := 0; i < 5; i++ {
		addr := FreeAddr(t)
		addrs = append(addrs, addr)
		procs[addr] = Start(t, "bookie-"+addr, "bookie", "--metadata-url", metaURL,
			"--data-dir", filepath.Join(t.TempDir(), fmt.Sprint("b", i)), "--listen", addr, "--http", "",
			"--session-ttl", "2s", "--autorecovery-poll-interval", "200ms", "--autorecovery-open-ledger-grace", "5s",
			"--autorecovery-lost-bookie-delay", "1h")
	}
	waitBookies(t, store, 30*time.Second, addrs...)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool := client.NewPool(client.Options{})
	defer pool.Close()
	lc := ledger.NewClient(store, pool, ledger.Options{AddTimeout: 2 * time.Second})
	defer lc.Close()

	// 20 ledgers with 100 entries each; the first 12 are closed, the last 8 keep a writer
	// that appends an entry every 20ms until the end of the test.
	const ledgers, closedLedgers, initial = 20, 12, 100
	type live struct {
		h     *ledger.Handle
		mu    sync.Mutex
		acked int64
		err   error
	}
	var handles []*ledger.Handle
	lives := map[int64]*live{}
	for i := 0; i < ledgers; i++ {
		h, err := lc.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, Password: arPassword})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for e := int64(0); e < initial; e++ {
			wg.Add(1)
			h.AppendAsync(ctx, arPayload(h.ID(), e), func(id int64, err error) {
				defer wg.Done()
				if err != nil || id != e {
					t.Errorf("ledger %d: add %d: id %d, %v", h.ID(), e, id, err)
				}
			})
		}
		wg.Wait()
		if i < closedLedgers {
			if err := h.Close(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			lives[h.ID()] = &live{h: h, acked: initial - 1}
		}
		handles = append(handles, h)
	}
	stopWriters := make(chan struct{})
	var writers sync.WaitGroup
	for _, l := range lives {
		writers.Add(1)
		go func() {
			defer writers.Done()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for e := l.acked + 1; ; e++ {
				select {
				case <-stopWriters:
					return
				case <-tick.C:
				}
				if _, err := l.h.Append(ctx, arPayload(l.h.ID(), e)); err != nil {
					l.mu.Lock()
					l.err = err
					l.mu.Unlock()
					return
				}
				l.mu.Lock()
				l.acked = e
				l.mu.Unlock()
			}
		}()
	}
	t.Logf("setup done in %v", time.Since(start).Round(time.Millisecond))

	// The victim: the bookie in the most ensembles.
	count := map[string]int{}
	for _, h := range handles {
		for _, b := range h.Metadata().Ensembles[0].Bookies {
			count[b]++
		}
	}
	victim := addrs[0]
	for _, a := range addrs {
		if count[a] > count[victim] {
			victim = a
		}
	}
	killed := time.Now()
	procs[victim].Kill()
	rest := slices.DeleteFunc(slices.Clone(addrs), func(a string) bool { return a == victim })
	waitBookies(t, store, 30*time.Second, rest...)
	t.Logf("killed %s (in %d of %d ledgers); registration gone after %v", victim, count[victim], ledgers,
		time.Since(killed).Round(time.Millisecond))

	decomStart := time.Now()
	cmd := exec.CommandContext(ctx, Binary(t), "bookie", "decommission", "--bookie", victim, "--metadata-url", metaURL,
		"--interval", "500ms")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("decommission: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if !strings.Contains(lines[len(lines)-1], "decommissioned") {
		t.Fatalf("decommission output:\n%s", out)
	}
	t.Logf("decommission completed in %v (%d progress lines); first: %s", time.Since(decomStart).Round(time.Millisecond),
		len(lines)-1, lines[0])

	// Stop the live writers and close their ledgers.
	close(stopWriters)
	writers.Wait()
	for id, l := range lives {
		if l.err != nil {
			t.Fatalf("live writer of ledger %d failed: %v", id, l.err)
		}
		if err := l.h.Close(ctx); err != nil {
			t.Fatalf("close live ledger %d: %v", id, err)
		}
	}

	// Status: nothing under-replicated and the four workers; and an auditor, once a follower
	// has seen the victim's election key go (followers look every second).
	for deadline := time.Now().Add(15 * time.Second); ; {
		stOut, err := exec.CommandContext(ctx, Binary(t), "autorecovery", "status", "--metadata-url", metaURL, "-o", "json").Output()
		if err != nil {
			t.Fatalf("autorecovery status: %v", err)
		}
		var st autorecovery.Status
		if err := json.Unmarshal(stOut, &st); err != nil {
			t.Fatalf("status JSON: %v\n%s", err, stOut)
		}
		if len(st.Ledgers) != 0 || len(st.Workers) != 4 {
			t.Fatalf("status after decommission: %s", stOut)
		}
		if st.Auditor != nil {
			if st.Auditor.ID == victim {
				t.Fatalf("the decommissioned bookie is still the auditor: %s", stOut)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no auditor elected after decommission: %s", stOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := store.Get(ctx, metadata.CookieKey(victim)); err == nil {
		t.Fatal("the decommissioned bookie's cookie is still there")
	}

	// Every entry reads back byte-identical, and is on every bookie of its write set.
	conns := map[string]*client.Conn{}
	for _, a := range rest {
		if conns[a], err = pool.Get(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	entries, replicas := 0, 0
	for _, h := range handles {
		r, err := lc.Open(ctx, h.ID(), ledger.OpenOptions{Password: arPassword})
		if err != nil {
			t.Fatal(err)
		}
		m := r.Metadata()
		if m.State != ledger.StateClosed || m.LastEntryID < initial-1 {
			t.Fatalf("ledger %d: %v at %d", m.LedgerID, m.State, m.LastEntryID)
		}
		held := map[string][]bk.Range{}
		for _, en := range m.Ensembles {
			for _, b := range en.Bookies {
				if b == victim {
					t.Fatalf("ledger %d still references %s: %+v", m.LedgerID, victim, m.Ensembles)
				}
				if _, ok := held[b]; !ok {
					resp, err := conns[b].Do(ctx, &bk.Request{Op: bk.OpListEntries, LedgerID: m.LedgerID, MasterKey: bk.MasterKey(arPassword)})
					if err != nil || resp.Status != bk.StatusOK {
						t.Fatalf("list entries of %d on %s: %v %v", m.LedgerID, b, resp.Status, err)
					}
					held[b] = resp.Ranges
				}
			}
		}
		for from := int64(0); from <= m.LastEntryID; from += 500 {
			to := min(from+499, m.LastEntryID)
			es, err := r.Read(ctx, from, to)
			if err != nil {
				t.Fatalf("ledger %d: read %d..%d: %v", m.LedgerID, from, to, err)
			}
			for k, e := range es {
				if !bytes.Equal(e.Payload, arPayload(m.LedgerID, from+int64(k))) {
					t.Fatalf("ledger %d entry %d: payload differs", m.LedgerID, e.EntryID)
				}
			}
		}
		for e := int64(0); e <= m.LastEntryID; e++ {
			entries++
			for _, b := range m.WriteSet(e) {
				if !inRanges(held[b], e) {
					t.Fatalf("ledger %d entry %d: no replica on %s (write set %v)", m.LedgerID, e, b, m.WriteSet(e))
				}
				replicas++
			}
		}
	}
	t.Logf("%d ledgers, %d entries, %d replicas verified; total %v", ledgers, entries, replicas,
		time.Since(start).Round(time.Millisecond))
}

func inRanges(rs []bk.Range, e int64) bool {
	for _, r := range rs {
		if e >= r.First && e <= r.Last {
			return true
		}
	}
	return false
}
