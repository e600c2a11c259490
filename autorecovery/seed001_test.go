package autorecovery

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// Reproducer of apache/bookkeeper#3917, "Fix ledger replicated failed blocks bookie
// decommission process" (invariant L4 in docs/DESIGN.md).
//
// E=3 WQ=3 AQ=2, ledger OPEN with ensembles {0:[b1,b2,b3], 15:[b1,b2,b4]}: the writer had
// entry 14 acknowledged, changed ensemble at 15 (its LAC + 1) and died before entry 15 was
// written. Every entry carries the LAC its writer knew when sending it, so the bookies' last
// entry (14) says LAC 13, and b4 has nothing: a reader learns LAC 13. b3 is lost and is
// decommissioned. Treating fragment [0,14] as closed because a later ensemble exists would
// read entry 14 beyond the known LAC (BookKeeper: a read error, the ledger lock deferred
// forever, decommission never done). Here the worker replicates nothing beyond the LAC,
// defers, and once the LAC has not moved for the grace period recovers the ledger (fencing and
// closing it at 14); then it copies 0..14 from b1/b2 to a new bookie and swaps b3 out, and the
// decommission completes.

type seedCase struct {
	explicitLAC  bool // the writer flushed an explicit LAC of 14 before dying
	neverRecover bool // mutation: the worker never recovers an open ledger
}

// runSeed001 builds the scenario on a fresh simulation and runs a worker and the
// decommission of b3 until it completes (or maxTime).
func runSeed001(t *testing.T, c seedCase, maxTime time.Duration) (w *arWorld, decomErr error, finished bool) {
	t.Helper()
	p := arParams{bookies: 5, e: 3, wq: 3, aq: 2}
	w = newARWorld(1, &p, testing.Verbose())
	const id = 904368
	bks := func(ids ...int) []string {
		var out []string
		for _, i := range ids {
			out = append(out, w.ids[i-1])
		}
		return out
	}
	m := &ledger.Metadata{LedgerID: id, State: ledger.StateOpen, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2,
		Digest: ledger.DigestCRC32C, Password: []byte("pw"), LastEntryID: -1,
		Ensembles: []ledger.Ensemble{{FirstEntry: 0, Bookies: bks(1, 2, 3)}, {FirstEntry: 15, Bookies: bks(1, 2, 4)}}}
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.Put(metadata.LedgerKey(id), b, 0); err != nil {
		t.Fatal(err)
	}
	// The dead writer's entries 0..14 on b1, b2, b3, each carrying LAC e-1.
	writer := &simWriter{id: id, env: newSimEnv("writer", w.s, w.net, w.store), acked: 14}
	w.writers = append(w.writers, writer)
	w.byLedger[id] = writer
	key := bk.MasterKey([]byte("pw"))
	length := int64(0)
	for e := int64(0); e <= 14; e++ {
		pl := arPayload(w.s.Seed(), id, e)
		length += int64(len(pl))
		body := bk.AppendEntry(nil, id, e, e-1, length, bk.DigestCRC32C, pl)
		for _, bid := range bks(1, 2, 3) {
			writer.env.Bookie(bid, &bk.Request{Op: bk.OpAddEntry, LedgerID: id, EntryID: e, MasterKey: key,
				Digest: bk.DigestCRC32C, Body: body}, func(resp bk.Response, err error) {
				if err != nil || resp.Status != bk.StatusOK {
					t.Errorf("setup add %d to %s: %v %v", e, bid, resp.Status, err)
				}
			})
		}
	}
	if c.explicitLAC {
		for _, bid := range bks(1, 2) {
			writer.env.send(bid, &bk.Request{Op: bk.OpWriteLAC, LedgerID: id, LAC: 14, MasterKey: key,
				Body: bk.AppendLACBody(nil, id, 14, bk.DigestCRC32C)})
		}
	}
	for w.s.Step() { // setup, fault-free
	}
	writer.env.kill()
	w.loseBookie(w.ids[2]) // b3

	w.startWorker(0, WorkerConfig{PollInterval: 20 * time.Millisecond, OpenLedgerGrace: 200 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond, neverRecover: c.neverRecover})
	env := newSimEnv("decommission", w.s, w.net, w.store)
	NewDecommission(env, DecommissionConfig{Bookie: w.ids[2], Interval: 50 * time.Millisecond,
		Progress: func(p DecommissionProgress) { w.s.Tracef("%v", p) },
		Done: func(err error) {
			decomErr, finished = err, true
			w.s.Tracef("decommission done: %v", err)
		}}).Start()
	for w.err == nil && !finished && w.s.Now() < maxTime && w.s.Step() {
		w.check()
	}
	return w, decomErr, finished
}

