package pulsarclient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/internal/fsm"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// SubscriptionType is a subscription's type (pb.CommandSubscribe_SubType).
type SubscriptionType int

const (
	Exclusive SubscriptionType = iota
	Shared
	Failover
	KeyShared
)

var subTypeNames = []string{"Exclusive", "Shared", "Failover", "Key_Shared"}

func (t SubscriptionType) String() string {
	if t >= 0 && int(t) < len(subTypeNames) {
		return subTypeNames[t]
	}
	return fmt.Sprintf("SubscriptionType(%d)", int(t))
}

// ParseSubscriptionType parses Exclusive, Shared, Failover or Key_Shared (case-insensitive;
// KeyShared is accepted too).
func ParseSubscriptionType(s string) (SubscriptionType, error) {
	for i, n := range subTypeNames {
		if strings.EqualFold(s, n) || strings.EqualFold(s, strings.ReplaceAll(n, "_", "")) {
			return SubscriptionType(i), nil
		}
	}
	return 0, fmt.Errorf("unknown subscription type %q (want Exclusive, Shared, Failover or Key_Shared)", s)
}

// InitialPosition is where a new subscription starts.
type InitialPosition int

const (
	// Latest: only messages published after the subscription is created.
	Latest InitialPosition = iota
	// Earliest: every message still in the topic.
	Earliest
)

// ConsumerOptions configures a Consumer. Zero values take the documented defaults.
type ConsumerOptions struct {
	Topic           string
	Subscription    string
	Type            SubscriptionType
	InitialPosition InitialPosition
	// Name is the consumer name ("" lets the client pick one).
	Name string
	// ReceiverQueueSize is the number of messages the broker may push ahead of Receive, per
	// partition. Default 1000.
	ReceiverQueueSize int
	// NonDurable makes a subscription that lives only as long as the consumer (a reader).
	NonDurable bool
	// StartMessageID positions a NonDurable subscription: delivery starts after this id
	// (at it, with StartInclusive). nil: by InitialPosition.
	StartMessageID *MessageID
	StartInclusive bool
	// AckGroupingTime is how long acknowledgements are collected before being sent together.
	// Default 100 ms; negative sends each at once.
	AckGroupingTime time.Duration
	// AckGroupingMaxSize sends the collected acknowledgements when this many are waiting.
	// Default 1000.
	AckGroupingMaxSize int

	// NackRedeliveryDelay is how long after Nack a message is redelivered (Pulsar's
	// negativeAckRedeliveryDelay). Default 1 minute.
	NackRedeliveryDelay time.Duration

	// Properties are the consumer's metadata (CommandSubscribe.metadata), as in
	// pulsar-client-go's ConsumerOptions.Properties.
	Properties map[string]string
	// metadata, if set, gives the consumer metadata of each (re)subscribe: a scalable
	// topic's stream consumer names the assignment version it holds (scalable.go).
	metadata func() map[string]string
}

func (o *ConsumerOptions) setDefaults() error {
	if o.Subscription == "" {
		return errors.New("pulsarclient: a subscription name is required")
	}
	if o.Type < Exclusive || o.Type > KeyShared {
		return fmt.Errorf("pulsarclient: invalid subscription type %d", o.Type)
	}
	if o.ReceiverQueueSize <= 0 {
		o.ReceiverQueueSize = 1000
	}
	if o.AckGroupingTime == 0 {
		o.AckGroupingTime = 100 * time.Millisecond
	}
	if o.AckGroupingMaxSize <= 0 {
		o.AckGroupingMaxSize = 1000
	}
	if o.NackRedeliveryDelay <= 0 {
		o.NackRedeliveryDelay = time.Minute
	}
	if o.StartMessageID != nil && !o.NonDurable {
		return errors.New("pulsarclient: StartMessageID needs NonDurable")
	}
	return nil
}

// Consumer receives the messages of a subscription (on every partition of a partitioned
// topic). It is safe for concurrent use.
type Consumer struct {
	cl    *Client
	topic string
	opts  ConsumerOptions
	parts []*partConsumer

	notify chan struct{} // cap 1: the queue got messages
	closed chan struct{} // closed by Close or a permanent failure

	q struct {
		sync.Mutex // guards the fields below
		msgs       []*Message
		err        error // set before closed is closed
	}
	closeOnce sync.Once
}

