// Package seqwin holds Window, a map from uint64 sequence numbers to values for keys that are
// allocated (nearly) consecutively and retired roughly in order: request ids, tokens and entry
// ids of in-flight operations.
//
// Go's maps suffer under that workload: every key is inserted once and deleted once, so a map
// of in-flight ids churns through tombstones and rehashes, and each lookup hashes and probes.
// A Window is a ring buffer indexed by key - base that grows when a key falls outside it and
// pops retired keys at its ends: Put, Get and Delete are a subtraction and a mask, and a
// steady state allocates nothing.
//
// A key that stays while later ones come and go (a request the peer never answers, a long
// poll among adds) would stretch the ring: when the ring would have to grow although at most
// half of it is live, the oldest keys move to a side map instead, so the ring stays within a
// few times the live keys, and a Window of sparse keys degrades to a map rather than failing.
//
// A Window is a plain value type with no locks; it is not safe for concurrent use. The zero
// value is an empty window ready to use, and holds no memory until the first Put; Release
// returns an empty window to that state.
package seqwin

import (
	"iter"
	"maps"
	"slices"
)

const (
	// minCap is the smallest ring a Window allocates.
	minCap = 16
	// shrinkCap is the smallest ring a Window shrinks; smaller rings are kept.
	shrinkCap = 1024
)

// Window maps uint64 keys to values of T, for dense keys. See the package documentation.
type Window[T any] struct {
	// ring holds the slots of keys base .. base+span-1, key base at index head, wrapping.
	// len(ring) is 0 or a power of two >= span.
	ring []slot[T]
	head int
	base uint64
	// span is the number of keys from the lowest to the highest present key.
	// Invariant: n == 0 iff span == 0; if span > 0, keys base and base+span-1 are present.
	span int
	// n is the number of present keys in the ring.
	n int
	// old holds the keys evicted from the ring (stragglers, sparse keys); nil when empty.
	// Invariant: no key is present in both old and the ring (Put updates a key in old in
	// place; the ring's span may come to cover keys of old, which are absent in the ring).
	old map[uint64]T
}

type slot[T any] struct {
	v  T
	ok bool
}

// Len returns the number of keys present.
func (w *Window[T]) Len() int { return w.n + len(w.old) }

// Cap returns the number of slots of the ring (keys in the side map not counted): the
// window's memory, in values.
func (w *Window[T]) Cap() int { return len(w.ring) }

func (w *Window[T]) index(k uint64) int { return (w.head + int(k-w.base)) & (len(w.ring) - 1) }

// contains reports whether k lies within the span (present or not).
func (w *Window[T]) contains(k uint64) bool { return k >= w.base && k-w.base < uint64(w.span) }

// Put sets the value of key k. Keys may be put in any order; keys far from the others are
// kept in a side map.
func (w *Window[T]) Put(k uint64, v T) {
	if w.old != nil {
		if _, ok := w.old[k]; ok {
			w.old[k] = v
			return
		}
	}
	switch {
	case w.span == 0:
		if len(w.ring) == 0 {
			w.ring = make([]slot[T], minCap)
		}
		w.head, w.base, w.span = 0, k, 1
	case k < w.base:
		d := w.base - k
		need := uint64(w.span) + d
		if need > uint64(len(w.ring)) && need > 2*uint64(w.n+1) {
			w.putOld(k, v) // far below the others: keep the ring dense
			return
		}
		w.grow(int(need))
		w.head = (w.head - int(d)) & (len(w.ring) - 1)
		w.base = k
		w.span += int(d)
	case k-w.base >= uint64(w.span):
		// Before growing a ring that is at most half live, move its oldest keys out.
		for w.n > 0 && k-w.base >= uint64(len(w.ring)) && k-w.base+1 > 2*uint64(w.n+1) {
			w.evictHead()
		}
		if w.n == 0 {
			w.head, w.base, w.span = 0, k, 1
			break
		}
		need := k - w.base + 1
		w.grow(int(need))
		w.span = int(need)
	}
	s := &w.ring[w.index(k)]
	if !s.ok {
		w.n++
	}
	s.v, s.ok = v, true
}

// Get returns the value of key k and whether it is present.
func (w *Window[T]) Get(k uint64) (T, bool) {
	if w.contains(k) {
		if s := &w.ring[w.index(k)]; s.ok {
			return s.v, true
		}
	}
	if w.old != nil {
		v, ok := w.old[k]
		return v, ok
	}
	var zero T
	return zero, false
}

