package topic

import "testing"

func TestMurmur3(t *testing.T) {
	// Reference values of MurmurHash3_x86_32 with seed 0.
	for _, tc := range []struct {
		in   string
		want uint32
	}{
		{"", 0},
		{"hello", 0x248bfa47},
		{"Hello, world!", 0xc0363e43},
		{"The quick brown fox jumps over the lazy dog", 0x2e4ff723},
	} {
		if got := murmur3([]byte(tc.in), 0); got != tc.want {
			t.Errorf("murmur3(%q) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
}

// TestKeySelectorAutoSplit: ranges always partition the whole hash space; a consumer that
// leaves gives its ranges to a neighbour.
func TestKeySelectorAutoSplit(t *testing.T) {
	var ks keySelector
	cs := []*Consumer{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}}
	check := func(live []*Consumer) {
		t.Helper()
		next := uint32(0)
		for _, r := range ks.ranges {
			if r.Start != next || r.End < r.Start {
				t.Fatalf("ranges %v do not partition the space", ks.ranges)
			}
			next = r.End + 1
		}
		if next != keyHashRange {
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
	check([]*Consumer{cs[0], cs[2], cs[3]})
	ks.remove(cs[3], false)
	ks.remove(cs[0], false)
	check([]*Consumer{cs[2]})
}

func TestKeySelectorSticky(t *testing.T) {
	var ks keySelector
	a, b := &Consumer{Name: "a"}, &Consumer{Name: "b"}
	if err := ks.add(a, []hashRange{{0, 100}}); err != nil {
		t.Fatal(err)
	}
	if err := ks.add(b, []hashRange{{50, 200}}); err == nil {
		t.Fatal("overlapping sticky ranges accepted")
	}
	if err := ks.add(b, []hashRange{{101, 200}}); err != nil {
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