// Subscribe creates a consumer on opts.Topic (every partition of it, if partitioned).
func (cl *Client) Subscribe(ctx context.Context, opts ConsumerOptions) (*Consumer, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	full, err := fullTopicName(opts.Topic)
	if err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("magnetar-consumer-%d", cl.nextID())
	}
	n, err := cl.PartitionedMetadata(ctx, full)
	if err != nil {
		return nil, err
	}
	cons := &Consumer{cl: cl, topic: full, opts: opts, notify: make(chan struct{}, 1), closed: make(chan struct{})}
	names, parts := []string{full}, []int32{-1}
	if n > 0 {
		names, parts = make([]string, n), make([]int32, n)
		for i := range n {
			names[i], parts[i] = partitionName(full, i), int32(i)
		}
	}
	for i, name := range names {
		pc := &partConsumer{cons: cons, cl: cl, topic: name, partition: parts[i], id: cl.nextID()}
		cons.parts = append(cons.parts, pc)
		sctx, cancel := cl.opContext(ctx)
		err := pc.subscribe(sctx)
		cancel()
		if err != nil {
			cons.shutdown(context.Background(), err)
			return nil, err
		}
	}
	if err := cl.track(cons); err != nil {
		cons.shutdown(context.Background(), err)
		return nil, err
	}
	return cons, nil
}

// Topic returns the consumer's topic, fully qualified.
func (c *Consumer) Topic() string { return c.topic }

// Receive returns the next message, waiting until one arrives, ctx ends or the consumer
// closes.
func (c *Consumer) Receive(ctx context.Context) (*Message, error) {
	for {
		c.q.Lock()
		if len(c.q.msgs) > 0 {
			m := c.q.msgs[0]
			c.q.msgs[0] = nil
			c.q.msgs = c.q.msgs[1:]
			more := len(c.q.msgs) > 0
			c.q.Unlock()
			if more {
				c.signal() // another Receive may be waiting
			}
			m.cons.consumed(1)
			return m, nil
		}
		err := c.q.err
		c.q.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.closed:
		}
	}
}

func (c *Consumer) signal() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *Consumer) push(msgs []*Message) {
	c.q.Lock()
	c.q.msgs = append(c.q.msgs, msgs...)
	c.q.Unlock()
	c.signal()
}

// purge drops the queued messages of one partition (they were not acknowledged, so the
// broker delivers them again after the resubscription).
func (c *Consumer) purge(pc *partConsumer) {
	c.q.Lock()
	kept := c.q.msgs[:0]
	for _, m := range c.q.msgs {
		if m.cons != pc {
			kept = append(kept, m)
		}
	}
	clear(c.q.msgs[len(kept):])
	c.q.msgs = kept
	c.q.Unlock()
}

// Ack acknowledges one message. The messages of a batch entry are acknowledged to the
// broker together, once all of them are.
func (c *Consumer) Ack(m *Message) error {
	if m.cons == nil || m.cons.cons != c {
		return errors.New("pulsarclient: message is not from this consumer")
	}
	if m.batch != nil && m.batch.remaining.Add(-1) > 0 {
		return nil
	}
	return m.cons.ack(m.ID.entryData(), false)
}

// AckCumulative acknowledges m and every message before it on its partition (not allowed
// on Shared and Key_Shared subscriptions).
func (c *Consumer) AckCumulative(m *Message) error {
	if m.cons == nil || m.cons.cons != c {
		return errors.New("pulsarclient: message is not from this consumer")
	}
	if c.opts.Type == Shared || c.opts.Type == KeyShared {
		return fmt.Errorf("pulsarclient: cumulative ack is not allowed on %v subscriptions", c.opts.Type)
	}
	id := m.ID
	if m.batch != nil && id.BatchIndex < m.batch.size-1 {
		// The entry is not wholly acknowledged yet: acknowledge up to the entry before it.
		if id.EntryID == 0 {
			return nil
		}
		id.EntryID--
	}
	return m.cons.ack(id.entryData(), true)
}

// Close sends the pending acknowledgements and closes the consumer on the broker; Receive
// then returns ErrClosed. Close is idempotent.
func (c *Consumer) Close(ctx context.Context) error {
	return c.shutdown(ctx, ErrClosed)
}

