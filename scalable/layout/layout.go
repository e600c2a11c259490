package layout

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// MaxHash is the largest key hash: the key-hash space is the 16 bits 0x0000–0xFFFF.
const MaxHash = 0xFFFF

// AssignmentMetadataKey is the consumer-metadata key (CommandSubscribe.metadata) in which a
// stream consumer attaching to a segment names the version of the assignment it holds (a
// decimal number): the segment's broker refuses the attach while the version is below the
// segment's fence for the subscription (a seek of an ancestor fenced it).
const AssignmentMetadataKey = "magnetar.scalable.assignment"

// Errors. Callers test them with errors.Is.
var (
	// ErrInvalid marks a layout that breaks a structural rule (S1 among them); Validate wraps
	// it with the reason.
	ErrInvalid = errors.New("layout: invalid")
	// ErrNotActive is returned for a split or merge of a segment that is not active.
	ErrNotActive = errors.New("layout: segment not active")
	// ErrNotFound is returned for a segment that is not in the layout.
	ErrNotFound = errors.New("layout: no such segment")
	// ErrNotAdjacent is returned for a merge of two segments whose ranges do not touch.
	ErrNotAdjacent = errors.New("layout: segments not adjacent")
	// ErrBadSplit is returned for a split point outside the segment or a one-hash segment.
	ErrBadSplit = errors.New("layout: bad split point")
	// ErrPending is returned when an operation is recorded and not yet committed.
	ErrPending = errors.New("layout: an operation is pending")
	// ErrNoPending is returned by Commit when no operation is recorded.
	ErrNoPending = errors.New("layout: no pending operation")
	// ErrPruneOrder is returned for a prune of a segment that still has a parent in the
	// layout (S3) or that is not sealed.
	ErrPruneOrder = errors.New("layout: only a sealed segment with no parent left may be pruned")
	// ErrBadName is returned by the name parsers.
	ErrBadName = errors.New("layout: bad topic name")
)

// HashRange is an inclusive range [Start, End] of the key-hash space, as upstream's
// HashRange: the whole space is [0x0000, 0xFFFF] and a segment's name shows both ends.
type HashRange struct {
	Start uint16 `json:"start"`
	End   uint16 `json:"end"`
}

// FullRange is the whole key-hash space.
func FullRange() HashRange { return HashRange{0, MaxHash} }

// Contains reports whether h is in the range.
func (r HashRange) Contains(h uint16) bool { return r.Start <= h && h <= r.End }

// Size is the number of hashes in the range.
func (r HashRange) Size() int { return int(r.End) - int(r.Start) + 1 }

// Adjacent reports whether r and o touch (one ends just before the other starts).
func (r HashRange) Adjacent(o HashRange) bool {
	return int(r.End)+1 == int(o.Start) || int(o.End)+1 == int(r.Start)
}

// Overlaps reports whether r and o share a hash.
func (r HashRange) Overlaps(o HashRange) bool { return r.Start <= o.End && o.Start <= r.End }

// Midpoint is the first hash of the upper half when the range is split in two (upstream's
// split: [start, mid] and [mid+1, end] with mid = start + (end-start)/2).
func (r HashRange) Midpoint() uint16 { return r.Start + (r.End-r.Start)/2 + 1 }

func (r HashRange) String() string { return fmt.Sprintf("%04x-%04x", r.Start, r.End) }

// SegmentID identifies a segment within its topic; ids are handed out in increasing order
// and never reused.
type SegmentID uint64

// SegmentState is a segment's state in the layout.
type SegmentState uint8

// Segment states.
const (
	// StateActive: the segment takes new messages of its hash range.
	StateActive SegmentState = iota + 1
	// StateSealed: the segment's managed ledger is terminated; it is only read.
	StateSealed
)

