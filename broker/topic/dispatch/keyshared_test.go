package dispatch

import "testing"

// TestKeySelectorAutoSplit: ranges always partition the whole hash space; a consumer that
// leaves gives its ranges to a neighbour.
func TestKeySelectorAutoSplit(t *testing.T) {
	var ks keySelector
	cs := []*consumer{{name: "a"}, {name: "b"}, {name: "c"}, {name: "d"}}
	check := func(live []*consumer) {
		t.Helper()
		next := uint32(0)
		for _, r := range ks.ranges {
			if r.Start != next || r.End < r.Start {
				t.Fatalf("ranges %v do not partition the space", ks.ranges)
			}
			next = r.End + 1
		}
		if next != KeyHashRange {
			t.Fatalf("ranges %v end at %d", ks.ranges, next)
		}
		for _, h := range []uint32{0, 1, 12345, 32767, 32768, 65535} {
			c := ks.pick(h)
			found := false
			for _, l := range live {
				found = found || l == c
			}
			if !found {
				t.Fatalf("slot %d goes to %v, not a live consumer", h, c)
			}
		}
	}
	for i, c := range cs {
		if err := ks.add(c, nil); err != nil {
			t.Fatal(err)
		}
		check(cs[:i+1])
	}
	if len(ks.rangesOf(cs[0])) == 0 || len(ks.rangesOf(cs[3])) == 0 {
		t.Fatal("a consumer owns no range")
	}
	ks.remove(cs[1], false)
	check([]*consumer{cs[0], cs[2], cs[3]})
	ks.remove(cs[3], false)
	ks.remove(cs[0], false)
	check([]*consumer{cs[2]})
}

func TestKeySelectorSticky(t *testing.T) {
	var ks keySelector
	a, b := &consumer{name: "a"}, &consumer{name: "b"}
	if err := ks.add(a, []HashRange{{0, 100}}); err != nil {
		t.Fatal(err)
	}
	if err := ks.add(b, []HashRange{{50, 200}}); err == nil {
		t.Fatal("overlapping sticky ranges accepted")
	}
	if err := ks.add(b, []HashRange{{101, 200}}); err != nil {
		t.Fatal(err)
	}
	if ks.pick(100) != a || ks.pick(101) != b || ks.pick(201) != nil {
		t.Fatal("sticky ranges picked wrongly")
	}
	ks.remove(a, true)
	if ks.pick(0) != nil {
		t.Fatal("removed sticky range still picked")
	}
}
