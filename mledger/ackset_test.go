package mledger

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAckSetModel compares ackSet with a plain set under random adds and truncations.
func TestAckSetModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		var s ackSet
		model := map[Position]bool{}
		for op := 0; op < 200; op++ {
			p := Position{LedgerID: int64(r.IntN(3)), EntryID: int64(r.IntN(20))}
			if r.IntN(10) == 0 {
				s.removeThrough(p)
				for q := range model {
					if !p.Less(q) {
						delete(model, q)
					}
				}
			} else if added := s.add(p); added == model[p] {
				t.Fatalf("add %v reported %v, model had it: %v", p, added, model[p])
			} else {
				model[p] = true
			}
			if int(s.count()) != len(model) {
				t.Fatalf("count %d, model %d (%v)", s.count(), len(model), s.r)
			}
			for i, a := range s.r {
				if a.First > a.Last || i > 0 && (s.r[i-1].Ledger > a.Ledger ||
					s.r[i-1].Ledger == a.Ledger && s.r[i-1].Last+1 >= a.First) {
					t.Fatalf("ranges not sorted, disjoint and non-adjacent: %v", s.r)
				}
			}
			for l := int64(0); l < 3; l++ {
				for e := int64(0); e < 20; e++ {
					p := Position{LedgerID: l, EntryID: e}
					if s.contains(p) != model[p] {
						t.Fatalf("contains %v = %v, model %v (%v)", p, s.contains(p), model[p], s.r)
					}
				}
			}
		}
	}
}

func TestAckSetSpans(t *testing.T) {
	var s ackSet
	for _, e := range []int64{5, 7, 6, 1, 2, 9} {
		s.add(Position{LedgerID: 4, EntryID: e})
	}
	want := []AckRange{{4, 1, 2}, {4, 5, 7}, {4, 9, 9}}
	if !slices.Equal(s.r, want) {
		t.Fatalf("ranges %v, want %v", s.r, want)
	}
	if r, ok := s.span(Position{LedgerID: 4, EntryID: 6}); !ok || r != want[1] {
		t.Fatalf("span of 4:6 = %v %v", r, ok)
	}
	s.removeThrough(Position{LedgerID: 4, EntryID: 5})
	if want := []AckRange{{4, 6, 7}, {4, 9, 9}}; !slices.Equal(s.r, want) {
		t.Fatalf("after removeThrough: %v", s.r)
	}
}
