package server

import (
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Publish back-pressure without head-of-line blocking.
//
// A connection has at most MaxPendingPublishPerConnection SENDs in flight to its topics.
// Beyond that its SENDs are parked: they wait, in arrival order, in the connection's park
// queue, and a drainer goroutine hands them to their topics as the in-flight SENDs complete.
// Meanwhile the reader goes on reading, and serves at once every command that does not
// depend on the SENDs before it — FLOW, ACK, PING, lookups, new producers and consumers — so
// a client that both publishes and consumes on one connection (an IoT gateway; every
// pulsar-client-go client, which opens one connection per broker) keeps its consumers fed
// while its producers wait. Were the reader to stop instead, those commands would wait behind
// every SEND in the socket's buffers (megabytes with the kernel's receive-buffer autotuning:
// seconds at the publish rate), and the consumers would starve for permits.
//
// The commands whose meaning depends on the SENDs before them — CLOSE_PRODUCER (its SENDs
// are stored first, not dropped) and the transaction commands (END_TXN commits the SENDs
// sent before it) — are parked behind them while SENDs are parked, and the drainer serves
// them in order. The park queue is bounded by MaxParkedPublishBytes: beyond it the reader
// stops reading until the drainer makes room, which slows the client down as before.

// parked is one command waiting in the park queue: a SEND ready to publish (e, m) or a
// command served in order after the SENDs before it (f).
type parked struct {
	e *idEntry[*topic.Producer]
	m topic.Message
	f *pulsar.Frame
}

// dependsOnSends reports whether a command must not overtake the SENDs before it.
func dependsOnSends(t pb.BaseCommand_Type) bool {
	switch t {
	case pb.BaseCommand_SEND, pb.BaseCommand_CLOSE_PRODUCER, pb.BaseCommand_NEW_TXN,
		pb.BaseCommand_ADD_PARTITION_TO_TXN, pb.BaseCommand_ADD_SUBSCRIPTION_TO_TXN, pb.BaseCommand_END_TXN:
		return true
	}
	return false
}

// parkOrdered parks f behind the parked SENDs if there are any and f must stay behind them
// (reader goroutine). It reports whether it did.
func (c *conn) parkOrdered(f pulsar.Frame) bool {
	t := f.Cmd.GetType()
	if t == pb.BaseCommand_SEND || !dependsOnSends(t) {
		return false
	}
	c.park.Lock()
	defer c.park.Unlock()
	if !c.park.draining {
		return false
	}
	c.park.q = append(c.park.q, parked{f: &f})
	return true
}

// publish hands a SEND to its topic (reader goroutine): at once while the connection has
// room in its in-flight budget and nothing parked, else through the park queue. It returns
// false if the connection closed while the reader waited for room in the queue.
func (c *conn) publish(e *idEntry[*topic.Producer], m topic.Message) bool {
	c.park.Lock()
	if !c.park.draining {
		select {
		case c.budget <- struct{}{}:
			c.park.Unlock()
			if !e.t.AcquirePublish(len(m.Data), c.done) {
				c.PublishDone()
				return false
			}
			e.obj.Publish(m)
			return true
		default:
		}
		c.s.m.Throttled.Inc()
		c.park.draining = true
		c.drainers.Add(1)
		go c.drain()
	}
	c.park.q = append(c.park.q, parked{e: e, m: m})
	c.park.bytes += len(m.Data)
	for c.park.bytes > c.s.cfg.MaxParkedPublishBytes && c.park.draining {
		c.park.Unlock()
		select {
		case <-c.park.room:
		case <-c.done:
			return false
		}
		c.park.Lock()
	}
	c.park.Unlock()
	return true
}

// drain serves the park queue in order until it is empty (its own goroutine, one at a time
// per connection, started by publish): each SEND waits for room in the connection's
// in-flight budget and its topic's byte budget.
func (c *conn) drain() {
	defer c.drainers.Done()
	for {
		c.park.Lock()
		if len(c.park.q) == 0 {
			c.park.draining = false
			c.park.q = nil
			c.park.Unlock()
			return
		}
		p := c.park.q[0]
		c.park.q[0] = parked{}
		c.park.q = c.park.q[1:]
		c.park.bytes -= len(p.m.Data)
		c.park.Unlock()
		select {
		case c.park.room <- struct{}{}:
		default:
		}
		if p.f != nil {
			if err := c.handle(*p.f); err != nil {
				c.badFrame("protocol", err)
				return
			}
			continue
		}
		select {
		case c.budget <- struct{}{}:
		case <-c.done:
			return // the client sees the connection close and sends again
		}
		if !p.e.t.AcquirePublish(len(p.m.Data), c.done) {
			c.PublishDone()
			return
		}
		p.e.obj.Publish(p.m)
	}
}
