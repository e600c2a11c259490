package sim

import (
	"flag"
	"fmt"
	"reflect"
	"sort"
	"time"
)

// T is what the seed runners need of a test (*testing.T implements it). Package sim does not
// import testing: it is test support, but not a test.
type T interface {
	Helper()
	Name() string
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// Seeds selects the seeds a simulation test runs: Count seeds from First, or only Replay (when
// it is >= 0), verbosely, with the whole trace logged. Package names the package for the replay
// command printed on failure (e.g. "./mledger").
type Seeds struct {
	First, Count int64
	Replay       int64
	Package      string
}

// Outcome is one seed's run: its simulation (for the trace and the step count), a description
// of its random parameters, and the first invariant violation (nil: the seed passed).
type Outcome struct {
	Sim    *Sim
	Params fmt.Stringer
	Err    error
}

// RunSeeds runs run for every selected seed (verbose when replaying) and stops at the first
// failing one, which it reports with its parameters, the last events of its trace and the
// command that replays it. It logs the seeds per second and returns how many seeds ran and
// whether one failed.
func RunSeeds(t T, s Seeds, run func(seed int64, verbose bool) Outcome) (ran int64, failed bool) {
	t.Helper()
	first, count, verbose := s.First, s.Count, false
	if s.Replay >= 0 {
		first, count, verbose = s.Replay, 1, true
	}
	start := time.Now()
	var steps uint64
	for seed := first; seed < first+count; seed++ {
		o := run(seed, verbose)
		ran++
		steps += o.Sim.Steps()
		if verbose {
			t.Logf("seed %d: %v\n%s", seed, o.Params, o.Sim.Trace())
		}
		if o.Err != nil {
			t.Errorf("seed %d (%v) failed: %v\nlast events:\n%s\nreplay: go test %s -run '^%s$' -seed %d -v",
				seed, o.Params, o.Err, o.Sim.Trace(), s.Package, t.Name(), seed)
			return ran, true
		}
	}
	el := time.Since(start)
	t.Logf("%d seeds, %d steps in %v (%.0f seeds/s)", ran, steps, el.Round(time.Millisecond), float64(ran)/el.Seconds())
	return ran, false
}

// CatchMutation proves a checker can fail: it runs seeds 1..max of a deliberately broken
// variant until one fails, logs it, and reports an error if none does.
func CatchMutation(t T, name string, max int64, run func(seed int64) error) {
	t.Helper()
	for seed := int64(1); seed <= max; seed++ {
		if err := run(seed); err != nil {
			t.Logf("mutation %q caught by seed %d: %v", name, seed, err)
			return
		}
	}
	t.Errorf("no seed of 1..%d caught mutation %q", max, name)
}

// CheckDeterministic runs seeds 1..n twice each and reports an error unless both runs of a
// seed have the same trace and step count (run must build the simulation verbose).
func CheckDeterministic(t T, n int64, run func(seed int64) *Sim) {
	t.Helper()
	for seed := int64(1); seed <= n; seed++ {
		a, b := run(seed), run(seed)
		if a.Trace() != b.Trace() || a.Steps() != b.Steps() {
			t.Errorf("seed %d is not deterministic", seed)
			return
		}
	}
}

// AddCounts adds every integer field of src to the same field of *dst: the coverage counters of
// one seed summed over a run. S must be a struct.
func AddCounts[S any](dst *S, src S) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src)
	for i := range d.NumField() {
		if f := d.Field(i); f.CanInt() && f.CanSet() {
			f.SetInt(f.Int() + s.Field(i).Int())
		}
	}
}

// SeedFlags are a test package's simulation flags: -seeds (Count), -first-seed (First) and
// -seed (Replay: only that seed, with the whole trace; -1: off). Declare them once per test
// package, at package level: var flags = sim.NewSeedFlags(3000, "TestSim").
type SeedFlags struct {
	Count         *int
	First, Replay *int64
}

// NewSeedFlags registers the flags on the command line; count is the default number of
// seeds (what CI runs) and tests names the tests they apply to, for the usage text.
func NewSeedFlags(count int, tests string) SeedFlags {
	return SeedFlags{
		Count:  flag.Int("seeds", count, tests+": number of seeds to run"),
		First:  flag.Int64("first-seed", 1, tests+": first seed of the range"),
		Replay: flag.Int64("seed", -1, tests+": replay only this seed, with a full trace"),
	}
}

// Replaying reports whether -seed asks for one seed.
func (f SeedFlags) Replaying() bool { return *f.Replay >= 0 }

// Seeds returns the selection for RunSeeds: count seeds (count <= 0: the -seeds flag) of
// package pkg (for the replay command it prints, e.g. "./mledger").
func (f SeedFlags) Seeds(pkg string, count int) Seeds {
	if count <= 0 {
		count = *f.Count
	}
	return Seeds{First: *f.First, Count: int64(count), Replay: *f.Replay, Package: pkg}
}

// Mutant is a deliberately broken variant of a core (M: the package's mutation switches),
// named by the bug it re-creates.
type Mutant[M any] struct {
	Name string
	Mut  M
}

// CatchMutations proves the checkers can fail: each mutant must be caught by one of seeds
// 1..max of run (CatchMutation).
func CatchMutations[M any](t T, max int64, ms []Mutant[M], run func(seed int64, mut M) error) {
	t.Helper()
	for _, m := range ms {
		CatchMutation(t, m.Name, max, func(seed int64) error { return run(seed, m.Mut) })
	}
}

// RequireCoverage fails t for every counter in counts that stayed 0, once ran reached min
// seeds (fewer seeds, e.g. a replay, need not cover everything).
func RequireCoverage(t T, ran, min int64, counts map[string]int) {
	t.Helper()
	if ran < min {
		return
	}
	names := make([]string, 0, len(counts))
	for name := range counts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if counts[name] == 0 {
			t.Errorf("coverage: the seeds exercised no %s", name)
		}
	}
}
