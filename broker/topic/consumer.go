package topic

import (
	"time"

	"github.com/magnetar-io/magnetar/broker/topic/dispatch"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// SubType is a subscription type: Exclusive, Shared, Failover or Key_Shared.
type SubType = pb.CommandSubscribe_SubType

// Consumer is a consumer attached to a subscription. The fields set at creation are
// immutable; the rest is owned by the subscription goroutine. Its methods are safe for
// concurrent use (they post events to the subscription).
type Consumer struct {
	// ID is the client's consumer id on Conn.
	ID       uint64
	Name     string
	Conn     Conn
	Type     SubType
	Priority int32
	Metadata map[string]string
	// KeyShared configures a Key_Shared consumer (nil: AUTO_SPLIT).
	KeyShared *pb.KeySharedMeta

	sub       *Subscription
	connected time.Time

	// Owned by the subscription goroutine.
	cid      dispatch.CID // the consumer's id in the dispatcher core
	closed   bool
	msgsOut  int64
	bytesOut int64
	rateOut  rate
	redeliv  rate
	lastFlow int64 // when the consumer last gave permits (Unix ms)
}

// Subscription returns the consumer's subscription.
func (c *Consumer) Subscription() *Subscription { return c.sub }

// Flow adds n permits (messages the client can take).
func (c *Consumer) Flow(n uint32) {
	c.sub.post(func() { c.sub.onFlow(c, int(n)) })
}

// Ack applies an ACK. done (may be nil) is called, from any goroutine, once it is applied.
func (c *Consumer) Ack(ack *pb.CommandAck, done func(error)) {
	if !c.sub.post(func() { c.sub.onAck(c, ack, done) }) && done != nil {
		done(ErrClosed)
	}
}

// Redeliver redelivers the given unacknowledged messages (all of the consumer's if ids is
// empty) with a higher redelivery count.
func (c *Consumer) Redeliver(ids []*pb.MessageIdData) {
	c.sub.post(func() { c.sub.onRedeliver(c, ids) })
}

// Reattach restarts the consumer for a client that subscribed it again on the same
// connection (see dispatch.Core.Reattach): its unacknowledged messages are sent again and
// its permits start from the client's next FLOW. done runs once that is so (false: the
// consumer is closed), before which the client must not be answered: its FLOW follows.
func (c *Consumer) Reattach(done func(ok bool)) {
	if !c.sub.post(func() { done(c.sub.onReattach(c)) }) {
		done(false)
	}
}

// Close detaches the consumer; its unacknowledged messages are redelivered to others.
// done (may be nil) runs once it is detached.
func (c *Consumer) Close(done func()) {
	if !c.sub.post(func() {
		c.sub.removeConsumer(c, false)
		if done != nil {
			done()
		}
	}) && done != nil {
		done()
	}
}

// Unsubscribe deletes the subscription. Without force it fails with ErrNotEmpty if other
// consumers are connected.
func (c *Consumer) Unsubscribe(force bool, done func(error)) {
	if !c.sub.post(func() { c.sub.onUnsubscribe(c, force, done) }) {
		done(ErrClosed)
	}
}

// Seek resets the subscription to a message id (or, with publishTime > 0, to the first
// message published at or after it, in Unix ms): every consumer is disconnected (they
// reconnect) and done reports once the cursor moved.
func (c *Consumer) Seek(id *MessageID, publishTime int64, done func(error)) {
	if !c.sub.post(func() { c.sub.onSeek(id, publishTime, done) }) {
		done(ErrClosed)
	}
}
