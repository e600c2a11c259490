package loadmgr

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func load(rate float64) BundleLoad { return BundleLoad{MsgRateIn: rate / 2, MsgRateOut: rate / 2} }

func report(id string, at time.Time, bundles map[string]BundleLoad) *Report {
	r := &Report{BrokerID: id, Bundles: bundles, LastUpdate: at.UnixMilli()}
	r.fillTotals()
	return r
}

func TestLeastLongTermMessageRate(t *testing.T) {
	p := LeastLongTermMessageRate{OverloadedPercent: 85}
	for _, tc := range []struct {
		name string
		cs   []Candidate
		want int
	}{
		{"least rate", []Candidate{{ID: "a", MsgRate: 10}, {ID: "b", MsgRate: 5}, {ID: "c", MsgRate: 7}}, 1},
		{"tie: fewer bundles", []Candidate{{ID: "a", MsgRate: 5, Bundles: 2}, {ID: "b", MsgRate: 5, Bundles: 1}}, 1},
		{"tie: smaller id", []Candidate{{ID: "a", MsgRate: 5, Bundles: 1}, {ID: "b", MsgRate: 5, Bundles: 1}}, 0},
		{"overloaded skipped", []Candidate{{ID: "a", MsgRate: 1, MaxUsage: 0.9}, {ID: "b", MsgRate: 50, MaxUsage: 0.5}}, 1},
		{"all overloaded: least rate", []Candidate{{ID: "a", MsgRate: 9, MaxUsage: 0.9}, {ID: "b", MsgRate: 5, MaxUsage: 0.95}}, 1},
	} {
		if got := p.Choose("t/n/0x00000000_0xffffffff", tc.cs); got != tc.want {
			t.Errorf("%s: chose %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestSelectBrokerSpreadsAndExpires(t *testing.T) {
	th := DefaultThresholds()
	s := NewState(th, nil)
	if got := s.SelectBroker("t/n/0x00000000_0x10000000", t0); got != "" {
		t.Fatalf("no broker live: got %q", got)
	}
	for _, id := range []string{"b", "a", "c"} {
		s.SetLive(id, true)
	}
	var got []string
	for i := range 6 {
		got = append(got, s.SelectBroker(bundleN(i), t0))
	}
	if want := []string{"a", "b", "c", "a", "b", "c"}; !equal(got, want) {
		t.Fatalf("burst of assignments %v, want %v", got, want)
	}
	// A retried lookup gets the same broker.
	if got := s.SelectBroker(bundleN(1), t0); got != "b" {
		t.Fatalf("retried assignment: %q, want b", got)
	}
	// After AssignmentTTL with no report listing them, the assignments no longer count.
	if got := s.SelectBroker(bundleN(7), t0.Add(th.AssignmentTTL+time.Second)); got != "a" {
		t.Fatalf("after the TTL: %q, want a", got)
	}
	// A dead broker gets nothing; its assignments are dropped.
	s.SetLive("a", false)
	if got := s.SelectBroker(bundleN(8), t0.Add(th.AssignmentTTL+time.Second)); got == "a" {
		t.Fatal("a dead broker was selected")
	}
}

// TestSelectBrokerBurstOverUnequalLoads: a burst of assignments with no report in between
// spreads over brokers whose reported rates differ, each assignment counting as Pulsar's
// estimate for an unknown bundle; a report listing an assigned bundle counts its load if
// larger, and an idle (still ramping up) one keeps the estimate for AssignmentTTL.
func TestSelectBrokerBurstOverUnequalLoads(t *testing.T) {
	newState := func(mut mutation) *State {
		s := NewState(DefaultThresholds(), nil)
		s.mut = mut
		for i, id := range []string{"a", "b", "c"} {
			s.SetLive(id, true)
			s.Observe(id, report(id, t0, map[string]BundleLoad{"o/ns/" + id: load(float64(30 * i))}))
		}
		return s
	}
	burst := func(s *State) []string {
		var got []string
		for i := range 6 {
			got = append(got, s.SelectBroker(bundleN(i), t0))
		}
		return got
	}
	if got, want := burst(newState(mutation{})), []string{"a", "b", "c", "a", "b", "c"}; !equal(got, want) {
		t.Fatalf("burst over rates 0, 30, 60: %v, want %v", got, want)
	}
	if got, want := burst(newState(mutation{weightlessAssignments: true})), []string{"a", "a", "a", "a", "a", "a"}; !equal(got, want) {
		t.Fatalf("mutation weightlessAssignments: %v, want the whole burst on a %v", got, want)
	}
	for _, tc := range []struct {
		name string
		mut  mutation
		want string
	}{
		{"estimate kept", mutation{}, "c"},
		{"mutation dropReportedEstimate", mutation{dropReportedEstimate: true}, "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newState(tc.mut)
			burst(s)
			t1 := t0.Add(time.Second)
			// a's first bundle is busy: a counts 500 + 100, above b (230) and c (260).
			s.Observe("a", report("a", t1, map[string]BundleLoad{"o/ns/a": {}, bundleN(0): load(500), bundleN(3): {}}))
			if got := s.SelectBroker(bundleN(6), t1); got != "b" {
				t.Fatalf("after a reported a busy bundle: %q, want b", got)
			}
			// b reports its first two bundles idle: with their estimates b counts 330, above c.
			s.Observe("b", report("b", t1, map[string]BundleLoad{"o/ns/b": load(30), bundleN(1): {}, bundleN(4): {}}))
			if got := s.SelectBroker(bundleN(7), t1); got != tc.want {
				t.Fatalf("after b reported its assignments idle: %q, want %s", got, tc.want)
			}
		})
	}
}

func bundleN(i int) string {
	lo := uint32(i) << 24
	return "t/n/" + hex(lo) + "_" + hex(lo+1<<24)
}

func hex(v uint32) string {
	const digits = "0123456789abcdef"
	b := []byte("0x00000000")
	for i := 9; i >= 2; i-- {
		b[i] = digits[v&15]
		v >>= 4
	}
	return string(b)
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestShedding(t *testing.T) {
	th := DefaultThresholds()
	newState := func() *State {
		s := NewState(th, nil)
		for _, id := range []string{"a", "b", "c"} {
			s.SetLive(id, true)
			s.Observe(id, report(id, t0, map[string]BundleLoad{}))
		}
		return s
	}
	t.Run("sole bundle stays", func(t *testing.T) {
		s := newState()
		s.Observe("a", report("a", t0, map[string]BundleLoad{bundleN(0): load(9000)}))
		if acts := s.Plan(t0); len(acts) != 0 {
			t.Fatalf("a broker's sole bundle was shed: %+v", acts)
		}
	})
	t.Run("idle cluster does not churn", func(t *testing.T) {
		s := newState()
		s.Observe("a", report("a", t0, map[string]BundleLoad{bundleN(0): load(30), bundleN(1): load(30)}))
		if acts := s.Plan(t0); len(acts) != 0 {
			t.Fatalf("shed under MinUnloadMsgRate: %+v", acts)
		}
	})
	t.Run("moves to the least loaded, then grace", func(t *testing.T) {
		s := newState()
		s.Observe("a", report("a", t0, map[string]BundleLoad{bundleN(0): load(1000), bundleN(1): load(1000), bundleN(2): load(1000)}))
		acts := s.Plan(t0)
		if len(acts) != 2 || acts[0].To == acts[1].To || acts[0].From != "a" {
			t.Fatalf("plan %+v: want two unloads from a to b and c", acts)
		}
		// The source's stale report still lists them: they count on their destinations.
		if o := s.Owner(acts[0].Bundle, t0); o != acts[0].To {
			t.Fatalf("owner of a moved bundle %q, want %q", o, acts[0].To)
		}
		// A lookup of the unloaded bundle is sent to the destination.
		if got := s.SelectBroker(acts[1].Bundle, t0); got != acts[1].To {
			t.Fatalf("lookup of an unloaded bundle: %q, want its destination %q", got, acts[1].To)
		}
		if again := s.Plan(t0.Add(time.Minute)); len(again) != 0 {
			t.Fatalf("second plan on stale reports: %+v", again)
		}
		// The destination refused: the bundle is back on a and may be decided again.
		s.Failed(acts[0])
		if o := s.Owner(acts[0].Bundle, t0.Add(time.Minute)); o != "a" {
			t.Fatalf("owner after a failed unload %q, want a", o)
		}
		// The other move is done: its destination and the source report it.
		s.Observe(acts[1].To, report(acts[1].To, t0.Add(time.Minute), map[string]BundleLoad{acts[1].Bundle: load(1000)}))
		s.Observe("a", report("a", t0.Add(time.Minute), map[string]BundleLoad{acts[0].Bundle: load(1000), bundleN(2): load(1000)}))
		if again := s.Plan(t0.Add(2 * time.Minute)); len(again) != 1 || again[0].Bundle != acts[0].Bundle {
			t.Fatalf("plan after the failure %+v: want %s again", again, acts[0].Bundle)
		}
	})
	t.Run("within threshold: nothing", func(t *testing.T) {
		s := newState()
		s.Observe("a", report("a", t0, map[string]BundleLoad{bundleN(0): load(400), bundleN(1): load(400)}))
		s.Observe("b", report("b", t0, map[string]BundleLoad{bundleN(2): load(600)}))
		s.Observe("c", report("c", t0, map[string]BundleLoad{bundleN(3): load(700)}))
		if acts := s.Plan(t0); len(acts) != 0 {
			t.Fatalf("shares .38/.29/.33 are within 10 points of the mean: %+v", acts)
		}
	})
}

func TestSplitLimits(t *testing.T) {
	hot := map[string]BundleLoad{
		bundleN(0): {MsgRateIn: 40000}, bundleN(1): {Topics: 1001}, bundleN(2): {Producers: 600, Consumers: 600},
		bundleN(3): {MsgThroughputIn: 200 << 20}, bundleN(4): load(10)}
	for _, tc := range []struct {
		name       string
		maxBundles int
		want       int // splits
	}{
		{"namespace full", 5, 0},
		{"room for one", 6, 1},
		{"no limit: every bundle over a threshold", 0, 4},
	} {
		th := DefaultThresholds()
		th.MaxBundles = tc.maxBundles
		s := NewState(th, nil)
		s.SetLive("a", true)
		s.Observe("a", report("a", t0, hot))
		acts := s.Plan(t0)
		if len(acts) != tc.want {
			t.Fatalf("%s: splits %+v, want %d", tc.name, acts, tc.want)
		}
		for _, a := range acts {
			if a.Kind != ActionSplit || a.Bundle == bundleN(4) || a.From != "a" {
				t.Fatalf("%s: unexpected action %+v", tc.name, a)
			}
		}
		if again := s.Plan(t0.Add(time.Second)); len(again) != 0 {
			t.Fatalf("%s: split again before the owner reported: %+v", tc.name, again)
		}
	}
}

func TestReportChanged(t *testing.T) {
	base := report("a", t0, map[string]BundleLoad{bundleN(0): load(1000)})
	base.CPU = Usage{Usage: 50, Limit: 400}
	with := func(f func(r *Report)) *Report {
		r := *base
		r.Bundles = map[string]BundleLoad{bundleN(0): load(1000)}
		f(&r)
		return &r
	}
	for _, tc := range []struct {
		name string
		cur  *Report
		want bool
	}{
		{"same", with(func(*Report) {}), false},
		{"rate +5%", with(func(r *Report) { r.MsgRateIn *= 1.05 }), false},
		{"rate +20%", with(func(r *Report) { r.MsgRateIn *= 1.2 }), true},
		{"cpu +5 points", with(func(r *Report) { r.CPU.Usage += 20 }), false},
		{"cpu +15 points", with(func(r *Report) { r.CPU.Usage += 60 }), true},
		{"new bundle", with(func(r *Report) { r.Bundles[bundleN(1)] = BundleLoad{} }), true},
		{"topics 1 → 2", with(func(r *Report) { r.Topics = 2 }), true},
		{"other bundle", with(func(r *Report) { r.Bundles = map[string]BundleLoad{bundleN(1): load(1000)} }), true},
	} {
		if got := reportChanged(base, tc.cur, 10); got != tc.want {
			t.Errorf("%s: changed %v, want %v", tc.name, got, tc.want)
		}
	}
	if !reportChanged(nil, base, 10) {
		t.Error("first report not written")
	}
}

func TestBundleNames(t *testing.T) {
	for name, want := range map[string]string{
		"t/n/0x00000000_0x40000000":   "t/n",
		"t/n/0xc0000000_0xffffffff":   "t/n",
		"t/n/0x40000000_0x40000000":   "",
		"t/n/0x4000000_0x40000000z":   "",
		"t/n":                         "",
		"a/b/c/0x00000000_0x40000000": "",
		"t/n/00000000_0x40000000":     "",
	} {
		if got := BundleNamespace(name); got != want {
			t.Errorf("BundleNamespace(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestReportChangedIdleNoise(t *testing.T) {
	prev := report("a", t0, map[string]BundleLoad{bundleN(0): load(0.2)})
	cur := report("a", t0, map[string]BundleLoad{bundleN(0): load(0.6)})
	if reportChanged(prev, cur, 10) {
		t.Error("0.2 → 0.6 msg/s rewrote the report")
	}
	cur = report("a", t0, map[string]BundleLoad{bundleN(0): load(5)})
	if !reportChanged(prev, cur, 10) {
		t.Error("0.2 → 5 msg/s did not rewrite the report")
	}
}

func TestProcUsage(t *testing.T) {
	var p ProcUsage
	first := p.Sample(time.Now())
	if first.CPU.Limit <= 0 || first.CPU.Usage != 0 {
		t.Fatalf("first sample %+v: want a CPU limit and no usage yet", first)
	}
	if first.Memory.Usage <= 0 || first.Memory.Limit < first.Memory.Usage {
		t.Fatalf("memory %+v: want resident MB under a limit", first.Memory)
	}
	// Burn CPU until the kernel counted some for the process (bounded in wall time).
	c0, _ := processCPUSeconds()
	deadline, x := time.Now().Add(waitFor), 0
	for c, _ := processCPUSeconds(); c-c0 < 0.03 && time.Now().Before(deadline); c, _ = processCPUSeconds() {
		x++
	}
	second := p.Sample(time.Now())
	if second.CPU.Usage <= 0 { // not bounded by the limit: the kernel counts in ticks
		t.Fatalf("after a busy loop (%d turns): cpu %+v", x, second.CPU)
	}
}
