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
// The mutations (no grace period; a placement picking the most loaded broker) must break one.

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
