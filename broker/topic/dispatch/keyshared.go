package dispatch

import (
	"fmt"
	"sort"
)

// KeyHashRange is the size of the sticky-key hash space, as in Pulsar: a key's slot is
// murmur3_32(key) & MaxInt32 % 65536, and Key_Shared consumers own ranges of slots.
const KeyHashRange = 1 << 16

// HashRange is slots [Start, End], inclusive.
type HashRange struct{ Start, End uint32 }

func (r HashRange) String() string { return fmt.Sprintf("[%d, %d]", r.Start, r.End) }

// keySelector assigns hash slots to Key_Shared consumers.
//
// AUTO_SPLIT (Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector): the first consumer
// owns every slot; each new consumer takes the upper half of the largest range; a leaving
// consumer's range goes to the consumer of the next range up (or down, for the last range).
// STICKY: consumers bring their own ranges, which must not overlap.
//
// Invariant (AUTO_SPLIT): ranges are sorted by Start and partition 0..KeyHashRange-1.
type keySelector struct {
	ranges []ownedRange
}

type ownedRange struct {
	HashRange
	c *consumer
}

// add assigns ranges to c. sticky is c's own ranges (STICKY mode), nil for AUTO_SPLIT.
func (ks *keySelector) add(c *consumer, sticky []HashRange) error {
	if sticky != nil {
		for _, r := range sticky {
			if r.Start > r.End || r.End >= KeyHashRange {
				return fmt.Errorf("%w: hash range %v", ErrConsumerAssign, r)
			}
			for _, o := range ks.ranges {
				if r.Start <= o.End && o.Start <= r.End {
					return fmt.Errorf("%w: range %v overlaps %v of consumer %s", ErrConsumerAssign, r, o.HashRange, o.c.name)
				}
			}
		}
		for _, r := range sticky {
			ks.ranges = append(ks.ranges, ownedRange{r, c})
		}
		ks.sort()
		return nil
	}
	if len(ks.ranges) == 0 {
		ks.ranges = []ownedRange{{HashRange{0, KeyHashRange - 1}, c}}
		return nil
	}
	big := 0
	for i, r := range ks.ranges {
		if r.End-r.Start > ks.ranges[big].End-ks.ranges[big].Start {
			big = i
		}
	}
	r := ks.ranges[big]
	if r.End == r.Start {
		return fmt.Errorf("%w: no hash range left to split", ErrConsumerAssign)
	}
	mid := r.Start + (r.End-r.Start)/2
	ks.ranges[big].End = mid
	ks.ranges = append(ks.ranges, ownedRange{HashRange{mid + 1, r.End}, c})
	ks.sort()
	return nil
}

// remove gives c's ranges to their neighbours (AUTO_SPLIT) or drops them (STICKY).
func (ks *keySelector) remove(c *consumer, sticky bool) {
	out := ks.ranges[:0]
	for i, r := range ks.ranges {
		if r.c != c {
			out = append(out, r)
			continue
		}
		if sticky {
			continue
		}
		// Merge into the next range not owned by c, else the previous one.
		merged := false
		for j := i + 1; j < len(ks.ranges); j++ {
			if ks.ranges[j].c != c {
				ks.ranges[j].Start = r.Start
				merged = true
				break
			}
		}
		if !merged && len(out) > 0 {
			out[len(out)-1].End = r.End
		}
	}
	ks.ranges = out
}

func (ks *keySelector) sort() {
	sort.Slice(ks.ranges, func(i, j int) bool { return ks.ranges[i].Start < ks.ranges[j].Start })
}

// pick returns the consumer owning slot h, nil if none.
func (ks *keySelector) pick(h uint32) *consumer {
	i := sort.Search(len(ks.ranges), func(i int) bool { return ks.ranges[i].End >= h })
	if i < len(ks.ranges) && ks.ranges[i].Start <= h {
		return ks.ranges[i].c
	}
	return nil
}

// rangesOf lists c's ranges for the statistics.
func (ks *keySelector) rangesOf(c *consumer) []string {
	var out []string
	for _, r := range ks.ranges {
		if r.c == c {
			out = append(out, r.String())
		}
	}
	return out
}
