package pulsarclient

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Nack negatively acknowledges m: the broker delivers it again (with a higher redelivery
// count) ConsumerOptions.NackRedeliveryDelay from now. A message of a batch entry makes the
// whole entry come back; its messages acknowledged meanwhile are skipped on redelivery.
func (c *Consumer) Nack(m *Message) error {
	if m.cons == nil || m.cons.cons != c {
		return errors.New("pulsarclient: message is not from this consumer")
	}
	return m.cons.nack(m.ID)
}

// NackID is Nack of a message known by its id only.
func (c *Consumer) NackID(id MessageID) error {
	pc, err := c.partOf(id)
	if err != nil {
		return err
	}
	return pc.nack(id)
}

// AckID acknowledges the entry of a message known by its id only (a batch entry as a whole:
// acknowledge the received Message to acknowledge one message of a batch).
func (c *Consumer) AckID(id MessageID) error {
	pc, err := c.partOf(id)
	if err != nil {
		return err
	}
	return pc.ack(id.entryData(), false)
}

// HasReachedEndOfTopic reports whether the broker said that the subscription read every
// message of the terminated topic and has nothing left in its backlog (every partition's,
// for a partitioned topic).
func (c *Consumer) HasReachedEndOfTopic() bool {
	for _, pc := range c.parts {
		if !pc.endOfTopic.Load() {
			return false
		}
	}
	return len(c.parts) > 0
}

// partOf returns the partition consumer of id.
func (c *Consumer) partOf(id MessageID) (*partConsumer, error) {
	if len(c.parts) == 1 && (id.Partition < 0 || c.parts[0].partition == id.Partition) {
		return c.parts[0], nil
	}
	for _, pc := range c.parts {
		if pc.partition == id.Partition {
			return pc, nil
		}
	}
	return nil, fmt.Errorf("pulsarclient: message id %v is not from this consumer's partitions", id)
}

// nack schedules the redelivery request of id's entry. Without a connection at that time
// nothing is sent: the resubscription redelivers every unacknowledged message anyway.
func (pc *partConsumer) nack(id MessageID) error {
	pc.mu.Lock()
	closed := pc.mu.state == consumerClosed
	pc.mu.Unlock()
	if closed {
		return ErrClosed
	}
	data := id.entryData()
	time.AfterFunc(pc.cons.opts.NackRedeliveryDelay, func() {
		pc.mu.Lock()
		c, ready := pc.mu.conn, pc.mu.state == consumerReady
		pc.mu.Unlock()
		if !ready {
			return
		}
		_ = c.write(pulsar.Wrap(&pb.CommandRedeliverUnacknowledgedMessages{ConsumerId: proto.Uint64(pc.id),
			MessageIds: []*pb.MessageIdData{data}}))
	})
	return nil
}

// onEndOfTopic runs on the connection's reader goroutine.
func (pc *partConsumer) onEndOfTopic(c *conn) {
	pc.mu.Lock()
	current := pc.mu.conn == c
	pc.mu.Unlock()
	if current {
		pc.endOfTopic.Store(true)
	}
}
