package loadmgr

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"
)

// The simulation runs the core against a seeded world of brokers and bundles whose load
// changes every shedding period. The world executes the plans at once (unload moves a bundle,
// split halves its range and its load); each broker reports as the Reporter does (on a
// change over the threshold or after the max interval). Properties:
//   - balance: from all load on one of three brokers, within a few shedding periods no broker
//     carries more than 1.5× the mean message rate, and it stays so;
//   - no flapping: no bundle moves twice within the grace period.
// The mutations (no grace period; a placement picking the most loaded broker; no shedding;
// and, for the burst scenario below, assignments counted with no load, or only until
// reported) must break one.

const simPeriod = time.Minute // loadBalancerSheddingIntervalMinutes

type simBundle struct {
	owner string
	load  BundleLoad
}

type simWorld struct {
	t       testing.TB
	rnd     *rand.Rand
	now     time.Time
	brokers []string
	bundles map[string]*simBundle
	// lastReport and lastWrite are each broker's reporter state.
	lastReport map[string]*Report
	lastWrite  map[string]time.Time
	moves      map[string][]time.Time // bundle → times it was moved by an unload
	splits     int
}

func newSimWorld(t testing.TB, seed int64, brokers, namespaces, bundlesPerNS int) *simWorld {
	w := &simWorld{t: t, rnd: rand.New(rand.NewSource(seed)), now: time.Unix(1_700_000_000, 0),
		bundles: map[string]*simBundle{}, lastReport: map[string]*Report{}, lastWrite: map[string]time.Time{},
		moves: map[string][]time.Time{}}
	for i := range brokers {
		w.brokers = append(w.brokers, fmt.Sprintf("broker-%d", i+1))
	}
	step := uint64(1<<32) / uint64(bundlesPerNS)
	for n := range namespaces {
		for j := range bundlesPerNS {
			lo, hi := uint64(j)*step, uint64(j+1)*step
			if j == bundlesPerNS-1 {
				hi = 0xffffffff
			}
			name := fmt.Sprintf("tenant/ns%d/0x%08x_0x%08x", n, lo, hi)
			rate := 200 + 800*w.rnd.Float64()
			w.bundles[name] = &simBundle{owner: w.brokers[0], load: BundleLoad{
				MsgRateIn: rate / 2, MsgRateOut: rate / 2, MsgThroughputIn: rate * 512, MsgThroughputOut: rate * 512,
				Topics: 1 + w.rnd.Intn(20), Producers: 1 + w.rnd.Intn(5), Consumers: 1 + w.rnd.Intn(5)}}
		}
	}
	return w
}

// drift scales every bundle's load by a random factor in [1-d, 1+d]; with probability jump
// a bundle's load is multiplied or divided by 3.
func (w *simWorld) drift(d, jump float64) {
	for _, name := range sortedKeys(w.bundles) {
		f := 1 - d + 2*d*w.rnd.Float64()
		if w.rnd.Float64() < jump {
			if w.rnd.Intn(2) == 0 {
				f *= 3
			} else {
				f /= 3
			}
		}
		l := &w.bundles[name].load
		l.MsgRateIn *= f
		l.MsgRateOut *= f
		l.MsgThroughputIn *= f
		l.MsgThroughputOut *= f
	}
}

// report makes each broker's report and hands the ones its reporter would write to st.
func (w *simWorld) report(st *State, thresholdPct float64, maxInterval time.Duration) {
	for _, id := range w.brokers {
		r := &Report{BrokerID: id, Bundles: map[string]BundleLoad{}, LastUpdate: w.now.UnixMilli(),
			CPU: Usage{Usage: 5, Limit: 100}, Memory: Usage{Usage: 100, Limit: 1000}}
		for name, b := range w.bundles {
			if b.owner == id {
				r.Bundles[name] = b.load
			}
		}
		r.fillTotals()
		if reportChanged(w.lastReport[id], r, thresholdPct) || w.now.Sub(w.lastWrite[id]) >= maxInterval {
			w.lastReport[id], w.lastWrite[id] = r, w.now
			st.Observe(id, r)
		}
	}
}

