package topic

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/txn"
)

// checksumBlockLen is [u16 magic][u32 crc][u32 metaSize] (proto/pulsar's frozen layout).
const checksumBlockLen = 10

// A transactional entry is stored behind a broker header that names its transaction (the
// client does not always write it into the metadata, and the metadata must not be changed
// without recomputing its checksum): [u16 txnMagic][u64 most][u64 least], then the entry as
// the client sent it. Consumers get the entry without it.
const (
	txnMagic     uint16 = 0x0e0f
	txnHeaderLen int    = 18
)

// withTxn returns data behind the header of id.
func withTxn(id txn.ID, data []byte) []byte {
	out := make([]byte, txnHeaderLen+len(data))
	binary.BigEndian.PutUint16(out, txnMagic)
	binary.BigEndian.PutUint64(out[2:], id.Most)
	binary.BigEndian.PutUint64(out[10:], id.Least)
	copy(out[txnHeaderLen:], data)
	return out
}

// splitTxn separates a stored entry into its transaction (ok false: none) and the entry as
// the client sent it.
func splitTxn(data []byte) (id txn.ID, ok bool, rest []byte) {
	if len(data) < txnHeaderLen || binary.BigEndian.Uint16(data) != txnMagic {
		return txn.ID{}, false, data
	}
	return txn.ID{Most: binary.BigEndian.Uint64(data[2:]), Least: binary.BigEndian.Uint64(data[10:])}, true, data[txnHeaderLen:]
}

// ClientEntry returns a stored entry as the client sent it (without the broker's
// transaction header), and its transaction if it has one.
func ClientEntry(data []byte) (payload []byte, id txn.ID, transactional bool) {
	id, ok, rest := splitTxn(data)
	return rest, id, ok
}

// parseMeta decodes the MessageMetadata of a stored entry (headersAndPayload) without
// verifying the checksum: the broker checked it when the entry was published, and the
// client checks it again on delivery.
func parseMeta(data []byte) (*pb.MessageMetadata, error) {
	_, _, data = splitTxn(data)
	if len(data) < checksumBlockLen || binary.BigEndian.Uint16(data) != pulsar.MagicCRC32C {
		return nil, fmt.Errorf("%w: stored entry of %d bytes without a checksum block", pulsar.ErrMalformed, len(data))
	}
	n := uint64(binary.BigEndian.Uint32(data[6:]))
	if n > uint64(len(data)-checksumBlockLen) {
		return nil, fmt.Errorf("%w: stored entry metadata size %d", pulsar.ErrMalformed, n)
	}
	m := &pb.MessageMetadata{}
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(data[checksumBlockLen:checksumBlockLen+int(n)], m); err != nil {
		return nil, fmt.Errorf("%w: stored entry metadata: %v", pulsar.ErrMalformed, err)
	}
	return m, nil
}

// metaTimes scans the MessageMetadata of an entry for its publish_time and deliver_at_time
// (Unix ms; 0 if absent or malformed) without decoding the rest or allocating: the SEND
// path's max delivery delay check.
func metaTimes(data []byte) (publish, deliverAt int64) {
	_, _, data = splitTxn(data)
	if len(data) < checksumBlockLen || binary.BigEndian.Uint16(data) != pulsar.MagicCRC32C {
		return 0, 0
	}
	n := uint64(binary.BigEndian.Uint32(data[6:]))
	if n > uint64(len(data)-checksumBlockLen) {
		return 0, 0
	}
	b := data[checksumBlockLen : checksumBlockLen+int(n)]
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, 0
		}
		b = b[l:]
		if typ == protowire.VarintType && (num == metaPublishTime || num == metaDeliverAtTime) {
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return 0, 0
			}
			if num == metaPublishTime {
				publish = int64(v)
			} else {
				deliverAt = int64(v)
			}
			b = b[l:]
			continue
		}
		if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
			return 0, 0
		}
		b = b[l:]
	}
	return publish, deliverAt
}

// Field numbers of MessageMetadata (PulsarApi.proto).
const (
	metaPublishTime   protowire.Number = 3
	metaDeliverAtTime protowire.Number = 19
)

// entryInfo is what dispatching needs to know about an entry.
type entryInfo struct {
	msgs      int    // messages in the entry (permits it takes)
	hash      uint32 // sticky key hash (Key_Shared), 0..keyHashRange-1
	deliverAt int64  // Unix ms, 0: now
	publish   int64  // Unix ms
	marker    bool   // marker_type is set: never delivered (dispatch.Info.Marker)
}

func infoOf(data []byte) entryInfo {
	m, err := parseMeta(data)
	if err != nil {
		return entryInfo{msgs: 1}
	}
	return infoFromMeta(m)
}

func infoFromMeta(m *pb.MessageMetadata) entryInfo {
	ei := entryInfo{msgs: 1, deliverAt: m.GetDeliverAtTime(), publish: int64(m.GetPublishTime()), marker: m.MarkerType != nil}
	if m.NumMessagesInBatch != nil && m.GetNumMessagesInBatch() > 0 {
		ei.msgs = int(m.GetNumMessagesInBatch())
	}
	switch {
	case len(m.OrderingKey) > 0:
		ei.hash = stickyHash(m.OrderingKey)
	case m.PartitionKey != nil:
		ei.hash = stickyHash([]byte(m.GetPartitionKey()))
	default:
		ei.hash = noKeyHash
	}
	return ei
}