func TestSeed001DecommissionOpenLedgerBeyondLAC(t *testing.T) {
	w, err, finished := runSeed001(t, seedCase{}, 10*time.Second)
	if w.err != nil {
		t.Fatalf("violation: %v\n%s", w.err, w.s.Trace())
	}
	if !finished || err != nil {
		t.Fatalf("decommission finished=%v err=%v\n%s", finished, err, w.s.Trace())
	}
	const id = 904368
	// The worker saw LAC 13, so fragment [0,14] was not closed: it deferred, never read entry
	// 14 while the ledger was OPEN (checkWorkerRequest), then recovered the ledger.
	if lacs := w.deferredLAC[id]; len(lacs) == 0 || lacs[0] != 13 {
		t.Fatalf("deferred attempts saw LACs %v, want 13 first", lacs)
	}
	if w.stats.Recovered != 1 {
		t.Fatalf("recoveries %d, want 1", w.stats.Recovered)
	}
	m := w.ledgerMeta(id)
	if m.State != ledger.StateClosed || m.LastEntryID != 14 {
		t.Fatalf("ledger %v at %d, want CLOSED at 14", m.State, m.LastEntryID)
	}
	checkSeedReplicas(t, w, m)
	if _, _, ok := w.store.Get(metadata.CookieKey(w.ids[2])); ok {
		t.Fatal("cookie of the decommissioned bookie still there")
	}
	if kvs := w.store.List(metadata.PrefixUnderReplicated); len(kvs) != 0 {
		t.Fatalf("marks left: %v", kvs)
	}
	t.Logf("decommissioned in %v (virtual): ensembles %v", w.s.Now(), m.Ensembles)
}

// TestSeed001ExplicitLAC: had the writer flushed its LAC (14) before dying, fragment [0,14]
// is closed by the known LAC: it is replicated at once, without fencing the ledger.
func TestSeed001ExplicitLAC(t *testing.T) {
	w, err, finished := runSeed001(t, seedCase{explicitLAC: true}, 10*time.Second)
	if w.err != nil || !finished || err != nil {
		t.Fatalf("violation %v, decommission finished=%v err=%v\n%s", w.err, finished, err, w.s.Trace())
	}
	m := w.ledgerMeta(904368)
	if m.State != ledger.StateOpen || w.stats.Recovered != 0 || len(w.deferredLAC[904368]) != 0 {
		t.Fatalf("ledger %v, recoveries %d, deferrals %v: want it replicated while OPEN", m.State, w.stats.Recovered,
			w.deferredLAC[904368])
	}
	checkSeedReplicas(t, w, &ledger.Metadata{LedgerID: m.LedgerID, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2,
		Ensembles: m.Ensembles, LastEntryID: 14})
}

// TestSeed001WithoutRecoveryStalls is the mutation check: a worker that never recovers an
// open ledger (BookKeeper before #3917, which deferred the lock forever) never finishes the
// decommission.
func TestSeed001WithoutRecoveryStalls(t *testing.T) {
	w, _, finished := runSeed001(t, seedCase{neverRecover: true}, 3*time.Second)
	if w.err != nil {
		t.Fatalf("violation: %v", w.err)
	}
	if finished {
		t.Fatal("decommission finished without recovering the open ledger: the scenario does not exercise L4")
	}
	if m := w.ledgerMeta(904368); !slices.Contains(m.Ensembles[0].Bookies, w.ids[2]) {
		t.Fatalf("fragment [0,14] was replicated without knowing its end: %v", m.Ensembles)
	}
}

// checkSeedReplicas: entries 0..14 have WQ intact copies on live bookies of their write set,
// and b3 is in no ensemble.
func checkSeedReplicas(t *testing.T, w *arWorld, m *ledger.Metadata) {
	t.Helper()
	for _, en := range m.Ensembles {
		if slices.Contains(en.Bookies, w.ids[2]) {
			t.Fatalf("b3 still in ensemble %v", en)
		}
	}
	for e := int64(0); e <= 14; e++ {
		n := 0
		for _, b := range m.WriteSet(e) {
			body, ok := w.bookies[b].DurableEntry(m.LedgerID, e)
			if !ok || w.lost[b] {
				continue
			}
			got, err := bk.DecodeEntry(body, bk.DigestCRC32C)
			if err != nil || !bytes.Equal(got.Payload, arPayload(w.s.Seed(), m.LedgerID, e)) {
				t.Fatalf("entry %d on %s does not verify", e, b)
			}
			n++
		}
		if n != m.WriteQuorum {
			t.Fatalf("entry %d has %d replicas on %v, want %d", e, n, m.WriteSet(e), m.WriteQuorum)
		}
	}
}

// TestSeed001ReadPastKnownLACIsCaught: with the rule before apache/bookkeeper#3917 put back
// and the Replicator's own guard removed (mutations), the worker reads entry 14 of the OPEN
// ledger. The checker compares with the LAC a reader could know (13), not the writer's (14,
// under which the read would pass), and catches it.
func TestSeed001ReadPastKnownLACIsCaught(t *testing.T) {
	mutationKeyClosesFragment, mutationNoReadGuard, panicOnAssert = true, true, false
	defer func() { mutationKeyClosesFragment, mutationNoReadGuard, panicOnAssert = false, false, true }()
	w, _, _ := runSeed001(t, seedCase{}, 3*time.Second)
	if w.err == nil || !strings.Contains(w.err.Error(), "L4") {
		t.Fatalf("the checker did not catch the read beyond the known LAC: %v", w.err)
	}
	t.Logf("caught: %v", w.err)
}