// execute applies a plan to the world.
func (w *simWorld) execute(acts []Action) {
	for _, a := range acts {
		b := w.bundles[a.Bundle]
		if b == nil || b.owner != a.From {
			w.t.Fatalf("%v: bundle %s is owned by %v, not %s", w.now, a.Bundle, b, a.From)
		}
		switch a.Kind {
		case ActionUnload:
			b.owner = a.To
			w.moves[a.Bundle] = append(w.moves[a.Bundle], w.now)
		case ActionSplit:
			w.split(a.Bundle)
		}
	}
}

func (w *simWorld) split(name string) {
	b := w.bundles[name]
	ns, rng, err := splitBundleName(name)
	if err != nil {
		w.t.Fatal(err)
	}
	loS, hiS, _ := strings.Cut(rng, "_")
	lo, _ := parseHex32(loS)
	hi, _ := parseHex32(hiS)
	mid := lo + (hi-lo)/2
	f := 0.3 + 0.4*w.rnd.Float64()
	for i, part := range [][2]uint64{{lo, mid}, {mid, hi}} {
		share := f
		if i == 1 {
			share = 1 - f
		}
		l := b.load
		l.MsgRateIn *= share
		l.MsgRateOut *= share
		l.MsgThroughputIn *= share
		l.MsgThroughputOut *= share
		w.bundles[fmt.Sprintf("%s/0x%08x_0x%08x", ns, part[0], part[1])] = &simBundle{owner: b.owner, load: l}
	}
	delete(w.bundles, name)
	w.splits++
}

// rates returns each broker's message rate.
func (w *simWorld) rates() []float64 {
	rs := make([]float64, len(w.brokers))
	for _, b := range w.bundles {
		rs[slices.Index(w.brokers, b.owner)] += b.load.MsgRate()
	}
	return rs
}

// step advances one shedding period: load changes, reports, the leader's plan.
func (w *simWorld) step(st *State, d, jump float64) []Action {
	w.now = w.now.Add(simPeriod)
	w.drift(d, jump)
	w.report(st, 10, 15*time.Minute)
	acts := st.Plan(w.now)
	w.execute(acts)
	return acts
}

func simState(th Thresholds, p Placement, w *simWorld) *State {
	st := NewState(th, p)
	for _, id := range w.brokers {
		st.SetLive(id, true)
	}
	return st
}

// balanceViolation runs the convergence scenario and returns the first period at or after
// settle where the most loaded broker carried more than 1.5× the mean, or "".
func balanceViolation(t testing.TB, seed int64, th Thresholds, p Placement) string {
	v, _, _ := balanceRun(t, seed, th, p)
	return v
}

// balanceRun also returns the largest max/mean ratio after settling and the unloads made.
func balanceRun(t testing.TB, seed int64, th Thresholds, p Placement) (violation string, worst float64, unloads int) {
	w := newSimWorld(t, seed, 3, 4, 4)
	st := simState(th, p, w)
	const settle, periods = 3, 40
	for i := 1; i <= periods; i++ {
		unloads += len(w.step(st, 0.05, 0))
		if i < settle {
			continue
		}
		mean, mx := meanAndMax(w.rates())
		worst = max(worst, mx/mean)
		if mx > 1.5*mean && violation == "" {
			violation = fmt.Sprintf("seed %d period %d: rates %.0f, max %.2f× mean", seed, i, w.rates(), mx/mean)
		}
	}
	return violation, worst, unloads
}