// Unsubscribe deletes the subscription on the broker and closes the consumer.
func (c *Consumer) Unsubscribe(ctx context.Context) error {
	var errs []error
	for _, pc := range c.parts {
		errs = append(errs, pc.unsubscribe(ctx))
	}
	errs = append(errs, c.Close(ctx))
	return errors.Join(errs...)
}

func (c *Consumer) forceClose() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.shutdown(ctx, ErrClosed)
}

func (c *Consumer) shutdown(ctx context.Context, cause error) error {
	var err error
	c.closeOnce.Do(func() {
		c.cl.untrack(c)
		var errs []error
		for _, pc := range c.parts {
			errs = append(errs, pc.close(ctx))
		}
		err = errors.Join(errs...)
		c.q.Lock()
		c.q.err = cause
		c.q.Unlock()
		close(c.closed)
	})
	return err
}

// consumerState is the lifecycle of one partition's consumer.
type consumerState int

const (
	// consumerSubscribing: the SUBSCRIBE is in flight (initial state).
	consumerSubscribing consumerState = iota
	// consumerReady: subscribed on conn; messages are accepted.
	consumerReady
	// consumerReconnecting: the connection or the subscription was lost; messages from the
	// old incarnation are dropped and a goroutine subscribes again.
	consumerReconnecting
	// consumerClosed: final.
	consumerClosed
)

func (s consumerState) String() string {
	switch s {
	case consumerSubscribing:
		return "Subscribing"
	case consumerReady:
		return "Ready"
	case consumerReconnecting:
		return "Reconnecting"
	case consumerClosed:
		return "Closed"
	}
	return fmt.Sprintf("consumerState(%d)", int(s))
}

// partConsumer is the consumer of one topic or partition. Its small state is guarded by mu
// (lock order: partConsumer.mu, then the connection's locks); messages go straight from
// the connection's reader goroutine to the Consumer's queue.
type partConsumer struct {
	// Immutable.
	cons      *Consumer
	cl        *Client
	topic     string
	partition int32
	id        uint64
	// endOfTopic: the broker said the subscription reached the end of the terminated topic.
	endOfTopic atomic.Bool

	mu struct {
		sync.Mutex // guards the fields below
		state      consumerState
		conn       *conn
		epoch      int
		// consumed counts the messages handed to the application since the last FLOW.
		consumed   int
		acks       []*pb.MessageIdData
		cumulative *pb.MessageIdData
		ackTimer   *time.Timer
	}
}

// consumerEdges are the legal transitions of a partConsumer.
var consumerEdges = fsm.Edges[consumerState]{
	consumerSubscribing:  {consumerReady, consumerClosed},
	consumerReady:        {consumerReconnecting, consumerClosed},
	consumerReconnecting: {consumerReady, consumerClosed},
}

// becomeLocked moves to state to, refusing illegal transitions.
func (pc *partConsumer) becomeLocked(to consumerState) bool {
	ok := consumerEdges.Legal(pc.mu.state, to)
	if ok {
		pc.mu.state = to
	}
	return ok
}

