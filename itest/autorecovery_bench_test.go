package itest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/ledger"
)

// victimPlacement puts the victim in every ensemble (E=2), with the other bookies in turn.
type victimPlacement struct {
	victim string
	others []string
	mu     sync.Mutex
	next   int
}

func (p *victimPlacement) NewEnsemble(size int) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []string{p.victim}
	for len(out) < size {
		out = append(out, p.others[p.next%len(p.others)])
		p.next++
	}
	return out, nil
}

func (p *victimPlacement) Replace(exclude []string) (string, error) {
	for _, b := range p.others {
		if !slices.Contains(exclude, b) {
			return b, nil
		}
	}
	return "", ledger.ErrNotEnoughBookies
}

// TestRereplicationThroughput measures how fast auto-recovery re-replicates the replicas of a
// lost bookie, against `magnetar perf ledger` on the same cluster in the same run. Skipped
// unless MAGNETAR_BENCH_REREPLICATION is set to the bytes to re-replicate (e.g. 1073741824);
// MAGNETAR_BENCH_ENTRY sets the entry size (default 65536).
//
// etcd + 4 bookie processes (each embedding a replication worker); ledgers at E=2 WQ=2 AQ=2
// whose ensembles all contain the victim, with N bytes of payload in total (so the victim holds
// exactly N bytes of replicas); kill -9 the victim; `magnetar bookie decommission` it and time
// it until no ledger references it: every byte is read from the surviving replica and written
// to a new bookie (recovery-add, fsynced) by the three surviving bookies' workers.
func TestRereplicationThroughput(t *testing.T) {
	total, _ := strconv.ParseInt(os.Getenv("MAGNETAR_BENCH_REREPLICATION"), 10, 64)
	if total <= 0 {
		t.Skip("set MAGNETAR_BENCH_REREPLICATION=<bytes> to run")
	}
	entrySize := 65536
	if s, err := strconv.Atoi(os.Getenv("MAGNETAR_BENCH_ENTRY")); err == nil && s > 0 {
		entrySize = s
	}
	_, metaURL := StartEtcd(t)
	store := openStore(t, metaURL)
	procs := map[string]*Proc{}
	var addrs []string
	for i := 0; i < 4; i++ {
		addr := FreeAddr(t)
		addrs = append(addrs, addr)
		procs[addr] = Start(t, "bookie-"+addr, "bookie", "--metadata-url", metaURL,
			"--data-dir", filepath.Join(t.TempDir(), fmt.Sprint("b", i)), "--listen", addr, "--http", "",
			"--session-ttl", "2s", "--autorecovery-poll-interval", "200ms", "--autorecovery-lost-bookie-delay", "1h")
	}
	waitBookies(t, store, 30*time.Second, addrs...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	perf := func(e, wq, aq, size int) string {
		out, err := exec.CommandContext(ctx, Binary(t), "perf", "ledger", "--metadata-url", metaURL,
			"--ensemble", fmt.Sprint(e), "--write-quorum", fmt.Sprint(wq), "--ack-quorum", fmt.Sprint(aq),
			"--size", fmt.Sprint(size), "--duration", "10s").CombinedOutput()
		if err != nil {
			t.Fatalf("perf ledger: %v\n%s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return lines[len(lines)-1]
	}
	perfSame := perf(2, 2, 2, entrySize)
	perf1K := perf(3, 2, 2, 1024)

	victim := addrs[0]
	pool := client.NewPool(client.Options{})
	defer pool.Close()
	lc := ledger.NewClient(store, pool, ledger.Options{Placement: &victimPlacement{victim: victim, others: addrs[1:]},
		MaxPendingAdds: 256})
	defer lc.Close()
	const ledgers = 8
	perLedger := total / ledgers / int64(entrySize)
	payload := make([]byte, entrySize)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	writeStart := time.Now()
	var written int64
	for i := 0; i < ledgers; i++ {
		h, err := lc.Create(ctx, ledger.CreateOptions{Ensemble: 2, WriteQuorum: 2, AckQuorum: 2, Password: []byte("bench")})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var failed error
		var mu sync.Mutex
		for e := int64(0); e < perLedger; e++ {
			wg.Add(1)
			h.AppendAsync(ctx, payload, func(_ int64, err error) {
				defer wg.Done()
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if failed != nil {
			t.Fatal(failed)
		}
		if err := h.Close(ctx); err != nil {
			t.Fatal(err)
		}
		written += perLedger * int64(entrySize)
	}
	writeTook := time.Since(writeStart)

	procs[victim].Kill()
	waitBookies(t, store, 30*time.Second, addrs[1:]...)
	start := time.Now()
	out, err := exec.CommandContext(ctx, Binary(t), "bookie", "decommission", "--bookie", victim, "--metadata-url", metaURL,
		"--interval", "200ms").CombinedOutput()
	if err != nil {
		t.Fatalf("decommission: %v\n%s", err, out)
	}
	took := time.Since(start)
	mib := float64(written) / (1 << 20)
	t.Logf("entry size %d B; %.0f MiB of replicas on the lost bookie", entrySize, mib)
	t.Logf("write of that data at E=2 WQ=2 AQ=2 (8 ledgers in turn): %v, %.1f MiB/s", writeTook.Round(time.Millisecond),
		mib/writeTook.Seconds())
	t.Logf("re-replication (kill -9, decommission until no ledger references the bookie): %v, %.1f MiB/s",
		took.Round(time.Millisecond), mib/took.Seconds())
	t.Logf("perf ledger 2/2/2 %d B: %s", entrySize, perfSame)
	t.Logf("perf ledger 3/2/2 1 KiB: %s", perf1K)
}
