// Package pulsarclient is a small Pulsar client on top of package proto/pulsar, for
// Magnetar's own tools (magnetar produce, consume and perf). It speaks the binary protocol
// as pulsar-client-go does — lookup, partitioned metadata, producers with batching and
// asynchronous receipts, consumers with flow permits and grouped acknowledgements — without
// that client's dependencies; negative acknowledgements (Consumer.Nack) and the broker's
// end-of-topic notice (Consumer.HasReachedEndOfTopic) too. It is not a full client: no
// schemas, transactions, chunking, encryption or seeks.
//
// # Usage
//
//	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://127.0.0.1:6650"})
//	defer cl.Close()
//	p, err := cl.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: "my-topic"})
//	id, err := p.Send(ctx, &pulsarclient.ProducerMessage{Payload: []byte("hello")})
//	err = p.SendAsync(ctx, msg, func(id pulsarclient.MessageID, err error) { ... })
//	c, err := cl.Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: "my-topic", Subscription: "s"})
//	m, err := c.Receive(ctx)
//	err = c.Ack(m)
//
// Caller obligations:
//  1. Close producers and consumers (or the Client, which closes them all); Close waits for
//     the goroutines it owns.
//  2. SendAsync callbacks run on the producer's goroutine: keep them short, and never call
//     Send, SendAsync or Flush of the same producer from one (it would deadlock).
//  3. Acknowledge each message once; a batch entry is acknowledged to the broker when all
//     its messages are.
//
// # Goroutines and ownership
//
//   - conn (one per broker address, shared): readLoop owns the FrameReader and dispatches
//     every frame — answers to requests by request id, receipts to producers, messages to
//     consumers; writeLoop drains the outbound buffer (appended to under a leaf mutex by any
//     goroutine) in large writes. Pending requests and the producer/consumer registries are
//     a mutex-guarded leaf map.
//
//   - partProducer (one per topic or partition): run owns the state (Ready, Reconnecting,
//     Closed), the current batch, the sequence ids and the FIFO of entries sent and not yet
//     acknowledged. SendAsync feeds sendc; the conn reader feeds events (receipts, send
//     errors, connection lost); a reconnect goroutine, started on connection loss, looks the
//     topic up again, registers the producer with the next epoch and reports back as an
//     event, after which run re-sends every pending entry in order.
//
//   - SessionProducer (session_producer.go, the broker's geo-replicator's producer): no
//     goroutine of its own; a mutex-guarded FIFO of sends without a receipt, completed in
//     order by the connection's reader. One session only: it never reconnects or re-sends,
//     and ends for good (every pending send failed, OnEnd called) at the first send error,
//     CLOSE_PRODUCER or lost connection; its caller starts a new one.
//
//   - partConsumer (one per topic or partition): a small mutex-guarded state (Subscribing,
//     Ready, Reconnecting, Closed), the permits counter and the grouped acknowledgements.
//     The conn reader decodes MESSAGE frames straight into the Consumer's queue; a
//     reconnect goroutine subscribes again after CLOSE_CONSUMER or a lost connection (the
//     partition's queued, unacknowledged messages are dropped: the broker redelivers them).
//
//   - Scalable topics (scalable.go, scalable_producer.go, scalable_watch.go): the CONNECT
//     sets FeatureFlags.supports_scalable_topics, and the scalable-topic commands are sent
//     only on a connection whose CONNECTED set it too (else ErrScalableUnsupported: e.g.
//     through Magnetar's proxy, which does not forward them). A layoutWatch goroutine keeps a DAG watch
//     session (SCALABLE_TOPIC_LOOKUP, then the broker's SCALABLE_TOPIC_UPDATE pushes) open
//     on the service URL's connection and publishes each newer layout; an assignmentWatch
//     goroutine keeps a stream consumer subscribed (SCALABLE_TOPIC_SUBSCRIBE, then
//     SCALABLE_TOPIC_ASSIGNMENT_UPDATE pushes) and hands each assignment to the
//     ScalableConsumer's run goroutine, which attaches one ordinary consumer per segment.
//     The conn reader puts pushes in a one-value mailbox (a layout or assignment is whole)
//     and never blocks; a closed connection ends the sessions, which open new ones. The
//     producer routes by the newest pushed layout and, after TopicTerminated, waits for the
//     one showing the seal. HTTP (ScalableOptions.AdminURL) remains only for admin calls:
//     ScalableLayout, creating a consumer's subscription, and unregistering a closed stream
//     consumer (the protocol has no command for it; without it the broker's grace period
//     would hand its segments on later).
//
// Lock order: partConsumer.mu, then conn.mu / conn.out. The conn never calls a producer or
// consumer while holding its own locks.
//
// # Invariants
//
//   - Receipts complete pending entries strictly in order; a receipt for a later sequence id
//     than the oldest pending entry closes the connection (then everything is re-sent), an
//     earlier one is a duplicate and ignored. Every SendAsync callback runs exactly once.
//   - A consumer never grants more than ReceiverQueueSize permits ahead of Receive; permits
//     count messages, not entries.
//   - Messages of a connection or subscription the consumer has left are never delivered.
package pulsarclient
