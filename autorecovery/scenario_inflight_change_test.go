package autorecovery

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
)

// The schedule of the first seed of TestSimAutoRecovery (240) that failed with the mutation
// "ensemble key closes a fragment", before crashOnChange: the real ledger.Writer, not a
// scripted bookie state (compare seed001_test.go). E=3 WQ=3 AQ=2; the writer has entries 0..5
// acknowledged; the first bookie that receives entry 6 is lost before its fsync, the other two
// acknowledge it, the lost one's write times out, so the writer changes ensemble at 7 (its
// LAC + 1) and dies as the change is stored. Entry 6 went out carrying LAC 5 and nothing later reached a
// bookie: a reader learns LAC 5, and fragment [0,6]
// is not closed, though a later ensemble exists. The worker defers, recovers the ledger after
// the grace period (closing it with entry 6) and replicates; with the mutation it reads entry 6
// beyond the known LAC, which the Replicator's guard (and, without it, the checker) catches.

// runInflightChange plays the schedule and runs an auditor and a worker until every ledger is
// CLOSED and fully replicated, or a violation, or maxTime.
func runInflightChange(t *testing.T, maxTime time.Duration) (w *arWorld, lost string) {
	t.Helper()
	p := arParams{bookies: 5, e: 3, wq: 3, aq: 2, crashOnChange: true}
	w = newARWorld(1, &p, testing.Verbose())
	sw := w.startWriter(1, crashes, 8)
	for range 6 {
		w.appendEntry(sw)
	}
	for w.s.Step() { // the writes settle, fault-free
		w.check()
	}
	if w.err != nil || sw.acked != 5 {
		t.Fatalf("setup: acknowledged up to %d (want 5): %v", sw.acked, w.err)
	}
	// Entry 6 (carrying LAC 5): the first bookie that receives it is lost before its fsync, so
	// its answer never comes; the other two acknowledge it, the lost one's write times out and
	// the writer changes ensemble at 7.
	w.appendEntry(sw)
	for lost == "" && w.s.Step() {
		w.check()
		for _, b := range w.ledgerMeta(1).Ensembles[0].Bookies {
			if _, ok := w.bookies[b].DurableEntry(1, 6); lost == "" && !ok && w.bookies[b].KnownLAC(1) == 5 {
				lost = b
			}
		}
	}
	if lost == "" {
		t.Fatal("setup: entry 6 reached no bookie")
	}
	w.loseBookie(lost)
	for !sw.env.dead && w.s.Step() {
		w.check()
	}
	if w.err != nil || !sw.env.dead || sw.acked != 6 {
		t.Fatalf("setup: the writer did not die on its ensemble change with 6 acknowledged (%d): %v", sw.acked, w.err)
	}
	m := w.ledgerMeta(1)
	if len(m.Ensembles) != 2 || m.Ensembles[1].FirstEntry != 7 {
		t.Fatalf("setup: ensembles %v, want a change at 7", m.Ensembles)
	}
	if lac := w.knownLAC(1); lac != 5 || !w.unclosedLost(1) {
		t.Fatalf("setup: a reader could know LAC %d (want 5), fragment [0,6] with %s unclosed: %v", lac, lost, w.unclosedLost(1))
	}

	w.startAuditor(0, AuditorConfig{Interval: 20 * time.Millisecond, LostBookieDelay: time.Nanosecond,
		CheckInterval: 400 * time.Millisecond})
	w.startWorker(0, WorkerConfig{PollInterval: 20 * time.Millisecond, OpenLedgerGrace: 150 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	w.faultsOver = w.s.Now()
	_ = w.loop(w.s.Now() + maxTime)
	return w, lost
}

// TestScenarioWriterDiesWithEnsembleChange: nothing of [0,6] is read while the ledger is OPEN;
// the worker recovers it (CLOSED with every acknowledged entry), then replaces the lost bookie.
func TestScenarioWriterDiesWithEnsembleChange(t *testing.T) {
	w, lost := runInflightChange(t, 10*time.Second)
	if w.err != nil {
		t.Fatalf("%v\n%s", w.err, w.s.Trace())
	}
	if lacs := w.deferredLAC[1]; len(lacs) == 0 || lacs[0] != 5 {
		t.Fatalf("deferred attempts saw LACs %v, want 5 first", lacs)
	}
	m := w.ledgerMeta(1)
	if w.stats.Recovered != 1 || m.State != ledger.StateClosed || m.LastEntryID < 6 {
		t.Fatalf("recoveries %d, ledger %v at %d: want recovered by the worker, CLOSED at 6 or more", w.stats.Recovered,
			m.State, m.LastEntryID)
	}
	if slices.Contains(m.Ensembles[0].Bookies, lost) {
		t.Fatalf("the lost %s is still in %v", lost, m.Ensembles[0])
	}
}

// TestScenarioWriterDiesWithEnsembleChangeIsCaught: with the rule before
// apache/bookkeeper#3917, the worker reads entry 6 beyond the known LAC 5: the Replicator's
// read guard stops it; without the guard, the checker does.
func TestScenarioWriterDiesWithEnsembleChangeIsCaught(t *testing.T) {
	defer func() { mutationKeyClosesFragment, mutationNoReadGuard, panicOnAssert = false, false, true }()
	for _, c := range []struct {
		name    string
		noGuard bool
		want    string
	}{
		{"read guard", false, "read of entry 6 beyond known LAC 5"},
		{"checker", true, "L4: worker sent ReadEntry of entry 6 of OPEN ledger 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mutationKeyClosesFragment, mutationNoReadGuard, panicOnAssert = true, c.noGuard, false
			w, _ := runInflightChange(t, 3*time.Second)
			if w.err == nil || !strings.Contains(w.err.Error(), c.want) {
				t.Fatalf("the read beyond the known LAC was not caught (want %q): %v\n%s", c.want, w.err, w.s.Trace())
			}
			t.Logf("caught: %v", w.err)
		})
	}
}