// subscribe registers the consumer on the topic's broker and grants the initial permits.
func (pc *partConsumer) subscribe(ctx context.Context) error {
	o := &pc.cons.opts
	c, err := pc.cl.topicConn(ctx, pc.topic)
	if err != nil {
		return err
	}
	if err := c.addConsumer(pc.id, pc); err != nil {
		return err
	}
	rid := pc.cl.nextID()
	sub := &pb.CommandSubscribe{
		Topic: proto.String(pc.topic), Subscription: proto.String(o.Subscription),
		SubType: pb.CommandSubscribe_SubType(o.Type).Enum(), ConsumerId: proto.Uint64(pc.id),
		RequestId: proto.Uint64(rid), ConsumerName: proto.String(o.Name), Durable: proto.Bool(!o.NonDurable),
		InitialPosition: pb.CommandSubscribe_InitialPosition(o.InitialPosition).Enum(),
	}
	if o.StartMessageID != nil {
		sub.StartMessageId = o.StartMessageID.entryData()
	}
	md := o.Properties
	if o.metadata != nil {
		md = o.metadata()
	}
	for _, k := range slices.Sorted(maps.Keys(md)) {
		sub.Metadata = append(sub.Metadata, &pb.KeyValue{Key: proto.String(k), Value: proto.String(md[k])})
	}
	if _, err := c.request(ctx, rid, pulsar.Wrap(sub)); err != nil {
		c.removeConsumer(pc.id)
		var se *ServerError
		if !errors.As(err, &se) {
			// Given up (ctx) with the SUBSCRIBE sent: the broker may make the consumer, which
			// would hold an exclusive subscription; closing the id makes it close it.
			_ = pc.closeOnBroker(context.Background(), c, false)
		}
		return fmt.Errorf("subscribe %s on %s: %w", o.Subscription, pc.topic, err)
	}
	pc.mu.Lock()
	if !pc.becomeLocked(consumerReady) {
		pc.mu.Unlock()
		c.removeConsumer(pc.id)
		pc.closeOnBroker(context.Background(), c, false)
		return ErrClosed
	}
	pc.mu.conn = c
	pc.mu.consumed = 0
	pc.flushAcksLocked() // acknowledgements made while reconnecting
	pc.mu.Unlock()
	return c.write(pulsar.Wrap(&pb.CommandFlow{ConsumerId: proto.Uint64(pc.id), MessagePermits: proto.Uint32(uint32(o.ReceiverQueueSize))}))
}

// consumed records n messages handed to the application (or skipped) and grants the broker
// more permits once half the queue is used.
func (pc *partConsumer) consumed(n int) {
	pc.mu.Lock()
	pc.mu.consumed += n
	if pc.mu.consumed < max(1, pc.cons.opts.ReceiverQueueSize/2) || pc.mu.state != consumerReady {
		pc.mu.Unlock()
		return
	}
	permits := pc.mu.consumed
	pc.mu.consumed = 0
	c := pc.mu.conn
	pc.mu.Unlock()
	_ = c.write(pulsar.Wrap(&pb.CommandFlow{ConsumerId: proto.Uint64(pc.id), MessagePermits: proto.Uint32(uint32(permits))}))
}

func (pc *partConsumer) ack(id *pb.MessageIdData, cumulative bool) error {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.mu.state == consumerClosed {
		return ErrClosed
	}
	if cumulative {
		pc.mu.cumulative = id
	} else {
		pc.mu.acks = append(pc.mu.acks, id)
	}
	o := &pc.cons.opts
	if o.AckGroupingTime < 0 || len(pc.mu.acks) >= o.AckGroupingMaxSize {
		pc.flushAcksLocked()
	} else if pc.mu.ackTimer == nil {
		pc.mu.ackTimer = time.AfterFunc(o.AckGroupingTime, func() {
			pc.mu.Lock()
			pc.mu.ackTimer = nil
			pc.flushAcksLocked()
			pc.mu.Unlock()
		})
	}
	return nil
}

// flushAcksLocked sends the collected acknowledgements, if connected (they wait for the
// resubscription otherwise).
func (pc *partConsumer) flushAcksLocked() {
	c := pc.mu.conn
	if c == nil || pc.mu.state != consumerReady {
		return
	}
	if pc.mu.ackTimer != nil {
		pc.mu.ackTimer.Stop()
		pc.mu.ackTimer = nil
	}
	if len(pc.mu.acks) > 0 {
		_ = c.write(pulsar.Wrap(&pb.CommandAck{ConsumerId: proto.Uint64(pc.id),
			AckType: pb.CommandAck_Individual.Enum(), MessageId: pc.mu.acks}))
		pc.mu.acks = nil
	}
	if pc.mu.cumulative != nil {
		_ = c.write(pulsar.Wrap(&pb.CommandAck{ConsumerId: proto.Uint64(pc.id),
			AckType: pb.CommandAck_Cumulative.Enum(), MessageId: []*pb.MessageIdData{pc.mu.cumulative}}))
		pc.mu.cumulative = nil
	}
}

// The connConsumer methods run on a connection's reader goroutine.

