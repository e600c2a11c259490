package replication

import (
	"cmp"
	"errors"
	"slices"
	"strconv"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/internal/fsm"
	"github.com/magnetar-io/magnetar/internal/invariants"
)

// Position is the address of an entry of the local topic: mledger.Position's fields, so the
// owner converts with replication.Position(p) and mledger.Position(p) (the package imports
// nothing of the storage or the broker).
type Position struct {
	LedgerID, EntryID int64
}

// Earliest is before every entry: the mark-delete position of a new replication cursor
// (mledger.Earliest).
var Earliest = Position{LedgerID: -1, EntryID: -1}

// Compare returns -1, 0 or +1 as p is before, equal to or after q.
func (p Position) Compare(q Position) int {
	switch {
	case p.LedgerID != q.LedgerID:
		return cmp.Compare(p.LedgerID, q.LedgerID)
	}
	return cmp.Compare(p.EntryID, q.EntryID)
}

// Less reports p < q.
func (p Position) Less(q Position) bool { return p.Compare(q) < 0 }

// String formats p as "ledger:entry".
func (p Position) String() string {
	return strconv.FormatInt(p.LedgerID, 10) + ":" + strconv.FormatInt(p.EntryID, 10)
}

// Prefix is Pulsar's replicatorPrefix: the start of the replication cursors' and the
// replicator producers' names.
const Prefix = "pulsar.repl"

// CursorName is the name of the durable cursor on the local topic that holds the backlog
// of the replication to remote: pulsar.repl.<remote>.
func CursorName(remote string) string { return Prefix + "." + remote }

// ProducerName is the name of the producer with which the replicator of cluster local
// publishes on cluster remote: pulsar.repl.<local>--><remote>. The remote broker knows a
// replicator producer by the prefix and deduplicates its messages on their original
// producer name and sequence id.
func ProducerName(local, remote string) string { return Prefix + "." + local + "-->" + remote }

// Marker types (PulsarMarkers.proto MarkerType).
const (
	MarkerSnapshotRequest  int32 = 10 // REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST: to every cluster
	MarkerSnapshotResponse int32 = 11 // ..._SNAPSHOT_RESPONSE: replicate_to the requesting cluster
	MarkerSnapshot         int32 = 12 // ..._SNAPSHOT: replicate_to the local cluster only
	MarkerUpdate           int32 = 13 // REPLICATED_SUBSCRIPTION_UPDATE: to every cluster
	MarkerTxnCommitting    int32 = 20
	MarkerTxnCommit        int32 = 21
	MarkerTxnAbort         int32 = 22
)

// Errors.
var (
	// ErrClosed: the replicator is closed (or not started) and takes no request.
	ErrClosed = errors.New("replication: closed")
	// ErrResetInProgress: a cursor reset arrived while another one is being applied.
	ErrResetInProgress = errors.New("replication: a cursor reset is in progress")
	// ErrIllegalTransition is the category of the core's impossible states (a transition it
	// does not have, a read that breaks the log's order).
	ErrIllegalTransition = errors.New("replication: illegal transition")
)

// panicOnAssert makes assertionFailedf panic: with the "invariants" build tag, and in this
// package's tests.
var panicOnAssert = invariants.Switch(invariants.Enabled)

func assertionFailedf(format string, args ...any) error {
	return panicOnAssert.Failedf(ErrIllegalTransition, format, args...)
}

// State is the replicator's lifecycle state.
type State uint8

// Replicator states.
const (
	// StateStopped: created, not started; nothing is read or sent.
	StateStopped State = iota
	// StateConnecting: no usable producer on the remote cluster: a connect is outstanding or
	// waits for its backoff. Nothing new is read; the window waits to be (re)sent.
	StateConnecting
	// StateReplicating: the remote producer of the current epoch is connected; entries are
	// read, filtered and sent, and the mark-delete position follows their receipts.
	StateReplicating
	// StateResetting: an admin cursor reset is being applied to the cursor; nothing is read
	// or sent, the window is empty. The producer may connect or fail meanwhile.
	StateResetting
	// StateClosed: the topic is closing or unloaded; final. Every later input is ignored.
	StateClosed
)

var stateNames = []string{"Stopped", "Connecting", "Replicating", "Resetting", "Closed"}

func (s State) String() string { return fsm.Name(stateNames, s, "State") }

// edges are the legal transitions of State.
var edges = fsm.Edges[State]{
	StateStopped:     {StateConnecting, StateClosed},
	StateConnecting:  {StateReplicating, StateResetting, StateClosed},
	StateReplicating: {StateConnecting, StateResetting, StateClosed},
	StateResetting:   {StateConnecting, StateReplicating, StateClosed},
}

// link is the state of the producer on the remote cluster.
type link uint8

const (
	linkIdle       link = iota // none: a reconnect may be timed (reconnectAt)
	linkConnecting             // Connect of the current epoch outstanding
	linkUp                     // connected under the current epoch
)

var linkNames = []string{"idle", "connecting", "up"}

