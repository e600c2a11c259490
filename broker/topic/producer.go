package topic

import (
	"time"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/txn"
)

// Producer is a producer attached to a topic. The fields set at creation are immutable; the
// rest is owned by the topic goroutine. Its methods are safe for concurrent use (they post
// events to the topic).
type Producer struct {
	// ID is the client's producer id on Conn.
	ID   uint64
	Name string
	Conn Conn
	// AccessMode is Shared, Exclusive or WaitForExclusive (ExclusiveWithFencing is treated as
	// Exclusive that fences the current holder).
	AccessMode pb.ProducerAccessMode
	// TopicEpoch is the epoch the client asks to resume (reconnect of an exclusive
	// producer), nil on first connect.
	TopicEpoch *uint64
	Metadata   map[string]string
	// UserProvidedName tells that the application named the producer (not the broker).
	UserProvidedName bool

	topic     *Topic
	connected time.Time

	// Owned by the topic goroutine.
	state producerState
	// ready reports the outcome of AddProducer (see ProducerCallbacks).
	cb      ProducerCallbacks
	msgsIn  int64
	bytesIn int64
	rateIn  rate
}

// ProducerCallbacks report the outcome of Topic.AddProducer. They run on the topic goroutine
// and must not block.
type ProducerCallbacks struct {
	// Queued: a WaitForExclusive producer waits behind others (answer producer_ready=false).
	Queued func()
	// Ready: the producer may publish.
	Ready func(ProducerReady)
	// Failed: the producer was refused (or removed while queued).
	Failed func(error)
}

// ProducerReady is what PRODUCER_SUCCESS reports.
type ProducerReady struct {
	// LastSequenceID is the highest sequence id stored for the producer's name (-1: none).
	LastSequenceID int64
	TopicEpoch     uint64
}

// Message is one SEND.
type Message struct {
	SequenceID uint64
	// HighestSequenceID identifies the SEND for deduplication: max(sequence_id,
	// highest_sequence_id), as in Pulsar.
	HighestSequenceID uint64
	NumMessages       int
	// Data is the entry to store (headersAndPayload); the topic owns it from now on.
	Data []byte
	// Chunk marks a chunk of a chunked message; LastChunk its final chunk. Only final chunks
	// take part in deduplication (all chunks share a sequence id).
	Chunk, LastChunk bool
	// Txn is the transaction of a transactional SEND (nil: none).
	Txn *txn.ID
	// Origin is, for a SEND of a replicator producer, the message's original identity
	// (replicated.go); Publish sets it from the metadata. Deduplication keys on it.
	Origin Origin
}

// Publish hands a SEND to the topic. It never blocks; the connection bounds its pending
// publishes (Conn.PublishDone releases one per SEND).
func (p *Producer) Publish(m Message) {
	if isReplicator(p.Name) && m.Origin == (Origin{}) {
		m.Origin = OriginOf(m.Data)
	}
	if !p.topic.in.Push(func() { p.topic.onSend(p, m) }) {
		p.topic.pubDone(p, m)
		p.Conn.Send(sendError(p.ID, m.SequenceID, pb.ServerError_ServiceNotReady, "topic is closed"))
	}
}

// Close removes the producer from the topic; done (may be nil) runs once it is removed.
func (p *Producer) Close(done func()) {
	if !p.topic.in.Push(func() {
		p.topic.core.removeProducer(p, false)
		if done != nil {
			done()
		}
	}) && done != nil {
		done()
	}
}

// Topic returns the producer's topic.
func (p *Producer) Topic() *Topic { return p.topic }

func sendError(producerID, seq uint64, code pb.ServerError, msg string) *pb.BaseCommand {
	return wrap(&pb.CommandSendError{ProducerId: &producerID, SequenceId: &seq, Error: code.Enum(), Message: &msg})
}