// flapViolation runs the churn scenario and returns the first bundle moved twice within the
// (real) grace period, or "".
func flapViolation(t testing.TB, seed int64, th Thresholds, grace time.Duration) string {
	w := newSimWorld(t, seed, 3, 4, 4)
	st := simState(th, nil, w)
	for range flapPeriods {
		w.step(st, 0.3, 0.1)
	}
	for _, name := range sortedKeys(w.moves) {
		ts := w.moves[name]
		for i := 1; i < len(ts); i++ {
			if ts[i].Sub(ts[i-1]) < grace {
				return fmt.Sprintf("seed %d: bundle %s moved at %v and again %v later", seed, name, ts[i-1], ts[i].Sub(ts[i-1]))
			}
		}
	}
	return ""
}

// simSeeds is the seeds of each property; flapSeeds and flapPeriods size the churn
// scenario (two hours of shedding periods, four grace periods).
const (
	simSeeds    = 50
	flapSeeds   = 20
	flapPeriods = 120
)

func TestSimBalanceFromOneBroker(t *testing.T) {
	var worst float64
	var unloads int
	for seed := int64(1); seed <= simSeeds; seed++ {
		v, w, u := balanceRun(t, seed, DefaultThresholds(), nil)
		if v != "" {
			t.Fatal(v)
		}
		worst, unloads = max(worst, w), unloads+u
	}
	t.Logf("%d seeds: worst max/mean rate after %d periods %.2f; %.1f unloads per seed", simSeeds, 3, worst, float64(unloads)/simSeeds)
}

func TestSimNoFlapping(t *testing.T) {
	th := DefaultThresholds()
	for seed := int64(1); seed <= flapSeeds; seed++ {
		if v := flapViolation(t, seed, th, th.GracePeriod); v != "" {
			t.Fatal(v)
		}
	}
}

// TestSimMutations checks that the properties catch a broken core.
func TestSimMutations(t *testing.T) {
	t.Run("no-grace-period", func(t *testing.T) {
		th := DefaultThresholds()
		th.GracePeriod = 0
		if !anySeed(func(seed int64) string { return flapViolation(t, seed, th, DefaultThresholds().GracePeriod) }) {
			t.Fatal("a core without grace period passed the flapping property")
		}
	})
	t.Run("most-loaded-placement", func(t *testing.T) {
		if !anySeed(func(seed int64) string { return balanceViolation(t, seed, DefaultThresholds(), mostLoaded{}) }) {
			t.Fatal("a placement picking the most loaded broker passed the balance property")
		}
	})
	for _, m := range []struct {
		name string
		mut  mutation
	}{
		{"weightless-assignments", mutation{weightlessAssignments: true}},
		{"drop-reported-estimate", mutation{dropReportedEstimate: true}},
	} {
		t.Run(m.name, func(t *testing.T) {
			if !anySeed(func(seed int64) string {
				v := burstViolation(t, seed, m.mut)
				if v != "" {
					t.Logf("caught: %s", v)
				}
				return v
			}) {
				t.Fatal("the burst checker passed the mutated core")
			}
		})
	}
	t.Run("no-shedding", func(t *testing.T) {
		th := DefaultThresholds()
		th.SheddingEnabled = false
		if !anySeed(func(seed int64) string { return balanceViolation(t, seed, th, nil) }) {
			t.Fatal("a core that never sheds passed the balance property")
		}
	})
}

func anySeed(f func(seed int64) string) bool {
	for seed := int64(1); seed <= simSeeds; seed++ {
		if f(seed) != "" {
			return true
		}
	}
	return false
}

// mostLoaded is the mutant placement.
type mostLoaded struct{}

func (mostLoaded) Choose(_ string, cs []Candidate) int {
	best := 0
	for i, c := range cs {
		if lessLoaded(cs[best], c) {
			best = i
		}
	}
	return best
}