func (l link) String() string { return fsm.Name(linkNames, l, "link") }

// Meta is what the replicator needs of an entry's message metadata (the owner decodes it).
type Meta struct {
	ProducerName string
	// SequenceID and HighestSequenceID are the original producer's (equal for a single
	// message; a batch entry's first and last).
	SequenceID, HighestSequenceID uint64
	PublishTime                   int64 // Unix ms
	NumMessages                   int   // messages in the entry (a batch: more than 1)
	// ReplicatedFrom is set on a message that another cluster's replicator published here.
	ReplicatedFrom string
	// ReplicateTo is the message's own list of clusters (empty: the namespace's);
	// ["__local__"] disables replication.
	ReplicateTo []string
	// Marker says the entry is a marker (marker_type is set), of type MarkerType.
	Marker     bool
	MarkerType int32
	// Aborted: a message of an aborted transaction (the owner asks the transaction buffer).
	Aborted bool
	// Corrupt: the metadata could not be decoded.
	Corrupt bool
}

// Entry is one entry read from the replication cursor.
type Entry struct {
	Pos  Position
	Meta Meta
	// Data is opaque to the core: it is handed back in the Send of the entry.
	Data []byte
}

// Reason says why an entry is, or is not, replicated.
type Reason uint8

// Reasons, in the order the checks are made (Pulsar's replicator's order).
const (
	Replicate           Reason = iota // sent to the remote cluster
	FilteredCorrupt                   // undecodable metadata
	FilteredTxn                       // a transaction marker or an aborted transaction's message
	FilteredMarker                    // a marker that is not replicated (1(c): only 10, 11, 13, with replicated subscriptions on)
	FilteredReplicated                // replicated_from is set: it came from another cluster (no loops)
	FilteredReplicateTo               // its replicate_to does not name the remote cluster
	FilteredExpired                   // older than the namespace's message TTL when read (Config.MessageTTLMs)
	numReasons
)

var reasonNames = []string{"replicate", "corrupt", "txn", "marker", "replicated", "replicate-to", "expired"}

func (r Reason) String() string { return fsm.Name(reasonNames, r, "Reason") }

// Classify decides whether an entry with metadata m is replicated to cluster remote, as
// Pulsar's replicator does: an entry that is not is acknowledged on the cursor without being
// sent. replSubs is enableReplicatedSubscriptions: only then are the replicated-subscription
// markers that travel (request, response, update) sent; a snapshot marker never leaves its
// cluster.
func Classify(m Meta, remote string, replSubs bool) Reason {
	switch {
	case m.Corrupt:
		return FilteredCorrupt
	case m.Aborted || (m.Marker && m.MarkerType >= MarkerTxnCommitting && m.MarkerType <= MarkerTxnAbort):
		return FilteredTxn
	case m.Marker && !(replSubs && (m.MarkerType == MarkerSnapshotRequest || m.MarkerType == MarkerSnapshotResponse ||
		m.MarkerType == MarkerUpdate)):
		return FilteredMarker
	case m.ReplicatedFrom != "":
		return FilteredReplicated
	case len(m.ReplicateTo) > 0 && !slices.Contains(m.ReplicateTo, remote):
		return FilteredReplicateTo
	}
	return Replicate
}

// Config configures a core.
type Config struct {
	// LocalCluster and RemoteCluster name the two ends: sends carry
	// replicated_from = LocalCluster.
	LocalCluster, RemoteCluster string
	// MaxPending bounds the window: the entries read and not yet passed by the mark-delete
	// position (in flight, waiting to be sent, or done behind one that is not). Pulsar's
	// replicationProducerQueueSize; 0: 1000.
	MaxPending int
	// ReadBatch bounds one read (dispatcherMaxReadBatchSize); 0: 100.
	ReadBatch int
	// ReplicatedSubscriptions is enableReplicatedSubscriptions: replicate the markers of
	// replicated subscriptions.
	ReplicatedSubscriptions bool
	// RateMsgs and RateBytes are the replicator dispatch rate per second (0: off).
	RateMsgs, RateBytes int64
	// MessageTTLMs is the namespace's message TTL (0: none): an entry read more than this
	// after its publish time is not replicated (Pulsar's msgRateExpired), as the other
	// filters, after them.
	MessageTTLMs int64
	// Reconnect is the backoff between attempts to connect the remote producer (zero: 100 ms
	// doubling to 60 s, as Pulsar); its Rand is the jitter source (seeded in simulations).
	Reconnect backoff.Policy
	// ReadRetry is the backoff after a failed or empty read (zero: 1 s doubling to 60 s).
	ReadRetry backoff.Policy
	// ConnectTimeoutMs abandons a connect that has not answered (0: 30 s): its producer, if
	// it connects after all, is closed.
	ConnectTimeoutMs int64
	// MarkDeleteRetryMs is the wait before a failed mark-delete write is retried (0: 1 s).
	MarkDeleteRetryMs int64
	// Mutation deliberately breaks the core (tests only: the simulation must catch it).
	Mutation Mutation
}

