package topic

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sort"
)

// keyHashRange is the size of the sticky-key hash space, as in Pulsar: a key's slot is
// murmur3_32(key) & MaxInt32 % 65536, and Key_Shared consumers own ranges of slots.
const keyHashRange = 1 << 16

// noKeyHash is the slot of messages without a key (Pulsar hashes "NONE_KEY").
var noKeyHash = stickyHash([]byte("NONE_KEY"))

// stickyHash returns the slot of a sticky key (ordering key, else partition key).
func stickyHash(key []byte) uint32 {
	return (murmur3(key, 0) & 0x7fffffff) % keyHashRange
}

// murmur3 is MurmurHash3_x86_32, as Guava's murmur3_32 (which Pulsar uses).
func murmur3(data []byte, seed uint32) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	h := seed
	n := len(data)
	i := 0
	for ; i+4 <= n; i += 4 {
		k := binary.LittleEndian.Uint32(data[i:])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	var k uint32
	switch n - i {
	case 3:
		k ^= uint32(data[i+2]) << 16
		fallthrough
	case 2:
		k ^= uint32(data[i+1]) << 8
		fallthrough
	case 1:
		k ^= uint32(data[i])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(n)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// hashRange is slots [Start, End], inclusive.
type hashRange struct{ Start, End uint32 }

func (r hashRange) String() string { return fmt.Sprintf("[%d, %d]", r.Start, r.End) }

// keySelector assigns hash slots to Key_Shared consumers. Owned by the subscription
// goroutine.
//
// AUTO_SPLIT (Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector): the first consumer
// owns every slot; each new consumer takes the upper half... of the largest range; a
// leaving consumer's range goes to the consumer of the next range up (or down, for the
// last range). STICKY: consumers bring their own ranges, which must not overlap.
type keySelector struct {
	ranges []ownedRange // sorted by Start, covering 0..keyHashRange-1 in AUTO_SPLIT mode
}

type ownedRange struct {
	hashRange
	c *Consumer
}

// add assigns ranges to c. sticky is c's own ranges (STICKY mode), nil for AUTO_SPLIT.
func (ks *keySelector) add(c *Consumer, sticky []hashRange) error {
	if sticky != nil {
		for _, r := range sticky {
			if r.Start > r.End || r.End >= keyHashRange {
				return fmt.Errorf("%w: hash range %v", ErrConsumerAssign, r)
			}
			for _, o := range ks.ranges {
				if r.Start <= o.End && o.Start <= r.End {
					return fmt.Errorf("%w: range %v overlaps %v of consumer %s", ErrConsumerAssign, r, o.hashRange, o.c.Name)
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
		ks.ranges = []ownedRange{{hashRange{0, keyHashRange - 1}, c}}
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
	ks.ranges = append(ks.ranges, ownedRange{hashRange{mid + 1, r.End}, c})
	ks.sort()
	return nil
}

// remove gives c's ranges to their neighbours (AUTO_SPLIT) or drops them (STICKY).
func (ks *keySelector) remove(c *Consumer, sticky bool) {
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
func (ks *keySelector) pick(h uint32) *Consumer {
	i := sort.Search(len(ks.ranges), func(i int) bool { return ks.ranges[i].End >= h })
	if i < len(ks.ranges) && ks.ranges[i].Start <= h {
		return ks.ranges[i].c
	}
	return nil
}

// rangesOf lists c's ranges for the statistics.
func (ks *keySelector) rangesOf(c *Consumer) []string {
	var out []string
	for _, r := range ks.ranges {
		if r.c == c {
			out = append(out, r.String())
		}
	}
	return out
}
