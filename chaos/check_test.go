package chaos

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, dir, name string, lines ...string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckFilesClean(t *testing.T) {
	dir := t.TempDir()
	prod := write(t, dir, "p0.rec", "name p0", "start 1", "ack 1 5 0 0 0", "ack 2 5 1 0 1", "fail 3 timeout",
		"start 1", "ack 2 -1 -1 -1 1") // a restarted producer's resend answered as a duplicate
	stored := []string{"msg p0 1 5 0 0 0", "msg p0 2 5 1 0 1", "msg p0 3 5 2 0 0"}
	cons := write(t, dir, "c0.rec", append(stored, "msg p0 1 5 0 0 0")...) // a redelivery
	read := write(t, dir, "r0.rec", stored...)
	v, err := CheckFiles([]string{prod}, nil, cons, read, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v.Broken() || v.Acked != 2 || v.Failed != 1 || v.Read != 3 || v.Consumed != 3 {
		t.Fatalf("verdict %+v", v)
	}
}

func TestCheckFilesViolations(t *testing.T) {
	dir := t.TempDir()
	prod := write(t, dir, "p0.rec", "name p0", "ack 1 5 0 0 0", "ack 2 5 1 0 0", "ack 3 5 2 0 0", "ack 4 5 3 0 0",
		"ack 5 5 4 0 0")
	// seq 2 lost; seq 3 stored twice (the second time after 5); seq 4 stored after 5; seq 5
	// acknowledged as 5:4, stored as 6:0.
	read := write(t, dir, "r0.rec", "msg p0 1 5 0 0 0", "msg p0 3 5 2 0 0", "msg p0 5 6 0 0 0", "msg p0 4 5 3 0 0",
		"msg p0 3 6 1 0 0")
	cons := write(t, dir, "c0.rec", "msg p0 1 5 0 0 0")
	v, err := CheckFiles([]string{prod}, nil, cons, read, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := [6]int{v.Lost, v.Undelivered, v.Duplicated, v.OutOfOrder, v.Moved, v.Acked}
	// Undelivered: 3, 4, 5 (2 is lost, counted there). Out of order: 4 after 5, 3 after 5.
	// Moved: 5 (acked 5:4, stored 6:0) and 3 (stored under 5:2 and 6:1 — 5:2 is there, so not).
	if want := [6]int{1, 3, 1, 2, 1, 5}; got != want {
		t.Fatalf("lost/undelivered/dup/ooo/moved/acked = %v, want %v; examples %q", got, want, v.Examples)
	}
	if !v.Broken() {
		t.Fatal("not broken")
	}
}

func TestCheckTxns(t *testing.T) {
	dir := t.TempDir()
	txn := write(t, dir, "t0.rec", "name t0",
		"begin 1:1 1 2", "txn 1:1 commit 1 2", "outcome 1:1 committed", // all stored: fine
		"begin 1:2 3 4", "txn 1:2 abort 3 4", "outcome 1:2 aborted", // none: fine
		"begin 1:3 5 6", "txn 1:3 commit 5 6", "outcome 1:3 committed", // half: broken
		"begin 1:4 7 8",                                                        // never ended (client killed), one visible: broken
		"begin 1:5 9 10", "txn 1:5 commit 9 10", "outcome 1:5 unknown timeout") // none: fine
	read := write(t, dir, "r0.rec", "msg t0 1 5 0 0 0", "msg t0 2 5 1 0 0", "msg t0 5 5 2 0 0", "msg t0 8 5 3 0 0")
	v, err := CheckFiles(nil, []string{txn}, read, read, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v.TxnBroken != 2 || v.Txns != [3]int{2, 2, 1} {
		t.Fatalf("broken %d, txns %v; %q", v.TxnBroken, v.Txns, v.Examples)
	}
}

func TestScheduleReplays(t *testing.T) {
	topo := Topology{Etcd: []string{"e0", "e1", "e2"}, Bookies: []string{"k0", "k1", "k2", "k3"},
		Brokers: []string{"b0", "b1", "b2"}, Producers: []string{"p0", "p1"}, Consumers: []string{"c0"}}
	a := Schedule(7, topo, 25*time.Second, 5*time.Second, 2, 5)
	b := Schedule(7, topo, 25*time.Second, 5*time.Second, 2, 5)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 7 drew two schedules:\n%v\n%v", a, b)
	}
	kinds := map[FaultKind]bool{}
	for seed := range uint64(200) {
		fs := Schedule(seed, topo, 25*time.Second, 5*time.Second, 2, 5)
		if len(fs) < 2 || len(fs) > 5 {
			t.Fatalf("seed %d: %d faults", seed, len(fs))
		}
		for i, f := range fs {
			kinds[f.Kind] = true
			if f.At < 2*time.Second || f.At > 22*time.Second || (i > 0 && f.At < fs[i-1].At) {
				t.Fatalf("seed %d: fault %v out of the window or order", seed, f)
			}
			if f.Kind == FaultPause && f.For <= 5*time.Second {
				t.Fatalf("seed %d: pause %v not past the TTL", seed, f)
			}
		}
	}
	if len(kinds) != len(faultWeights) {
		t.Fatalf("200 seeds drew %d of %d fault kinds", len(kinds), len(faultWeights))
	}
}

func TestCheckFilesIncompleteRead(t *testing.T) {
	dir := t.TempDir()
	prod := write(t, dir, "p0.rec", "name p0", "ack 1 5 0 0 0", "ack 2 6 0 0 1")
	read := write(t, dir, "r0.rec", "msg p0 1 5 0 0 0", "end 0") // partition 1 never ended
	v, err := CheckFiles([]string{prod}, nil, read, read, 2)
	if err != nil {
		t.Fatal(err)
	}
	if v.Lost != 0 || v.Unverified != 1 {
		t.Fatalf("lost %d unverified %d, want 0 and 1", v.Lost, v.Unverified)
	}
}
