package server

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/txn"
)

// Producing: SEND (the data path: no allocation or lock per message beyond the payload copy
// and the registry lookup), PRODUCER and CLOSE_PRODUCER.

func (c *conn) handleSend(f pulsar.Frame) {
	cmd := f.Cmd.GetSend()
	e := c.producers.get(cmd.GetProducerId())
	if e == nil {
		c.log.Debug("SEND for an unknown producer", "producer", cmd.GetProducerId())
		return
	}
	meta := f.Metadata
	if meta.GetProducerName() == "" || meta.PublishTime == nil {
		e.obj.Refused() // a replicator producer's session ends at a refusal
		c.Send(wrapSendError(cmd.GetProducerId(), cmd.GetSequenceId(), pb.ServerError_NotAllowedError,
			"message metadata without producer name or publish time"))
		return
	}
	n := max(int(cmd.GetNumMessages()), 1)
	if meta.NumMessagesInBatch != nil {
		n = max(int(meta.GetNumMessagesInBatch()), 1)
	}
	// Deduplication follows Pulsar: a SEND is identified by its sequence id (the first of a
	// batch) or highest_sequence_id if larger; batches need not hold consecutive ids (the
	// key-based batcher interleaves keys), but their first ids increase.
	seq := cmd.GetSequenceId()
	hi := max(seq, cmd.GetHighestSequenceId())
	m := topic.Message{SequenceID: seq, HighestSequenceID: hi, NumMessages: n,
		Data: append([]byte(nil), f.HeadersAndPayload...)}
	if cmd.TxnidMostBits != nil || cmd.TxnidLeastBits != nil {
		m.Txn = &txn.ID{Most: cmd.GetTxnidMostBits(), Least: cmd.GetTxnidLeastBits()}
	}
	if meta.ChunkId != nil {
		m.Chunk = true
		m.LastChunk = meta.GetChunkId() == meta.GetNumChunksFromMsg()-1
	}
	c.publish(e, m) // conn_park.go
}

func (c *conn) handleProducer(cmd *pb.CommandProducer) {
	createID(c, c.producers, "producer", cmd.GetProducerId(), cmd.GetRequestId(), cmd.GetTopic(), true, auth.ActionProduce, "",
		func(ctx context.Context, t *topic.Topic, e *idEntry[*topic.Producer], fail func(error)) {
			c.createProducer(ctx, cmd, t, e, fail)
		})
}

// createProducer makes the producer of entry e on topic t (createID's goroutine): it
// registers the schema (PRODUCER_SUCCESS names its version, so the version is stored before
// the success is sent), creates the initial subscription, and hands the producer to the
// topic, whose callbacks answer the client.
func (c *conn) createProducer(ctx context.Context, cmd *pb.CommandProducer, t *topic.Topic, e *idEntry[*topic.Producer],
	fail func(error)) {
	rid, pid := cmd.GetRequestId(), cmd.GetProducerId()
	schemaVersion, err := c.b.OfferSchema(ctx, t.Name(), cmd.GetSchema(), SchemaProduce)
	if err != nil {
		fail(err)
		return
	}
	if sub := cmd.GetInitialSubscriptionName(); sub != "" {
		if err := t.CreateInitialSubscription(ctx, sub); err != nil {
			fail(err)
			return
		}
	}
	pname := cmd.GetProducerName()
	if pname == "" {
		pname = c.b.NewProducerName()
	}
	p := &topic.Producer{ID: pid, Name: pname, Conn: c, AccessMode: cmd.GetProducerAccessMode(),
		TopicEpoch: cmd.TopicEpoch, Metadata: kvMap(cmd.GetMetadata()), UserProvidedName: cmd.GetUserProvidedProducerName()}
	success := func(r topic.ProducerReady, ready bool) *pb.CommandProducerSuccess {
		ps := &pb.CommandProducerSuccess{RequestId: &rid, ProducerName: &pname, LastSequenceId: &r.LastSequenceID,
			TopicEpoch: &r.TopicEpoch, ProducerReady: &ready}
		if schemaVersion != nil {
			ps.SchemaVersion = schemaVersion
		}
		return ps
	}
	t.AddProducer(p, topic.ProducerCallbacks{
		Queued: func() {
			if c.producers.waiting(e, p, t) != nil {
				p.Close(nil) // the id was closed meanwhile
				return
			}
			c.Send(pulsar.Wrap(success(topic.ProducerReady{LastSequenceID: -1}, false)))
		},
		Ready: func(r topic.ProducerReady) {
			ps := success(r, true)
			again := func(rid uint64) {
				again := proto.Clone(ps).(*pb.CommandProducerSuccess)
				again.RequestId = &rid
				c.Send(pulsar.Wrap(again))
			}
			if c.producers.ready(e, p, t, again) != nil {
				p.Close(nil) // the id was closed meanwhile
				return
			}
			c.Send(pulsar.Wrap(ps))
		},
		Failed: fail,
	})
}
