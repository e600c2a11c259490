package pulsar

import (
	"encoding/binary"
	"fmt"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// minBatchRecord is the smallest batch record: a u32 size and a SingleMessageMetadata
// holding only payload_size (one tag byte, one varint byte).
const minBatchRecord = 4 + 2

// SingleMessage is one message of a batch. Payload aliases the batch payload.
type SingleMessage struct {
	Metadata *pb.SingleMessageMetadata
	Payload  []byte
}

// IsBatch reports whether an entry's payload is a batch of SingleMessageMetadata records.
// Presence of num_messages_in_batch decides, even when it is 1 (clients batch by default).
func IsBatch(meta *pb.MessageMetadata) bool { return meta.NumMessagesInBatch != nil }

// NumMessages is the number of messages an entry holds (num_messages_in_batch, default
// 1). Flow permits are counted in these units.
func NumMessages(meta *pb.MessageMetadata) int { return int(meta.GetNumMessagesInBatch()) }

// ParseBatch splits a batch payload of n messages, each [u32 size][SingleMessageMetadata]
// [payload_size bytes]. The payload must be uncompressed and unencrypted: decompress it
// first if meta.compression is not NONE, and do not parse encrypted entries. The records
// must fill payload exactly. Errors wrap ErrMalformed.
func ParseBatch(payload []byte, n int) ([]SingleMessage, error) {
	if n <= 0 {
		return nil, malformed("batch of %d messages", n)
	}
	if n > len(payload)/minBatchRecord {
		return nil, malformed("batch of %d messages cannot fit in %d bytes", n, len(payload))
	}
	msgs := make([]SingleMessage, 0, n)
	rest := payload
	for i := range n {
		smm, p, r, err := nextBatchRecord(rest)
		if err != nil {
			return nil, fmt.Errorf("%w (batch message %d of %d)", err, i, n)
		}
		msgs = append(msgs, SingleMessage{Metadata: smm, Payload: p})
		rest = r
	}
	if len(rest) != 0 {
		return nil, malformed("%d bytes after the %d messages of the batch", len(rest), n)
	}
	return msgs, nil
}

func nextBatchRecord(b []byte) (*pb.SingleMessageMetadata, []byte, []byte, error) {
	if len(b) < 4 {
		return nil, nil, nil, malformed("batch record header cut short")
	}
	size := uint64(binary.BigEndian.Uint32(b))
	b = b[4:]
	if size > uint64(len(b)) {
		return nil, nil, nil, malformed("single message metadata size %d exceeds the %d bytes left", size, len(b))
	}
	smm := &pb.SingleMessageMetadata{}
	if err := unmarshalOpts.Unmarshal(b[:size], smm); err != nil {
		return nil, nil, nil, malformed("SingleMessageMetadata: %v", err)
	}
	b = b[size:]
	ps := smm.GetPayloadSize()
	if ps < 0 || int64(ps) > int64(len(b)) {
		return nil, nil, nil, malformed("payload size %d, %d bytes left", ps, len(b))
	}
	return smm, b[:ps], b[ps:], nil
}

// AppendBatchMessage appends one batch record [u32 size][SingleMessageMetadata][payload]
// to dst, setting smm.PayloadSize to len(payload). Build the batch-level MessageMetadata
// with num_messages_in_batch = the number of records.
func AppendBatchMessage(dst []byte, smm *pb.SingleMessageMetadata, payload []byte) ([]byte, error) {
	if smm.PayloadSize == nil || int(*smm.PayloadSize) != len(payload) {
		ps := int32(len(payload))
		smm.PayloadSize = &ps
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	out, err := marshalOpts.MarshalAppend(dst, smm)
	if err != nil {
		return dst[:start], fmt.Errorf("pulsar: encode SingleMessageMetadata: %w", err)
	}
	binary.BigEndian.PutUint32(out[start:], uint32(len(out)-start-4))
	return append(out, payload...), nil
}
