package mledger

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// infoFormat is the version of the JSON records below. Frozen: bump it for an incompatible
// change.
const infoFormat = 1

// infoFormatOffload is the format of a managed ledger record in which some ledger has an
// offload context. Its records are written as format 2 so that a binary which does not know
// offload refuses them (ErrBadRecord) rather than rewriting them without the offload state
// (which would leak the blobs and, once the bookie copy is deleted, lose the only readable
// copy). Format 1 records (no ledger offloaded) are unchanged and still read.
const infoFormatOffload = 2

// Info is the metadata record of a managed ledger, stored at metadata.ManagedLedgerKey(name)
// and updated only by compare-and-swap by its owner (invariant M4).
//
//	{"format":1, "owner":"<token>", "epoch":7,
//	 "ledgers":[{"id":12,"entries":500,"size":51200,"ctime":…,"closed":…,
//	            "offload":{"uuid":"…","complete":true,"bkDeleted":true,…}},   // format 2 only
//	            {"id":19,…}],
//	 "terminated":{"l":19,"e":41},          // only once terminated
//	 "properties":{"k":"v"}}
//
// Invariants: ledger ids grow along Ledgers; every ledger but the last has its final Entries
// and Size and a non-zero Closed time; the last ledger's statistics are final only if Closed
// is set (always so when Terminated is set); Terminated, once set, never changes and names
// the last ledger.
type Info struct {
	Format int `json:"format"`
	// Owner is the token of the process that owns the log; Epoch counts ownership changes.
	// A writer whose compare-and-swap fails re-reads the record: another Owner means it was
	// fenced, its own Owner means the conflict was its own earlier write.
	Owner      string            `json:"owner"`
	Epoch      int64             `json:"epoch"`
	Ledgers    []LedgerInfo      `json:"ledgers"`
	Terminated *Position         `json:"terminated,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
}

// LedgerInfo describes one ledger of the chain.
type LedgerInfo struct {
	ID      int64 `json:"id"`
	Entries int64 `json:"entries"`
	Size    int64 `json:"size"`
	// CTime is when the ledger was created, Closed when it was closed (Unix ms; 0: open).
	CTime  int64 `json:"ctime"`
	Closed int64 `json:"closed,omitempty"`
	// Offload is the ledger's tiered-storage state (nil: never offloaded, or the attempt was
	// cleaned up). Only closed ledgers have one.
	Offload *OffloadContext `json:"offload,omitempty"`
}

// OffloadContext is a ledger's offload state, Pulsar's MLDataFormats OffloadContext: the
// current attempt to copy the closed ledger to the object store.
//
//	{"uuid":"6f1c…","complete":true,"bkDeleted":true,"started":…,"ts":…,
//	 "driver":"aws-s3","driverMetadata":{"bucket":"…"}}
//
// Invariants: UUID names one attempt and is never reused (a retry gets a new one, so a late
// write or delete of an old attempt cannot touch a newer copy); Complete is recorded only
// after Offloader.Offload returned success for UUID (the data and index objects are durable);
// BookkeeperDeleted implies Complete (the bookie copy is deleted only after the complete
// offloaded copy is recorded, and after the deletion lag). An incomplete context is an attempt
// in progress or an orphan (a crash, a failure): its objects are deleted before the context is
// cleared or replaced.
type OffloadContext struct {
	// UUID is the attempt's unique id (Pulsar's uidMsb/uidLsb), the prefix of its objects.
	UUID              string `json:"uuid"`
	Complete          bool   `json:"complete,omitempty"`
	BookkeeperDeleted bool   `json:"bkDeleted,omitempty"`
	// Started is when the attempt was recorded; Timestamp when it was recorded complete, the
	// start of the deletion lag (Unix ms; Pulsar's timestamp).
	Started   int64 `json:"started"`
	Timestamp int64 `json:"ts,omitempty"`
	// Driver and DriverMetadata are the offloader's name and what it returned for the
	// attempt (Pulsar's OffloadDriverMetadata), handed back on reads and deletes.
	Driver         string            `json:"driver,omitempty"`
	DriverMetadata map[string]string `json:"driverMetadata,omitempty"`
}

func (oc *OffloadContext) clone() *OffloadContext {
	if oc == nil {
		return nil
	}
	out := *oc
	out.DriverMetadata = maps.Clone(oc.DriverMetadata)
	return &out
}

func (in *Info) clone() *Info {
	out := *in
	out.Ledgers = slices.Clone(in.Ledgers)
	for i := range out.Ledgers {
		out.Ledgers[i].Offload = out.Ledgers[i].Offload.clone()
	}
	if in.Terminated != nil {
		t := *in.Terminated
		out.Terminated = &t
	}
	out.Properties = maps.Clone(in.Properties)
	return &out
}

// ledger returns the index of ledger id in Ledgers, or -1.
func (in *Info) ledger(id int64) int {
	i, ok := slices.BinarySearchFunc(in.Ledgers, id, func(l LedgerInfo, id int64) int {
		switch {
		case l.ID < id:
			return -1
		case l.ID > id:
			return 1
		}
		return 0
	})
	if !ok {
		return -1
	}
	return i
}

func (in *Info) has(id int64) bool { return in.ledger(id) >= 0 }

func (in *Info) last() *LedgerInfo {
	if len(in.Ledgers) == 0 {
		return nil
	}
	return &in.Ledgers[len(in.Ledgers)-1]
}

func (in *Info) marshal() []byte {
	out := *in
	out.Format = infoFormat
	for _, l := range in.Ledgers {
		if l.Offload != nil {
			out.Format = infoFormatOffload
			break
		}
	}
	b, err := json.Marshal(&out)
	if err != nil {
		panic(err) // plain structs: cannot fail
	}
	return b
}

func (in *Info) validate() error {
	if in.Format != infoFormat && in.Format != infoFormatOffload {
		return fmt.Errorf("%w: managed ledger record format %d", ErrBadRecord, in.Format)
	}
	for i, l := range in.Ledgers {
		if i > 0 && l.ID <= in.Ledgers[i-1].ID {
			return fmt.Errorf("%w: ledger ids out of order at %d", ErrBadRecord, l.ID)
		}
		if l.Entries < 0 || l.Size < 0 {
			return fmt.Errorf("%w: ledger %d has %d entries, %d bytes", ErrBadRecord, l.ID, l.Entries, l.Size)
		}
		if oc := l.Offload; oc != nil && (oc.UUID == "" || oc.BookkeeperDeleted && !oc.Complete) {
			return fmt.Errorf("%w: ledger %d has offload context %+v", ErrBadRecord, l.ID, *oc)
		}
	}
	if t := in.Terminated; t != nil {
		last := in.last()
		if last == nil || t.LedgerID != last.ID || t.EntryID != last.Entries-1 {
			return fmt.Errorf("%w: terminated at %v, last ledger %+v", ErrBadRecord, *t, last)
		}
	}
	return nil
}

func decodeInfo(b []byte) (*Info, error) {
	var in Info
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("%w: managed ledger record: %v", ErrBadRecord, err)
	}
	if err := in.validate(); err != nil {
		return nil, err
	}
	return &in, nil
}

// CursorInfo is the metadata record of a durable cursor, stored at
// metadata.ManagedCursorKey(ml, name) and updated by compare-and-swap by the managed ledger's
// owner. State is a snapshot; the cursor's ledger (Ledger, -1: none) holds newer states, one
// per entry. Recovery takes the newest by Seq of the snapshot and the ledger's last entry.
type CursorInfo struct {
	Format int `json:"format"`
	// Owner and Epoch are the managed ledger's owner token and epoch at the last write. A
	// claim (at open) takes over a record only from an older epoch.
	Owner  string      `json:"owner"`
	Epoch  int64       `json:"epoch"`
	Ledger int64       `json:"ledger"`
	State  CursorState `json:"state"`
}

// CursorState is a cursor's acknowledgement state: the mark-delete position (everything at or
// before it is acknowledged), the individually acknowledged ranges above it, and the partly
// acknowledged batch entries. Seq orders states of one cursor.
type CursorState struct {
	Seq        uint64     `json:"seq"`
	MarkDelete Position   `json:"md"`
	Acked      []AckRange `json:"acked,omitempty"`
	Batches    []BatchAck `json:"batches,omitempty"`
	// Truncated tells that more ranges were acknowledged than were persisted (they are
	// redelivered after a crash).
	Truncated bool `json:"truncated,omitempty"`
	// Properties are the cursor's properties (Pulsar's cursor properties kept with the
	// mark-delete position, e.g. pulsar.replicated.subscription=1). Every state carries all
	// of them, so the newest state recovered has the newest properties whatever write
	// (ledger entry or record snapshot) persisted it. A binary that predates them ignores
	// the field and drops it at its next write.
	Properties map[string]int64 `json:"props,omitempty"`
}

// AckRange is entries First..Last of ledger Ledger, all acknowledged.
type AckRange struct {
	Ledger int64 `json:"l"`
	First  int64 `json:"f"`
	Last   int64 `json:"t"`
}

// BatchAck is a batch entry with some of its Size messages acknowledged (bit i of Acked:
// message i).
type BatchAck struct {
	Pos   Position `json:"p"`
	Size  int      `json:"n"`
	Acked []uint64 `json:"a"`
}

func (ci *CursorInfo) marshal() []byte {
	b, err := json.Marshal(ci)
	if err != nil {
		panic(err)
	}
	return b
}

func decodeCursorInfo(b []byte) (*CursorInfo, error) {
	var ci CursorInfo
	if err := json.Unmarshal(b, &ci); err != nil {
		return nil, fmt.Errorf("%w: cursor record: %v", ErrBadRecord, err)
	}
	if ci.Format != infoFormat {
		return nil, fmt.Errorf("%w: cursor record format %d", ErrBadRecord, ci.Format)
	}
	return &ci, nil
}

func encodeCursorState(s *CursorState) []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

func decodeCursorState(b []byte) (*CursorState, error) {
	var s CursorState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: cursor state: %v", ErrBadRecord, err)
	}
	return &s, nil
}
