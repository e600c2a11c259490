package mledger

import (
	"fmt"

	"github.com/magnetar-io/magnetar/internal/fsm"
)

// State is the lifecycle state of a managed ledger, owned by its owner goroutine. Transitions
// happen only in the core's become… methods, which reject edges not in legalEdges.
//
//	Opening ──▶ LedgerOpened ◀──────────────┐
//	   │          │    │ full / add error     │ switch recorded in metadata
//	   │          │    ▼                      │
//	   │          │  ClosingLedger ──▶ CreatingLedger ◀──▶ WriteFailed
//	   │          │    │                  │                   │
//	   │          ▼    ▼                  ▼                   ▼
//	   │        Terminating (closes the current ledger, never creates one)
//	   │          │
//	   └───────▶ Terminated  (final for writes; recorded in metadata before it is reported)
//
//	Any state but Closed ──▶ Fenced (another owner wrote the record or recovered our ledger)
//	Any state but Opening/Terminating ──▶ Closing ──▶ Closed (Terminating finishes first)
type State uint8

// States.
const (
	// StateOpening: reading the record, claiming ownership, recovering the last ledger,
	// recovering cursors and creating the first writable ledger.
	StateOpening State = iota + 1
	// StateLedgerOpened: the current ledger takes adds.
	StateLedgerOpened
	// StateClosingLedger: rollover (or a write error) is closing the current ledger; new adds
	// queue for the next ledger.
	StateClosingLedger
	// StateCreatingLedger: the next ledger is being created and recorded in metadata; new adds
	// queue.
	StateCreatingLedger
	// StateWriteFailed: creating a ledger failed; queued adds failed with it. The next add
	// tries to create a ledger again.
	StateWriteFailed
	// StateTerminating: terminate took ownership of the log: new adds fail with ErrTerminated,
	// no rollover starts, the current ledger is being closed and the terminated position
	// recorded. Not durable: a crash here reopens a writable log.
	StateTerminating
	// StateTerminated: the terminated position is recorded in metadata. Final for writes.
	StateTerminated
	// StateFenced: another owner took the log over; everything fails with ErrFenced.
	StateFenced
	// StateClosing: Close is closing the current ledger and flushing cursors.
	StateClosing
	// StateClosed: final; the owner goroutine has stopped or is stopping.
	StateClosed
)

var stateNames = [...]string{
	StateOpening: "Opening", StateLedgerOpened: "LedgerOpened", StateClosingLedger: "ClosingLedger",
	StateCreatingLedger: "CreatingLedger", StateWriteFailed: "WriteFailed", StateTerminating: "Terminating",
	StateTerminated: "Terminated", StateFenced: "Fenced", StateClosing: "Closing", StateClosed: "Closed",
}

// String returns the state's name.
func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Writable reports whether the state accepts adds (possibly queueing them for the next
// ledger). After Terminating, no state is writable again (invariant M1).
func (s State) Writable() bool {
	switch s {
	case StateLedgerOpened, StateClosingLedger, StateCreatingLedger, StateWriteFailed:
		return true
	}
	return false
}

// legalEdges lists every transition; anything else is a bug.
var legalEdges = fsm.Edges[State]{
	StateOpening:        {StateLedgerOpened, StateTerminated, StateFenced, StateClosed},
	StateLedgerOpened:   {StateClosingLedger, StateTerminating, StateFenced, StateClosing},
	StateClosingLedger:  {StateCreatingLedger, StateTerminating, StateFenced, StateClosing},
	StateCreatingLedger: {StateLedgerOpened, StateWriteFailed, StateTerminating, StateFenced, StateClosing},
	StateWriteFailed:    {StateCreatingLedger, StateTerminating, StateFenced, StateClosing},
	StateTerminating:    {StateTerminated, StateFenced},
	StateTerminated:     {StateFenced, StateClosing},
	StateFenced:         {StateClosing},
	StateClosing:        {StateClosed},
	StateClosed:         {},
}
