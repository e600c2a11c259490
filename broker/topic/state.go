package topic

import (
	"github.com/magnetar-io/magnetar/internal/fsm"
)

// State is a topic's lifecycle state, owned by the topic goroutine. Transitions happen only
// in Topic.become, which rejects edges not in topicEdges.
//
//	Active ──▶ Terminating ──▶ Terminated
//	  │  ▲          │              │
//	  │  └──────────┘ (failed)     │
//	  ▼                            ▼
//	Closing ◀──────────────────────┘ ──▶ Closed
//	  ▲
//	Fenced (the managed ledger was taken over or failed: the topic closes itself)
type State uint8

// Topic states.
const (
	// StateActive: producers publish, subscriptions dispatch.
	StateActive State = iota + 1
	// StateTerminating: Terminate is sealing the managed ledger; publishes fail with
	// TopicTerminatedError.
	StateTerminating
	// StateTerminated: sealed. Publishes and new producers fail; consumers read to the end.
	StateTerminated
	// StateFenced: another broker owns the managed ledger (or it failed); the topic is closing.
	StateFenced
	// StateClosing: unloading or deleting: clients are being disconnected and the managed
	// ledger closed.
	StateClosing
	// StateClosed: final; the owner goroutine has stopped.
	StateClosed
)

var topicStateNames = [...]string{StateActive: "Active", StateTerminating: "Terminating",
	StateTerminated: "Terminated", StateFenced: "Fenced", StateClosing: "Closing", StateClosed: "Closed"}

func (s State) String() string { return fsm.Name(topicStateNames[:], s, "State") }

var topicEdges = fsm.Edges[State]{
	StateActive:      {StateTerminating, StateFenced, StateClosing},
	StateTerminating: {StateActive, StateTerminated, StateFenced},
	StateTerminated:  {StateFenced, StateClosing},
	StateFenced:      {StateClosing},
	StateClosing:     {StateClosed},
	StateClosed:      {},
}

// producerState is a producer's state, owned by the topic goroutine.
type producerState uint8

const (
	// producerWaiting: a WaitForExclusive producer queued behind the topic's current
	// producers (the client got PRODUCER_SUCCESS with producer_ready=false).
	producerWaiting producerState = iota + 1
	// producerStoring: an exclusive producer holds the topic while its topic epoch is
	// stored; it is told it is connected once that write completes.
	producerStoring
	// producerReady: publishes are accepted.
	producerReady
	// producerClosed: removed from the topic; late sends are dropped.
	producerClosed
)

var producerStateNames = [...]string{producerWaiting: "Waiting", producerStoring: "Storing", producerReady: "Ready", producerClosed: "Closed"}

func (s producerState) String() string { return fsm.Name(producerStateNames[:], s, "producerState") }

// SubState is a subscription's lifecycle state, owned by the subscription goroutine.
//
//	Active ──▶ Closing ──▶ Closed
//	   └─────▶ Deleting ──▶ Closed
type SubState uint8

// Subscription states.
const (
	// SubActive: consumers attach and receive.
	SubActive SubState = iota + 1
	// SubClosing: the topic is unloading (or a non-durable subscription lost its last
	// consumer): consumers are disconnected and the cursor closed.
	SubClosing
	// SubDeleting: unsubscribe or delete: consumers are disconnected and the cursor deleted.
	SubDeleting
	// SubClosed: final; the owner goroutine has stopped.
	SubClosed
)

var subStateNames = [...]string{SubActive: "Active", SubClosing: "Closing", SubDeleting: "Deleting", SubClosed: "Closed"}

func (s SubState) String() string { return fsm.Name(subStateNames[:], s, "SubState") }

var subEdges = fsm.Edges[SubState]{
	SubActive:   {SubClosing, SubDeleting},
	SubClosing:  {SubClosed},
	SubDeleting: {SubClosed, SubActive}, // back to Active if deleting the cursor failed
	SubClosed:   {},
}
