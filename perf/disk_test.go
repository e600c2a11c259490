package perf

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestDiskRate: the latency reference syncs every copy of every entry that arrived in the
// run, into files it removes afterwards, and reports the rate it was given.
func TestDiskRate(t *testing.T) {
	dir := t.TempDir()
	var lines []Progress
	res, err := Disk(context.Background(), DiskOptions{Dir: dir, Size: 512, Rate: 2000, Journals: 3, Copies: 2,
		Duration: 1500 * time.Millisecond, Prealloc: 1 << 20, Progress: func(p Progress) { lines = append(lines, p) }})
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^disk \(journals 3, copies per entry 2, .* at 2000 entries/s\): (\d+) entries of 512 B in .*add latency p50 \S+ p99 \S+ p99.9 \S+ max \S+$`).FindStringSubmatch(res.String())
	if m == nil {
		t.Fatalf("result %q", res)
	}
	if n, _ := strconv.Atoi(m[1]); n != 3000 || res.Latency.Samples != 3000 {
		t.Fatalf("%d entries synced, want all 3000 that arrived: %s", n, res)
	}
	if len(lines) == 0 {
		t.Fatal("no progress report")
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("files left behind: %v", left)
	}
}

// TestDiskThroughput: groups of entries are synced until the duration has passed.
func TestDiskThroughput(t *testing.T) {
	dir := t.TempDir()
	res, err := Disk(context.Background(), DiskOptions{Dir: dir, Size: 256, Group: 4, Duration: 200 * time.Millisecond,
		Prealloc: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.Throughput.Count == 0 || res.Throughput.Count != 4*int64(res.Latency.Samples) {
		t.Fatalf("%d entries in %d syncs, want 4 per sync: %s", res.Throughput.Count, res.Latency.Samples, res)
	}
	if !regexp.MustCompile(`^disk \(groups of 4, fdatasync each\): \d+ entries of 256 B in `).MatchString(res.String()) {
		t.Fatalf("result %q", res)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("files left behind: %v", left)
	}
}

func TestDiskOptionsRejected(t *testing.T) {
	for name, o := range map[string]DiskOptions{
		"no dir":          {Size: 1, Group: 1, Duration: time.Second, Prealloc: 1},
		"prealloc < size": {Dir: ".", Size: 10, Group: 1, Duration: time.Second, Prealloc: 1},
		"copies > files":  {Dir: ".", Size: 1, Duration: time.Second, Prealloc: 1, Rate: 10, Journals: 1, Copies: 2},
		"no group":        {Dir: ".", Size: 1, Duration: time.Second, Prealloc: 1},
	} {
		if _, err := Disk(context.Background(), o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