func (pc *partConsumer) onMessage(c *conn, f *pulsar.Frame) {
	pc.mu.Lock()
	current := pc.mu.conn == c && pc.mu.state == consumerReady
	pc.mu.Unlock()
	if !current {
		return
	}
	msgs, skipped, err := pc.decode(f, c.maxMessageSize)
	if err != nil {
		pc.cl.log.Warn("pulsarclient: undecodable message, skipped", "topic", pc.topic, "err", err)
		skipped++
	}
	if len(msgs) > 0 {
		pc.cons.push(msgs)
	}
	if skipped > 0 {
		pc.consumed(skipped)
	}
}

func (pc *partConsumer) onCorrupt(c *conn, m *pb.CommandMessage, err error) {
	pc.cl.log.Warn("pulsarclient: message with a bad checksum, acknowledged as corrupt", "topic", pc.topic, "err", err)
	_ = c.write(pulsar.Wrap(&pb.CommandAck{ConsumerId: proto.Uint64(pc.id), AckType: pb.CommandAck_Individual.Enum(),
		MessageId:       []*pb.MessageIdData{{LedgerId: m.MessageId.LedgerId, EntryId: m.MessageId.EntryId}},
		ValidationError: pb.CommandAck_ChecksumMismatch.Enum()}))
	pc.consumed(1)
}

func (pc *partConsumer) onClosed(c *conn, err error) {
	pc.mu.Lock()
	if pc.mu.conn != c || !pc.becomeLocked(consumerReconnecting) {
		pc.mu.Unlock()
		return
	}
	pc.mu.conn = nil
	pc.mu.epoch++
	epoch := pc.mu.epoch
	pc.mu.Unlock()
	pc.cons.purge(pc)
	go pc.reconnect(epoch, err)
}

