package autorecovery

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// The striped shape of invariant L4 (docs/DESIGN.md; apache/bookkeeper#3917), the one the
// random simulation first reached at seed 282 of TestSimCatchesMutations' search (mutation
// "ensemble key closes a fragment"), before crashOnChange made the shape common. (The first
// seed of TestSimAutoRecovery itself that failed with that mutation, 240, had seed001_test.go's
// shape, a fragment's last entry read beyond the known LAC: scenario_inflight_change_test.go.)
//
// E=3 WQ=2 AQ=2, ledger OPEN with ensembles {0:[b1,b5,b3]}, {1:[b1,b5,b2]}: entry 0 went to
// b1 and b5 (its write set, indexes 0 and 1) carrying LAC -1 and was acknowledged; entry 1's
// write to b3 failed, so the writer changed ensemble at 1 (its LAC + 1), replacing b3 by b2,
// and died before entry 1 was stored anywhere. A reader learns LAC -1: fragment [0,0] is not
// closed. Then b3 is lost for good. b3 holds no entry of [0,0] (with WQ < E the fragment's one
// entry is striped onto b1 and b5), so a worker that takes the ensemble key for the fragment's
// end swaps b3 out at once without reading anything: neither the Replicator's read guard nor
// the checker's read check sees it, only the swap check (checkSwap) does. Correctly, the
// worker defers, recovers the ledger once its LAC has not moved for the grace period (closing
// it at 0), and then swaps b3 out of the now closed fragment.

// runStripedUnclosed builds the scenario on a fresh simulation with an auditor and a worker
// and runs it until every ledger is CLOSED and fully replicated, or a violation, or maxTime.
func runStripedUnclosed(t *testing.T, maxTime time.Duration) *arWorld {
	t.Helper()
	p := arParams{bookies: 5, e: 3, wq: 2, aq: 2}
	w := newARWorld(1, &p, testing.Verbose())
	const id = 1
	b := func(i int) string { return w.ids[i-1] }
	m := &ledger.Metadata{LedgerID: id, State: ledger.StateOpen, EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2,
		Digest: ledger.DigestCRC32C, Password: []byte("pw"), LastEntryID: -1,
		Ensembles: []ledger.Ensemble{{FirstEntry: 0, Bookies: []string{b(1), b(5), b(3)}},
			{FirstEntry: 1, Bookies: []string{b(1), b(5), b(2)}}}}
	if ws := m.WriteSet(0); !slices.Equal(ws, []string{b(1), b(5)}) {
		t.Fatalf("entry 0's write set is %v, want [b1 b5]", ws)
	}
	rec, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.Put(metadata.LedgerKey(id), rec, 0); err != nil {
		t.Fatal(err)
	}
	// The dead writer's entry 0 on b1 and b5, carrying LAC -1; it was acknowledged.
	writer := &simWriter{id: id, env: newSimEnv("writer", w.s, w.net, w.store), acked: 0}
	w.writers = append(w.writers, writer)
	w.byLedger[id] = writer
	pl := arPayload(w.s.Seed(), id, 0)
	body := bk.AppendEntry(nil, id, 0, -1, int64(len(pl)), bk.DigestCRC32C, pl)
	for _, bid := range []string{b(1), b(5)} {
		writer.env.Bookie(bid, &bk.Request{Op: bk.OpAddEntry, LedgerID: id, EntryID: 0, MasterKey: bk.MasterKey([]byte("pw")),
			Digest: bk.DigestCRC32C, Body: body}, func(resp bk.Response, err error) {
			if err != nil || resp.Status != bk.StatusOK {
				t.Errorf("setup add 0 to %s: %v %v", bid, resp.Status, err)
			}
		})
	}
	for w.s.Step() { // setup, fault-free
	}
	writer.env.kill()
	if lac := w.knownLAC(id); lac != -1 {
		t.Fatalf("a reader could know LAC %d, want -1", lac)
	}
	w.loseBookie(b(3))

	w.startAuditor(0, AuditorConfig{Interval: 20 * time.Millisecond, LostBookieDelay: time.Nanosecond,
		CheckInterval: 400 * time.Millisecond})
	w.startWorker(0, WorkerConfig{PollInterval: 20 * time.Millisecond, OpenLedgerGrace: 150 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	w.faultsOver = w.s.Now()
	_ = w.loop(w.s.Now() + maxTime)
	return w
}

// TestScenarioSwapInStripedUnclosedFragment: the worker never swaps the lost b3 out of the
// unclosed fragment [0,0] of the OPEN ledger; it recovers the ledger first (CLOSED at 0, the
// acknowledged entry kept), then replicates, and no mark is left.
func TestScenarioSwapInStripedUnclosedFragment(t *testing.T) {
	w := runStripedUnclosed(t, 10*time.Second)
	if w.err != nil {
		t.Fatalf("%v\n%s", w.err, w.s.Trace())
	}
	if lacs := w.deferredLAC[1]; len(lacs) == 0 || lacs[0] != -1 {
		t.Fatalf("deferred attempts saw LACs %v, want -1 first", lacs)
	}
	if w.stats.Recovered != 1 || w.stats.Swaps == 0 {
		t.Fatalf("recoveries %d, swaps %d: want the ledger recovered, then b3 swapped out", w.stats.Recovered, w.stats.Swaps)
	}
	m := w.ledgerMeta(1)
	if m.State != ledger.StateClosed || m.LastEntryID != 0 {
		t.Fatalf("ledger %v at %d, want CLOSED at 0", m.State, m.LastEntryID)
	}
	for _, en := range m.Ensembles {
		if slices.Contains(en.Bookies, w.ids[2]) {
			t.Fatalf("b3 still in ensemble %v", en)
		}
	}
}

// TestScenarioSwapInStripedUnclosedFragmentIsCaught: with the rule before
// apache/bookkeeper#3917 (mutation: the ensemble key closes a fragment) and the Replicator's
// read guard left on, the worker swaps b3 out of [0,0] without a read, and the swap check
// catches it.
func TestScenarioSwapInStripedUnclosedFragmentIsCaught(t *testing.T) {
	mutationKeyClosesFragment, panicOnAssert = true, false
	defer func() { mutationKeyClosesFragment, panicOnAssert = false, true }()
	w := runStripedUnclosed(t, 3*time.Second)
	if w.err == nil || !strings.Contains(w.err.Error(), "L4: ledger 1: swap in fragment 0..0 that is not closed (known LAC -1)") {
		t.Fatalf("the swap in the unclosed fragment was not caught: %v\n%s", w.err, w.s.Trace())
	}
	if w.stats.Recovered != 0 {
		t.Fatalf("the ledger was recovered (%d) before the swap: the scenario does not exercise L4", w.stats.Recovered)
	}
	t.Logf("caught: %v", w.err)
}
