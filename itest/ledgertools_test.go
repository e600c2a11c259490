package itest

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runJSON runs a magnetar command and decodes its JSON output into v.
func runJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("magnetar %v: %v\n%s", args, err, stderr.String())
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("magnetar %v: output %q: %v", args, out, err)
	}
}

// TestLedgerTools drives `magnetar ledger write|show|list|read|create|recover|delete` against
// etcd and three bookie processes and checks their JSON output.
func TestLedgerTools(t *testing.T) {
	_, metaURL := StartEtcd(t)
	store := openStore(t, metaURL)
	var addrs []string
	for i := 0; i < 3; i++ {
		addr := FreeAddr(t)
		addrs = append(addrs, addr)
		startBookie(t, metaURL, filepath.Join(t.TempDir(), fmt.Sprint("b", i)), addr)
	}
	waitBookies(t, store, 30*time.Second, addrs...)
	m := []string{"--metadata-url", metaURL, "-o", "json"}

	var w struct {
		LedgerID    int64 `json:"ledgerId"`
		Acked       int   `json:"acked"`
		LastEntryID int64 `json:"lastEntryId"`
	}
	runJSON(t, &w, append([]string{"ledger", "write", "--ensemble", "3", "--write-quorum", "2", "--ack-quorum", "2",
		"--count", "500", "--size", "100", "--password", "pw"}, m...)...)
	if w.Acked != 500 || w.LastEntryID != 499 {
		t.Fatalf("write: %+v", w)
	}
	type view struct {
		LedgerID     int64  `json:"ledgerId"`
		State        string `json:"state"`
		LastEntryID  int64  `json:"lastEntryId"`
		EnsembleSize int    `json:"ensembleSize"`
		WriteQuorum  int    `json:"writeQuorum"`
		AckQuorum    int    `json:"ackQuorum"`
		Ensembles    []struct {
			FirstEntry int64    `json:"firstEntry"`
			Bookies    []string `json:"bookies"`
		} `json:"ensembles"`
	}
	var shown view
	runJSON(t, &shown, append([]string{"ledger", "show", fmt.Sprint(w.LedgerID)}, m...)...)
	if shown.State != "CLOSED" || shown.LastEntryID != 499 || shown.EnsembleSize != 3 || shown.WriteQuorum != 2 ||
		shown.AckQuorum != 2 || len(shown.Ensembles) != 1 || len(shown.Ensembles[0].Bookies) != 3 {
		t.Fatalf("show: %+v", shown)
	}
	var count struct {
		Count int `json:"count"`
	}
	runJSON(t, &count, append([]string{"ledger", "read", fmt.Sprint(w.LedgerID), "--count-only", "--password", "pw"}, m...)...)
	if count.Count != 500 {
		t.Fatalf("read --count-only: %d", count.Count)
	}
	var rows []struct {
		EntryID int64 `json:"entryId"`
		Length  int   `json:"length"`
	}
	runJSON(t, &rows, append([]string{"ledger", "read", fmt.Sprint(w.LedgerID), "--from", "10", "--to", "12", "--password", "pw"}, m...)...)
	if len(rows) != 3 || rows[0].EntryID != 10 || rows[2].EntryID != 12 || rows[1].Length != 100 {
		t.Fatalf("read 10..12: %+v", rows)
	}

	var created struct {
		LedgerID int64 `json:"ledgerId"`
	}
	runJSON(t, &created, append([]string{"ledger", "create"}, m...)...)
	var recovered view
	runJSON(t, &recovered, append([]string{"ledger", "recover", fmt.Sprint(created.LedgerID)}, m...)...)
	if recovered.State != "CLOSED" || recovered.LastEntryID != -1 {
		t.Fatalf("recover of an empty open ledger: %+v", recovered)
	}
	var list []view
	runJSON(t, &list, append([]string{"ledger", "list"}, m...)...)
	if len(list) != 2 {
		t.Fatalf("list: %+v", list)
	}
	var deleted map[string]any
	runJSON(t, &deleted, append([]string{"ledger", "delete", fmt.Sprint(created.LedgerID)}, m...)...)
	runJSON(t, &list, append([]string{"ledger", "list"}, m...)...)
	if len(list) != 1 || list[0].LedgerID != w.LedgerID {
		t.Fatalf("list after delete: %+v", list)
	}
	// Bad input: exit status 2, nothing created.
	cmd := exec.Command(Binary(t), append([]string{"ledger", "write", "--ensemble", "1", "--write-quorum", "2"}, m...)...)
	if err := cmd.Run(); cmd.ProcessState.ExitCode() != 2 {
		t.Fatalf("bad quorum flags: %v (exit %d), want exit 2", err, cmd.ProcessState.ExitCode())
	}
	runJSON(t, &list, append([]string{"ledger", "list"}, m...)...)
	if len(list) != 1 {
		t.Fatalf("bad input created a ledger: %+v", list)
	}
}
