package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/disktest"
	"github.com/magnetar-io/magnetar/metadata"
)

// TestBrokerMovesWritesOffAFailedBookie: etcd, 4 bookie processes and a broker at E=3 WQ=2
// AQ=2; a producer publishes at 500 msg/s; the disk of a bookie in the topic's ledger ensemble
// fails: its data directory is removed (the bookie stops) or its file system fills up (the
// bookie turns read-only). The broker's ledger changes ensemble, no publish fails, and a
// consumer then reads every message published.
func TestBrokerMovesWritesOffAFailedBookie(t *testing.T) {
	for _, fault := range []string{"dir-removed", "disk-full"} {
		t.Run(fault, func(t *testing.T) { brokerBookieFault(t, fault == "disk-full") })
	}
}

func brokerBookieFault(t *testing.T, full bool) {
	metaURL, store, procs, dirs, _ := startFaultBookies(t, full)
	brAddr := FreeAddr(t)
	Start(t, "broker", "broker", "--metadata-url", metaURL, "--listen", brAddr, "--http", FreeAddr(t),
		"--ensemble", "3", "--write-quorum", "2", "--ack-quorum", "2")
	waitKeys(t, store, metadata.PrefixBrokers, 1, 30*time.Second)

	url, topic := "pulsar://"+brAddr, "persistent://public/default/bookie-fault"
	const total = 4000
	prod := Start(t, "perf-produce", "perf", "produce", topic, "--url", url, "--rate", "500",
		"--messages", fmt.Sprint(total), "--warmup", "0", "-d", "0", "-o", "json", "--size", "200")

	// The topic's ledger, once it has one, and a bookie of its ensemble.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := store.Watch(ctx, metadata.PrefixLedgers, 0)
	var lid int64 = -1
	for lid < 0 {
		kvs, _, err := store.List(ctx, metadata.PrefixLedgers)
		if err != nil {
			t.Fatal(err)
		}
		if len(kvs) > 0 { // the first ledger: the topic's (keys sort by id)
			if lid, err = metadata.LedgerIDFromKey(kvs[0].Key); err != nil {
				t.Fatal(err)
			}
		}
		if lid >= 0 {
			break
		}
		select {
		case <-w.C:
		case <-ctx.Done():
			t.Fatal("the topic created no ledger")
		}
	}
	// Mid-stream: once a consumer has received 500 of the messages.
	if outs, errs, code := runTool(t, "consume", topic, "--url", url, "-s", "early", "-p", "Earliest",
		"-n", "500", "--timeout", "30s", "-o", "json"); code != 0 {
		t.Fatalf("consume of 500: exit %d: %s%s", code, tail(outs), errs)
	}
	m0 := ledgerMeta(t, ctx, store, lid)
	victim := m0.LastEnsemble().Bookies[0]
	t.Logf("ledger %d: %+v; victim %s", lid, m0.Ensembles, victim)
	start := time.Now()
	if full {
		disktest.Fill(t, dirs[victim])
		waitBookieState(t, store, 15*time.Second, victim, "read-only")
		t.Logf("bookie %s read-only %v after its disk filled up", victim, time.Since(start).Round(time.Millisecond))
	} else {
		if err := os.RemoveAll(dirs[victim]); err != nil {
			t.Fatal(err)
		}
		if code := waitExit(t, procs[victim], 15*time.Second); code == 0 {
			t.Fatal("bookie with its data directory removed exited 0")
		}
		t.Logf("bookie %s exited %v after its data directory was removed", victim, time.Since(start).Round(time.Millisecond))
	}

	if code := waitExit(t, prod, 60*time.Second); code != 0 {
		t.Fatalf("perf produce exit code %d", code)
	}
	out, err := os.ReadFile(prod.Log)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Messages int64 `json:"messages"`
		Failed   int64 `json:"failed"`
	}
	if i := strings.Index(string(out), "{"); i < 0 || json.Unmarshal(out[i:], &res) != nil {
		t.Fatalf("perf produce output:\n%s", out)
	}
	if res.Failed != 0 || res.Messages != total {
		t.Fatalf("published %d, failed %d; want %d, 0", res.Messages, res.Failed, total)
	}
	if m := ledgerMeta(t, ctx, store, lid); slices.Contains(m.LastEnsemble().Bookies, victim) {
		t.Fatalf("ledger %d: no ensemble change away from %s: %+v", lid, victim, m.Ensembles)
	}
	if outs, errs, code := runTool(t, "consume", topic, "--url", url, "-s", "check", "-p", "Earliest",
		"-n", fmt.Sprint(total), "--timeout", "30s", "-o", "json"); code != 0 {
		t.Fatalf("consume of %d: exit %d: %s%s", total, code, tail(outs), errs)
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}
