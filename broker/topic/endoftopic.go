package topic

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// End of topic, as Pulsar's Consumer.reachedEndOfTopic: once a subscription has read a
// terminated topic to its end and nothing is left in its backlog, its consumers are sent
// REACHED_END_OF_TOPIC (clients' hasReachedEndOfTopic). Pulsar sends it from the two places
// it can become true: a read that finds no more entries (the dispatchers' readEntriesFailed
// with NoMoreEntriesToReadException) and an acknowledgement that empties the backlog of a
// terminated topic (PersistentSubscription.acknowledgeMessage). Both run on the
// subscription's goroutine; the backlog is read on a cursor I/O goroutine.

// endOfTopicTimeout bounds the backlog read of one check.
const endOfTopicTimeout = 10 * time.Second

// onEndOfLog records that a read reached the end of the terminated log and checks the
// backlog.
func (s *Subscription) onEndOfLog() {
	s.atEnd = true
	s.checkEndOfTopic()
}

// endOfTopicAfter wraps an acknowledgement's completion: once the read position is at the
// end of the terminated log, every applied acknowledgement checks the backlog again.
func (s *Subscription) endOfTopicAfter(done func(error)) func(error) {
	if !s.atEnd {
		return done
	}
	return func(err error) {
		if done != nil {
			done(err)
		}
		if err == nil {
			s.post(s.checkEndOfTopic)
		}
	}
}

// checkEndOfTopic tells the consumers that they reached the end of the topic if the
// backlog is empty.
func (s *Subscription) checkEndOfTopic() {
	if !s.atEnd || s.state == SubClosed {
		return
	}
	cur := s.cur
	s.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), endOfTopicTimeout)
		ci, err := cur.Info(ctx)
		cancel()
		if err != nil || ci.Backlog > 0 {
			return
		}
		s.post(func() {
			for _, c := range s.sortedConsumers() {
				if !c.closed {
					c.Conn.Send(pulsar.Wrap(&pb.CommandReachedEndOfTopic{ConsumerId: proto.Uint64(c.ID)}))
				}
			}
		})
	})
}
