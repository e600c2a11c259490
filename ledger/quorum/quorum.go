// Package quorum holds the pure arithmetic of BookKeeper-style striped replication: which
// bookies of an ensemble hold an entry (the write set), when an add has enough acknowledgements
// (the ack set), when a set of answers proves that no entry can have been acknowledged
// elsewhere (the coverage set), and when recovery may declare an entry absent.
//
// Everything here is a pure function or a small value type with no I/O, no goroutines and no
// locks; values are not safe for concurrent use. The rules follow
// BookKeeper's RoundRobinDistributionSchedule (with its RRQuorumCoverageSet), PendingAddOp
// and PendingReadOp.
//
// Throughout, E is the ensemble size, WQ the write quorum and AQ the ack quorum, with
// E >= WQ >= AQ >= 1 and WQ <= MaxWriteQuorum.
package quorum

import "fmt"

// MaxWriteQuorum is the largest write quorum the bit-set types support.
const MaxWriteQuorum = 64

// Valid reports whether E, WQ and AQ form a legal configuration.
func Valid(e, wq, aq int) error {
	switch {
	case aq < 1:
		return fmt.Errorf("quorum: ack quorum %d < 1", aq)
	case wq < aq:
		return fmt.Errorf("quorum: write quorum %d < ack quorum %d", wq, aq)
	case e < wq:
		return fmt.Errorf("quorum: ensemble %d < write quorum %d", e, wq)
	case wq > MaxWriteQuorum:
		return fmt.Errorf("quorum: write quorum %d > %d", wq, MaxWriteQuorum)
	}
	return nil
}

// WriteSet returns the ensemble indices that store entry, in slot order: slot w holds index
// (entry+w) mod E, for w in [0, WQ). It appends to dst (which may be nil) and returns it.
// entry must be >= 0.
func WriteSet(dst []int, entry int64, e, wq int) []int {
	base := int(entry % int64(e))
	for w := 0; w < wq; w++ {
		dst = append(dst, (base+w)%e)
	}
	return dst
}

// Index returns the ensemble index of slot w of entry's write set.
func Index(entry int64, w, e int) int { return int((entry + int64(w)) % int64(e)) }

// Slot returns the slot of ensemble index idx in entry's write set, or -1 if the bookie at idx
// does not store entry.
func Slot(entry int64, idx, e, wq int) int {
	w := (idx - int(entry%int64(e)) + e) % e
	if w < wq {
		return w
	}
	return -1
}

// MissingThreshold is how many members of an entry's write set must answer "no such entry" (or
// "no such ledger") before recovery may conclude the entry was never acknowledged:
// WQ-AQ+1. With that many definite misses at most AQ-1 bookies can hold the entry, so no writer
// can have collected AQ acknowledgements for it.
func MissingThreshold(wq, aq int) int { return wq - aq + 1 }

// AckSet tracks the acknowledgements of one entry's write set, by slot. The zero value is not
// usable; call NewAckSet.
type AckSet struct {
	wq, aq int
	// Invariant: acked & failed == 0 (a slot is acked, failed or outstanding).
	acked, failed uint64
}

// NewAckSet returns an empty ack set for write quorum wq and ack quorum aq.
func NewAckSet(wq, aq int) AckSet {
	if err := Valid(wq, wq, aq); err != nil {
		panic(err)
	}
	return AckSet{wq: wq, aq: aq}
}

// Ack records a success from slot w and reports whether the entry has reached AQ.
func (a *AckSet) Ack(w int) bool {
	a.failed &^= 1 << w
	a.acked |= 1 << w
	return a.Complete()
}

// Fail records a failure from slot w. It reports whether the entry can still complete without
// replacing a bookie, i.e. whether failures stay within WQ-AQ.
func (a *AckSet) Fail(w int) (tolerable bool) {
	a.acked &^= 1 << w
	a.failed |= 1 << w
	return a.Failed() <= a.wq-a.aq
}

// Reset forgets whatever slot w answered (its bookie was replaced and the entry is re-sent).
func (a *AckSet) Reset(w int) {
	a.acked &^= 1 << w
	a.failed &^= 1 << w
}

// Complete reports whether at least AQ slots acknowledged.
func (a AckSet) Complete() bool { return a.Acked() >= a.aq }

// Acked is the number of acknowledged slots.
func (a AckSet) Acked() int { return popcount(a.acked) }

