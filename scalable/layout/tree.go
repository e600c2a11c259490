package layout

import (
	"fmt"
	"strings"

	"github.com/magnetar-io/magnetar/internal/murmur3"
)

// KeyHash is a key's place in the key-hash space: the high 16 bits of its
// MurmurHash3_x86_32 (seed 0), as upstream's ScalableTopicHashing.segmentHash.
func KeyHash(key []byte) uint16 { return uint16(murmur3.Sum32(key, 0) >> 16) }

// Tree renders the DAG for people: the roots (segments with no parent left) in id order and
// under each segment its children; a segment with two parents (a merge) is shown in full
// under the first and referred to under the second.
func (l Layout) Tree() string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %d, %d segments (%d active)", l.Epoch, len(l.Segments), len(l.Active()))
	if op := l.Pending; op != nil {
		fmt.Fprintf(&b, ", pending %v of %v", op.Kind, op.Parents)
	}
	b.WriteByte('\n')
	shown := map[SegmentID]bool{}
	var walk func(id SegmentID, prefix string, last bool, root bool)
	walk = func(id SegmentID, prefix string, last, root bool) {
		s, _ := l.Segment(id)
		branch, next := "├── ", prefix+"│   "
		if last {
			branch, next = "└── ", prefix+"    "
		}
		if root {
			branch, next = "", ""
		}
		if shown[id] {
			fmt.Fprintf(&b, "%s%s%d (merged, see above)\n", prefix, branch, id)
			return
		}
		shown[id] = true
		fmt.Fprintf(&b, "%s%s%d %v %v\n", prefix, branch, id, s.Range, s.State)
		for i, c := range s.Children {
			walk(c, next, i == len(s.Children)-1, false)
		}
	}
	for _, s := range l.Segments {
		if len(s.Parents) == 0 {
			walk(s.ID, "", true, true)
		}
	}
	return b.String()
}
