package ledger

import (
	"errors"
	"slices"
	"testing"

	"github.com/magnetar-io/magnetar/proto/bk"
)

// fixedPlacement hands out bookies from a list, in order.
type fixedPlacement struct{ spare []string }

func (p *fixedPlacement) NewEnsemble(n int) ([]string, error) { return nil, ErrNotEnoughBookies }
func (p *fixedPlacement) Replace(exclude []string) (string, error) {
	for i, b := range p.spare {
		if !slices.Contains(exclude, b) {
			p.spare = slices.Delete(p.spare, i, i+1)
			return b, nil
		}
	}
	return "", ErrNotEnoughBookies
}

func openMeta(e, wq, aq int) *Metadata {
	bookies := []string{"a", "b", "c", "d"}[:e]
	return &Metadata{LedgerID: 1, State: StateOpen, EnsembleSize: e, WriteQuorum: wq, AckQuorum: aq,
		Ensembles: []Ensemble{{FirstEntry: 0, Bookies: bookies}}, LastEntryID: -1}
}

func newTestWriter(t *testing.T, m *Metadata, spare ...string) *Writer {
	t.Helper()
	w, err := NewWriter(WriterConfig{Meta: m, Version: 1, Placement: &fixedPlacement{spare: spare}})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// ackAll answers every add in rd with status s, except those to skip.
func answer(w *Writer, adds []AddRequest, s bk.Status, only func(AddRequest) bool) {
	for _, a := range adds {
		if only == nil || only(a) {
			w.Step(AddResult{Token: a.Token, Bookie: a.Bookie, Status: s})
		}
	}
}

func completed(rd Ready) (ids []int64, errs []error) {
	for _, c := range rd.Completions {
		ids = append(ids, c.EntryID)
		errs = append(errs, c.Err)
	}
	return
}

func TestWriterCompletesInOrder(t *testing.T) {
	m := openMeta(3, 2, 2)
	w := newTestWriter(t, m)
	for range 3 {
		if _, err := w.Append([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	rd := w.Ready()
	if len(rd.Adds) != 6 {
		t.Fatalf("%d adds, want 6", len(rd.Adds))
	}
	for _, a := range rd.Adds {
		if !slices.Contains(m.WriteSet(a.Entry.EntryID), a.Bookie) {
			t.Fatalf("add of entry %d to %s, outside its write set", a.Entry.EntryID, a.Bookie)
		}
		if a.Entry.LAC != -1 {
			t.Fatalf("piggybacked LAC %d, want -1", a.Entry.LAC)
		}
	}
	answer(w, rd.Adds, bk.StatusOK, func(a AddRequest) bool { return a.Entry.EntryID > 0 })
	if ids, _ := completed(w.Ready()); len(ids) != 0 || w.LAC() != -1 {
		t.Fatalf("completed %v before entry 0", ids)
	}
	answer(w, rd.Adds, bk.StatusOK, func(a AddRequest) bool { return a.Entry.EntryID == 0 })
	if ids, _ := completed(w.Ready()); !slices.Equal(ids, []int64{0, 1, 2}) || w.LAC() != 2 {
		t.Fatalf("completed %v LAC %d", ids, w.LAC())
	}
	// The next entry piggybacks LAC 2; an idle tick then publishes LAC 3 explicitly.
	w.Append([]byte("y"))
	rd = w.Ready()
	if rd.Adds[0].Entry.LAC != 2 {
		t.Fatalf("piggybacked LAC %d, want 2", rd.Adds[0].Entry.LAC)
	}
	answer(w, rd.Adds, bk.StatusOK, nil)
	w.Ready()
	w.Tick()
	if lw := w.Ready().LACWrites; len(lw) != 2 || lw[0].LAC != 3 {
		t.Fatalf("LAC writes %+v", lw)
	}
	w.Tick()
	if w.HasReady() {
		t.Fatalf("LAC sent twice")
	}
}

func TestWriterEnsembleChange(t *testing.T) {
	w := newTestWriter(t, openMeta(3, 2, 2), "d")
	w.Append([]byte("e0"))
	w.Append([]byte("e1"))
	rd := w.Ready()
	// Entry 0 completes; entry 1 (on b, c) fails on c.
	answer(w, rd.Adds, bk.StatusOK, func(a AddRequest) bool { return a.Entry.EntryID == 0 || a.Bookie == "b" })
	answer(w, rd.Adds, bk.StatusServerError, func(a AddRequest) bool { return a.Entry.EntryID == 1 && a.Bookie == "c" })
	rd = w.Ready()
	if ids, _ := completed(rd); !slices.Equal(ids, []int64{0}) {
		t.Fatalf("completed %v", ids)
	}
	if len(rd.MetaWrites) != 1 {
		t.Fatalf("meta writes %+v", rd.MetaWrites)
	}
	mw := rd.MetaWrites[0]
	if got := mw.Meta.Ensembles; len(got) != 2 || got[1].FirstEntry != 1 || !slices.Equal(got[1].Bookies, []string{"a", "b", "d"}) {
		t.Fatalf("proposed ensembles %+v", got)
	}
	// Appends during the change are queued, not sent.
	w.Append([]byte("e2"))
	if rd := w.Ready(); len(rd.Adds) != 0 {
		t.Fatalf("sent during ensemble change: %+v", rd.Adds)
	}
	w.Step(MetaResult{Seq: mw.Seq, Version: 2})
	rd = w.Ready()
	var to []string
	for _, a := range rd.Adds {
		to = append(to, a.Bookie+string('0'+byte(a.Entry.EntryID)))
	}
	slices.Sort(to)
	// Entry 1 is re-sent to d (slot of c); entry 2 goes to its write set {c→d, a}.
	if !slices.Equal(to, []string{"a2", "d1", "d2"}) {
		t.Fatalf("sends after change: %v", to)
	}
	answer(w, rd.Adds, bk.StatusOK, nil)
	if ids, _ := completed(w.Ready()); !slices.Equal(ids, []int64{1, 2}) {
		t.Fatalf("completed %v", ids)
	}
}

func TestWriterReplacesLastEnsembleAtSameKey(t *testing.T) {
	w := newTestWriter(t, openMeta(3, 2, 2), "d")
	w.Append([]byte("e0"))
	rd := w.Ready()
	answer(w, rd.Adds, bk.StatusServerError, func(a AddRequest) bool { return a.Bookie == "a" })
	mw := w.Ready().MetaWrites[0]
	if got := mw.Meta.Ensembles; len(got) != 1 || !slices.Equal(got[0].Bookies, []string{"d", "b", "c"}) {
		t.Fatalf("want the ensemble at 0 replaced, got %+v", got)
	}
	// The late OK from a (its token was replaced) must not count.
	w.Step(MetaResult{Seq: mw.Seq, Version: 2})
	rd2 := w.Ready()
	answer(w, rd.Adds, bk.StatusOK, nil) // stale tokens, plus b's first (still valid) answer
	if ids, _ := completed(w.Ready()); len(ids) != 0 {
		t.Fatalf("completed %v on a stale ack", ids)
	}
	answer(w, rd2.Adds, bk.StatusOK, nil)
	if ids, _ := completed(w.Ready()); !slices.Equal(ids, []int64{0}) {
		t.Fatalf("completed %v", ids)
	}
}

func TestWriterFencing(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(w *Writer, rd Ready)
		want error
	}{
		{"fenced bookie", func(w *Writer, rd Ready) {
			answer(w, rd.Adds, bk.StatusFenced, func(a AddRequest) bool { return a.Bookie == "b" })
		}, ErrFenced},
		{"ensemble change finds IN_RECOVERY", func(w *Writer, rd Ready) {
			answer(w, rd.Adds, bk.StatusServerError, func(a AddRequest) bool { return a.Bookie == "b" })
			mw := w.Ready().MetaWrites[0]
			cur := openMeta(3, 2, 2)
			cur.State = StateInRecovery
			w.Step(MetaResult{Seq: mw.Seq, Err: ErrMetadataConflict, Current: cur, CurrentVersion: 5})
		}, ErrFenced},
		{"ensemble change finds CLOSED", func(w *Writer, rd Ready) {
			answer(w, rd.Adds, bk.StatusServerError, func(a AddRequest) bool { return a.Bookie == "b" })
			mw := w.Ready().MetaWrites[0]
			cur := openMeta(3, 2, 2)
			cur.State, cur.LastEntryID = StateClosed, -1
			w.Step(MetaResult{Seq: mw.Seq, Err: ErrMetadataConflict, Current: cur, CurrentVersion: 5})
		}, ErrClosed},
		{"no replacement bookie", func(w *Writer, rd Ready) {
			w.cfg.Placement = &fixedPlacement{}
			answer(w, rd.Adds, bk.StatusServerError, func(a AddRequest) bool { return a.Bookie == "b" })
		}, ErrNotEnoughBookies},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestWriter(t, openMeta(3, 2, 2), "d")
			w.Append([]byte("e0"))
			w.Append([]byte("e1"))
			tc.run(w, w.Ready())
			ids, errs := completed(w.Ready())
			if !slices.Equal(ids, []int64{0, 1}) || !errors.Is(errs[0], tc.want) || !errors.Is(errs[1], tc.want) {
				t.Fatalf("completions %v %v, want both %v", ids, errs, tc.want)
			}
			if _, err := w.Append([]byte("late")); !errors.Is(err, tc.want) {
				t.Fatalf("append after failure: %v", err)
			}
			w.Close()
			if c := w.Ready().Closed; c == nil || !errors.Is(c.Err, tc.want) {
				t.Fatalf("close: %+v", c)
			}
		})
	}
}

func TestWriterClose(t *testing.T) {
	w := newTestWriter(t, openMeta(3, 2, 2))
	w.Append([]byte("abc"))
	rd := w.Ready()
	w.Close()
	if _, err := w.Append([]byte("x")); !errors.Is(err, ErrClosed) || w.State() != WriterDraining {
		t.Fatalf("append while draining: %v, state %v", err, w.State())
	}
	answer(w, rd.Adds, bk.StatusOK, nil)
	rd = w.Ready()
	if len(rd.MetaWrites) != 1 || w.State() != WriterClosing {
		t.Fatalf("no close CAS: %+v %v", rd, w.State())
	}
	m := rd.MetaWrites[0].Meta
	if m.State != StateClosed || m.LastEntryID != 0 || m.Length != 3 {
		t.Fatalf("closed record %+v", m)
	}
	// The answer was lost; the driver reports a conflict with our own record.
	w.Step(MetaResult{Seq: rd.MetaWrites[0].Seq, Err: ErrMetadataConflict, Current: m, CurrentVersion: 9})
	if c := w.Ready().Closed; c == nil || c.Err != nil || c.Version != 9 || w.State() != WriterClosed {
		t.Fatalf("close result %+v state %v", c, w.State())
	}
}

func TestWriterIllegalTransitionPanics(t *testing.T) {
	w := newTestWriter(t, openMeta(1, 1, 1))
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("Closed → Draining did not panic")
		}
	}()
	w.state = WriterClosed
	w.become(WriterDraining)
}
