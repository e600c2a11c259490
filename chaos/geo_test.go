package chaos

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestCheckGeo: a message acknowledged in one cluster is checked in every cluster — stored
// once, in per-producer order, delivered to the subscription — and its message id only in
// its own cluster (a replicated message has the remote's own ids).
func TestCheckGeo(t *testing.T) {
	dir := t.TempDir()
	ap := write(t, dir, "a-p0.rec", "name a-p0", "ack 1 5 0 0 0", "ack 2 5 1 0 1", "ack 3 5 2 0 0")
	bp := write(t, dir, "b-p0.rec", "name b-p0", "ack 1 7 0 0 0")
	aStored := []string{"msg a-p0 1 5 0 0 0", "msg a-p0 3 5 2 0 0", "msg b-p0 1 9 0 0 0", "msg a-p0 2 5 1 0 1"}
	a := SiteFiles{Cluster: "a", Producers: []string{ap}, Consumer: write(t, dir, "a-c0.rec", aStored...),
		Reader: write(t, dir, "a-r0.rec", aStored...)}
	bStored := []string{"msg b-p0 1 7 0 0 0", "msg a-p0 1 8 0 0 0", "msg a-p0 3 8 1 0 0", "msg a-p0 2 8 2 0 1"}
	b := SiteFiles{Cluster: "b", Producers: []string{bp}, Consumer: write(t, dir, "b-c0.rec", bStored...),
		Reader: write(t, dir, "b-r0.rec", bStored...)}
	v, err := CheckGeo([]SiteFiles{a, b}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v.Broken() || v.Acked != 4 || v.Read != 8 || v.Consumed != 8 {
		t.Fatalf("clean run: verdict %+v", v)
	}

	// In b: a-p0's seq 2 lost, seq 3 stored twice (the second time after 1, out of order),
	// and b's own message stored under another id than acknowledged; b's subscription
	// missed a-p0's seq 1.
	b.Reader = write(t, dir, "b-r0.bad", "msg b-p0 1 7 1 0 0", "msg a-p0 1 8 0 0 0", "msg a-p0 3 8 1 0 0",
		"msg a-p0 3 8 3 0 0")
	b.Consumer = write(t, dir, "b-c0.bad", "msg b-p0 1 7 1 0 0", "msg a-p0 3 8 1 0 0")
	v, err = CheckGeo([]SiteFiles{a, b}, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := [5]int{v.Lost, v.Undelivered, v.Duplicated, v.OutOfOrder, v.Moved}
	if want := [5]int{1, 1, 1, 1, 1}; got != want {
		t.Fatalf("lost/undelivered/dup/ooo/moved = %v, want %v; examples %q", got, want, v.Examples)
	}
	for _, e := range v.Examples {
		if !strings.HasPrefix(e, "in b: ") {
			t.Fatalf("example %q does not name the cluster", e)
		}
	}
}

// TestScheduleGeoReplays: a seed draws the same schedule across clusters every time; 300
// seeds draw every kind; faults between clusters name two different clusters.
func TestScheduleGeoReplays(t *testing.T) {
	sites := GeoTopologies(3)
	a := ScheduleGeo(7, sites, 20*time.Second, 5*time.Second, 2, 5)
	if b := ScheduleGeo(7, sites, 20*time.Second, 5*time.Second, 2, 5); !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 7 drew two schedules:\n%v\n%v", a, b)
	}
	kinds := map[FaultKind]bool{}
	for seed := range uint64(300) {
		for _, f := range ScheduleGeo(seed, sites, 20*time.Second, 5*time.Second, 2, 5) {
			kinds[f.Kind] = true
			switch f.Kind {
			case FaultGeoCut, FaultGeoOneWay, FaultGeoLoss:
				if f.Target == f.Peer || f.Target == "" || f.Peer == "" {
					t.Fatalf("seed %d: %v", seed, f)
				}
			case FaultKillOwner:
				if f.Target == "" || f.Partition < 0 || f.Partition > 1 {
					t.Fatalf("seed %d: %v", seed, f)
				}
			case FaultEtcdPause:
				if !strings.HasSuffix(f.Target, "-e0") || f.For <= 5*time.Second {
					t.Fatalf("seed %d: %v", seed, f)
				}
			}
		}
	}
	if len(kinds) != len(geoFaultWeights) {
		t.Fatalf("300 seeds drew %d of %d fault kinds", len(kinds), len(geoFaultWeights))
	}
	if mix := FaultMix(a); mix == "" || strings.Count(mix, "×") > len(a) {
		t.Fatalf("fault mix %q of %v", mix, a)
	}
}

// TestChaosGeoCI runs short randomized runs across two clusters (the same seeds every time,
// so that a failure in CI replays with scripts/chaos -clusters 2 -seed N).
func TestChaosGeoCI(t *testing.T) {
	for _, seed := range []uint64{21} {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			runSeed(t, seed, Options{Clusters: 2, Duration: 10 * time.Second})
		})
	}
}
