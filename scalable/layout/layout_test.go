package layout

import (
	"errors"
	"reflect"
	"testing"
)

func mustOK(t *testing.T, l Layout, err error) Layout {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestSplitMergeCommit(t *testing.T) {
	l := Initial(1, []string{"b", "a", "a"}, 1000)
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(l.Subscriptions, []string{"a", "b"}) {
		t.Fatalf("subscriptions %v", l.Subscriptions)
	}
	p, err := l.PlanSplit(0, 0, 2000)
	p = mustOK(t, p, err)
	if _, err := p.PlanSplit(0, 0, 2000); !errors.Is(err, ErrPending) {
		t.Fatalf("second plan: %v", err)
	}
	c, err := p.Commit(2500)
	c = mustOK(t, c, err)
	if got := c.Active(); len(got) != 2 || got[0].Range != (HashRange{0, 0x7fff}) || got[1].Range != (HashRange{0x8000, MaxHash}) {
		t.Fatalf("active after split: %+v", got)
	}
	if s, _ := c.Segment(0); s.State != StateSealed || s.SealedMs != 2500 || !reflect.DeepEqual(s.Children, []SegmentID{1, 2}) {
		t.Fatalf("parent after split: %+v", s)
	}
	c2, err := c.PlanSplit(2, 0xc000, 3000)
	c2 = mustOK(t, c2, err)
	c2, err = c2.Commit(3000)
	c2 = mustOK(t, c2, err)
	if got := c2.Ancestors(4); !reflect.DeepEqual(got, []SegmentID{0, 2}) {
		t.Fatalf("ancestors of 4: %v", got)
	}
	if got := c2.Descendants(0); !reflect.DeepEqual(got, []SegmentID{1, 2, 3, 4}) {
		t.Fatalf("descendants of 0: %v", got)
	}
	if _, err := c2.PlanMerge(1, 4, 4000); !errors.Is(err, ErrNotAdjacent) {
		t.Fatalf("merge of 1 and 4: %v", err)
	}
	m, err := c2.PlanMerge(3, 1, 4000)
	m = mustOK(t, m, err)
	m, err = m.Commit(4000)
	m = mustOK(t, m, err)
	s5, _ := m.Segment(5)
	if s5.Range != (HashRange{0, 0xbfff}) || !reflect.DeepEqual(s5.Parents, []SegmentID{1, 3}) || m.MergeDepth(5) != 1 {
		t.Fatalf("merged: %+v depth %d", s5, m.MergeDepth(5))
	}
	if h, ok := m.FindActive(0xc123); !ok || h.ID != 4 {
		t.Fatalf("FindActive: %+v", h)
	}
	if _, err := m.PlanSplit(0, 0, 1); !errors.Is(err, ErrNotActive) {
		t.Fatalf("split of sealed: %v", err)
	}
	if _, err := m.PlanSplit(4, 0xc000, 1); !errors.Is(err, ErrBadSplit) {
		t.Fatalf("split at start: %v", err)
	}
}

func TestPruneAncestorsFirst(t *testing.T) {
	l := Initial(1, nil, 1)
	l, _ = l.PlanSplit(0, 0, 1)
	l, _ = l.Commit(1)
	l, _ = l.PlanSplit(2, 0, 2)
	l, _ = l.Commit(2)
	if _, err := l.Prune(2); !errors.Is(err, ErrPruneOrder) {
		t.Fatalf("prune of 2 with parent 0 left: %v", err)
	}
	if _, err := l.Prune(1); !errors.Is(err, ErrPruneOrder) {
		t.Fatalf("prune of active 1: %v", err)
	}
	p, err := l.Prune(0)
	p = mustOK(t, p, err)
	if s, _ := p.Segment(2); len(s.Parents) != 0 || len(p.Deleting) != 1 {
		t.Fatalf("after prune of 0: %+v deleting %v", s, p.Deleting)
	}
	p, err = p.Prune(2)
	p = mustOK(t, p, err)
	if p = p.Deleted([]SegmentID{0}); len(p.Deleting) != 1 || p.Deleting[0].ID != 2 {
		t.Fatalf("deleting %v", p.Deleting)
	}
}

func TestValidateCatchesBrokenLayouts(t *testing.T) {
	base := Initial(2, nil, 1)
	for name, broken := range map[string]func(l *Layout){
		"gap":             func(l *Layout) { l.Segments[1].Range.Start++ },
		"overlap":         func(l *Layout) { l.Segments[1].Range.Start-- },
		"short":           func(l *Layout) { l.Segments[1].Range.End-- },
		"id past next":    func(l *Layout) { l.NextID = 1 },
		"one-sided edge":  func(l *Layout) { l.Segments[1].Parents = []SegmentID{0} },
		"sealed, no time": func(l *Layout) { l.Segments[0].State = StateSealed },
		"bad pending": func(l *Layout) {
			l.Pending = &Op{Kind: OpSplit, Parents: []SegmentID{0}, Children: []Segment{{ID: 2, Range: HashRange{0, 10}}}}
			l.NextID = 3
		},
	} {
		l := base.Clone()
		broken(&l)
		if err := l.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	l := Initial(1, []string{"s"}, 1)
	l, _ = l.PlanSplit(0, 0x1234, 5)
	b, err := l.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, l) {
		t.Fatalf("round trip:\n%+v\n%+v\n%s", got, l, b)
	}
	if _, err := Unmarshal([]byte(`{"epoch":1,"nextSegmentId":1,"segments":[{"id":0,"range":{"start":0,"end":65535},"state":"frozen"}]}`)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad state: %v", err)
	}
}

func TestNames(t *testing.T) {
	top, err := ParseTopic("topic://t/ns/orders")
	if err != nil {
		t.Fatal(err)
	}
	s := Segment{ID: 12, Range: HashRange{0x8000, 0xffff}}
	name := top.SegmentName(s)
	if name != "segment://t/ns/orders/8000-ffff-12" {
		t.Fatalf("name %q", name)
	}
	gt, r, id, err := ParseSegmentName(name)
	if err != nil || gt != top || r != s.Range || id != 12 {
		t.Fatalf("parse %q: %v %v %v %v", name, gt, r, id, err)
	}
	for _, bad := range []string{"topic://t/ns", "persistent://t/ns/x", "segment://t/ns/x/8000-7fff-1", "segment://t/ns/x/800-ffff-1"} {
		if _, err := ParseTopic(bad); err == nil {
			if _, _, _, err := ParseSegmentName(bad); err == nil {
				t.Errorf("%q parsed", bad)
			}
		}
	}
}

func TestTree(t *testing.T) {
	l := Initial(1, nil, 1)
	l, _ = l.PlanSplit(0, 0, 1)
	l, _ = l.Commit(1)
	l, _ = l.PlanSplit(2, 0, 2)
	l, _ = l.Commit(2)
	l, _ = l.PlanMerge(1, 3, 3)
	l, _ = l.Commit(3)
	want := `epoch 4, 6 segments (2 active)
0 0000-ffff sealed
├── 1 0000-7fff sealed
│   └── 5 0000-bfff active
└── 2 8000-ffff sealed
    ├── 3 8000-bfff sealed
    │   └── 5 (merged, see above)
    └── 4 c000-ffff active
`
	if got := l.Tree(); got != want {
		t.Fatalf("tree:\n%s\nwant:\n%s", got, want)
	}
	if KeyHash([]byte("hello")) != 0x248b {
		t.Fatalf("KeyHash(hello) = %04x", KeyHash([]byte("hello")))
	}
}
