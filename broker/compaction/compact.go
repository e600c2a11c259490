package compaction

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/compression"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Position is the managed ledger's.
type Position = mledger.Position

// PropState is the managed-ledger property holding a topic's compaction State (JSON).
const PropState = "magnetar.compaction"

// readBatch is how many entries one read of the topic asks for.
const readBatch = 500

// State is a topic's durable compaction record: which generation of the compacted log is
// current and the horizon it covers. It is written only after the generation is complete,
// so a crash mid-compaction leaves the previous State (and its generation) in force.
type State struct {
	// Generation is the current compacted log's number (0: never compacted).
	Generation int64 `json:"generation"`
	// Horizon is the last entry of the topic the generation covers.
	HorizonLedger int64 `json:"horizonLedger"`
	HorizonEntry  int64 `json:"horizonEntry"`
	// Entries, Messages and Bytes describe the generation; Keys counts its messages' keys.
	Entries  int64 `json:"entries"`
	Messages int64 `json:"messages"`
	Bytes    int64 `json:"bytes"`
	// InputEntries counts the topic entries read by the compaction that made it.
	InputEntries int64 `json:"inputEntries"`
}

// Horizon returns the horizon position (Earliest if never compacted).
func (s State) Horizon() Position {
	if s.Generation == 0 {
		return mledger.Earliest
	}
	return Position{LedgerID: s.HorizonLedger, EntryID: s.HorizonEntry}
}

// ReadState reads a topic's compaction State from its log's properties.
func ReadState(ctx context.Context, log topic.Log) (State, error) {
	st, err := log.Stats(ctx)
	if err != nil {
		return State{}, err
	}
	var s State
	if v := st.Properties[PropState]; v != "" {
		if err := json.Unmarshal([]byte(v), &s); err != nil {
			return State{}, fmt.Errorf("compaction state of the topic: %w", err)
		}
	}
	return s, nil
}

// lastEntry is the position of a log's last stored entry (EntryID -1: none).
func lastEntry(st mledger.Stats) Position {
	if st.LastConfirmed.EntryID >= 0 {
		return st.LastConfirmed
	}
	for i := len(st.Ledgers) - 1; i >= 0; i-- {
		if l := st.Ledgers[i]; l.Entries > 0 {
			return Position{LedgerID: l.ID, EntryID: l.Entries - 1}
		}
	}
	return st.LastConfirmed
}

// after is the first position after p.
func after(p Position) Position {
	if p == mledger.Earliest {
		return p
	}
	return Position{LedgerID: p.LedgerID, EntryID: p.EntryID + 1}
}

// kept is the latest message of one key: where it is stored and what it is. A message of a
// batch keeps its SingleMessageMetadata and payload (it is batched again with the other
// messages kept of its entry); an unbatched one keeps its whole entry.
type kept struct {
	pos   Position
	index int // batch index (-1: not batched)
	meta  *pb.MessageMetadata
	smm   *pb.SingleMessageMetadata
	data  []byte // the payload (batched) or the whole entry (not batched)
}

// isDelete reports whether a message deletes its key: an empty payload or null_value.
func isDelete(payload []byte, null bool) bool { return len(payload) == 0 || null }

// absorb folds the messages of one stored entry into latest. Messages without a key are
// not kept (as Pulsar's compactor by default). A compressed batch is decompressed (claiming
// at most limit bytes) to find its messages' keys; an entry that cannot be split (an
// encrypted batch, or a compressed one that does not decompress) is kept whole under a key
// of its own, as Pulsar's compactor keeps a batch it cannot decode.
func absorb(latest map[string]kept, e topic.Entry, limit int) error {
	meta, payload, err := pulsar.ParseHeadersAndPayload(e.Data)
	if err != nil {
		return fmt.Errorf("entry %v: %w", e.Position, err)
	}
	if !pulsar.IsBatch(meta) {
		if meta.PartitionKey == nil {
			return nil
		}
		if isDelete(payload, meta.GetNullValue()) {
			delete(latest, meta.GetPartitionKey())
			return nil
		}
		latest[meta.GetPartitionKey()] = kept{pos: e.Position, index: -1, meta: meta, data: e.Data}
		return nil
	}
	whole := meta.EncryptionAlgo != nil || len(meta.EncryptionKeys) > 0
	if !whole && meta.GetCompression() != pb.CompressionType_NONE {
		if payload, err = compression.Decompress(meta, payload, limit); err != nil {
			whole = true
		}
	}
	if whole {
		latest[fmt.Sprintf("\x00entry %v", e.Position)] = kept{pos: e.Position, index: -1, meta: meta, data: e.Data}
		return nil
	}
	msgs, err := pulsar.ParseBatch(payload, pulsar.NumMessages(meta))
	if err != nil {
		return fmt.Errorf("entry %v: %w", e.Position, err)
	}
	for i, m := range msgs {
		if m.Metadata.PartitionKey == nil {
			continue
		}
		k := m.Metadata.GetPartitionKey()
		if isDelete(m.Payload, m.Metadata.GetNullValue()) {
			delete(latest, k)
			continue
		}
		latest[k] = kept{pos: e.Position, index: i, meta: meta, smm: m.Metadata, data: m.Payload}
	}
	return nil
}