func (c Config) withDefaults() Config {
	if c.MaxPending <= 0 {
		c.MaxPending = 1000
	}
	if c.ReadBatch <= 0 {
		c.ReadBatch = 100
	}
	if c.Reconnect.Base <= 0 {
		c.Reconnect.Base, c.Reconnect.Max = 100e6, 60e9
	}
	if c.ReadRetry.Base <= 0 {
		c.ReadRetry.Base, c.ReadRetry.Max = 1e9, 60e9
	}
	if c.ConnectTimeoutMs <= 0 {
		c.ConnectTimeoutMs = 30_000
	}
	if c.MarkDeleteRetryMs <= 0 {
		c.MarkDeleteRetryMs = 1000
	}
	return c
}

// Mutation lists deliberate bugs the simulation must catch (sim_test.go
// TestSimCatchesMutations). The zero value is the correct core.
type Mutation struct {
	FreshSequenceOnResend bool // a re-send after a rewind carries a new sequence id (no dedup identity)
	AdvanceOnFailure      bool // a failed send counts as acknowledged: the cursor passes it
	ReplicateReplicated   bool // an entry with replicated_from is sent back
	ReplicateMarkers      bool // every marker is sent, as data (apache/pulsar#24453)
	LoseWindowOnReconnect bool // the unacknowledged sends of an ended epoch are not re-sent
	AcceptStaleEpoch      bool // a receipt is matched by its number only, whatever its epoch
	// AcceptStaleRead: a read issued before a cursor reset is taken (apache/pulsar#20128,
	// #26106: a rewind racing a read leaves the read position past unsent entries).
	AcceptStaleRead bool
	// NoRetryAfterConnectFailure: a failed connect is not retried (replication that stops
	// and never recovers: apache/pulsar#25097, #26002).
	NoRetryAfterConnectFailure bool
	// KeepAbandonedProducer: a producer that connects for an epoch the core gave up is left
	// open, so every later connect is refused as busy (apache/pulsar#5104).
	KeepAbandonedProducer bool
	ReadPastWindow        bool // reads ignore the window's bound
	RateIgnored           bool // reads ignore the dispatch rate
	TTLIgnored            bool // entries past the message TTL are sent
}

// Ticket identifies one send: the producer epoch it was sent under and its number in that
// epoch (from 1). A receipt carries it back.
type Ticket struct {
	Epoch, N uint64
}

// Connect asks the owner to create the producer (ProducerName) on the remote cluster for
// Epoch and to answer ProducerConnected or ConnectFailed with it.
type Connect struct {
	Epoch        uint64
	ProducerName string
}

// Send asks the owner to publish one entry on the remote producer of Ticket.Epoch, with the
// dedup identity of the original message (ProducerName, SequenceID, HighestSequenceID), its
// metadata otherwise kept, replicated_from set to ReplicatedFrom and the transaction ids
// cleared; a marker goes as a marker (CommandSend.marker). Answer SendAcked or SendFailed
// with Ticket, or Disconnected for the whole epoch.
type Send struct {
	Ticket                        Ticket
	Pos                           Position
	ProducerName                  string
	SequenceID, HighestSequenceID uint64
	ReplicatedFrom                string
	Marker                        bool
	// Resend: the entry was sent before, in an epoch that ended without its receipt.
	Resend bool
	Entry  Entry
}

// Read asks the owner to read up to N entries that follow position After on the local topic
// (After itself excluded), waiting for one if there is none yet, and to answer ReadDone with
// Tag.
type Read struct {
	Tag   uint64
	After Position
	N     int
}

// MarkDelete asks the owner to persist the replication cursor's mark-delete position at Pos
// and to answer MarkDeleteDone with Tag.
type MarkDelete struct {
	Tag uint64
	Pos Position
}

// CursorReset asks the owner to reset the replication cursor so that its mark-delete
// position is To, and to answer ResetDone with Tag.
type CursorReset struct {
	Tag uint64
	To  Position
}

// Ready is what the owner must do after an input, in this order: close the producers of
// CloseProducer's epochs, connect, perform the sends in order on the producer of their epoch,
// then the cursor calls (cancel the read of tag CancelRead, the mark-delete write, the reset,
// the read: in that order, on the cursor's one owner); arm a timer for TimerAt (Unix ms, 0:
// none) that calls Tick.
type Ready struct {
	CloseProducer []uint64
	Connect       *Connect
	Sends         []Send
	CancelRead    uint64
	MarkDelete    *MarkDelete
	Reset         *CursorReset
	Read          *Read
	TimerAt       int64
}

// Stats are the core's counters.
type Stats struct {
	Sent, Resent, Acked, Duplicates                     int64
	Filtered                                            [numReasons]int64
	SendFailures, Disconnects, Rewinds                  int64
	ConnectFailures, ConnectTimeouts, AbandonedClosed   int64
	StaleReceipts, StaleReads, ReadFailures, EmptyReads int64
	MarkDeleteFailures, Resets, ResetFailures           int64
	RateWaits, WindowFull                               int64
}
