package mledger

import (
	"math/bits"
	"sort"
)

// ackSet is a set of positions kept as sorted, disjoint, non-adjacent ranges of entry ids per
// ledger (Pulsar's individuallyDeletedMessages). Thread-unsafe.
type ackSet struct {
	r []AckRange // sorted by (Ledger, First)
}

func (s *ackSet) empty() bool { return len(s.r) == 0 }

// search returns the index of the first range that ends at or after p.
func (s *ackSet) search(p Position) int {
	return sort.Search(len(s.r), func(i int) bool {
		r := s.r[i]
		return r.Ledger > p.LedgerID || (r.Ledger == p.LedgerID && r.Last >= p.EntryID)
	})
}

// span returns the range holding p.
func (s *ackSet) span(p Position) (AckRange, bool) {
	i := s.search(p)
	if i < len(s.r) && s.r[i].Ledger == p.LedgerID && s.r[i].First <= p.EntryID {
		return s.r[i], true
	}
	return AckRange{}, false
}

func (s *ackSet) contains(p Position) bool {
	_, ok := s.span(p)
	return ok
}

// add inserts p and reports whether it was new.
func (s *ackSet) add(p Position) bool {
	i := s.search(p)
	if i < len(s.r) && s.r[i].Ledger == p.LedgerID && s.r[i].First <= p.EntryID {
		return false
	}
	joinPrev := i > 0 && s.r[i-1].Ledger == p.LedgerID && s.r[i-1].Last+1 == p.EntryID
	joinNext := i < len(s.r) && s.r[i].Ledger == p.LedgerID && s.r[i].First-1 == p.EntryID
	switch {
	case joinPrev && joinNext:
		s.r[i-1].Last = s.r[i].Last
		s.r = append(s.r[:i], s.r[i+1:]...)
	case joinPrev:
		s.r[i-1].Last = p.EntryID
	case joinNext:
		s.r[i].First = p.EntryID
	default:
		s.r = append(s.r, AckRange{})
		copy(s.r[i+1:], s.r[i:])
		s.r[i] = AckRange{Ledger: p.LedgerID, First: p.EntryID, Last: p.EntryID}
	}
	return true
}

// removeThrough drops every position <= p.
func (s *ackSet) removeThrough(p Position) {
	i := s.search(p)
	if i < len(s.r) && s.r[i].Ledger == p.LedgerID && s.r[i].First <= p.EntryID {
		s.r[i].First = p.EntryID + 1
		if s.r[i].First > s.r[i].Last {
			i++
		}
	}
	s.r = append(s.r[:0], s.r[i:]...)
}

// count returns the number of positions.
func (s *ackSet) count() int64 {
	var n int64
	for _, r := range s.r {
		n += r.Last - r.First + 1
	}
	return n
}

// batchBits tracks the acknowledged messages of one batch entry.
type batchBits struct {
	size  int
	words []uint64
}

func newBatchBits(size int) *batchBits {
	return &batchBits{size: size, words: make([]uint64, (size+63)/64)}
}

func (b *batchBits) set(i int) { b.words[i/64] |= 1 << (i % 64) }

func (b *batchBits) isSet(i int) bool { return b.words[i/64]&(1<<(i%64)) != 0 }

func (b *batchBits) full() bool {
	n := 0
	for _, w := range b.words {
		n += bits.OnesCount64(w)
	}
	return n >= b.size
}
