package quorum

import (
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"
)

func TestWriteSet(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry int64
		e, wq int
		want  []int
	}{
		{"e0 3/2", 0, 3, 2, []int{0, 1}},
		{"e1 3/2", 1, 3, 2, []int{1, 2}},
		{"e2 3/2 wraps", 2, 3, 2, []int{2, 0}},
		{"e5 5/3", 5, 5, 3, []int{0, 1, 2}},
		{"e7 5/3", 7, 5, 3, []int{2, 3, 4}},
		{"e9 5/5", 9, 5, 5, []int{4, 0, 1, 2, 3}},
		{"1/1", 42, 1, 1, []int{0}},
		{"large entry", 1<<40 + 1, 4, 2, []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := WriteSet(nil, tc.entry, tc.e, tc.wq)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("WriteSet(%d,%d,%d) = %v, want %v", tc.entry, tc.e, tc.wq, got, tc.want)
			}
			for w, idx := range got {
				if Index(tc.entry, w, tc.e) != idx {
					t.Fatalf("Index slot %d = %d, want %d", w, Index(tc.entry, w, tc.e), idx)
				}
				if s := Slot(tc.entry, idx, tc.e, tc.wq); s != w {
					t.Fatalf("Slot(idx %d) = %d, want %d", idx, s, w)
				}
			}
			for idx := 0; idx < tc.e; idx++ {
				if !slices.Contains(got, idx) && Slot(tc.entry, idx, tc.e, tc.wq) != -1 {
					t.Fatalf("Slot(idx %d) should be -1", idx)
				}
			}
		})
	}
}

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		e, wq, aq int
		ok        bool
	}{
		{3, 2, 2, true}, {1, 1, 1, true}, {5, 3, 1, true}, {3, 3, 3, true},
		{3, 2, 0, false}, {3, 2, 3, false}, {2, 3, 2, false}, {65, 65, 1, false},
	} {
		if err := Valid(tc.e, tc.wq, tc.aq); (err == nil) != tc.ok {
			t.Errorf("Valid(%d,%d,%d) = %v, want ok=%v", tc.e, tc.wq, tc.aq, err, tc.ok)
		}
	}
}

func TestAckSet(t *testing.T) {
	for _, tc := range []struct {
		name          string
		wq, aq        int
		ops           string // a<slot> ack, f<slot> fail, r<slot> reset
		complete      bool
		lastTolerable bool
	}{
		{"aq reached", 3, 2, "a0a2", true, true},
		{"one short", 3, 2, "a0", false, true},
		{"fail within budget", 3, 2, "f1a0a2", true, true},
		{"fail over budget", 3, 2, "a0f1f2", false, false},
		{"reset removes ack", 3, 2, "a0a1r1", false, true},
		{"ack after fail clears it", 3, 2, "f1a1a0", true, true},
		{"wq=aq any failure intolerable", 2, 2, "a0f1", false, false},
		{"aq=1", 3, 1, "f0f1a2", true, true},
		{"aq=1 all fail", 3, 1, "f0f1f2", false, false},
		{"duplicate ack counts once", 3, 2, "a1a1", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAckSet(tc.wq, tc.aq)
			tolerable := true
			for i := 0; i < len(tc.ops); i += 2 {
				w := int(tc.ops[i+1] - '0')
				switch tc.ops[i] {
				case 'a':
					a.Ack(w)
				case 'f':
					tolerable = a.Fail(w)
				case 'r':
					a.Reset(w)
				}
			}
			if a.Complete() != tc.complete {
				t.Errorf("Complete = %v, want %v (acked %d)", a.Complete(), tc.complete, a.Acked())
			}
			if tolerable != tc.lastTolerable {
				t.Errorf("tolerable = %v, want %v", tolerable, tc.lastTolerable)
			}
		})
	}
}

func TestCoverageSet(t *testing.T) {
	for _, tc := range []struct {
		name      string
		e, wq, aq int
		definite  []int
		covered   bool
	}{
		{"none", 3, 2, 2, nil, false},
		{"3/2/2 one answer leaves a quorum unknown", 3, 2, 2, []int{0}, false},
		{"3/2/2 two answers", 3, 2, 2, []int{0, 1}, true},
		{"3/3/2 two answers", 3, 3, 2, []int{0, 2}, true},
		{"3/3/3 one answer", 3, 3, 3, []int{1}, true},
		{"3/3/1 needs all", 3, 3, 1, []int{0, 1}, false},
		{"3/3/1 all", 3, 3, 1, []int{0, 1, 2}, true},
		{"5/3/2 alternate leaves 1,3 unknown", 5, 3, 2, []int{0, 2, 4}, false},
		{"5/3/2 four answers", 5, 3, 2, []int{0, 1, 3, 4}, true},
		{"5/3/2 adjacent gap", 5, 3, 2, []int{0, 1, 2}, false},
		{"4/2/2 every other", 4, 2, 2, []int{0, 2}, true},
		{"4/2/2 adjacent", 4, 2, 2, []int{0, 1}, false},
		{"1/1/1", 1, 1, 1, []int{0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCoverageSet(tc.e, tc.wq, tc.aq)
			for _, i := range tc.definite {
				c.Set(i, Definite)
			}
			if got := c.Covered(); got != tc.covered {
				t.Fatalf("Covered = %v, want %v", got, tc.covered)
			}
		})
	}
}

