package mledger

import (
	"fmt"
	"math"
)

// Position is the address of an entry in a managed ledger: the ledger that holds it and its
// entry id there. Positions order first by ledger, then by entry; ledger ids grow along a
// managed ledger's ledger list, so position order is log order. EntryID -1 means "before the
// first entry of LedgerID" (e.g. the last confirmed position right after a rollover).
type Position struct {
	LedgerID int64 `json:"l"`
	EntryID  int64 `json:"e"`
}

// Special positions for opening cursors and reading.
var (
	// Earliest is before every entry: a cursor opened there delivers the whole log.
	Earliest = Position{LedgerID: -1, EntryID: -1}
	// Latest is after every entry: a cursor opened there delivers only new entries.
	Latest = Position{LedgerID: math.MaxInt64, EntryID: math.MaxInt64}
)

// Compare returns -1, 0 or +1 as p is before, equal to or after q.
func (p Position) Compare(q Position) int {
	switch {
	case p.LedgerID < q.LedgerID:
		return -1
	case p.LedgerID > q.LedgerID:
		return 1
	case p.EntryID < q.EntryID:
		return -1
	case p.EntryID > q.EntryID:
		return 1
	}
	return 0
}

// Less reports p < q.
func (p Position) Less(q Position) bool { return p.Compare(q) < 0 }

// String formats p as "ledger:entry".
func (p Position) String() string { return fmt.Sprintf("%d:%d", p.LedgerID, p.EntryID) }

func minPos(a, b Position) Position {
	if a.Less(b) {
		return a
	}
	return b
}

func maxPos(a, b Position) Position {
	if a.Less(b) {
		return b
	}
	return a
}
