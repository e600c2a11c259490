package scalable

import (
	"slices"
	"testing"

	"github.com/magnetar-io/magnetar/scalable/layout"
)

func twoSegments(t *testing.T) layout.Layout {
	t.Helper()
	l := layout.Initial(1, nil, 1)
	l, err := l.PlanSplit(0, 0, 1)
	if err == nil {
		l, err = l.Commit(1)
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestDecide(t *testing.T) {
	p := DefaultPolicy()
	p.Enabled = true
	p.MaxSegments = 3
	l := twoSegments(t) // active 1 = [0000, 7fff], 2 = [8000, ffff]
	hot := LoadSample{MsgRateIn: 2 * p.SplitMsgRateIn}
	cold := LoadSample{MsgRateIn: 1, ChangedMs: 0}
	const now = 1_000_000
	for name, tc := range map[string]struct {
		l                    layout.Layout
		load                 map[SegmentID]LoadSample
		consumers            int
		p                    Policy
		lastSplit, lastMerge int64
		want                 DecisionKind
		seg, other           SegmentID
	}{
		"disabled":              {l: l, load: map[SegmentID]LoadSample{1: hot}, p: Policy{}, want: DecideNone},
		"hot segment splits":    {l: l, load: map[SegmentID]LoadSample{1: hot, 2: cold}, p: p, want: DecideSplit, seg: 1},
		"bytes split too":       {l: l, load: map[SegmentID]LoadSample{2: {BytesRateIn: 2 * p.SplitBytesRateIn}}, p: p, want: DecideSplit, seg: 2},
		"split cooldown":        {l: l, load: map[SegmentID]LoadSample{1: hot}, p: p, lastSplit: now - 1, want: DecideNone},
		"consumers split":       {l: l, load: map[SegmentID]LoadSample{2: {MsgRateIn: 5}}, consumers: 3, p: p, want: DecideSplit, seg: 2},
		"cold pair merges":      {l: l, load: map[SegmentID]LoadSample{1: cold, 2: cold}, p: p, want: DecideMerge, seg: 1, other: 2},
		"cold too recently":     {l: l, load: map[SegmentID]LoadSample{1: cold, 2: {MsgRateIn: 1, ChangedMs: now}}, p: p, want: DecideNone},
		"no sample, no merge":   {l: l, load: map[SegmentID]LoadSample{1: cold}, p: p, want: DecideNone},
		"merge cooldown":        {l: l, load: map[SegmentID]LoadSample{1: cold, 2: cold}, p: p, lastMerge: now - 1, want: DecideNone},
		"merge keeps consumers": {l: l, load: map[SegmentID]LoadSample{1: cold, 2: cold}, consumers: 2, p: p, want: DecideNone},
		"min segments":          {l: l, load: map[SegmentID]LoadSample{1: cold, 2: cold}, p: func() Policy { q := p; q.MinSegments = 2; return q }(), want: DecideNone},
		"max dag depth":         {l: l, load: map[SegmentID]LoadSample{1: cold, 2: cold}, p: func() Policy { q := p; q.MaxDAGDepth = 0; return q }(), want: DecideNone},
		"max segments":          {l: l, load: map[SegmentID]LoadSample{1: hot}, p: func() Policy { q := p; q.MaxSegments = 2; return q }(), want: DecideNone},
	} {
		d := Decide(tc.l, tc.load, tc.consumers, tc.p, now, tc.lastSplit, tc.lastMerge)
		if d.Kind != tc.want || (d.Kind != DecideNone && (d.Segment != tc.seg || d.Other != tc.other)) {
			t.Errorf("%s: got %+v, want kind %d on %d/%d", name, d, tc.want, tc.seg, tc.other)
		}
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := p
	bad.MergeMsgRateIn = bad.SplitMsgRateIn
	if bad.Validate() == nil {
		t.Fatal("a merge threshold at the split threshold validates")
	}
}

// TestComputeAssignmentDeterministic: the assignment depends on the set of consumers, not
// their order, and deals segments in hash order round-robin over the names in order.
func TestComputeAssignmentDeterministic(t *testing.T) {
	l := twoSegments(t)
	l, _ = l.PlanSplit(2, 0xc000, 2)
	l, _ = l.Commit(2) // active 1 = [0000, 7fff], 3 = [8000, bfff], 4 = [c000, ffff]
	all := func(layout.Segment) bool { return true }
	a := ComputeAssignment(l, []string{"b", "a"}, all)
	b := ComputeAssignment(l, []string{"a", "b"}, all)
	// Hash order, then id: 0 [0000-], 1 [0000-], 2 [8000-], 3 [8000-], 4 [c000-].
	want := map[string][]SegmentID{"a": {0, 2, 4}, "b": {1, 3}}
	for _, got := range []map[string][]SegmentID{a, b} {
		if len(got) != 2 || !slices.Equal(got["a"], want["a"]) || !slices.Equal(got["b"], want["b"]) {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}
