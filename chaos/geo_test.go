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
// so that a failure in CI replays with scripts/chaos -clusters 2 -duration 10s -seed N):
// seed 45 cuts the link between the clusters, then one way and the other, and kills b's
// consumer; seed 61 cuts the link while b's etcd is paused past the session TTL.
func TestChaosGeoCI(t *testing.T) {
	for _, seed := range []uint64{45, 61} {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			runSeed(t, seed, Options{Clusters: 2, Duration: 10 * time.Second})
		})
	}
}

// TestChaosGeoAllBrokersInRecord: cluster records whose brokerServiceUrl names every broker
// of the cluster (pulsar://b0:6650,b1:6650), as Pulsar's clients and its replicators take
// them; the first broker of b is killed for a while, so replication to b must find the
// topic's owner through the other. The broker accepts such a record
// (resources.CheckClusterData), but its replicators' client (pulsarclient.New) takes the
// whole host list as one address and never connects: nothing replicates.
func TestChaosGeoAllBrokersInRecord(t *testing.T) {
	knownBug(t, "a cluster record with several broker hosts is accepted but its replicators never connect")
	runSeed(t, 22, Options{Clusters: 2, Duration: 10 * time.Second, AllBrokersInRecords: true,
		Faults: []Fault{{Kind: FaultKill, At: 2 * time.Second, For: 12 * time.Second, Target: "b-b0"}}})
}

// TestChaosGeoReplicationStallsAfterOwnerMove replays the faults of chaos seed 7007
// (-clusters 2 -duration 20s): the link between a and b cut, then lossy, while the broker
// owning partition 1 in b is killed and the partition moves to b's other broker. Both
// replicators of that partition — a's (its broker never restarted) towards b's new owner,
// and the new owner's towards a — then stopped for good after exactly one window (1000
// entries) of sends: the entries reached the remote cluster, but the replication cursors'
// mark-delete positions never moved past where they stood before the move, the topic stats
// said connected: false with the backlog growing, and no "replicator not connected" was
// logged. Every message published on that partition afterwards stayed in its own cluster
// (278 acknowledged messages missing, 114 in a and 164 in b).
func TestChaosGeoReplicationStallsAfterOwnerMove(t *testing.T) {
	knownBug(t, "replication of a partition stops for good after its owner in the remote cluster moved")
	runSeed(t, 7007, seed7007Options())
}

// seed7007Options are the options of the batch that found chaos seed 7007.
func seed7007Options() Options {
	return Options{Clusters: 2, Duration: 20 * time.Second, MinFaults: 3, MaxFaults: 6}
}

// TestSeed7007Schedule: the replay of chaos seed 7007 still draws the faults it was found
// with (the owner of partition 1 in b killed while the link between a and b is cut).
func TestSeed7007Schedule(t *testing.T) {
	var got []string
	for _, f := range PlannedFaults(7007, seed7007Options()) {
		got = append(got, f.String())
	}
	want := []string{
		"+  2.1s   4.2s geo-cut    b<->a",
		"+  2.5s   5.6s geo-one-way b->a",
		"+  4.5s   5.3s geo-loss   b->a 20%",
		"+  6.3s   5.6s kill-owner b partition 1",
		"+  7.0s   0.9s kill-owner a partition 0",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("seed 7007 draws\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestChaosGeoReplicationStallsAfterSessionLoss replays chaos seed 9006 (-clusters 3
// -duration 12s): the link between a and c cut while c's etcd is held (a stall of its
// inbound bytes) past the session TTL, so c's brokers give up their metadata sessions and
// reload both partitions. All four of c's replicators then stopped after one window, as in
// TestChaosGeoReplicationStallsAfterOwnerMove, with no broker killed.
func TestChaosGeoReplicationStallsAfterSessionLoss(t *testing.T) {
	knownBug(t, "replication stops for good after its topic reloads when its broker lost the metadata session")
	runSeed(t, 9006, Options{Clusters: 3, Duration: 12 * time.Second})
}