// Delete removes key k and returns the value it had and whether it was present.
func (w *Window[T]) Delete(k uint64) (T, bool) {
	if !w.contains(k) {
		return w.deleteOld(k)
	}
	s := &w.ring[w.index(k)]
	if !s.ok {
		return w.deleteOld(k)
	}
	v := s.v
	*s = slot[T]{}
	w.n--
	switch {
	case w.n == 0:
		w.head, w.span = 0, 0
	case k == w.base:
		w.popHead()
	case k == w.base+uint64(w.span)-1:
		for !w.ring[w.index(w.base+uint64(w.span)-1)].ok {
			w.span--
		}
	}
	if len(w.ring) > shrinkCap && w.span < len(w.ring)/8 {
		w.resize(len(w.ring) / 2)
	}
	return v, true
}

// deleteOld removes key k from old.
func (w *Window[T]) deleteOld(k uint64) (T, bool) {
	v, ok := w.old[k]
	if ok {
		delete(w.old, k)
		if len(w.old) == 0 {
			w.old = nil
		}
	}
	return v, ok
}

// popHead advances the head past absent keys. The ring must hold a key.
func (w *Window[T]) popHead() {
	for !w.ring[w.head].ok {
		w.head = (w.head + 1) & (len(w.ring) - 1)
		w.base++
		w.span--
	}
}

// evictHead moves the ring's lowest key to old.
func (w *Window[T]) evictHead() {
	s := &w.ring[w.head]
	w.putOld(w.base, s.v)
	*s = slot[T]{}
	w.n--
	if w.n == 0 {
		w.head, w.span = 0, 0
		return
	}
	w.popHead()
}

func (w *Window[T]) putOld(k uint64, v T) {
	if w.old == nil {
		w.old = make(map[uint64]T)
	}
	w.old[k] = v
}

// Release drops the ring of an empty window, so that an idle window holds no memory (the
// next Put allocates a ring again). A window with keys is left as it is. Owners call it when
// they go idle, not after every Delete: a window emptied and refilled between bursts keeps
// its ring.
func (w *Window[T]) Release() {
	if w.n == 0 && w.old == nil {
		w.ring, w.head, w.base, w.span = nil, 0, 0, 0
	}
}

// Clear removes every key. It keeps the ring for reuse.
func (w *Window[T]) Clear() {
	clear(w.ring)
	w.head, w.span, w.n, w.old = 0, 0, 0, nil
}

// All yields the present keys and their values in increasing key order. The loop body may
// Delete the key it was given (and nothing else).
func (w *Window[T]) All() iter.Seq2[uint64, T] {
	return func(yield func(uint64, T) bool) {
		var olds []uint64 // the side map's keys, sorted, merged with the ring's
		if len(w.old) > 0 {
			olds = slices.Sorted(maps.Keys(w.old))
		}
		k := w.base
		for {
			rk, rv, ringOK := w.next(k)
			for len(olds) > 0 && (!ringOK || olds[0] < rk) {
				if v, ok := w.old[olds[0]]; ok && !yield(olds[0], v) {
					return
				}
				olds = olds[1:]
			}
			if !ringOK || !yield(rk, rv) {
				return
			}
			k = rk + 1
		}
	}
}

// next returns the lowest key >= k present in the ring.
func (w *Window[T]) next(k uint64) (uint64, T, bool) {
	for k = max(k, w.base); w.span > 0 && k-w.base < uint64(w.span); k++ {
		if s := &w.ring[w.index(k)]; s.ok {
			return k, s.v, true
		}
	}
	var zero T
	return 0, zero, false
}

// grow makes the ring hold at least need keys.
func (w *Window[T]) grow(need int) {
	if need <= len(w.ring) {
		return
	}
	c := max(len(w.ring), minCap)
	for c < need {
		c *= 2
	}
	w.resize(c)
}

// resize moves the span into a new ring of c slots (a power of two >= span), starting at 0.
func (w *Window[T]) resize(c int) {
	ring := make([]slot[T], c)
	if w.span > 0 {
		// The span is at most two runs of the old ring: head..end, then 0..
		first := min(w.span, len(w.ring)-w.head)
		copy(ring, w.ring[w.head:w.head+first])
		copy(ring[first:], w.ring[:w.span-first])
	}
	w.ring, w.head = ring, 0
}
