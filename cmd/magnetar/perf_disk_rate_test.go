package main

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestDiskRateRun: the latency reference syncs every copy of every entry that arrived in the
// run, into files it removes afterwards, and reports the rate it was given.
func TestDiskRateRun(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	res, err := diskRateRun{dir: dir, size: 512, rate: 2000, journals: 3, copies: 2, d: 1500 * time.Millisecond,
		prealloc: 1 << 20}.run(context.Background(), func(s string) { lines = append(lines, s) })
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`: (\d+) entries of 512 B in .*add latency p50 \S+ p99 \S+ p99.9 \S+ max \S+$`).FindStringSubmatch(res)
	if m == nil {
		t.Fatalf("result %q", res)
	}
	if n, _ := strconv.Atoi(m[1]); n != 3000 {
		t.Fatalf("%d entries synced, want all 3000 that arrived: %s", n, res)
	}
	if len(lines) == 0 {
		t.Fatal("no progress line")
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("files left behind: %v", left)
	}
}
