package storage

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestEntryTableMatchesMap drives an entryTable and a map with the same sets (runs in
// order, gaps, IDs below and far above the run, replacements, resets) and compares them.
func TestEntryTableMatchesMap(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		var tab entryTable
		ref := map[int64]slot{}
		next := rng.Int64N(1000)
		for step := 0; step < 2000; step++ {
			var id int64
			switch r := rng.IntN(100); {
			case r < 70: // the writer's next entry
				id = next
				next++
			case r < 80: // a gap within reach of the dense run
				next += rng.Int64N(2 * maxDenseGap)
				id = next
			case r < 90: // an earlier entry again
				id = next - 1 - rng.Int64N(200)
			case r < 99: // far away, either side
				id = next + (rng.Int64N(10000) - 5000)
			default:
				tab.reset()
				clear(ref)
				continue
			}
			s := slot{chunk: uint32(step), off: uint32(id), length: uint32(rng.IntN(100)), mayBeIndexed: rng.IntN(2) == 0}
			tab.set(id, s)
			s.used = true
			ref[id] = s
			if got, ok := tab.get(id); !ok || got != s {
				t.Fatalf("seed %d step %d: get(%d) = %+v, %v after set %+v", seed, step, id, got, ok, s)
			}
		}
		want := make([]int64, 0, len(ref))
		for id, s := range ref {
			want = append(want, id)
			if got, ok := tab.get(id); !ok || got != s {
				t.Fatalf("seed %d: get(%d) = %+v, %v, want %+v", seed, id, got, ok, s)
			}
		}
		slices.Sort(want)
		if got := tab.appendIDs(nil); !slices.Equal(got, want) {
			t.Fatalf("seed %d: appendIDs has %d IDs, want %d (ascending, no duplicates)", seed, len(got), len(want))
		}
		var scratch, seen []int64
		_ = tab.ascend(&scratch, func(id int64, s slot) error {
			if s != ref[id] {
				t.Fatalf("seed %d: ascend gave %+v for %d, want %+v", seed, s, id, ref[id])
			}
			seen = append(seen, id)
			return nil
		})
		if !slices.Equal(seen, want) {
			t.Fatalf("seed %d: ascend visited %d IDs, want %d (ascending, no duplicates)", seed, len(seen), len(want))
		}
		for _, id := range []int64{-1, next + 1, next + 100000} {
			if _, ok := ref[id]; !ok {
				if _, ok := tab.get(id); ok {
					t.Fatalf("seed %d: get(%d) found an entry never set", seed, id)
				}
			}
		}
	}
}
