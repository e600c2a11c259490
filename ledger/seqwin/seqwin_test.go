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
				m[k] = op
				w.Put(k, op)
			case x < 85 && len(m) > 0:
				keys := slices.Sorted(maps.Keys(m))
				k := keys[0]
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
				if r.IntN(10) == 0 {
					w.Clear()
					clear(m)
				}
			}
			check(t, &w, m)
		}
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

func TestWindowSparsePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	var w Window[int]
	w.Put(1, 1)
	w.Put(1<<40, 2)
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
