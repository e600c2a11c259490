package chaos

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// FaultKind names a fault.
type FaultKind string

// The faults a schedule draws from.
const (
	FaultKill      FaultKind = "kill"       // SIGKILL a process, restart it after For
	FaultPause     FaultKind = "pause"      // SIGSTOP for longer than the session TTL, then SIGCONT
	FaultEtcdCut   FaultKind = "etcd-cut"   // a broker cut from every etcd member, not from clients
	FaultBookieCut FaultKind = "bookie-cut" // a bookie cut from every broker
	FaultEtcdAlone FaultKind = "etcd-alone" // an etcd member cut from every node (a minority)
	FaultOneWay    FaultKind = "one-way"    // packets from one node to another dropped (route)
	FaultDelay     FaultKind = "delay"      // the proxy in front of a node delays every chunk
	FaultLoss      FaultKind = "loss"       // the proxy pauses random chunks as retransmissions would
	FaultStall     FaultKind = "stall"      // the proxy holds one direction of a node's connections
	FaultReset     FaultKind = "reset"      // the proxy resets every connection of a node
	FaultDiskFull  FaultKind = "disk-full"  // a bookie's filesystem filled to the last byte

	// Between clusters (Options.Clusters; Target and Peer name clusters).
	FaultGeoCut    FaultKind = "geo-cut"     // every broker of Target cut from every broker of Peer, both ways
	FaultGeoOneWay FaultKind = "geo-one-way" // packets from Target's brokers to Peer's brokers dropped (route)
	FaultGeoLoss   FaultKind = "geo-loss"    // bytes from Target's brokers to Peer's paused as by lost packets
	FaultKillOwner FaultKind = "kill-owner"  // SIGKILL Target's broker that owns Partition (its replicators), restart after For
	FaultEtcdPause FaultKind = "etcd-pause"  // SIGSTOP Target's etcd past the session TTL, then SIGCONT
)

// Fault is one drawn fault: what, on which nodes, when (from the start of the workload) and
// for how long.
type Fault struct {
	Kind   FaultKind
	At     time.Duration
	For    time.Duration
	Target string // node name
	Peer   string // the other node of a one-way drop
	Dir    Direction
	Delay  time.Duration
	Loss   float64
	// Partition is the partition whose owner a kill-owner kills.
	Partition int
}

func (f Fault) String() string {
	var b strings.Builder
	dur := fmt.Sprintf("%5.1fs", f.For.Seconds())
	if f.For < 0 {
		dur = "  for good"
	}
	fmt.Fprintf(&b, "+%5.1fs %s %-10s %s", f.At.Seconds(), dur, f.Kind, f.Target)
	switch f.Kind {
	case FaultOneWay:
		fmt.Fprintf(&b, "->%s", f.Peer)
	case FaultDelay:
		fmt.Fprintf(&b, " %v", f.Delay)
	case FaultLoss:
		fmt.Fprintf(&b, " %.0f%%", f.Loss*100)
	case FaultStall:
		fmt.Fprintf(&b, " %s", f.Dir)
	case FaultGeoCut:
		fmt.Fprintf(&b, "<->%s", f.Peer)
	case FaultGeoOneWay:
		fmt.Fprintf(&b, "->%s", f.Peer)
	case FaultGeoLoss:
		fmt.Fprintf(&b, "->%s %.0f%%", f.Peer, f.Loss*100)
	case FaultKillOwner:
		fmt.Fprintf(&b, " partition %d", f.Partition)
	}
	return b.String()
}

// Topology names the nodes a schedule may pick.
type Topology struct {
	Cluster                                      string // the Pulsar cluster's name, with Options.Clusters
	Etcd, Bookies, Brokers, Producers, Consumers []string
}

func (t Topology) servers() []string {
	return concat(t.Etcd, t.Bookies, t.Brokers)
}

func concat(ss ...[]string) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s...)
	}
	return out
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6d61676e65746172)) }

// faultWeight is how often a kind of fault is drawn, relative to the others of its table.
type faultWeight struct {
	kind FaultKind
	w    int
}

// faultDraw draws a schedule's faults from its seed: how many (n), then each one's kind (by
// weight) and start, and the choices of its targets and durations (pick, secs), always in
// that order for the same seed.
type faultDraw struct {
	rng     *rand.Rand
	weights []faultWeight
	total   int
	span    time.Duration
	n       int
}

func newFaultDraw(seed uint64, weights []faultWeight, d time.Duration, minFaults, maxFaults int) *faultDraw {
	dr := &faultDraw{rng: newRand(seed), weights: weights, span: max(d-5*time.Second, time.Second)}
	for _, w := range weights {
		dr.total += w.w
	}
	dr.n = minFaults + dr.rng.IntN(max(1, maxFaults-minFaults+1))
	return dr
}

