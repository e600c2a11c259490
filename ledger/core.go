package ledger

import (
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// This file holds the messages shared by the sans-I/O cores (Writer, Recovery): the requests
// they ask their driver to perform (collected in Ready) and the results the driver feeds back
// through Step. The cores import no net, os or time; the driver owns every connection, timer
// and goroutine.
//
// Driver obligations (for every core):
//  1. Perform every request in a Ready, in any order, and deliver exactly one result for each
//     AddRequest, ReadRequest and MetaWrite (a timeout or broken connection is a result with
//     Err set). LACWrites need no result.
//  2. Deliver results only from the goroutine that owns the core; the core is not safe for
//     concurrent use.
//  3. For a MetaWrite, do a compare-and-swap of Meta at metadata.LedgerKey with Expected. On a
//     version conflict, read the current record and return it in MetaResult.Current with
//     Err wrapping ErrMetadataConflict. Retry transient store errors itself; any other error is
//     final for the core.

// Entry is one ledger entry as the cores see it: the header fields the digest protects and the
// payload.
type Entry struct {
	EntryID int64
	// LAC is the last add confirmed the writer knew when it sent the entry (piggybacked LAC).
	LAC int64
	// Length is the ledger length in payload bytes including this entry.
	Length  int64
	Payload []byte
}

// Encoder packages an entry for the wire (header, digest, payload). It must be pure.
type Encoder func(Entry) []byte

// AddRequest asks the driver to send an add to one bookie.
type AddRequest struct {
	Token  uint64 // echo in AddResult
	Bookie string
	Entry  Entry
	// Body is the packaged entry (from the Encoder, or as read back during recovery). Resends of
	// an entry reuse the same bytes.
	Body []byte
	// Recovery marks a recovery add, which a fenced bookie accepts.
	Recovery bool
}

// AddResult is a bookie's answer to an AddRequest.
type AddResult struct {
	Token  uint64
	Bookie string
	Status bk.Status // meaningful when Err is nil
	Err    error     // transport failure or timeout
}

// ReadRequest asks the driver to read one entry (EntryID bk.LastEntry: the last entry the
// bookie holds) from one bookie.
type ReadRequest struct {
	Token   uint64
	Bookie  string
	EntryID int64
	// Fence makes the bookie durably fence the ledger before answering.
	Fence bool
}

// ReadResult is a bookie's answer to a ReadRequest. With StatusOK, the driver has verified the
// digest and decoded Entry (an entry that fails verification is reported as
// bk.StatusDigestMismatch).
type ReadResult struct {
	Token  uint64
	Bookie string
	Status bk.Status
	Err    error
	Entry  Entry  // StatusOK only
	Body   []byte // StatusOK only: the stored bytes, re-added as is by recovery
}

// LACWrite asks the driver to send an explicit LAC to a bookie. No result is expected.
type LACWrite struct {
	Bookie string
	LAC    int64
}

// MetaWrite asks the driver to compare-and-swap the ledger's metadata.
type MetaWrite struct {
	Seq      uint64 // echo in MetaResult
	Meta     *Metadata
	Expected metadata.Version
}

// MetaResult is the outcome of a MetaWrite.
type MetaResult struct {
	Seq     uint64
	Version metadata.Version // the new version, on success
	Err     error            // nil, wraps ErrMetadataConflict, or a final error
	// Current and CurrentVersion are the record found on a conflict.
	Current        *Metadata
	CurrentVersion metadata.Version
}

// AddCompletion reports the outcome of one Append, delivered strictly in entry order.
type AddCompletion struct {
	EntryID int64
	Err     error
}

// CloseResult reports the outcome of Writer.Close.
type CloseResult struct {
	Meta    *Metadata // the CLOSED record on success
	Version metadata.Version
	Err     error
}

// RecoveryResult reports the outcome of a Recovery: the CLOSED record (ours or the one a
// concurrent recovery wrote) or an error.
type RecoveryResult struct {
	Meta    *Metadata
	Version metadata.Version
	Err     error
}

// Ready is what a core asks its driver to do next. Requests may be performed in any order;
// Completions must be delivered to callers in slice order.
type Ready struct {
	Adds        []AddRequest
	Reads       []ReadRequest
	LACWrites   []LACWrite
	MetaWrites  []MetaWrite
	Completions []AddCompletion
	Closed      *CloseResult
	Recovered   *RecoveryResult
}

// Empty reports whether there is nothing to do.
func (r *Ready) Empty() bool {
	return len(r.Adds) == 0 && len(r.Reads) == 0 && len(r.LACWrites) == 0 && len(r.MetaWrites) == 0 &&
		len(r.Completions) == 0 && r.Closed == nil && r.Recovered == nil
}

// Placement chooses bookies for ensembles. Implementations used by a core are called from the
// core's owner goroutine only.
type Placement interface {
	// NewEnsemble returns size distinct writable bookies.
	NewEnsemble(size int) ([]string, error)
	// Replace returns one writable bookie not in exclude, or an error wrapping
	// ErrNotEnoughBookies.
	Replace(exclude []string) (string, error)
}

// isMissing reports whether a status says the bookie does not hold the entry.
func isMissing(s bk.Status) bool { return s == bk.StatusNoSuchEntry || s == bk.StatusNoSuchLedger }
