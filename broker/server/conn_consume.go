package server

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Consuming: SUBSCRIBE, ACK, SEEK, UNSUBSCRIBE, CLOSE_CONSUMER and GET_LAST_MESSAGE_ID
// (FLOW and REDELIVER_UNACKNOWLEDGED_MESSAGES are one call each, in handle).

func (c *conn) handleSubscribe(cmd *pb.CommandSubscribe) {
	if cmd.GetSubscription() == "" {
		c.sendError(cmd.GetRequestId(), fmt.Errorf("%w: empty subscription name", api.ErrNotAllowed))
		return
	}
	createID(c, c.consumers, "consumer", cmd.GetConsumerId(), cmd.GetRequestId(), cmd.GetTopic(), cmd.GetForceTopicCreation(),
		auth.ActionConsume, cmd.GetSubscription(), func(ctx context.Context, t *topic.Topic, e *idEntry[*topic.Consumer], fail func(error)) {
			c.subscribe(ctx, cmd, t, e, fail)
		})
}

// subscribe makes the consumer of entry e on topic t (createID's goroutine): it registers
// the schema and hands the consumer to the topic, whose answer answers the client.
func (c *conn) subscribe(ctx context.Context, cmd *pb.CommandSubscribe, t *topic.Topic, e *idEntry[*topic.Consumer],
	fail func(error)) {
	rid, cid := cmd.GetRequestId(), cmd.GetConsumerId()
	if sc := cmd.GetSchema(); sc != nil && sc.GetType() != pb.Schema_None {
		if _, err := c.b.OfferSchema(ctx, t.Name(), sc, SchemaConsume); err != nil {
			fail(err)
			return
		}
	}
	cons := &topic.Consumer{ID: cid, Name: cmd.GetConsumerName(), Conn: c, Type: cmd.GetSubType(),
		Priority: cmd.GetPriorityLevel(), Metadata: kvMap(cmd.GetMetadata()), KeyShared: cmd.GetKeySharedMeta()}
	req := topic.SubscribeRequest{Consumer: cons, Subscription: cmd.GetSubscription(), Durable: cmd.GetDurable(),
		Initial: mledger.Latest, ReadCompacted: cmd.GetReadCompacted(), ReplicateSubscriptionState: cmd.GetReplicateSubscriptionState()}
	if req.ReadCompacted && (cons.Type == pb.CommandSubscribe_Shared || cons.Type == pb.CommandSubscribe_Key_Shared) {
		fail(fmt.Errorf("%w: Compacted topic reads are only allowed for Exclusive and Failover subscriptions", api.ErrNotAllowed))
		return
	}
	if cmd.GetInitialPosition() == pb.CommandSubscribe_Earliest {
		req.Initial = mledger.Earliest
	}
	req.Start = req.Initial
	if id := cmd.GetStartMessageId(); id != nil {
		req.Start = startPosition(id)
	}
	t.Subscribe(req, func(err error) {
		if err == nil {
			// A stream consumer of a segment fenced by a seek (Backend.CheckAttach): checked once
			// attached, so a concurrent fence either detaches it or is seen here.
			if err = c.b.CheckAttach(t.Name().String(), req.Subscription, cons.Metadata); err != nil {
				cons.Close(nil)
			}
		}
		if err != nil {
			fail(err)
			return
		}
		if c.consumers.ready(e, cons, t, c.resubscribed(cons)) != nil {
			cons.Close(nil) // the id was closed meanwhile
			return
		}
		c.sendSuccess(rid)
	})
}

// resubscribed answers a repeated SUBSCRIBE of cons's id on this connection: with success,
// as Pulsar does, but only once cons is restarted (topic.Consumer.Reattach) — a client
// subscribes again after it dropped its prefetched messages (pulsar-client-go does when it
// reconnects the consumer, also on a connection the broker kept), and those must be sent
// again (chaos: a message stored, acknowledged to its producer, never delivered).
func (c *conn) resubscribed(cons *topic.Consumer) func(rid uint64) {
	return func(rid uint64) {
		cons.Reattach(func(ok bool) {
			if !ok {
				c.sendError(rid, fmt.Errorf("%w: consumer %d is closing", api.ErrServiceNotReady, cons.ID))
				return
			}
			c.sendSuccess(rid)
		})
	}
}

