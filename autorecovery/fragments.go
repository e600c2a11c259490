package autorecovery

import (
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/ledger/quorum"
)

// Fragment is the run of entries [First, Last] stored by one ensemble of a ledger (empty when
// Last < First).
type Fragment struct {
	// Index is the ensemble's position in Metadata.Ensembles.
	Index       int
	First, Last int64
	Bookies     []string
	// Closed reports that the fragment will never change, so it may be copied and its
	// bookies replaced (invariant L4): the ledger is CLOSED, or the fragment is not the last
	// one and the known LAC covers its end. The last fragment of a ledger that is not CLOSED
	// is never closed; its Last is the known LAC (entries beyond it are not known to exist).
	Closed bool
}

// Fragments splits a ledger into its fragments, given the LAC the caller knows (ignored for a
// CLOSED ledger). The rule is BookKeeper's after apache/bookkeeper#3917: an ensemble key k
// does not prove that entries below k are confirmed — the writer's LAC was k-1 when it changed
// ensemble, but a reader may see less (the piggybacked LAC lags) — so a non-last fragment of an
// open ledger is closed only if lac >= its last entry.
func Fragments(m *ledger.Metadata, lac int64) []Fragment {
	out := make([]Fragment, len(m.Ensembles))
	closed := m.State == ledger.StateClosed
	for i, en := range m.Ensembles {
		f := Fragment{Index: i, First: en.FirstEntry, Bookies: en.Bookies}
		switch {
		case i+1 < len(m.Ensembles):
			f.Last = m.Ensembles[i+1].FirstEntry - 1
			f.Closed = closed || lac >= f.Last || mutationKeyClosesFragment
		case closed:
			f.Last, f.Closed = m.LastEntryID, true
		default:
			f.Last = lac
		}
		out[i] = f
	}
	return out
}

// Entries returns the entries of f stored by ensemble index idx (those whose write set
// contains idx), in order.
func (f Fragment) Entries(m *ledger.Metadata, idx int) []int64 {
	var out []int64
	for e := f.First; e <= f.Last; e++ {
		if quorum.Slot(e, idx, m.EnsembleSize, m.WriteQuorum) >= 0 {
			out = append(out, e)
		}
	}
	return out
}

// mutationKeyClosesFragment is a test-only mutation: the rule before apache/bookkeeper#3917
// (every non-last fragment is closed, whatever the LAC).
var mutationKeyClosesFragment = false

// mutationNoReadGuard is a test-only mutation: the Replicator does not refuse to read beyond
// the LAC it knows (so only the simulation's checker can catch such a read).
var mutationNoReadGuard = false