// compactedEntry is one entry of a compacted generation: the topic position it came from and
// its data (the original entry, or a batch of the messages kept of it).
type compactedEntry struct {
	pos  Position
	data []byte
	msgs int
}

// build turns the kept messages into compacted entries in position order, batching again
// the messages kept of each batch entry (in their batch order), uncompressed.
func build(latest map[string]kept) ([]compactedEntry, error) {
	byPos := map[Position][]kept{}
	for _, k := range latest {
		byPos[k.pos] = append(byPos[k.pos], k)
	}
	out := make([]compactedEntry, 0, len(byPos))
	for pos, ks := range byPos {
		if ks[0].index < 0 {
			out = append(out, compactedEntry{pos: pos, data: ks[0].data, msgs: 1})
			continue
		}
		slices.SortFunc(ks, func(a, b kept) int { return cmp.Compare(a.index, b.index) })
		var payload []byte
		for _, k := range ks {
			var err error
			if payload, err = pulsar.AppendBatchMessage(payload, proto.Clone(k.smm).(*pb.SingleMessageMetadata), k.data); err != nil {
				return nil, err
			}
		}
		meta := proto.Clone(ks[0].meta).(*pb.MessageMetadata)
		n := int32(len(ks))
		meta.NumMessagesInBatch = &n
		meta.Compression, meta.UncompressedSize = nil, nil // the kept messages are stored uncompressed
		data, err := pulsar.AppendHeadersAndPayload(nil, meta, payload)
		if err != nil {
			return nil, err
		}
		out = append(out, compactedEntry{pos: pos, data: data, msgs: len(ks)})
	}
	slices.SortFunc(out, func(a, b compactedEntry) int { return a.pos.Compare(b.pos) })
	return out, nil
}

// record frames a compacted entry in the compacted log: [8B ledger][8B entry][data].
func record(e compactedEntry) []byte {
	b := make([]byte, 16, 16+len(e.data))
	binary.BigEndian.PutUint64(b, uint64(e.pos.LedgerID))
	binary.BigEndian.PutUint64(b[8:], uint64(e.pos.EntryID))
	return append(b, e.data...)
}

// errBadRecord: a compacted log entry that is not a record.
var errBadRecord = errors.New("compaction: malformed compacted entry")

func unrecord(b []byte) (topic.Entry, error) {
	if len(b) < 16 {
		return topic.Entry{}, fmt.Errorf("%w of %d bytes", errBadRecord, len(b))
	}
	p := Position{LedgerID: int64(binary.BigEndian.Uint64(b)), EntryID: int64(binary.BigEndian.Uint64(b[8:]))}
	return topic.Entry{Position: p, Data: b[16:]}, nil
}

// readAll reads every entry of log up to and including last, in order.
func readAll(ctx context.Context, log topic.Log, from, last Position, f func(topic.Entry) error) (int64, error) {
	var n int64
	if last.EntryID < 0 {
		return 0, nil
	}
	for !last.Less(from) {
		es, err := log.Read(ctx, from, readBatch)
		if err != nil {
			return n, err
		}
		if len(es) == 0 {
			return n, fmt.Errorf("compaction: empty read at %v", from)
		}
		for _, e := range es {
			if last.Less(e.Position) {
				return n, nil
			}
			if err := f(e); err != nil {
				return n, err
			}
			n++
		}
		from = after(es[len(es)-1].Position)
	}
	return n, nil
}

// loadGeneration reads the entries of a compacted log.
func loadGeneration(ctx context.Context, log topic.Log) ([]topic.Entry, error) {
	st, err := log.Stats(ctx)
	if err != nil {
		return nil, err
	}
	var out []topic.Entry
	_, err = readAll(ctx, log, mledger.Earliest, lastEntry(st), func(e topic.Entry) error {
		ce, err := unrecord(e.Data)
		if err == nil {
			out = append(out, ce)
		}
		return err
	})
	return out, err
}