// Failed is the number of failed slots.
func (a AckSet) Failed() int { return popcount(a.failed) }

// HasAcked reports whether slot w acknowledged.
func (a AckSet) HasAcked(w int) bool { return a.acked&(1<<w) != 0 }

func popcount(x uint64) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// Answer is what one bookie of an ensemble said, as the coverage rule sees it.
type Answer uint8

// Answers.
const (
	// Unknown: no reply yet, or an error that says nothing about the bookie's contents.
	Unknown Answer = iota
	// Definite: the bookie answered with data or with NoSuchEntry/NoSuchLedger (and, for a
	// fencing read, is now fenced).
	Definite
)

// CoverageSet decides when the answers from an ensemble cover every write quorum: for each of
// the E write quorums (members (i+j) mod E, j < WQ) fewer than AQ members are Unknown. Once
// covered, no entry can have been acknowledged by bookies that have not answered. The zero
// value is not usable; call NewCoverageSet.
type CoverageSet struct {
	e, wq, aq int
	answers   []Answer
}

// NewCoverageSet returns a coverage set with every bookie Unknown.
func NewCoverageSet(e, wq, aq int) *CoverageSet {
	if err := Valid(e, wq, aq); err != nil {
		panic(err)
	}
	return &CoverageSet{e: e, wq: wq, aq: aq, answers: make([]Answer, e)}
}

// Set records bookie idx's answer. A Definite answer is never downgraded to Unknown.
func (c *CoverageSet) Set(idx int, a Answer) {
	if c.answers[idx] == Definite {
		return
	}
	c.answers[idx] = a
}

// Covered reports whether every write quorum has fewer than AQ Unknown members.
func (c *CoverageSet) Covered() bool {
	for i := 0; i < c.e; i++ {
		unknown := 0
		for j := 0; j < c.wq; j++ {
			if c.answers[(i+j)%c.e] == Unknown {
				unknown++
			}
		}
		if unknown >= c.aq {
			return false
		}
	}
	return true
}

// ReadOutcome is the decision about one entry during recovery.
type ReadOutcome uint8

// Read outcomes.
const (
	// Pending: not decided yet.
	Pending ReadOutcome = iota
	// Found: some member returned the entry.
	Found
	// Missing: at least MissingThreshold members said NoSuchEntry/NoSuchLedger, so the entry
	// was never acknowledged.
	Missing
	// Undecidable: every member answered but neither rule fired (too many errors).
	Undecidable
)

var outcomeNames = [...]string{"Pending", "Found", "Missing", "Undecidable"}

func (o ReadOutcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("ReadOutcome(%d)", uint8(o))
}

// RecoveryRead applies the recovery read rules to the answers of one entry's write set. The
// zero value is not usable; call NewRecoveryRead.
type RecoveryRead struct {
	wq, aq int
	// Bit sets by slot. Invariant: pairwise disjoint.
	found, missing, errs uint64
}

// NewRecoveryRead returns a tracker for one entry.
func NewRecoveryRead(wq, aq int) RecoveryRead {
	if err := Valid(wq, wq, aq); err != nil {
		panic(err)
	}
	return RecoveryRead{wq: wq, aq: aq}
}

func (r *RecoveryRead) clear(w int) {
	r.found &^= 1 << w
	r.missing &^= 1 << w
	r.errs &^= 1 << w
}

// Found records that slot w returned the entry.
func (r *RecoveryRead) Found(w int) ReadOutcome { r.clear(w); r.found |= 1 << w; return r.Outcome() }

// Missing records that slot w said NoSuchEntry or NoSuchLedger.
func (r *RecoveryRead) Missing(w int) ReadOutcome {
	r.clear(w)
	r.missing |= 1 << w
	return r.Outcome()
}

// Error records any other answer from slot w.
func (r *RecoveryRead) Error(w int) ReadOutcome { r.clear(w); r.errs |= 1 << w; return r.Outcome() }

// Outcome is the current decision. Found wins over Missing when both apply: data that exists
// is always recovered.
func (r RecoveryRead) Outcome() ReadOutcome {
	switch {
	case r.found != 0:
		return Found
	case popcount(r.missing) >= MissingThreshold(r.wq, r.aq):
		return Missing
	case popcount(r.found|r.missing|r.errs) == r.wq:
		return Undecidable
	}
	return Pending
}