func (s SegmentState) String() string {
	switch s {
	case StateActive:
		return "active"
	case StateSealed:
		return "sealed"
	}
	return fmt.Sprintf("SegmentState(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler ("active", "sealed").
func (s SegmentState) MarshalText() ([]byte, error) {
	if s != StateActive && s != StateSealed {
		return nil, fmt.Errorf("%w: state %d", ErrInvalid, uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *SegmentState) UnmarshalText(b []byte) error {
	switch string(b) {
	case "active":
		*s = StateActive
	case "sealed":
		*s = StateSealed
	default:
		return fmt.Errorf("%w: state %q", ErrInvalid, b)
	}
	return nil
}

// Segment is one node of the DAG: an ordinary persistent topic with its own managed ledger.
type Segment struct {
	ID    SegmentID    `json:"id"`
	Range HashRange    `json:"range"`
	State SegmentState `json:"state"`
	// Parents and Children are the DAG edges still in the layout, in increasing id order.
	// A pruned segment is removed from its children's Parents.
	Parents  []SegmentID `json:"parents,omitempty"`
	Children []SegmentID `json:"children,omitempty"`
	// CreatedEpoch and SealedEpoch are layout epochs; CreatedMs and SealedMs wall-clock Unix
	// milliseconds (Sealed*: 0 while active).
	CreatedEpoch int64 `json:"createdAtEpoch"`
	SealedEpoch  int64 `json:"sealedAtEpoch,omitempty"`
	CreatedMs    int64 `json:"createdAtMs"`
	SealedMs     int64 `json:"sealedAtMs,omitempty"`
}

func (s Segment) clone() Segment {
	s.Parents = slices.Clone(s.Parents)
	s.Children = slices.Clone(s.Children)
	return s
}

// Descriptor is the segment's part of its topic name: <hexStart>-<hexEnd>-<id>.
func (s Segment) Descriptor() string { return fmt.Sprintf("%s-%d", s.Range, s.ID) }

// OpKind tells a pending operation apart.
type OpKind uint8

// Operation kinds.
const (
	// OpSplit seals one parent and creates two children covering its range.
	OpSplit OpKind = iota + 1
	// OpMerge seals two adjacent parents and creates one child covering both.
	OpMerge
	// OpSubscribe adds a subscription: a cursor on every segment, then the name.
	OpSubscribe
)

func (k OpKind) String() string {
	switch k {
	case OpSplit:
		return "split"
	case OpMerge:
		return "merge"
	case OpSubscribe:
		return "subscribe"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// MarshalText implements encoding.TextMarshaler.
func (k OpKind) MarshalText() ([]byte, error) {
	if k < OpSplit || k > OpSubscribe {
		return nil, fmt.Errorf("%w: op kind %d", ErrInvalid, uint8(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *OpKind) UnmarshalText(b []byte) error {
	for _, c := range []OpKind{OpSplit, OpMerge, OpSubscribe} {
		if string(b) == c.String() {
			*k = c
			return nil
		}
	}
	return fmt.Errorf("%w: op kind %q", ErrInvalid, b)
}

// Op is an operation recorded in the layout before any of its effects (the intent): a
// controller that takes over finds it and completes it. Children are the segments a split or
// merge creates, with their ids and ranges already chosen.
type Op struct {
	Kind         OpKind      `json:"kind"`
	Parents      []SegmentID `json:"parents,omitempty"`
	Children     []Segment   `json:"children,omitempty"`
	Subscription string      `json:"subscription,omitempty"`
	AtMs         int64       `json:"atMs"`
}

// Layout is a scalable topic's whole metadata record: the DAG of segments, its subscriptions,
// the operation in progress and the pruned segments whose topics are still to delete. It is
// changed only as a whole, by compare-and-swap; every method returns a new Layout and leaves
// the receiver unchanged. Not safe for concurrent mutation (it is a value).
//
// Invariants (Validate):
//   - S1: the active segments partition [0, MaxHash];
//   - Segments are in increasing id order, every id below NextID, and edges are symmetric;
//   - an active segment has no children; a sealed one has a seal time;
//   - Pending, if set, names active parents and children with fresh ids whose ranges
//     partition the parents' union.
type Layout struct {
	Epoch         int64     `json:"epoch"`
	NextID        SegmentID `json:"nextSegmentId"`
	Segments      []Segment `json:"segments"`
	Subscriptions []string  `json:"subscriptions,omitempty"`
	Pending       *Op       `json:"pending,omitempty"`
	// Deleting are pruned segments (out of the DAG) whose topics are not yet deleted.
	Deleting []Segment `json:"deleting,omitempty"`
}

// Initial returns the layout of a new topic with n equal segments (n >= 1) and the given
// subscriptions, at epoch 1.
func Initial(n int, subs []string, nowMs int64) Layout {
	if n < 1 {
		n = 1
	}
	l := Layout{Epoch: 1, Subscriptions: sortedUnique(subs)}
	width := (MaxHash + 1) / n
	for i := range n {
		start := i * width
		end := start + width - 1
		if i == n-1 {
			end = MaxHash
		}
		l.Segments = append(l.Segments, Segment{ID: SegmentID(i), Range: HashRange{uint16(start), uint16(end)},
			State: StateActive, CreatedEpoch: 1, CreatedMs: nowMs})
	}
	l.NextID = SegmentID(n)
	return l
}

func sortedUnique(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return slices.Compact(out)
}

// Clone returns a deep copy.
func (l Layout) Clone() Layout {
	c := l
	c.Segments = make([]Segment, len(l.Segments))
	for i, s := range l.Segments {
		c.Segments[i] = s.clone()
	}
	c.Subscriptions = slices.Clone(l.Subscriptions)
	if l.Pending != nil {
		p := *l.Pending
		p.Parents = slices.Clone(p.Parents)
		p.Children = slices.Clone(p.Children)
		c.Pending = &p
	}
	c.Deleting = slices.Clone(l.Deleting)
	return c
}

// Segment returns the segment with id.
func (l Layout) Segment(id SegmentID) (Segment, bool) {
	i, ok := slices.BinarySearchFunc(l.Segments, id, func(s Segment, id SegmentID) int { return cmpID(s.ID, id) })
	if !ok {
		return Segment{}, false
	}
	return l.Segments[i], true
}

// Has reports whether id is in the layout.
func (l Layout) Has(id SegmentID) bool { _, ok := l.Segment(id); return ok }

func cmpID(a, b SegmentID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Active returns the active segments in hash order.
func (l Layout) Active() []Segment {
	var out []Segment
	for _, s := range l.Segments {
		if s.State == StateActive {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Range.Start < out[j].Range.Start })
	return out
}

// FindActive returns the active segment whose range holds h.
func (l Layout) FindActive(h uint16) (Segment, bool) {
	for _, s := range l.Segments {
		if s.State == StateActive && s.Range.Contains(h) {
			return s, true
		}
	}
	return Segment{}, false
}

// Ancestors returns every ancestor of id still in the layout (transitively), in id order.
func (l Layout) Ancestors(id SegmentID) []SegmentID {
	return l.walk(id, func(s Segment) []SegmentID { return s.Parents })
}

// Descendants returns every descendant of id in the layout (transitively), in id order.
func (l Layout) Descendants(id SegmentID) []SegmentID {
	return l.walk(id, func(s Segment) []SegmentID { return s.Children })
}

func (l Layout) walk(id SegmentID, next func(Segment) []SegmentID) []SegmentID {
	seen := map[SegmentID]bool{}
	stack := []SegmentID{id}
	for len(stack) > 0 {
		cur := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		s, ok := l.Segment(cur)
		if !ok {
			continue
		}
		for _, n := range next(s) {
			if !seen[n] && l.Has(n) {
				seen[n] = true
				stack = append(stack, n)
			}
		}
	}
	out := make([]SegmentID, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// MergeDepth is the number of merges in id's lineage still in the layout, itself included
// (a segment with two parents was made by a merge), as upstream's mergeDepth: the auto-scale
// policy's maximum DAG depth caps it.
func (l Layout) MergeDepth(id SegmentID) int {
	d := 0
	for _, a := range append(l.Ancestors(id), id) {
		if s, _ := l.Segment(a); len(s.Parents) >= 2 {
			d++
		}
	}
	return d
}

// PlanSplit records the split of active segment id at hash at (0: the midpoint) as the
// pending operation: children [Start, at-1] and [at, End] get the next two ids. The split
// takes effect with Commit.
func (l Layout) PlanSplit(id SegmentID, at uint16, nowMs int64) (Layout, error) {
	if l.Pending != nil {
		return l, ErrPending
	}
	s, ok := l.Segment(id)
	if !ok {
		return l, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if s.State != StateActive {
		return l, fmt.Errorf("%w: %d", ErrNotActive, id)
	}
	if s.Range.Size() < 2 {
		return l, fmt.Errorf("%w: segment %d holds one hash", ErrBadSplit, id)
	}
	if at == 0 {
		at = s.Range.Midpoint()
	}
	if at <= s.Range.Start || at > s.Range.End {
		return l, fmt.Errorf("%w: %04x outside (%04x, %04x]", ErrBadSplit, at, s.Range.Start, s.Range.End)
	}
	c := l.Clone()
	c.Pending = &Op{Kind: OpSplit, Parents: []SegmentID{id}, AtMs: nowMs, Children: []Segment{
		{ID: l.NextID, Range: HashRange{s.Range.Start, at - 1}, State: StateActive, Parents: []SegmentID{id}},
		{ID: l.NextID + 1, Range: HashRange{at, s.Range.End}, State: StateActive, Parents: []SegmentID{id}},
	}}
	c.NextID += 2
	return c, nil
}

// PlanMerge records the merge of adjacent active segments a and b as the pending operation:
// one child covering both gets the next id.
func (l Layout) PlanMerge(a, b SegmentID, nowMs int64) (Layout, error) {
	if l.Pending != nil {
		return l, ErrPending
	}
	sa, oka := l.Segment(a)
	sb, okb := l.Segment(b)
	if !oka || !okb || a == b {
		return l, fmt.Errorf("%w: %d or %d", ErrNotFound, a, b)
	}
	if sa.State != StateActive || sb.State != StateActive {
		return l, fmt.Errorf("%w: %d or %d", ErrNotActive, a, b)
	}
	if !sa.Range.Adjacent(sb.Range) {
		return l, fmt.Errorf("%w: %v and %v", ErrNotAdjacent, sa.Range, sb.Range)
	}
	r := HashRange{min(sa.Range.Start, sb.Range.Start), max(sa.Range.End, sb.Range.End)}
	parents := []SegmentID{min(a, b), max(a, b)}
	c := l.Clone()
	c.Pending = &Op{Kind: OpMerge, Parents: parents, AtMs: nowMs, Children: []Segment{
		{ID: l.NextID, Range: r, State: StateActive, Parents: slices.Clone(parents)},
	}}
	c.NextID++
	return c, nil
}

// PlanSubscribe records the addition of subscription sub as the pending operation.
func (l Layout) PlanSubscribe(sub string, nowMs int64) (Layout, error) {
	if l.Pending != nil {
		return l, ErrPending
	}
	if sub == "" || slices.Contains(l.Subscriptions, sub) {
		return l, fmt.Errorf("%w: subscription %q empty or exists", ErrInvalid, sub)
	}
	c := l.Clone()
	c.Pending = &Op{Kind: OpSubscribe, Subscription: sub, AtMs: nowMs}
	return c, nil
}

// Commit applies the pending operation at nowMs: a split or merge seals its parents and
// adds its children as active; a subscribe adds the name. The epoch moves on.
func (l Layout) Commit(nowMs int64) (Layout, error) {
	if l.Pending == nil {
		return l, ErrNoPending
	}
	c := l.Clone()
	op := c.Pending
	c.Pending = nil
	c.Epoch++
	switch op.Kind {
	case OpSubscribe:
		c.Subscriptions = sortedUnique(append(c.Subscriptions, op.Subscription))
	case OpSplit, OpMerge:
		var kids []SegmentID
		for _, ch := range op.Children {
			kids = append(kids, ch.ID)
		}
		for i := range c.Segments {
			s := &c.Segments[i]
			if slices.Contains(op.Parents, s.ID) {
				s.State, s.Children, s.SealedEpoch, s.SealedMs = StateSealed, slices.Clone(kids), c.Epoch, max(nowMs, 1)
			}
		}
		for _, ch := range op.Children {
			ch.CreatedEpoch, ch.CreatedMs = c.Epoch, nowMs
			c.Segments = append(c.Segments, ch.clone())
		}
	}
	return c, c.Validate()
}

// Prune removes sealed segment id from the DAG (S3: it must have no parent left in the
// layout) and lists it in Deleting until its topic is deleted (Deleted).
func (l Layout) Prune(id SegmentID) (Layout, error) {
	s, ok := l.Segment(id)
	if !ok {
		return l, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if s.State != StateSealed || len(s.Parents) > 0 {
		return l, fmt.Errorf("%w: segment %d (%v, parents %v)", ErrPruneOrder, id, s.State, s.Parents)
	}
	return l.Remove(id), nil
}

// Remove drops segment id from the DAG whatever its place, unlinking it from its neighbours,
// and lists it in Deleting. It is Prune without the S3 check: only the controller's
// upstream-behaviour mutation (tests) and Prune call it.
func (l Layout) Remove(id SegmentID) Layout {
	c := l.Clone()
	c.Epoch++
	out := c.Segments[:0]
	for _, s := range c.Segments {
		if s.ID == id {
			c.Deleting = append(c.Deleting, Segment{ID: s.ID, Range: s.Range, State: s.State})
			continue
		}
		s.Parents = slices.DeleteFunc(s.Parents, func(p SegmentID) bool { return p == id })
		s.Children = slices.DeleteFunc(s.Children, func(p SegmentID) bool { return p == id })
		out = append(out, s)
	}
	c.Segments = out
	return c
}

// Deleted drops the segments in ids from Deleting (their topics are gone).
func (l Layout) Deleted(ids []SegmentID) Layout {
	c := l.Clone()
	c.Deleting = slices.DeleteFunc(c.Deleting, func(s Segment) bool { return slices.Contains(ids, s.ID) })
	return c
}

// Validate checks the layout's invariants (S1 and the structure; see Layout) and returns an
// error wrapping ErrInvalid for the first one broken.
func (l Layout) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	ids := map[SegmentID]Segment{}
	for i, s := range l.Segments {
		if i > 0 && s.ID <= l.Segments[i-1].ID {
			return bad("segments out of id order at %d", s.ID)
		}
		if s.ID >= l.NextID {
			return bad("segment %d at or past next id %d", s.ID, l.NextID)
		}
		if s.Range.End < s.Range.Start {
			return bad("segment %d has range %v", s.ID, s.Range)
		}
		switch s.State {
		case StateActive:
			if len(s.Children) > 0 {
				return bad("active segment %d has children %v", s.ID, s.Children)
			}
		case StateSealed:
			if s.SealedMs == 0 {
				return bad("sealed segment %d has no seal time", s.ID)
			}
		default:
			return bad("segment %d in state %v", s.ID, s.State)
		}
		ids[s.ID] = s
	}
	for _, s := range l.Segments {
		for _, p := range s.Parents {
			ps, ok := ids[p]
			if !ok || !slices.Contains(ps.Children, s.ID) {
				return bad("segment %d lists parent %d that does not list it", s.ID, p)
			}
		}
		for _, ch := range s.Children {
			if cs, ok := ids[ch]; !ok || !slices.Contains(cs.Parents, s.ID) {
				return bad("segment %d lists child %d that does not list it", s.ID, ch)
			}
		}
	}
	if err := partitions(l.Active()); err != nil {
		return bad("S1: %v", err)
	}
	for _, d := range l.Deleting {
		if _, ok := ids[d.ID]; ok {
			return bad("segment %d both in the DAG and deleting", d.ID)
		}
	}
	if op := l.Pending; op != nil {
		if op.Kind == OpSubscribe {
			if op.Subscription == "" || slices.Contains(l.Subscriptions, op.Subscription) {
				return bad("pending subscribe of %q", op.Subscription)
			}
			return nil
		}
		var union []Segment
		for _, p := range op.Parents {
			s, ok := ids[p]
			if !ok || s.State != StateActive {
				return bad("pending %v of segment %d that is not active", op.Kind, p)
			}
			union = append(union, s)
		}
		if err := coversSame(union, op.Children); err != nil {
			return bad("pending %v: %v", op.Kind, err)
		}
		for _, ch := range op.Children {
			if _, ok := ids[ch.ID]; ok || ch.ID >= l.NextID {
				return bad("pending %v child %d reuses an id or is past next id", op.Kind, ch.ID)
			}
		}
	}
	return nil
}

// partitions reports whether segs (in hash order) cover [0, MaxHash] exactly once.
func partitions(segs []Segment) error {
	next := 0
	for _, s := range segs {
		if int(s.Range.Start) != next {
			return fmt.Errorf("segment %d starts at %04x, expected %04x (gap or overlap)", s.ID, s.Range.Start, next)
		}
		next = int(s.Range.End) + 1
	}
	if next != MaxHash+1 {
		return fmt.Errorf("active segments end at %04x", next-1)
	}
	return nil
}

// coversSame reports whether the children's ranges partition exactly the parents' union.
func coversSame(parents, children []Segment) error {
	sortR := func(s []Segment) []HashRange {
		var rs []HashRange
		for _, x := range s {
			rs = append(rs, x.Range)
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
		return rs
	}
	p, c := sortR(parents), sortR(children)
	if len(p) == 0 || len(c) == 0 {
		return errors.New("no parents or children")
	}
	for _, rs := range [][]HashRange{p, c} {
		for i := 1; i < len(rs); i++ {
			if int(rs[i-1].End)+1 != int(rs[i].Start) {
				return fmt.Errorf("ranges %v and %v not contiguous", rs[i-1], rs[i])
			}
		}
	}
	if p[0].Start != c[0].Start || p[len(p)-1].End != c[len(c)-1].End {
		return fmt.Errorf("children %v do not cover the parents %v", c, p)
	}
	return nil
}

// Marshal returns the record's JSON form.
func (l Layout) Marshal() ([]byte, error) { return json.Marshal(l) }

// Unmarshal parses a record and validates it.
func Unmarshal(b []byte) (Layout, error) {
	var l Layout
	if err := json.Unmarshal(b, &l); err != nil {
		return Layout{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return l, l.Validate()
}

// Topic is a scalable topic's name: topic://<tenant>/<namespace>/<name>.
type Topic struct{ Tenant, Namespace, Name string }

// ParseTopic parses topic://tenant/ns/name.
func ParseTopic(s string) (Topic, error) {
	rest, ok := strings.CutPrefix(s, "topic://")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return Topic{}, fmt.Errorf("%w: %q (want topic://tenant/namespace/name)", ErrBadName, s)
	}
	return Topic{parts[0], parts[1], parts[2]}, nil
}

func (t Topic) String() string { return "topic://" + t.Tenant + "/" + t.Namespace + "/" + t.Name }

// SegmentName is the topic name of segment s of t:
// segment://<tenant>/<namespace>/<name>/<hexStart>-<hexEnd>-<id>.
func (t Topic) SegmentName(s Segment) string {
	return "segment://" + t.Tenant + "/" + t.Namespace + "/" + t.Name + "/" + s.Descriptor()
}

// ParseSegmentName parses a name built by SegmentName.
func ParseSegmentName(s string) (Topic, HashRange, SegmentID, error) {
	rest, ok := strings.CutPrefix(s, "segment://")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 4 {
		return Topic{}, HashRange{}, 0, fmt.Errorf("%w: %q", ErrBadName, s)
	}
	d := strings.Split(parts[3], "-")
	if len(d) != 3 || len(d[0]) != 4 || len(d[1]) != 4 {
		return Topic{}, HashRange{}, 0, fmt.Errorf("%w: segment descriptor %q", ErrBadName, parts[3])
	}
	start, err1 := strconv.ParseUint(d[0], 16, 16)
	end, err2 := strconv.ParseUint(d[1], 16, 16)
	id, err3 := strconv.ParseUint(d[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil || end < start {
		return Topic{}, HashRange{}, 0, fmt.Errorf("%w: segment descriptor %q", ErrBadName, parts[3])
	}
	t, err := ParseTopic("topic://" + strings.Join(parts[:3], "/"))
	return t, HashRange{uint16(start), uint16(end)}, SegmentID(id), err
}