func TestRecoveryRead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wq, aq int
		ops    string // f found, m missing, e error, each followed by slot
		want   ReadOutcome
	}{
		{"3/2 one missing", 3, 2, "m0", Pending},
		{"3/2 two missing", 3, 2, "m0m1", Missing},
		{"3/2 found", 3, 2, "m0f1", Found},
		{"3/2 errors undecidable", 3, 2, "m0e1e2", Undecidable},
		{"2/2 one missing suffices", 2, 2, "m1", Missing},
		{"3/1 needs all three", 3, 1, "m0m1", Pending},
		{"3/1 all three", 3, 1, "m0m1m2", Missing},
		{"3/1 error undecidable", 3, 1, "m0m1e2", Undecidable},
		{"found beats missing", 2, 2, "m0f1", Found},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRecoveryRead(tc.wq, tc.aq)
			var got ReadOutcome
			for i := 0; i < len(tc.ops); i += 2 {
				w := int(tc.ops[i+1] - '0')
				switch tc.ops[i] {
				case 'f':
					got = r.Found(w)
				case 'm':
					got = r.Missing(w)
				case 'e':
					got = r.Error(w)
				}
			}
			if got != tc.want {
				t.Fatalf("outcome %v, want %v", got, tc.want)
			}
		})
	}
}

// config draws a random legal (E, WQ, AQ) with E <= 8.
func config(r *rand.Rand) (e, wq, aq int) {
	e = 1 + r.IntN(8)
	wq = 1 + r.IntN(e)
	aq = 1 + r.IntN(wq)
	return
}

// TestQuickCoverage checks the coverage rule against its meaning: the set is covered iff no
// entry's write set (over every entry id modulo E) contains AQ bookies that did not answer.
func TestQuickCoverage(t *testing.T) {
	f := func(seed uint64, mask uint8) bool {
		r := rand.New(rand.NewPCG(seed, 0))
		e, wq, aq := config(r)
		c := NewCoverageSet(e, wq, aq)
		for i := 0; i < e; i++ {
			if mask&(1<<i) != 0 {
				c.Set(i, Definite)
			}
		}
		want := true
		for entry := int64(0); entry < int64(e); entry++ {
			unknown := 0
			for _, idx := range WriteSet(nil, entry, e, wq) {
				if mask&(1<<idx) == 0 {
					unknown++
				}
			}
			if unknown >= aq {
				want = false
			}
		}
		return c.Covered() == want
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}

// TestQuickRecoveryRead checks the safety of the missing rule: whenever an entry is declared
// Missing, the members that did not say "missing" are fewer than AQ, so no writer could have
// collected AQ acknowledgements; and whenever it is Undecidable, every member answered.
func TestQuickRecoveryRead(t *testing.T) {
	f := func(seed uint64) bool {
		r := rand.New(rand.NewPCG(seed, 1))
		_, wq, aq := config(r)
		rr := NewRecoveryRead(wq, aq)
		answered := map[int]byte{}
		for _, w := range r.Perm(wq) {
			var out ReadOutcome
			switch k := r.IntN(3); k {
			case 0:
				out, answered[w] = rr.Found(w), 'f'
			case 1:
				out, answered[w] = rr.Missing(w), 'm'
			default:
				out, answered[w] = rr.Error(w), 'e'
			}
			missing := 0
			for _, a := range answered {
				if a == 'm' {
					missing++
				}
			}
			switch out {
			case Missing:
				if wq-missing >= aq {
					return false
				}
			case Undecidable:
				if len(answered) != wq {
					return false
				}
			case Found:
				found := false
				for _, a := range answered {
					found = found || a == 'f'
				}
				if !found {
					return false
				}
			}
		}
		return rr.Outcome() != Pending
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}

// TestQuickAckSet checks AckSet against a model map.
func TestQuickAckSet(t *testing.T) {
	f := func(seed uint64) bool {
		r := rand.New(rand.NewPCG(seed, 2))
		_, wq, aq := config(r)
		a := NewAckSet(wq, aq)
		model := map[int]byte{}
		for range 20 {
			w := r.IntN(wq)
			switch r.IntN(3) {
			case 0:
				a.Ack(w)
				model[w] = 'a'
			case 1:
				a.Fail(w)
				model[w] = 'f'
			default:
				a.Reset(w)
				delete(model, w)
			}
			acked, failed := 0, 0
			for _, v := range model {
				if v == 'a' {
					acked++
				} else {
					failed++
				}
			}
			if a.Acked() != acked || a.Failed() != failed || a.Complete() != (acked >= aq) {
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
}
