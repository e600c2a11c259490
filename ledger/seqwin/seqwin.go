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
// Its memory is proportional to the span of live keys (the oldest to the newest), not to how
// many are live: use it only where ids are dense. One long-lived key among millions of retired
// ones pins a ring as large as the distance between them.
//
// A Window is a plain value type with no locks; it is not safe for concurrent use. The zero
// value is an empty window ready to use.
package seqwin

import (
	"fmt"
	"iter"
)

const (
	// minCap is the smallest ring a Window allocates.
	minCap = 16
	// shrinkCap is the smallest ring a Window shrinks; smaller rings are kept.
	shrinkCap = 1024
	// maxSpan bounds the key span: a Put beyond it is a caller bug (sparse keys), not a
	// reason to allocate gigabytes.
	maxSpan = 1 << 32
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
	// n is the number of present keys.
	n int
}

type slot[T any] struct {
	v  T
	ok bool
}

// Len returns the number of keys present.
func (w *Window[T]) Len() int { return w.n }

func (w *Window[T]) index(k uint64) int { return (w.head + int(k-w.base)) & (len(w.ring) - 1) }

// contains reports whether k lies within the span (present or not).
func (w *Window[T]) contains(k uint64) bool { return k >= w.base && k-w.base < uint64(w.span) }

// Put sets the value of key k. Keys may be put in any order, but the window grows to cover
// every key from the lowest to the highest present one: it panics if that span exceeds 2^32.
func (w *Window[T]) Put(k uint64, v T) {
	switch {
	case w.span == 0:
		if len(w.ring) == 0 {
			w.ring = make([]slot[T], minCap)
		}
		w.head, w.base, w.span = 0, k, 1
	case k < w.base:
		d := w.base - k
		w.grow(uint64(w.span) + d)
		w.head = (w.head - int(d)) & (len(w.ring) - 1)
		w.base = k
		w.span += int(d)
	case k-w.base >= uint64(w.span):
		need := k - w.base + 1
		w.grow(need)
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
	if !w.contains(k) {
		var zero T
		return zero, false
	}
	s := &w.ring[w.index(k)]
	return s.v, s.ok
}

// Delete removes key k and returns the value it had and whether it was present.
func (w *Window[T]) Delete(k uint64) (T, bool) {
	var zero T
	if !w.contains(k) {
		return zero, false
	}
	s := &w.ring[w.index(k)]
	if !s.ok {
		return zero, false
	}
	v := s.v
	*s = slot[T]{}
	w.n--
	switch {
	case w.n == 0:
		w.head, w.span = 0, 0
	case k == w.base:
		for !w.ring[w.head].ok {
			w.head = (w.head + 1) & (len(w.ring) - 1)
			w.base++
			w.span--
		}
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

// Clear removes every key. It keeps the ring for reuse.
func (w *Window[T]) Clear() {
	clear(w.ring)
	w.head, w.span, w.n = 0, 0, 0
}

// All yields the present keys and their values in increasing key order. The loop body may
// Delete the key it was given (and nothing else).
func (w *Window[T]) All() iter.Seq2[uint64, T] {
	return func(yield func(uint64, T) bool) {
		for k := w.base; w.span > 0; k++ {
			k = max(k, w.base)
			if k-w.base >= uint64(w.span) {
				return
			}
			if s := w.ring[w.index(k)]; s.ok && !yield(k, s.v) {
				return
			}
		}
	}
}

// grow makes the ring hold at least need keys.
func (w *Window[T]) grow(need uint64) {
	if need > maxSpan {
		panic(fmt.Sprintf("seqwin: key span %d too large (keys too sparse for a window)", need))
	}
	if int(need) <= len(w.ring) {
		return
	}
	c := max(len(w.ring), minCap)
	for c < int(need) {
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
