package seqwin

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// check compares w with the model m: length, every key's value, and All's order.
func check(t *testing.T, w *Window[int], m map[uint64]int) {
	t.Helper()
	if w.Len() != len(m) {
		t.Fatalf("Len %d, model %d", w.Len(), len(m))
	}
	want := slices.Sorted(maps.Keys(m))
	var got []uint64
	for k, v := range w.All() {
		if m[k] != v {
			t.Fatalf("All: key %d = %d, model %d", k, v, m[k])
		}
		got = append(got, k)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("All keys %v, model %v", got, want)
	}
	for k, v := range m {
		if g, ok := w.Get(k); !ok || g != v {
			t.Fatalf("Get(%d) = %d, %v; model %d", k, g, ok, v)
		}
	}
	if w.span > len(w.ring) || (w.n == 0) != (w.span == 0) {
		t.Fatalf("span %d, ring %d, n %d", w.span, len(w.ring), w.n)
	}
	for k := range w.old {
		if w.contains(k) && w.ring[w.index(k)].ok {
			t.Fatalf("key %d both in the ring and in old", k)
		}
	}
	if w.span > 0 {
		if _, ok := w.Get(w.base); !ok {
			t.Fatalf("base %d not present", w.base)
		}
		if _, ok := w.Get(w.base + uint64(w.span) - 1); !ok {
			t.Fatalf("last key %d not present", w.base+uint64(w.span)-1)
		}
	}
}

// TestWindowModel runs random operations on a Window and a map and compares them after each.
func TestWindowModel(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewPCG(seed, seed))
		var w Window[int]
		m := map[uint64]int{}
		next := uint64(r.IntN(1000))
		// Keys are mostly allocated in increasing order, sometimes below the lowest or with a
		// gap, and retired mostly in order: the workloads of request ids and tokens.
		for op := 0; op < 3000; op++ {
			switch x := r.IntN(100); {
			case x < 45:
				k := next
				next += 1 + uint64(r.IntN(3)/2)
				m[k] = op
				w.Put(k, op)
			case x < 50 && len(m) > 0:
				lo := slices.Min(slices.Collect(maps.Keys(m)))
				k := lo - uint64(r.IntN(int(min(lo, 40))+1))
				if r.IntN(8) == 0 {
					k = lo - uint64(r.IntN(int(min(lo, 100_000))+1)) // far below
				}
				m[k] = op
				w.Put(k, op)
			case x < 51:
				k := next + uint64(r.IntN(1_000_000)) // far above: a sparse key
				m[k] = op
				w.Put(k, op)
			case x < 85 && len(m) > 0:
				keys := slices.Sorted(maps.Keys(m))
				// Mostly the oldest key, but seed%4 == 0 keeps the oldest few (stragglers).
				i := 0
				if seed%4 == 0 {
					i = min(len(keys)-1, 3)
				}
				k := keys[i]
				if r.IntN(3) == 0 {
					k = keys[r.IntN(len(keys))]
				}
				v, ok := w.Delete(k)
				if !ok || v != m[k] {
					t.Fatalf("seed %d: Delete(%d) = %d, %v; model %d", seed, k, v, ok, m[k])
				}
				delete(m, k)
			case x < 95:
				k := next - uint64(r.IntN(50))
				v, ok := w.Delete(k)
				mv, mok := m[k]
				if ok != mok || v != mv {
					t.Fatalf("seed %d: Delete(%d) = %d, %v; model %d, %v", seed, k, v, ok, mv, mok)
				}
				delete(m, k)
			case x < 97:
				for k := range w.All() {
					if r.IntN(2) == 0 {
						w.Delete(k)
						delete(m, k)
					}
				}
			default:
				switch r.IntN(10) {
				case 0:
					w.Clear()
					clear(m)
				case 1:
					w.Release() // keeps every key of a window that has some
					if len(m) == 0 && w.Cap() != 0 {
						t.Fatalf("seed %d: an empty window keeps a ring of %d after Release", seed, w.Cap())
					}
				}
			}
			check(t, &w, m)
		}
	}
}

