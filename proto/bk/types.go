package bk

import "errors"

// Op identifies a request (and the response that answers it). Values are frozen: they are on
// the wire.
type Op uint8

// Ops. See doc.go for each body layout.
const (
	OpAddEntry    Op = 1 // store one entry (flag FlagRecovery bypasses fencing)
	OpReadEntry   Op = 2 // read one entry; EntryID -1 = last entry; FlagFence fences first
	OpWriteLAC    Op = 3 // store an explicit LAC body for a ledger
	OpReadLAC     Op = 4 // return the explicit LAC body and the last entry
	OpLongPoll    Op = 5 // wait until the bookie's LAC > PreviousLAC or the timeout passes
	OpForce       Op = 6 // return once everything the bookie acknowledged for a ledger is fsynced
	OpListEntries Op = 7 // list the entry ids a bookie holds for a ledger, as ranges
)

// Flags modify a request. Values are frozen.
const (
	FlagRecovery  uint8 = 1 << 0 // AddEntry: recovery add, accepted on a fenced ledger
	FlagFence     uint8 = 1 << 1 // ReadEntry: fence the ledger (durably) before replying
	FlagPiggyback uint8 = 1 << 2 // LongPoll: also return entry PreviousLAC+1 if present
)

// Status is the outcome carried by every response. Values are frozen.
type Status uint8

// Statuses.
const (
	StatusOK             Status = 0
	StatusNoSuchEntry    Status = 1  // the bookie has the ledger but not that entry
	StatusNoSuchLedger   Status = 2  // the bookie has never seen the ledger
	StatusFenced         Status = 3  // non-recovery add on a fenced ledger
	StatusUnauthorized   Status = 4  // master key does not match the ledger's
	StatusDigestMismatch Status = 5  // entry digest or header does not verify
	StatusReadOnly       Status = 6  // bookie is read-only and refuses adds
	StatusBadRequest     Status = 7  // malformed or inconsistent request fields
	StatusTimeout        Status = 8  // long poll ended without a LAC advance
	StatusServerError    Status = 9  // I/O or internal failure; retriable elsewhere
	StatusTooLarge       Status = 10 // entry larger than the bookie accepts
	StatusShuttingDown   Status = 11 // bookie is stopping
)

// DigestType names how an entry is protected. Values are frozen (they are on the wire and in
// ledger metadata).
type DigestType uint8

// Digest types.
const (
	DigestNone   DigestType = 0 // no digest bytes
	DigestCRC32C DigestType = 1 // 4-byte big-endian CRC32C (Castagnoli) over header+payload
)

// MasterKeyLen is the length of a ledger master key: SHA-1 of "ledger" + password.
const MasterKeyLen = 20

// EntryHeaderLen is the length of the fixed entry header that precedes the digest and payload.
const EntryHeaderLen = 32

// MaxFrameLen is the largest frame (after the length prefix) a peer accepts: a 5 MiB entry plus
// headers. Larger frames close the connection.
const MaxFrameLen = 5<<20 + 1024

// LastEntry as an EntryID in ReadEntry asks for the last entry the bookie holds.
const LastEntry int64 = -1

// Request is one decoded request frame. Only the fields of its Op are meaningful.
type Request struct {
	Op        Op
	Flags     uint8
	RequestID uint64
	LedgerID  int64
	EntryID   int64 // AddEntry, ReadEntry
	MasterKey [MasterKeyLen]byte
	// AddEntry: the digest type the entry is encoded with.
	Digest DigestType
	// AddEntry: the whole entry (header + digest + payload) as the client packaged it.
	// WriteLAC: the LAC body (ledger id, lac, digest).
	Body []byte
	// WriteLAC: the LAC value the body carries.
	LAC int64
	// LongPoll: the caller's LAC; the bookie answers when its LAC exceeds it.
	PreviousLAC int64
	// LongPoll: how long to wait, in milliseconds.
	TimeoutMs uint32
}

// Response is one decoded response frame.
type Response struct {
	Op        Op
	RequestID uint64
	Status    Status
	LedgerID  int64
	EntryID   int64
	// ReadEntry, LongPoll (with FlagPiggyback): the stored entry bytes.
	// ReadLAC: the last entry bytes (may be empty).
	Body []byte
	// ReadLAC: the explicit LAC body (may be empty).
	LACBody []byte
	// ReadEntry, LongPoll: the highest LAC the bookie knows for the ledger (-1 if none).
	MaxLAC int64
	// ListEntries: sorted, non-overlapping inclusive ranges of entry ids.
	Ranges []Range
}

// Range is an inclusive range of entry ids.
type Range struct{ First, Last int64 }

// Errors.
var (
	// ErrFrameTooLarge is returned when a frame's length exceeds MaxFrameLen.
	ErrFrameTooLarge = errors.New("bk: frame too large")
	// ErrMalformed is returned for a frame whose body does not decode.
	ErrMalformed = errors.New("bk: malformed frame")
	// ErrDigest is returned when an entry's digest or header does not verify.
	ErrDigest = errors.New("bk: digest mismatch")
)