// next draws a fault's kind and its start, in [2 s, d−3 s].
func (dr *faultDraw) next() Fault {
	x := dr.rng.IntN(dr.total)
	var kind FaultKind
	for _, w := range dr.weights {
		if x < w.w {
			kind = w.kind
			break
		}
		x -= w.w
	}
	return Fault{Kind: kind, At: 2*time.Second + time.Duration(dr.rng.Int64N(int64(dr.span))).Round(100*time.Millisecond)}
}

func (dr *faultDraw) pick(ss []string) string { return ss[dr.rng.IntN(len(ss))] }

// secs draws a duration in [lo, hi) seconds, to 100 ms.
func (dr *faultDraw) secs(lo, hi float64) time.Duration {
	return time.Duration((lo + dr.rng.Float64()*(hi-lo)) * float64(time.Second)).Round(100 * time.Millisecond)
}

var faultWeights = []faultWeight{
	{FaultKill, 6}, {FaultPause, 3}, {FaultEtcdCut, 2}, {FaultBookieCut, 2}, {FaultEtcdAlone, 1},
	{FaultOneWay, 2}, {FaultDelay, 2}, {FaultLoss, 2}, {FaultStall, 2}, {FaultReset, 1}, {FaultDiskFull, 2},
}

// Schedule draws the faults of a run from its seed: between minFaults and maxFaults faults,
// each starting in [2 s, d−3 s] of a workload of length d. The same seed, topology and
// options give the same schedule.
func Schedule(seed uint64, topo Topology, d, ttl time.Duration, minFaults, maxFaults int) []Fault {
	dr := newFaultDraw(seed, faultWeights, d, minFaults, maxFaults)
	rng, pick, secs := dr.rng, dr.pick, dr.secs
	var out []Fault
	for range dr.n {
		f := dr.next()
		switch f.Kind {
		case FaultKill:
			// Servers mostly; producers and the consumer too (a restarted producer resends).
			if rng.IntN(4) == 0 {
				f.Target = pick(concat(topo.Producers, topo.Consumers))
			} else {
				f.Target = pick(topo.servers())
			}
			f.For = secs(0.5, 8)
		case FaultPause:
			f.Target = pick(topo.servers())
			f.For = ttl + secs(1, 4)
		case FaultEtcdCut:
			f.Target = pick(topo.Brokers)
			f.For = secs(2, 12)
		case FaultBookieCut:
			f.Target = pick(topo.Bookies)
			f.For = secs(2, 12)
		case FaultEtcdAlone:
			f.Target = pick(topo.Etcd)
			f.For = secs(2, 10)
		case FaultOneWay:
			pairs := [][2][]string{
				{topo.Brokers, topo.Bookies}, {topo.Bookies, topo.Brokers}, {topo.Brokers, topo.Etcd},
				{topo.Etcd, topo.Brokers}, {topo.Brokers, topo.Producers}, {topo.Producers, topo.Brokers},
			}
			pr := pairs[rng.IntN(len(pairs))]
			f.Target, f.Peer = pick(pr[0]), pick(pr[1])
			f.For = secs(2, 10)
		case FaultDelay:
			f.Target = pick(topo.servers())
			f.Delay = time.Duration(20+rng.IntN(280)) * time.Millisecond
			f.For = secs(3, 10)
		case FaultLoss:
			f.Target = pick(topo.servers())
			f.Loss = 0.05 + rng.Float64()*0.25
			f.For = secs(3, 10)
		case FaultStall:
			f.Target = pick(concat(topo.Bookies, topo.Brokers, topo.Etcd))
			f.Dir = Direction(rng.IntN(2))
			f.For = secs(2, 10)
		case FaultReset:
			f.Target = pick(topo.servers())
		case FaultDiskFull:
			f.Target = pick(topo.Bookies)
			f.For = secs(4, 10)
		}
		out = append(out, f)
	}
	slices.SortStableFunc(out, func(a, b Fault) int { return cmp.Compare(a.At, b.At) })
	return out
}

// FaultMix counts faults by kind, as "kill×3 pause×1".
func FaultMix(fs []Fault) string {
	n := map[FaultKind]int{}
	for _, f := range fs {
		n[f.Kind]++
	}
	var parts []string
	for _, w := range slices.Concat(faultWeights, geoFaultWeights) {
		if n[w.kind] > 0 {
			parts = append(parts, fmt.Sprintf("%s×%d", w.kind, n[w.kind]))
			n[w.kind] = 0
		}
	}
	return strings.Join(parts, " ")
}