// TestWindowRelease: Release drops an empty window's ring, leaves one with keys as it is,
// and the window works after it.
func TestWindowRelease(t *testing.T) {
	var w Window[int]
	w.Release() // the zero value
	for k := uint64(10); k < 40; k++ {
		w.Put(k, int(k))
	}
	c := w.Cap()
	w.Release()
	if w.Cap() != c || w.Len() != 30 {
		t.Fatalf("Release of a window with keys: cap %d → %d, len %d", c, w.Cap(), w.Len())
	}
	for k := uint64(10); k < 40; k++ {
		w.Delete(k)
	}
	w.Release()
	if w.Cap() != 0 {
		t.Fatalf("an empty window keeps a ring of %d after Release", w.Cap())
	}
	w.Put(5, 5)
	if v, ok := w.Get(5); !ok || v != 5 || w.Len() != 1 {
		t.Fatalf("after Release: Get(5) = %d, %v; len %d", v, ok, w.Len())
	}
}

// TestWindowShrinks checks that a burst does not pin its ring once the window drains.
func TestWindowShrinks(t *testing.T) {
	var w Window[int]
	for k := range uint64(100_000) {
		w.Put(k, int(k))
	}
	big := len(w.ring)
	for k := range uint64(99_990) {
		w.Delete(k)
	}
	if len(w.ring) >= big/8 {
		t.Fatalf("ring %d slots after draining to 10 keys (was %d)", len(w.ring), big)
	}
	for k := uint64(99_990); k < 100_000; k++ {
		if v, ok := w.Get(k); !ok || v != int(k) {
			t.Fatalf("Get(%d) = %d, %v", k, v, ok)
		}
	}
}

// TestWindowStraggler: a key that stays while a million later ones come and go does not
// stretch the ring; nor do keys far apart.
func TestWindowStraggler(t *testing.T) {
	var w Window[uint64]
	w.Put(0, 0) // never answered
	const live = 100
	for k := uint64(1); k <= 1_000_000; k++ {
		w.Put(k, k)
		if k > live {
			if v, ok := w.Delete(k - live); !ok || v != k-live {
				t.Fatalf("Delete(%d) = %d, %v", k-live, v, ok)
			}
		}
	}
	if len(w.ring) > 8*live {
		t.Fatalf("ring of %d slots for %d live keys", len(w.ring), w.Len())
	}
	if v, ok := w.Get(0); !ok || v != 0 || w.Len() != live+1 {
		t.Fatalf("straggler: %d, %v; Len %d", v, ok, w.Len())
	}
	var keys []uint64
	for k := range w.All() {
		keys = append(keys, k)
	}
	if len(keys) != live+1 || keys[0] != 0 || keys[1] != 1_000_000-live+1 || !slices.IsSorted(keys) {
		t.Fatalf("All: %d keys, %v ...", len(keys), keys[:3])
	}

	var s Window[int]
	for i, k := range []uint64{1 << 50, 1, 1 << 40, 2, 1<<50 + 1} {
		s.Put(k, i)
	}
	if len(s.ring) > 64 || s.Len() != 5 {
		t.Fatalf("sparse keys: ring %d, Len %d", len(s.ring), s.Len())
	}
	for i, k := range []uint64{1 << 50, 1, 1 << 40, 2, 1<<50 + 1} {
		if v, ok := s.Delete(k); !ok || v != i {
			t.Fatalf("Delete(%d) = %d, %v", k, v, ok)
		}
	}
	if s.Len() != 0 || s.old != nil {
		t.Fatalf("not empty: %d, %v", s.Len(), s.old)
	}
}

// BenchmarkChurn compares a Window with a map on the in-flight id workload: put the next id,
// delete the one inflight ids older.
func BenchmarkChurn(b *testing.B) {
	const inflight = 1000
	b.Run("impl=window", func(b *testing.B) {
		var w Window[uint64]
		k := uint64(0)
		for b.Loop() {
			w.Put(k, k)
			if k >= inflight {
				w.Delete(k - inflight)
			}
			k++
		}
	})
	b.Run("impl=map", func(b *testing.B) {
		m := map[uint64]uint64{}
		k := uint64(0)
		for b.Loop() {
			m[k] = k
			if k >= inflight {
				delete(m, k-inflight)
			}
			k++
		}
	})
}