// reconnect subscribes again with backoff until it works, the consumer closes, or the
// error is permanent (then the consumer fails with it).
func (pc *partConsumer) reconnect(epoch int, cause error) {
	pc.cl.log.Info("pulsarclient: consumer reconnecting", "topic", pc.topic, "cause", cause)
	b := backoff.Retry{Policy: reconnectBackoff}
	for {
		select {
		case <-time.After(b.Next()):
		case <-pc.cons.closed:
			return
		}
		ctx, cancel := pc.cl.opContext(context.Background())
		go func() {
			select {
			case <-pc.cons.closed:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := pc.resubscribe(ctx, epoch)
		cancel()
		if err == nil {
			pc.cl.log.Debug("pulsarclient: consumer resubscribed", "topic", pc.topic)
			return
		}
		if errors.Is(err, ErrClosed) {
			return
		}
		if !retriable(err) {
			pc.cl.log.Warn("pulsarclient: consumer failed", "topic", pc.topic, "err", err)
			go pc.cons.shutdown(context.Background(), err)
			return
		}
		pc.cl.log.Debug("pulsarclient: consumer resubscribe failed, retrying", "topic", pc.topic, "err", err)
	}
}

func (pc *partConsumer) resubscribe(ctx context.Context, epoch int) error {
	pc.mu.Lock()
	if pc.mu.epoch != epoch || pc.mu.state != consumerReconnecting {
		pc.mu.Unlock()
		return ErrClosed
	}
	pc.mu.Unlock()
	return pc.subscribe(ctx)
}

// decode turns a MESSAGE frame into messages; skipped counts the batch messages dropped
// (already acknowledged, or before a reader's start). A compressed payload may not claim
// more than limit bytes uncompressed (the broker's max_message_size, as Pulsar's clients).
func (pc *partConsumer) decode(f *pulsar.Frame, limit int) (msgs []*Message, skipped int, err error) {
	cmd, meta := f.Cmd.Message, f.Metadata
	payload, err := decompress(meta, f.Payload, limit)
	if err != nil {
		return nil, 0, err
	}
	mid := cmd.GetMessageId()
	base := Message{
		ProducerName: meta.GetProducerName(), SequenceID: int64(meta.GetSequenceId()),
		PublishTime: msTime(meta.GetPublishTime()), RedeliveryCount: cmd.GetRedeliveryCount(), Topic: pc.topic,
		cons: pc,
	}
	if !pulsar.IsBatch(meta) {
		m := base
		m.ID = idFromData(mid, pc.partition, -1)
		if pc.beforeStart(m.ID) {
			return nil, 1, nil
		}
		m.Payload, m.Key, m.Properties, m.EventTime = payload, meta.GetPartitionKey(), kvMap(meta.Properties), msTime(meta.GetEventTime())
		return []*Message{&m}, 0, nil
	}
	n := pulsar.NumMessages(meta)
	singles, err := pulsar.ParseBatch(payload, n)
	if err != nil {
		return nil, n - 1, err
	}
	ba := &batchAcks{size: int32(n)}
	ba.remaining.Store(int32(n))
	ackSet := cmd.GetAckSet()
	msgs = make([]*Message, 0, n)
	for i, sm := range singles {
		id := idFromData(mid, pc.partition, int32(i))
		if acked(ackSet, i) || pc.beforeStart(id) {
			ba.remaining.Add(-1)
			skipped++
			continue
		}
		m := base
		m.ID, m.Payload, m.Key, m.Properties = id, sm.Payload, sm.Metadata.GetPartitionKey(), kvMap(sm.Metadata.Properties)
		m.EventTime, m.batch = msTime(sm.Metadata.GetEventTime()), ba
		m.SequenceID += int64(i)
		if sm.Metadata.SequenceId != nil {
			m.SequenceID = int64(sm.Metadata.GetSequenceId())
		}
		msgs = append(msgs, &m)
	}
	return msgs, skipped, nil
}

// acked reports whether batch index i is marked acknowledged in a MESSAGE's ack set (a set
// bit means "not acknowledged"; no ack set means none is).
func acked(ackSet []int64, i int) bool {
	if len(ackSet) == 0 {
		return false
	}
	w := i / 64
	return w >= len(ackSet) || ackSet[w]&(1<<(i%64)) == 0
}

// beforeStart reports whether a reader must skip id (at or before its start id).
func (pc *partConsumer) beforeStart(id MessageID) bool {
	s := pc.cons.opts.StartMessageID
	if s == nil || *s == EarliestMessageID || *s == LatestMessageID {
		return false
	}
	if id.LedgerID != s.LedgerID {
		return id.LedgerID < s.LedgerID
	}
	if id.EntryID != s.EntryID {
		return id.EntryID < s.EntryID
	}
	if s.BatchIndex < 0 { // the start is a whole entry
		return !pc.cons.opts.StartInclusive
	}
	if pc.cons.opts.StartInclusive {
		return id.BatchIndex < s.BatchIndex
	}
	return id.BatchIndex <= s.BatchIndex
}

// close flushes acknowledgements and closes the consumer on the broker.
func (pc *partConsumer) close(ctx context.Context) error {
	pc.mu.Lock()
	pc.flushAcksLocked()
	c := pc.mu.conn
	wasReady := pc.mu.state == consumerReady
	pc.becomeLocked(consumerClosed)
	pc.mu.conn = nil
	if pc.mu.ackTimer != nil {
		pc.mu.ackTimer.Stop()
		pc.mu.ackTimer = nil
	}
	pc.mu.Unlock()
	if c == nil || !wasReady {
		return nil
	}
	c.removeConsumer(pc.id)
	return pc.closeOnBroker(ctx, c, true)
}

func (pc *partConsumer) closeOnBroker(ctx context.Context, c *conn, wait bool) error {
	rid := pc.cl.nextID()
	cmd := pulsar.Wrap(&pb.CommandCloseConsumer{ConsumerId: proto.Uint64(pc.id), RequestId: proto.Uint64(rid)})
	if !wait {
		return c.write(cmd)
	}
	_, err := c.request(ctx, rid, cmd)
	if errors.Is(err, ErrConnectionClosed) {
		return nil
	}
	return err
}

func (pc *partConsumer) unsubscribe(ctx context.Context) error {
	pc.mu.Lock()
	c := pc.mu.conn
	pc.mu.Unlock()
	if c == nil {
		return fmt.Errorf("unsubscribe from %s: %w", pc.topic, ErrConnectionClosed)
	}
	rid := pc.cl.nextID()
	_, err := c.request(ctx, rid, pulsar.Wrap(&pb.CommandUnsubscribe{ConsumerId: proto.Uint64(pc.id), RequestId: proto.Uint64(rid)}))
	if err != nil {
		return fmt.Errorf("unsubscribe from %s: %w", pc.topic, err)
	}
	return nil
}