// startPosition converts a start_message_id: (-1,-1) as uint64 is Earliest,
// (MaxInt64, MaxInt64) Latest.
func startPosition(id *pb.MessageIdData) topic.Position {
	l, e := id.GetLedgerId(), id.GetEntryId()
	switch {
	case l == math.MaxUint64 || int64(l) < 0:
		return mledger.Earliest
	case l == math.MaxInt64:
		return mledger.Latest
	}
	return topic.Position{LedgerID: int64(l), EntryID: int64(e)}
}

func (c *conn) handleAck(cmd *pb.CommandAck) {
	e := c.consumers.get(cmd.GetConsumerId())
	var done func(error)
	if cmd.RequestId != nil {
		rid, cid := cmd.GetRequestId(), cmd.GetConsumerId()
		done = func(err error) {
			r := &pb.CommandAckResponse{ConsumerId: &cid, RequestId: &rid}
			if err != nil {
				msg := err.Error()
				r.Error, r.Message = serverError(err).Enum(), &msg
			}
			c.Send(pulsar.Wrap(r))
		}
	}
	if e == nil {
		if done != nil {
			done(fmt.Errorf("%w: consumer %d", topic.ErrClosed, cmd.GetConsumerId()))
		}
		return
	}
	e.obj.Ack(cmd, done)
}

func (c *conn) handleSeek(cmd *pb.CommandSeek) {
	rid := cmd.GetRequestId()
	e := c.consumers.get(cmd.GetConsumerId())
	if e == nil {
		c.sendError(rid, fmt.Errorf("%w: consumer %d not found", api.ErrNotAllowed, cmd.GetConsumerId()))
		return
	}
	done := func(err error) {
		if err != nil {
			c.sendError(rid, err)
			return
		}
		c.sendSuccess(rid)
	}
	switch {
	case cmd.MessageId != nil:
		p := startPosition(cmd.GetMessageId())
		e.obj.Seek(&topic.MessageID{LedgerID: p.LedgerID, EntryID: p.EntryID, BatchIndex: -1}, 0, done)
	case cmd.MessagePublishTime != nil:
		e.obj.Seek(nil, max(int64(cmd.GetMessagePublishTime()), 1), done)
	default:
		c.sendError(rid, fmt.Errorf("%w: seek without a message id or publish time", api.ErrNotAllowed))
	}
}

func (c *conn) handleUnsubscribe(cmd *pb.CommandUnsubscribe) {
	rid, cid := cmd.GetRequestId(), cmd.GetConsumerId()
	e := c.consumers.get(cid)
	if e == nil {
		c.sendError(rid, fmt.Errorf("%w: consumer %d not found", api.ErrNotAllowed, cid))
		return
	}
	e.obj.Unsubscribe(cmd.GetForce(), func(err error) {
		if err != nil {
			c.sendError(rid, err)
			return
		}
		c.consumers.forget(cid, e)
		c.sendSuccess(rid)
	})
}

func (c *conn) handleGetLastMessageID(cmd *pb.CommandGetLastMessageId) {
	rid := cmd.GetRequestId()
	e := c.consumers.get(cmd.GetConsumerId())
	if e == nil {
		c.sendError(rid, fmt.Errorf("%w: consumer %d not found", api.ErrNotAllowed, cmd.GetConsumerId()))
		return
	}
	ctx, cancel := c.ctx(30 * time.Second)
	defer cancel()
	id, err := e.t.LastMessageID(ctx)
	if err != nil {
		c.sendError(rid, err)
		return
	}
	l, en := uint64(id.LedgerID), uint64(id.EntryID)
	last := &pb.MessageIdData{LedgerId: &l, EntryId: &en}
	if id.BatchIndex >= 0 {
		bi := id.BatchIndex
		last.BatchIndex = &bi
	}
	if p := e.t.Name().Partition; p >= 0 {
		pi := int32(p)
		last.Partition = &pi
	}
	md, err := e.obj.Subscription().MarkDelete(ctx)
	if err != nil {
		c.sendError(rid, err)
		return
	}
	ml, me := uint64(md.LedgerID), uint64(md.EntryID)
	c.Send(pulsar.Wrap(&pb.CommandGetLastMessageIdResponse{RequestId: &rid, LastMessageId: last,
		ConsumerMarkDeletePosition: &pb.MessageIdData{LedgerId: &ml, EntryId: &me}}))
}
