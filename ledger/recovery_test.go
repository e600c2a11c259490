package ledger

import (
	"errors"
	"slices"
	"testing"

	"github.com/magnetar-io/magnetar/proto/bk"
)

// fakeBookies answers recovery requests from fixed contents: bookie → entry ids held.
type fakeBookies struct {
	held map[string][]int64
	down map[string]bool
	// meta answers metadata writes (nil: success at version 10).
	meta func(MetaWrite) MetaResult
}

func (f *fakeBookies) has(b string, e int64) bool {
	for _, x := range f.held[b] {
		if x == e {
			return true
		}
	}
	return false
}

// serve answers everything in rd (and whatever that triggers) until the recovery is quiet.
func (f *fakeBookies) serve(r *Recovery) *RecoveryResult {
	for r.HasReady() {
		rd := r.Ready()
		for _, q := range rd.Reads {
			res := ReadResult{Token: q.Token, Bookie: q.Bookie}
			e := q.EntryID
			if e == bk.LastEntry {
				e = -1
				for _, x := range f.held[q.Bookie] {
					e = max(e, x)
				}
			}
			switch {
			case f.down[q.Bookie]:
				res.Err = errors.New("down")
			case e >= 0 && f.has(q.Bookie, e):
				res.Status, res.Entry = bk.StatusOK, Entry{EntryID: e, LAC: e - 1, Length: 10 * (e + 1)}
			default:
				res.Status = bk.StatusNoSuchEntry
			}
			r.Step(res)
		}
		for _, a := range rd.Adds {
			if !a.Recovery {
				panic("recovery sent a non-recovery add")
			}
			st := bk.StatusOK
			if f.down[a.Bookie] {
				st = bk.StatusServerError
			}
			r.Step(AddResult{Token: a.Token, Bookie: a.Bookie, Status: st})
		}
		for _, m := range rd.MetaWrites {
			if f.meta != nil {
				r.Step(f.meta(m))
				continue
			}
			r.Step(MetaResult{Seq: m.Seq, Version: 10})
		}
		if rd.Recovered != nil {
			return rd.Recovered
		}
	}
	return nil
}

func TestRecovery(t *testing.T) {
	all := func(n int64) []int64 {
		var out []int64
		for i := int64(0); i < n; i++ {
			out = append(out, i)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		e, wq, aq int
		held      map[string][]int64
		down      []string
		want      int64 // last entry, or
		wantErr   error
	}{
		// 3/2/2: write sets 0:{a,b} 1:{b,c} 2:{c,a} 3:{a,b} 4:{b,c}.
		{"all written", 3, 2, 2, map[string][]int64{"a": {0, 2, 3}, "b": {0, 1, 3, 4}, "c": {1, 2, 4}}, nil, 4, nil},
		{"empty ledger", 3, 2, 2, map[string][]int64{}, nil, -1, nil},
		{"one bookie down, covered, nothing to re-add there", 3, 2, 2, map[string][]int64{"a": {0}, "b": {0}}, []string{"c"}, 0, nil},
		{"bookie down during re-add: retry later", 3, 2, 2, map[string][]int64{"a": {0, 2}, "b": {0, 1}, "c": {1, 2}}, []string{"c"}, 0, ErrRecoveryIncomplete},
		{"two bookies down: not covered", 3, 2, 2, map[string][]int64{"a": {0}}, []string{"b", "c"}, 0, ErrRecoveryIncomplete},
		// 3/3/2: an entry on one bookie (< AQ) is missing once two others say so.
		{"entry below AQ is dropped", 3, 3, 2, map[string][]int64{"a": append(all(4), 4), "b": all(4), "c": all(4)}, nil, 3, nil},
		{"entry on AQ bookies is kept", 3, 3, 2, map[string][]int64{"a": all(5), "b": all(4), "c": all(5)}, nil, 4, nil},
		// 4/2/1: a single copy is enough to keep an entry.
		{"aq=1 single copy kept", 4, 2, 1, map[string][]int64{"a": {0, 3}, "b": {0, 1}, "c": {1, 2}, "d": {2, 3}}, nil, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeBookies{held: tc.held, down: map[string]bool{}}
			for _, d := range tc.down {
				f.down[d] = true
			}
			r, err := NewRecovery(RecoveryConfig{Meta: openMeta(tc.e, tc.wq, tc.aq), Version: 1, ReadWindow: 2})
			if err != nil {
				t.Fatal(err)
			}
			r.Start()
			res := f.serve(r)
			if res == nil {
				t.Fatalf("recovery stuck in %v", r.State())
			}
			if tc.wantErr != nil {
				if !errors.Is(res.Err, tc.wantErr) || r.State() != RecoveryFailed {
					t.Fatalf("result %+v, want %v", res, tc.wantErr)
				}
				return
			}
			if res.Err != nil || res.Meta.State != StateClosed || res.Meta.LastEntryID != tc.want {
				t.Fatalf("result %+v %v, want closed at %d", res.Meta, res.Err, tc.want)
			}
			if tc.want >= 0 && res.Meta.Length != 10*(tc.want+1) {
				t.Fatalf("length %d", res.Meta.Length)
			}
		})
	}
}