// TestSimSplitsHotBundles: a bundle over the message rate threshold is split until the
// namespace reaches its maximum bundles, and the halves then spread.
func TestSimSplitsHotBundles(t *testing.T) {
	th := DefaultThresholds()
	th.MaxBundleMsgRate = 1500
	th.MaxBundles = 6
	w := newSimWorld(t, 7, 3, 1, 4)
	for _, name := range sortedKeys(w.bundles)[:1] {
		l := &w.bundles[name].load
		l.MsgRateIn, l.MsgRateOut = 4000, 4000
	}
	st := simState(th, nil, w)
	for range 40 {
		w.step(st, 0, 0)
	}
	if len(w.bundles) != th.MaxBundles {
		t.Fatalf("namespace has %d bundles after %d splits, want the maximum %d", len(w.bundles), w.splits, th.MaxBundles)
	}
	if mean, mx := meanAndMax(w.rates()); mx > 1.5*mean {
		t.Fatalf("rates %.0f after the splits: max %.2f× mean", w.rates(), mx/mean)
	}
}

// BenchmarkPlan measures one leader decision over a cluster of brokers and bundles.
func BenchmarkPlan(b *testing.B) {
	for _, size := range []struct{ brokers, bundles int }{{3, 16}, {10, 256}, {50, 4096}} {
		b.Run(fmt.Sprintf("brokers=%d/bundles=%d", size.brokers, size.bundles), func(b *testing.B) {
			w := newSimWorld(b, 1, size.brokers, size.bundles/16, 16)
			st := simState(DefaultThresholds(), nil, w)
			w.report(st, 10, 15*time.Minute)
			for b.Loop() {
				st.Plan(w.now)
				w.now = w.now.Add(simPeriod) // past nothing: the grace period keeps the plans small
			}
		})
	}
}

// BenchmarkSelectBroker measures one assignment of an unowned bundle.
func BenchmarkSelectBroker(b *testing.B) {
	for _, size := range []struct{ brokers, bundles int }{{3, 16}, {50, 4096}} {
		b.Run(fmt.Sprintf("brokers=%d/bundles=%d", size.brokers, size.bundles), func(b *testing.B) {
			w := newSimWorld(b, 1, size.brokers, size.bundles/16, 16)
			st := simState(DefaultThresholds(), nil, w)
			w.report(st, 10, 15*time.Minute)
			i := 0
			for b.Loop() {
				st.SelectBroker(fmt.Sprintf("other/ns/0x%08x_0x%08x", i, i+1), w.now)
				i++
			}
		})
	}
}

// The burst scenario: a namespace of new bundles is looked up at once on a cluster whose
// brokers carry unequal, randomly spread load. Every lookup is assigned before its client
// connects; part-way through, some assigned bundles connect (with a little load) and the
// brokers report. The checker runs after every assignment:
//   - least projected load: the broker chosen had the least projected rate of all (none is
//     overloaded here), where a broker's projected rate is its last observed report with
//     every bundle of the burst assigned to it counted at least as assignedBundleEstimate
//     (Pulsar counts preallocated bundles so);
//   - a repeated lookup of an assigned bundle gets the same broker.
// Then: if the estimates exceed what it takes to raise every broker to the most loaded one's
// reported rate plus one estimate, every broker got part of the burst. The mutations
// weightlessAssignments (the burst goes to the least loaded broker) and dropReportedEstimate
// (the rest of it goes to the brokers that reported) are caught.

// burstViolation runs the burst scenario and returns its first violation, or "".
func burstViolation(t testing.TB, seed int64, mut mutation) string {
	v, _ := burstRun(t, seed, mut)
	return v
}

