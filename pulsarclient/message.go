package pulsarclient

import (
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// MessageID identifies a message: the entry's ledger and entry ids, the message's index in a
// batch entry (-1 if the entry is not a batch), and the partition (-1 for a non-partitioned
// topic).
type MessageID struct {
	LedgerID   int64 `json:"ledgerId"`
	EntryID    int64 `json:"entryId"`
	BatchIndex int32 `json:"batchIndex"`
	Partition  int32 `json:"partition"`
}

// EarliestMessageID and LatestMessageID are the special start positions (as the protocol encodes them).
var (
	EarliestMessageID = MessageID{LedgerID: -1, EntryID: -1, BatchIndex: -1, Partition: -1}
	LatestMessageID   = MessageID{LedgerID: 1<<63 - 1, EntryID: 1<<63 - 1, BatchIndex: -1, Partition: -1}
)

func (m MessageID) String() string {
	return fmt.Sprintf("%d:%d:%d:%d", m.LedgerID, m.EntryID, m.Partition, m.BatchIndex)
}

func (m MessageID) entryData() *pb.MessageIdData {
	return &pb.MessageIdData{LedgerId: proto.Uint64(uint64(m.LedgerID)), EntryId: proto.Uint64(uint64(m.EntryID))}
}

func idFromData(d *pb.MessageIdData, partition int32, batchIndex int32) MessageID {
	return MessageID{LedgerID: int64(d.GetLedgerId()), EntryID: int64(d.GetEntryId()), BatchIndex: batchIndex,
		Partition: partition}
}

// ProducerMessage is what an application publishes.
type ProducerMessage struct {
	Payload []byte
	// Key is the partition key ("" for none): it routes the message to a partition and keys
	// it for Key_Shared subscriptions.
	Key        string
	Properties map[string]string
	// EventTime is an application timestamp (zero: none).
	EventTime time.Time
	// DeliverAfter asks the broker to deliver the message no earlier than this long after it
	// was sent (Shared and Key_Shared subscriptions only; zero: at once).
	DeliverAfter time.Duration
}

// Message is a received message. Payload is owned by the message (it is not reused).
type Message struct {
	ID              MessageID
	Payload         []byte
	Key             string
	Properties      map[string]string
	ProducerName    string
	SequenceID      int64
	PublishTime     time.Time
	EventTime       time.Time // zero if none
	RedeliveryCount uint32
	Topic           string // the partition's name for a partitioned topic

	// batch is shared by the messages of one batch entry; nil if the entry is not a batch.
	batch *batchAcks
	cons  *partConsumer
}

// batchAcks counts the messages of a batch entry that are not acknowledged yet: the entry is
// acknowledged to the broker when the count reaches zero.
type batchAcks struct {
	size      int32
	remaining atomic.Int32
}

func kvMap(kvs []*pb.KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

func kvList(m map[string]string) []*pb.KeyValue {
	if len(m) == 0 {
		return nil
	}
	kvs := make([]*pb.KeyValue, 0, len(m))
	for k, v := range m {
		kvs = append(kvs, &pb.KeyValue{Key: proto.String(k), Value: proto.String(v)})
	}
	return kvs
}

func msTime(ms uint64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(ms))
}
