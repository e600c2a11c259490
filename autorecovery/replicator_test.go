package autorecovery

import (
	"errors"
	"slices"
	"testing"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/proto/bk"
)

func meta(state ledger.State, last int64, ens ...ledger.Ensemble) *ledger.Metadata {
	m := &ledger.Metadata{LedgerID: 7, State: state, EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2,
		Password: []byte("pw"), Ensembles: ens, LastEntryID: -1}
	if state == ledger.StateClosed {
		m.LastEntryID = last
	}
	return m
}

func ens(first int64, bookies ...string) ledger.Ensemble {
	return ledger.Ensemble{FirstEntry: first, Bookies: bookies}
}

func TestFragmentsL4(t *testing.T) {
	// The seed: {0:[b1,b2,b3], 15:[b1,b2,b4]}, OPEN.
	open := meta(ledger.StateOpen, 0, ens(0, "b1", "b2", "b3"), ens(15, "b1", "b2", "b4"))
	for _, tc := range []struct {
		name string
		m    *ledger.Metadata
		lac  int64
		want []Fragment
	}{
		{"seed: LAC 13 does not close [0,14]", open, 13, []Fragment{
			{Index: 0, First: 0, Last: 14, Closed: false}, {Index: 1, First: 15, Last: 13, Closed: false}}},
		{"LAC 14 closes [0,14]", open, 14, []Fragment{
			{Index: 0, First: 0, Last: 14, Closed: true}, {Index: 1, First: 15, Last: 14, Closed: false}}},
		{"LAC 100", open, 100, []Fragment{
			{Index: 0, First: 0, Last: 14, Closed: true}, {Index: 1, First: 15, Last: 100, Closed: false}}},
		{"CLOSED at 14: empty last fragment", meta(ledger.StateClosed, 14, ens(0, "b1", "b2", "b3"), ens(15, "b1", "b2", "b4")), -1,
			[]Fragment{{Index: 0, First: 0, Last: 14, Closed: true}, {Index: 1, First: 15, Last: 14, Closed: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Fragments(tc.m, tc.lac)
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v", got)
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.Index != w.Index || g.First != w.First || g.Last != w.Last || g.Closed != w.Closed {
					t.Fatalf("fragment %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
	// 3/2/2: entries of [0,5] on index 0 are those whose write set {e%3, (e+1)%3} contains 0.
	f := Fragment{First: 0, Last: 5}
	if got := f.Entries(meta(ledger.StateOpen, 0, ens(0, "a", "b", "c")), 0); !slices.Equal(got, []int64{0, 2, 3, 5}) {
		t.Fatalf("entries on index 0: %v", got)
	}
}

// fakeCluster answers a Replicator: holdings per bookie, dead bookies, and a metadata store
// hook.
type fakeCluster struct {
	held  map[string]map[int64]bool
	lac   int64 // the LAC the bookies report
	dead  map[string]bool
	meta  func(ledger.MetaWrite) ledger.MetaResult
	reads []int64 // entries read, in order
	rec   func() RecoverResult
}

func (f *fakeCluster) serve(t *testing.T, r *Replicator) *Result {
	t.Helper()
	for r.HasReady() {
		rd := r.Ready()
		for _, q := range rd.Bookies {
			res := BookieResult{Token: q.Token}
			switch {
			case f.dead[q.Bookie]:
				res.Err = errors.New("dead")
			case q.Req.Op == bk.OpReadLAC:
				res.Resp = bk.Response{Status: bk.StatusOK, MaxLAC: f.lac}
			case q.Req.Op == bk.OpReadEntry:
				f.reads = append(f.reads, q.Req.EntryID)
				if f.held[q.Bookie][q.Req.EntryID] {
					res.Resp = bk.Response{Status: bk.StatusOK,
						Body: bk.AppendEntry(nil, 7, q.Req.EntryID, q.Req.EntryID-1, 10, bk.DigestCRC32C, []byte("0123456789"))}
				} else {
					res.Resp = bk.Response{Status: bk.StatusNoSuchEntry}
				}
			case q.Req.Op == bk.OpAddEntry:
				if q.Req.Flags&bk.FlagRecovery == 0 {
					t.Fatal("copy without the recovery flag")
				}
				if f.held[q.Bookie] == nil {
					f.held[q.Bookie] = map[int64]bool{}
				}
				f.held[q.Bookie][q.Req.EntryID] = true
				res.Resp = bk.Response{Status: bk.StatusOK}
			case q.Req.Op == bk.OpListEntries:
				var ids []int64
				for e := range f.held[q.Bookie] {
					ids = append(ids, e)
				}
				slices.Sort(ids)
				res.Resp = bk.Response{Status: bk.StatusOK}
				for _, e := range ids {
					res.Resp.Ranges = append(res.Resp.Ranges, bk.Range{First: e, Last: e})
				}
			}
			r.Step(res)
		}
		for _, mw := range rd.MetaWrites {
			r.Step(f.meta(mw))
		}
		if rd.Recover {
			r.Step(f.rec())
		}
		if rd.Done != nil {
			return rd.Done
		}
	}
	return nil
}

type fixedPlacement []string

func (p fixedPlacement) NewEnsemble(int) ([]string, error) { return nil, ledger.ErrNotEnoughBookies }
func (p fixedPlacement) Replace(exclude []string) (string, error) {
	for _, b := range p {
		if !slices.Contains(exclude, b) {
			return b, nil
		}
	}
	return "", ledger.ErrNotEnoughBookies
}

func holding(bookies map[string][]int64) map[string]map[int64]bool {
	out := map[string]map[int64]bool{}
	for b, es := range bookies {
		out[b] = map[int64]bool{}
		for _, e := range es {
			out[b][e] = true
		}
	}
	return out
}

func TestReplicatorReplacesLostBookieOfClosedLedger(t *testing.T) {
	m := meta(ledger.StateClosed, 5, ens(0, "a", "b", "c"))
	// 3/2/2 write sets: 0:{a,b} 1:{b,c} 2:{c,a} 3:{a,b} 4:{b,c} 5:{c,a}; c is lost.
	f := &fakeCluster{held: holding(map[string][]int64{"a": {0, 2, 3, 5}, "b": {0, 1, 3, 4}}), dead: map[string]bool{"c": true}}
	var written *ledger.Metadata
	f.meta = func(mw ledger.MetaWrite) ledger.MetaResult {
		written = mw.Meta
		return ledger.MetaResult{Seq: mw.Seq, Version: 11}
	}
	r, err := NewReplicator(ReplicatorConfig{Meta: m, Version: 10, Live: func(b string) bool { return b != "c" },
		Placement: fixedPlacement{"d"}, Window: 2})
	if err != nil {
		t.Fatal(err)
	}
	r.Start()
	res := f.serve(t, r)
	if res == nil || res.Outcome != Replicated || res.Fragments != 1 || res.Entries != 4 {
		t.Fatalf("result %+v", res)
	}
	if !slices.Equal(written.Ensembles[0].Bookies, []string{"a", "b", "d"}) || written.State != ledger.StateClosed {
		t.Fatalf("swap wrote %+v", written)
	}
	for _, e := range []int64{1, 2, 4, 5} {
		if !f.held["d"][e] {
			t.Fatalf("entry %d not copied to d", e)
		}
	}
}

// TestReplicatorAdoptsConcurrentClose: the swap of an OPEN ledger's closed fragment loses
// its compare-and-swap to a close; it retries on the CLOSED record and keeps it CLOSED.
func TestReplicatorAdoptsConcurrentClose(t *testing.T) {
	m := meta(ledger.StateOpen, 0, ens(0, "a", "b", "c"), ens(3, "a", "b", "d"))
	f := &fakeCluster{held: holding(map[string][]int64{"a": {0, 2}, "b": {0, 1}}), dead: map[string]bool{"c": true}, lac: 4}
	closed := m.Clone()
	closed.State, closed.LastEntryID = ledger.StateClosed, 4
	var writes []*ledger.Metadata
	f.meta = func(mw ledger.MetaWrite) ledger.MetaResult {
		writes = append(writes, mw.Meta)
		if mw.Expected == 10 {
			return ledger.MetaResult{Seq: mw.Seq, Err: ledger.ErrMetadataConflict, Current: closed, CurrentVersion: 12}
		}
		return ledger.MetaResult{Seq: mw.Seq, Version: 13}
	}
	r, _ := NewReplicator(ReplicatorConfig{Meta: m, Version: 10, Live: func(b string) bool { return b != "c" },
		Placement: fixedPlacement{"e"}})
	r.Start()
	res := f.serve(t, r)
	if res == nil || res.Outcome != Replicated || len(writes) != 2 {
		t.Fatalf("result %+v after %d writes", res, len(writes))
	}
	if w := writes[1]; w.State != ledger.StateClosed || w.LastEntryID != 4 || w.Ensembles[0].Bookies[2] != "e" {
		t.Fatalf("retry wrote %+v", w)
	}
	if res.Meta.State != ledger.StateClosed || res.Version != 13 {
		t.Fatalf("replicator ended on %v v%d", res.Meta.State, res.Version)
	}
}

// TestReplicatorSeedCase: OPEN ledger, the lost bookie's fragment ends beyond the LAC: no
// read past the LAC; Deferred while the writer may live; with Recover, the recovered CLOSED
// record is replicated.
func TestReplicatorSeedCase(t *testing.T) {
	m := meta(ledger.StateOpen, 0, ens(0, "b1", "b2", "b3"), ens(15, "b1", "b2", "b4"))
	m.WriteQuorum = 3
	all := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}
	live := func(b string) bool { return b != "b3" }
	f := &fakeCluster{held: holding(map[string][]int64{"b1": all, "b2": all}), dead: map[string]bool{"b3": true}, lac: 13}
	f.meta = func(mw ledger.MetaWrite) ledger.MetaResult { return ledger.MetaResult{Seq: mw.Seq, Version: 20} }
	r, _ := NewReplicator(ReplicatorConfig{Meta: m, Version: 10, Live: live, Placement: fixedPlacement{"b5"}})
	r.Start()
	if res := f.serve(t, r); res == nil || res.Outcome != Deferred || res.LAC != 13 || len(f.reads) != 0 {
		t.Fatalf("without recovery: %+v, reads %v", res, f.reads)
	}
	closed := m.Clone()
	closed.State, closed.LastEntryID = ledger.StateClosed, 14
	f.rec = func() RecoverResult { return RecoverResult{Meta: closed, Version: 15} }
	r, _ = NewReplicator(ReplicatorConfig{Meta: m, Version: 10, Live: live, Placement: fixedPlacement{"b4", "b5"},
		Recover: func(lac int64) bool { return lac == 13 }})
	r.Start()
	res := f.serve(t, r)
	if res == nil || res.Outcome != Replicated || !res.Recovered || res.Entries != 15 {
		t.Fatalf("with recovery: %+v", res)
	}
}

// TestReplicatorRepairsSuspectInPlace: a live bookie missing entries gets them back; no
// metadata change.
func TestReplicatorRepairsSuspectInPlace(t *testing.T) {
	m := meta(ledger.StateClosed, 5, ens(0, "a", "b", "c"))
	f := &fakeCluster{held: holding(map[string][]int64{"a": {0, 2, 3, 5}, "b": {0, 1, 3, 4}, "c": {1, 5}})}
	f.meta = func(ledger.MetaWrite) ledger.MetaResult { t.Fatal("metadata written"); return ledger.MetaResult{} }
	r, _ := NewReplicator(ReplicatorConfig{Meta: m, Version: 10, Live: func(string) bool { return true },
		Suspects: []string{"c"}, Placement: fixedPlacement{}})
	r.Start()
	res := f.serve(t, r)
	if res == nil || res.Outcome != Replicated || res.Entries != 2 || !f.held["c"][2] || !f.held["c"][4] {
		t.Fatalf("result %+v, c holds %v", res, f.held["c"])
	}
}

// TestReplicatorLeavesInRecoveryAlone: never a compare-and-swap on an IN_RECOVERY record.
func TestReplicatorLeavesInRecoveryAlone(t *testing.T) {
	m := meta(ledger.StateInRecovery, 0, ens(0, "a", "b", "c"), ens(3, "a", "b", "d"))
	f := &fakeCluster{held: holding(map[string][]int64{"a": {0, 2}, "b": {0, 1}}), dead: map[string]bool{"c": true}, lac: 5}
	f.meta = func(ledger.MetaWrite) ledger.MetaResult { t.Fatal("metadata written"); return ledger.MetaResult{} }
	r, _ := NewReplicator(ReplicatorConfig{Meta: m, Version: 10, Live: func(b string) bool { return b != "c" },
		Placement: fixedPlacement{"e"}})
	r.Start()
	if res := f.serve(t, r); res == nil || res.Outcome != Deferred {
		t.Fatalf("result %+v", res)
	}
}

func TestMarkWithMissing(t *testing.T) {
	m, changed := Mark{Missing: []string{"b"}}.withMissing([]string{"c", "a", "b"})
	if !changed || !slices.Equal(m.Missing, []string{"a", "b", "c"}) {
		t.Fatalf("%v %v", m.Missing, changed)
	}
	if _, changed := m.withMissing([]string{"a"}); changed {
		t.Fatal("no-op merge reported a change")
	}
	d, err := decodeMark(m.encode())
	if err != nil || !slices.Equal(d.Missing, m.Missing) {
		t.Fatalf("round trip: %v %v", d, err)
	}
	if _, err := decodeMark([]byte("{")); !errors.Is(err, errBadMark) {
		t.Fatalf("bad mark: %v", err)
	}
}