// burstRun also reports whether the burst was large enough for the spread property.
func burstRun(t testing.TB, seed int64, mut mutation) (violation string, spreadChecked bool) {
	w := newSimWorld(t, seed, 2+int(seed%4), 3, 4)
	for _, name := range sortedKeys(w.bundles) {
		w.bundles[name].owner = w.brokers[w.rnd.Intn(len(w.brokers))]
	}
	st := simState(DefaultThresholds(), nil, w)
	st.mut = mut
	w.report(st, 10, 15*time.Minute)
	n := 6 + w.rnd.Intn(60)
	connectAt := w.rnd.Intn(n)
	assigned := map[string]string{} // burst bundle → broker
	var order []string
	est := assignedBundleEstimate.MsgRate()
	// uncovered is the part of the estimate a burst bundle's reported load does not cover.
	uncovered := func(b string) float64 {
		return max(0, est-w.lastReport[assigned[b]].Bundles[b].MsgRate())
	}
	projected := func(id string) float64 {
		p := w.lastReport[id].MsgRate()
		for b, to := range assigned {
			if to == id {
				p += uncovered(b)
			}
		}
		return p
	}
	for i := range n {
		if i == connectAt { // some clients connect, with a little load; the brokers report
			for _, b := range order {
				if w.rnd.Intn(2) == 0 {
					rate := 10 * w.rnd.Float64()
					w.bundles[b] = &simBundle{owner: assigned[b], load: BundleLoad{MsgRateIn: rate / 2, MsgRateOut: rate / 2}}
				}
			}
			w.now = w.now.Add(time.Second)
			w.report(st, 10, 15*time.Minute)
		}
		b := fmt.Sprintf("burst/ns/0x%08x_0x%08x", i<<20, (i+1)<<20)
		before := map[string]float64{}
		for _, id := range w.brokers {
			before[id] = projected(id)
		}
		to := st.SelectBroker(b, w.now)
		if to == "" {
			return fmt.Sprintf("seed %d: lookup %d of %s got no broker", seed, i, b), false
		}
		for _, id := range w.brokers {
			if before[id] < before[to]-1e-6 {
				return fmt.Sprintf("seed %d: lookup %d of %d: %s went to %s (projected %.0f msg/s), but %s had %.0f (assigned so far %v)",
					seed, i, n, b, to, before[to], id, before[id], countBy(assigned)), false
			}
		}
		assigned[b] = to
		order = append(order, b)
		if again := order[w.rnd.Intn(len(order))]; st.SelectBroker(again, w.now) != assigned[again] {
			return fmt.Sprintf("seed %d: a repeated lookup of %s left %s", seed, again, assigned[again]), false
		}
	}
	// Water-filling: a broker left without any keeps its reported rate r, and every other got
	// its last bundle while projected at most r, so ends at most r plus one estimate (the
	// connected bundles' loads, under the estimate, do not change the projection). So if the
	// uncovered estimates exceed the sum over the brokers of (hi + estimate - rate), where hi
	// is the largest reported rate, no broker can be left without.
	var estimated, room, hi float64
	for _, id := range w.brokers {
		hi = max(hi, w.lastReport[id].MsgRate())
	}
	for _, id := range w.brokers {
		room += hi + est - w.lastReport[id].MsgRate()
	}
	for b := range assigned {
		estimated += uncovered(b)
	}
	if got := countBy(assigned); estimated > room {
		for _, id := range w.brokers {
			if got[id] == 0 {
				return fmt.Sprintf("seed %d: a burst of %d (%.0f msg/s estimated, room %.0f) left %s without any: %v",
					seed, n, estimated, room, id, got), true
			}
		}
		return "", true
	}
	return "", false
}

func countBy(assigned map[string]string) map[string]int {
	out := map[string]int{}
	for _, to := range assigned {
		out[to]++
	}
	return out
}

func TestSimLookupBurst(t *testing.T) {
	spreadChecked := 0
	for seed := int64(1); seed <= simSeeds; seed++ {
		v, checked := burstRun(t, seed, mutation{})
		if v != "" {
			t.Fatal(v)
		}
		if checked {
			spreadChecked++
		}
	}
	t.Logf("%d seeds; %d bursts large enough that every broker must get part", simSeeds, spreadChecked)
	if spreadChecked == 0 {
		t.Fatal("no seed checked the spread")
	}
}