func TestRecoveryConvergesOnConcurrentClose(t *testing.T) {
	m := openMeta(3, 2, 2)
	m.State = StateInRecovery // another recovery marked it; this one recovers alongside
	r, _ := NewRecovery(RecoveryConfig{Meta: m, Version: 3})
	other := openMeta(3, 2, 2)
	other.State, other.LastEntryID, other.Length = StateClosed, 0, 10
	f := &fakeBookies{held: map[string][]int64{"a": {0, 1}, "b": {0, 1}}, meta: func(mw MetaWrite) MetaResult {
		if mw.Meta.LastEntryID != 1 {
			t.Errorf("proposed last entry %d, want 1", mw.Meta.LastEntryID)
		}
		// The other recovery closed first, at 0 (it decided before entry 1 reached AQ).
		return MetaResult{Seq: mw.Seq, Err: ErrMetadataConflict, Current: other, CurrentVersion: 7}
	}}
	r.Start()
	res := f.serve(r)
	if res == nil || res.Err != nil || res.Version != 7 || res.Meta.LastEntryID != 0 {
		t.Fatalf("result %+v", res)
	}
	// Late answers after Done change nothing.
	r.Step(ReadResult{Token: 1, Status: bk.StatusOK})
	r.Step(AddResult{Token: 2, Status: bk.StatusOK})
	r.Step(MetaResult{Seq: 1})
	if r.State() != RecoveryDone || r.HasReady() || r.Result() != res {
		t.Fatalf("late answers moved the recovery: %v", r.State())
	}
}

func TestRecoveryOfClosedLedgerIsImmediate(t *testing.T) {
	m := openMeta(3, 2, 2)
	m.State, m.LastEntryID, m.Length = StateClosed, 5, 60
	r, _ := NewRecovery(RecoveryConfig{Meta: m, Version: 4})
	r.Start()
	rd := r.Ready()
	if rd.Recovered == nil || rd.Recovered.Meta != m || len(rd.Reads) != 0 || len(rd.MetaWrites) != 0 {
		t.Fatalf("ready %+v", rd)
	}
}

// TestRecoveryReplacesDeadBookie: a bookie of the last ensemble is down for good; recovery
// replaces it for its re-adds and records the replacement ensemble when it closes.
func TestRecoveryReplacesDeadBookie(t *testing.T) {
	for _, tc := range []struct {
		name      string
		e, wq, aq int
		held      map[string][]int64
		spare     []string
		want      int64
		wantEns   []Ensemble
		wantErr   error
	}{
		// 3/2/2, c dead. LAC from the fencing answers is 1; entry 2 ({c,a}) is found on a and
		// re-added; c fails, so entries from 2 go to {a,b,d}.
		{"replace at the first re-add", 3, 2, 2, map[string][]int64{"a": {0, 2}, "b": {0, 1}, "c": {1, 2}}, []string{"d"}, 2,
			[]Ensemble{{0, []string{"a", "b", "c"}}, {2, []string{"a", "b", "d"}}}, nil},
		// 3/3/2, c dead: entries 0..3 on a and b; LAC 2 (piggybacked on entry 3); entry 3 is
		// re-added and confirmed by a and b before c fails: nothing to replace.
		{"3/3/2 confirmed before the failure", 3, 3, 2, map[string][]int64{"a": {0, 1, 2, 3}, "b": {0, 1, 2, 3}}, []string{"d"}, 3,
			[]Ensemble{{0, []string{"a", "b", "c"}}}, nil},
		// 3/3/3: entry 3 needs c too, so c is replaced from entry 3.
		{"3/3/3", 3, 3, 3, map[string][]int64{"a": {0, 1, 2, 3}, "b": {0, 1, 2, 3}}, []string{"d"}, 3,
			[]Ensemble{{0, []string{"a", "b", "c"}}, {3, []string{"a", "b", "d"}}}, nil},
		{"no spare bookie", 3, 2, 2, map[string][]int64{"a": {0, 2}, "b": {0, 1}, "c": {1, 2}}, nil, 0, nil, ErrRecoveryIncomplete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeBookies{held: tc.held, down: map[string]bool{"c": true}}
			r, err := NewRecovery(RecoveryConfig{Meta: openMeta(tc.e, tc.wq, tc.aq), Version: 1, ReadWindow: 2,
				Placement: &fixedPlacement{spare: tc.spare}})
			if err != nil {
				t.Fatal(err)
			}
			var proposed *Metadata
			f.meta = func(mw MetaWrite) MetaResult {
				proposed = mw.Meta
				return MetaResult{Seq: mw.Seq, Version: 10}
			}
			r.Start()
			res := f.serve(r)
			if res == nil {
				t.Fatalf("recovery stuck in %v", r.State())
			}
			if tc.wantErr != nil {
				if !errors.Is(res.Err, tc.wantErr) {
					t.Fatalf("result %+v, want %v", res, tc.wantErr)
				}
				return
			}
			if res.Err != nil || res.Meta.LastEntryID != tc.want {
				t.Fatalf("result %+v %v, want closed at %d", res.Meta, res.Err, tc.want)
			}
			if err := proposed.Validate(); err != nil || proposed.State != StateClosed {
				t.Fatalf("proposed %+v: %v", proposed, err)
			}
			if !slices.EqualFunc(proposed.Ensembles, tc.wantEns, func(a, b Ensemble) bool {
				return a.FirstEntry == b.FirstEntry && slices.Equal(a.Bookies, b.Bookies)
			}) {
				t.Fatalf("closed with ensembles %v, want %v", proposed.Ensembles, tc.wantEns)
			}
		})
	}
}
