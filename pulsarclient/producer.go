package pulsarclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// AccessMode is a producer's access mode (pb.ProducerAccessMode).
type AccessMode int

const (
	// AccessShared lets several producers publish to the topic.
	AccessShared AccessMode = iota
	// AccessExclusive fails (ProducerBusy/ProducerFenced) if another producer is connected.
	AccessExclusive
	// AccessWaitForExclusive waits until the producer is the only one.
	AccessWaitForExclusive
)

// ProducerOptions configures a Producer. Zero values take the documented defaults.
type ProducerOptions struct {
	Topic string
	// Name is the producer name; "" lets the broker assign one. Deduplication keys on it.
	Name       string
	AccessMode AccessMode
	Properties map[string]string
	// DisableBatching sends every message as its own entry.
	DisableBatching bool
	// BatchingMaxMessages bounds the messages of one batch entry. Default 1000.
	BatchingMaxMessages int
	// BatchingMaxBytes bounds the payload bytes of one batch entry. Default 128 KiB.
	BatchingMaxBytes int
	// BatchingMaxDelay is how long the first message of a batch may wait for more. Default
	// 1 ms. A batch does not wait at all while fewer than BatchingMaxInFlight of the
	// producer's entries are in flight, and is sent when one in flight is acknowledged: at
	// low rates messages wait for the broker, not for a timer (Go's timers fire no sooner
	// than about 1 ms, often 2–3 ms, on a busy machine). Send (the synchronous call) never
	// waits: it flushes its batch at once.
	BatchingMaxDelay time.Duration
	// MaxPendingMessages bounds the messages sent and not yet acknowledged (across
	// partitions); SendAsync blocks when it is reached. Default 1000.
	MaxPendingMessages int
	// BatchingMaxInFlight is how many entries may be in flight before a batch that is not
	// full waits to gather more (for BatchingMaxDelay, or until one is acknowledged).
	// Below it, a batch goes as soon as the producer has taken every message queued for
	// it. Default 16; 1 sends a partial batch only when nothing is in flight.
	BatchingMaxInFlight int
}

// DefaultBatchingMaxInFlight is ProducerOptions.BatchingMaxInFlight's default.
const DefaultBatchingMaxInFlight = 16

func (o *ProducerOptions) setDefaults() error {
	if o.BatchingMaxMessages <= 0 {
		o.BatchingMaxMessages = 1000
	}
	if o.BatchingMaxBytes <= 0 {
		o.BatchingMaxBytes = 128 << 10
	}
	if o.BatchingMaxDelay <= 0 {
		o.BatchingMaxDelay = time.Millisecond
	}
	if o.MaxPendingMessages <= 0 {
		o.MaxPendingMessages = 1000
	}
	if o.BatchingMaxInFlight <= 0 {
		o.BatchingMaxInFlight = DefaultBatchingMaxInFlight
	}
	if o.AccessMode < AccessShared || o.AccessMode > AccessWaitForExclusive {
		return fmt.Errorf("pulsarclient: invalid access mode %d", o.AccessMode)
	}
	return nil
}

// Producer publishes to a topic; for a partitioned topic it routes messages to partitions
// (by key hash, or round robin). It is safe for concurrent use.
type Producer struct {
	cl    *Client
	topic string
	parts []*partProducer
	// slots holds one token per pending message (capacity MaxPendingMessages).
	slots     chan struct{}
	rr        atomic.Uint64
	batchSize uint64
	closeOnce sync.Once
	closeErr  error
}

// CreateProducer creates a producer on opts.Topic (every partition of it, if partitioned).
func (cl *Client) CreateProducer(ctx context.Context, opts ProducerOptions) (*Producer, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	full, err := fullTopicName(opts.Topic)
	if err != nil {
		return nil, err
	}
	n, err := cl.PartitionedMetadata(ctx, full)
	if err != nil {
		return nil, err
	}
	p := &Producer{cl: cl, topic: full, slots: make(chan struct{}, opts.MaxPendingMessages),
		batchSize: uint64(opts.BatchingMaxMessages)}
	if opts.DisableBatching {
		p.batchSize = 1
	}
	names, parts := []string{full}, []int32{-1}
	if n > 0 {
		names, parts = make([]string, n), make([]int32, n)
		for i := range n {
			names[i], parts[i] = partitionName(full, i), int32(i)
		}
	}
	for i, name := range names {
		pp, err := newPartProducer(ctx, cl, p.slots, name, parts[i], opts)
		if err != nil {
			p.forceClose()
			return nil, err
		}
		p.parts = append(p.parts, pp)
	}
	if err := cl.track(p); err != nil {
		p.forceClose()
		return nil, err
	}
	return p, nil
}

// Topic returns the producer's topic, fully qualified.
func (p *Producer) Topic() string { return p.topic }

// Name returns the producer name (of the first partition).
func (p *Producer) Name() string { return p.parts[0].name.Load().(string) }

// route picks the partition for msg.
func (p *Producer) route(msg *ProducerMessage) *partProducer {
	if len(p.parts) == 1 {
		return p.parts[0]
	}
	if msg.Key != "" {
		return p.parts[int(javaStringHash(msg.Key)&0x7fffffff)%len(p.parts)]
	}
	// Round robin, switching partition once per batch so that batches stay full.
	return p.parts[int(p.rr.Add(1)/p.batchSize)%len(p.parts)]
}

// javaStringHash is Java's String.hashCode, the Pulsar clients' default key hashing.
func javaStringHash(s string) int32 {
	var h int32
	for _, r := range s {
		h = 31*h + int32(r)
	}
	return h
}

// SendAsync queues msg and returns once it is queued; cb is called with its id or error when
// the broker acknowledged it durably (or it failed). SendAsync blocks while
// MaxPendingMessages are pending, until ctx ends. cb runs on the producer's goroutine: it
// must be quick and must not call Send, SendAsync or Flush of the same producer.
func (p *Producer) SendAsync(ctx context.Context, msg *ProducerMessage, cb func(MessageID, error)) error {
	return p.send(ctx, &sendReq{msg: msg, cb: cb})
}

// Send publishes msg and waits for the broker's acknowledgement. It does not wait for more
// messages to batch with.
func (p *Producer) Send(ctx context.Context, msg *ProducerMessage) (MessageID, error) {
	type result struct {
		id  MessageID
		err error
	}
	ch := make(chan result, 1)
	err := p.send(ctx, &sendReq{msg: msg, flush: true, cb: func(id MessageID, err error) { ch <- result{id, err} }})
	if err != nil {
		return MessageID{}, err
	}
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return MessageID{}, ctx.Err()
	}
}

func (p *Producer) send(ctx context.Context, r *sendReq) error {
	if r.msg == nil {
		return errors.New("pulsarclient: nil message")
	}
	pp := p.route(r.msg)
	if err := pp.failed(); err != nil {
		return err
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-pp.done:
		return pp.failed()
	}
	select {
	case pp.sendc <- r:
		select {
		case <-pp.done:
			// run returned (or is returning) and will not take r: fail what is left.
			pp.drainSends()
		default:
		}
		return nil
	case <-pp.done:
		<-p.slots
		return pp.failed()
	}
}

// Flush sends the messages waiting in batches and waits until every message queued before
// the call is acknowledged or failed.
func (p *Producer) Flush(ctx context.Context) error {
	var errs []error
	for _, pp := range p.parts {
		errs = append(errs, pp.flush(ctx))
	}
	return errors.Join(errs...)
}

// Close flushes pending messages (waiting at most until ctx ends), then closes the producer
// on the broker. Messages still pending fail with ErrClosed. Close is idempotent.
func (p *Producer) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.cl.untrack(p)
		ferr := p.Flush(ctx)
		var errs []error
		for _, pp := range p.parts {
			errs = append(errs, pp.close(ctx))
		}
		if ferr != nil && ctx.Err() != nil {
			errs = append(errs, ferr)
		}
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}

// forceClose stops every partition at once, failing pending messages with ErrClosed.
func (p *Producer) forceClose() {
	p.closeOnce.Do(func() {
		p.cl.untrack(p)
		for _, pp := range p.parts {
			pp.stop()
		}
		p.closeErr = ErrClosed
	})
}

// producerState is the lifecycle of one partition's producer.
type producerState int

const (
	// producerReady: registered on a connection; sends are written at once.
	producerReady producerState = iota
	// producerReconnecting: the connection or the registration was lost; sends are kept
	// (pending entries are re-sent in order once registered again).
	producerReconnecting
	// producerClosed: closed or failed for good (final).
	producerClosed
)

func (s producerState) String() string {
	switch s {
	case producerReady:
		return "Ready"
	case producerReconnecting:
		return "Reconnecting"
	case producerClosed:
		return "Closed"
	}
	return fmt.Sprintf("producerState(%d)", int(s))
}

type sendReq struct {
	msg   *ProducerMessage
	cb    func(MessageID, error)
	flush bool
}

// pendingEntry is an entry sent and not yet acknowledged. frame is kept to re-send it after
// a reconnection.
type pendingEntry struct {
	seq     uint64
	batched bool
	reqs    []*sendReq
	frame   []byte
	waiters []chan error // Flush calls waiting for this entry (the last one when they came)
}

type prodEventKind int

const (
	evReceipt prodEventKind = iota
	evSendError
	evConnClosed
	evReconnected
	evReconnectFailed
)

// prodEvent is something that happened to a producer partition, handled by its goroutine.
type prodEvent struct {
	kind    prodEventKind
	c       *conn
	receipt *pb.CommandSendReceipt
	sendErr *pb.CommandSendError
	err     error
}

// partProducer is the producer of one topic or partition. One goroutine (run) owns its
// state; SendAsync, Flush, Close, the connection's reader and the reconnect goroutine talk
// to it through channels.
type partProducer struct {
	// Immutable after newPartProducer.
	cl        *Client
	topic     string
	partition int32
	id        uint64
	opts      ProducerOptions
	slots     chan struct{}

	sendc  chan *sendReq
	events chan prodEvent
	flushc chan chan error
	stopc  chan struct{} // closed by stop
	done   chan struct{} // closed when run returns
	stopMu sync.Once

	name    atomic.Value // string: the broker-assigned or given name
	failure atomic.Pointer[error]

	// Owned by run; lastConn is read by close after done is closed.
	state      producerState
	conn       *conn
	lastConn   *conn
	epoch      uint64
	nextSeq    uint64
	maxMsgSize int
	batch      []*sendReq
	batchBytes int
	batchKey   string
	pending    []*pendingEntry // ring-free FIFO: pending[0] is the oldest
	timer      *time.Timer
	timerOn    bool
	gathering  bool // gather is filling the batch: no partial batch goes per message
	scratch    []byte
}

func newPartProducer(ctx context.Context, cl *Client, slots chan struct{}, topic string, partition int32, opts ProducerOptions) (*partProducer, error) {
	pp := &partProducer{cl: cl, topic: topic, partition: partition, id: cl.nextID(), opts: opts, slots: slots,
		sendc: make(chan *sendReq, opts.MaxPendingMessages), events: make(chan prodEvent, 256),
		flushc: make(chan chan error), stopc: make(chan struct{}), done: make(chan struct{})}
	pp.name.Store(opts.Name)
	cctx := ctx
	if opts.AccessMode != AccessWaitForExclusive {
		var cancel context.CancelFunc
		cctx, cancel = cl.opContext(ctx)
		defer cancel()
	}
	c, resp, err := pp.connect(cctx, opts.Name, 0)
	if err != nil {
		return nil, err
	}
	pp.conn, pp.lastConn, pp.maxMsgSize = c, c, c.maxMessageSize
	pp.name.Store(resp.GetProducerName())
	pp.nextSeq = uint64(resp.GetLastSequenceId() + 1)
	pp.timer = time.NewTimer(time.Hour)
	pp.timer.Stop()
	go pp.run()
	return pp, nil
}

// connect looks the topic up and registers the producer on its broker. It runs outside the
// owner goroutine, so it takes the name and epoch as arguments.
func (pp *partProducer) connect(ctx context.Context, name string, epoch uint64) (*conn, *pb.CommandProducerSuccess, error) {
	c, err := pp.cl.topicConn(ctx, pp.topic)
	if err != nil {
		return nil, nil, err
	}
	if err := c.addProducer(pp.id, pp); err != nil {
		return nil, nil, err
	}
	rid := pp.cl.nextID()
	cmd := &pb.CommandProducer{
		Topic: proto.String(pp.topic), ProducerId: proto.Uint64(pp.id), RequestId: proto.Uint64(rid),
		Epoch: proto.Uint64(epoch), Metadata: kvList(pp.opts.Properties),
		ProducerAccessMode:       pb.ProducerAccessMode(pp.opts.AccessMode).Enum(),
		UserProvidedProducerName: proto.Bool(pp.opts.Name != ""),
		InitialSubscriptionName:  proto.String(""),
	}
	if name != "" {
		cmd.ProducerName = proto.String(name)
	}
	resp, err := c.request(ctx, rid, pulsar.Wrap(cmd))
	if err != nil {
		c.removeProducer(pp.id)
		if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
			return nil, nil, fmt.Errorf("create producer on %s: %w", pp.topic, err)
		}
		// The request may still succeed on the broker: close it there.
		pp.closeOnBroker(c)
		return nil, nil, fmt.Errorf("create producer on %s: %w", pp.topic, err)
	}
	ps := resp.GetProducerSuccess()
	if ps == nil {
		c.removeProducer(pp.id)
		return nil, nil, fmt.Errorf("%w: answer to PRODUCER is %v", ErrProtocol, resp.GetType())
	}
	return c, ps, nil
}

// closeOnBroker sends CLOSE_PRODUCER without waiting for the answer.
func (pp *partProducer) closeOnBroker(c *conn) {
	_ = c.write(pulsar.Wrap(&pb.CommandCloseProducer{ProducerId: proto.Uint64(pp.id), RequestId: proto.Uint64(pp.cl.nextID())}))
}

// failed returns the error that closed the producer, nil while it is open.
func (pp *partProducer) failed() error {
	if e := pp.failure.Load(); e != nil {
		return *e
	}
	select {
	case <-pp.done:
		return ErrClosed
	default:
		return nil
	}
}

// The connProducer methods run on a connection's reader goroutine.

func (pp *partProducer) onReceipt(c *conn, r *pb.CommandSendReceipt) {
	pp.event(prodEvent{kind: evReceipt, c: c, receipt: r})
}

func (pp *partProducer) onSendError(c *conn, e *pb.CommandSendError) {
	pp.event(prodEvent{kind: evSendError, c: c, sendErr: e})
}

func (pp *partProducer) onClosed(c *conn, err error) {
	pp.event(prodEvent{kind: evConnClosed, c: c, err: err})
}

func (pp *partProducer) event(ev prodEvent) {
	select {
	case pp.events <- ev:
	case <-pp.done:
	}
}

func (pp *partProducer) run() {
	defer close(pp.done)
	for pp.state != producerClosed {
		var timerC <-chan time.Time
		if pp.timerOn {
			timerC = pp.timer.C
		}
		select {
		case r := <-pp.sendc:
			// Take what is queued behind r before sending, so that a burst goes as one batch.
			if pp.gather(r); pp.canSend() {
				pp.flushBatch()
			}
		case ev := <-pp.events:
			pp.handle(ev)
		case <-timerC:
			pp.timerOn = false
			pp.flushBatch()
		case w := <-pp.flushc:
			// Every SendAsync that returned before Flush was called has its message in
			// sendc: take them all first, so that the flush covers them.
			pp.gather(nil)
			pp.flushBatch()
			if len(pp.pending) == 0 {
				w <- nil
			} else {
				last := pp.pending[len(pp.pending)-1]
				last.waiters = append(last.waiters, w)
			}
		case <-pp.stopc:
			pp.fail(ErrClosed)
		}
	}
}

// add takes one message into the current batch (or sends it alone).
func (pp *partProducer) add(r *sendReq) {
	if size := len(r.msg.Payload); size > pp.maxMsgSize {
		pp.complete(r, MessageID{}, fmt.Errorf("%w: %d bytes, the broker's limit is %d", ErrMessageTooLarge, size, pp.maxMsgSize))
		return
	}
	if pp.opts.DisableBatching || r.msg.DeliverAfter > 0 {
		pp.flushBatch()
		pp.sendSingle(r)
		return
	}
	if len(pp.batch) > 0 && (r.msg.Key != pp.batchKey || pp.batchBytes+len(r.msg.Payload) > pp.opts.BatchingMaxBytes) {
		pp.flushBatch()
	}
	pp.batch = append(pp.batch, r)
	pp.batchBytes += len(r.msg.Payload)
	if len(pp.batch) == 1 {
		pp.batchKey = r.msg.Key
		pp.timer.Reset(pp.opts.BatchingMaxDelay)
		pp.timerOn = true
	}
	if r.flush || len(pp.batch) >= pp.opts.BatchingMaxMessages || pp.batchBytes >= pp.opts.BatchingMaxBytes ||
		pp.canSend() {
		pp.flushBatch()
	}
}

// canSend tells whether a batch that is not full goes at once: the producer is not taking
// queued messages, and fewer than BatchingMaxInFlight entries are in flight (see
// BatchingMaxDelay).
func (pp *partProducer) canSend() bool {
	return !pp.gathering && len(pp.pending) < pp.opts.BatchingMaxInFlight && pp.conn != nil
}

// gather adds first (if not nil) and every message already queued in sendc to the batch,
// sending only what the batch limits make it send.
func (pp *partProducer) gather(first *sendReq) {
	pp.gathering = true
	defer func() { pp.gathering = false }()
	if first != nil {
		pp.add(first)
	}
	for {
		select {
		case r := <-pp.sendc:
			pp.add(r)
		default:
			return
		}
	}
}

// flushBatch sends the current batch as one entry.
func (pp *partProducer) flushBatch() {
	if len(pp.batch) == 0 {
		return
	}
	if pp.timerOn {
		pp.timer.Stop()
		pp.timerOn = false
	}
	reqs := pp.batch
	pp.batch, pp.batchBytes = nil, 0
	seq := pp.nextSeq
	pp.nextSeq += uint64(len(reqs))
	payload := pp.scratch[:0]
	var err error
	for i, r := range reqs {
		smm := &pb.SingleMessageMetadata{Properties: kvList(r.msg.Properties), SequenceId: proto.Uint64(seq + uint64(i))}
		if r.msg.Key != "" {
			smm.PartitionKey = proto.String(r.msg.Key)
		}
		if !r.msg.EventTime.IsZero() {
			smm.EventTime = proto.Uint64(uint64(r.msg.EventTime.UnixMilli()))
		}
		if payload, err = pulsar.AppendBatchMessage(payload, smm, r.msg.Payload); err != nil {
			break
		}
	}
	pp.scratch = payload
	if err != nil {
		for _, r := range reqs {
			pp.complete(r, MessageID{}, err)
		}
		return
	}
	meta := pp.metadata(seq)
	meta.NumMessagesInBatch = proto.Int32(int32(len(reqs)))
	if pp.batchKey != "" {
		meta.PartitionKey = proto.String(pp.batchKey)
	}
	send := &pb.CommandSend{ProducerId: proto.Uint64(pp.id), SequenceId: proto.Uint64(seq), NumMessages: proto.Int32(int32(len(reqs)))}
	if len(reqs) > 1 {
		send.HighestSequenceId = proto.Uint64(seq + uint64(len(reqs)) - 1)
		meta.HighestSequenceId = send.HighestSequenceId
	}
	pp.sendEntry(&pendingEntry{seq: seq, batched: true, reqs: reqs}, send, meta, payload)
}

// sendSingle sends one message as a non-batched entry.
func (pp *partProducer) sendSingle(r *sendReq) {
	seq := pp.nextSeq
	pp.nextSeq++
	meta := pp.metadata(seq)
	meta.Properties = kvList(r.msg.Properties)
	if r.msg.Key != "" {
		meta.PartitionKey = proto.String(r.msg.Key)
	}
	if !r.msg.EventTime.IsZero() {
		meta.EventTime = proto.Uint64(uint64(r.msg.EventTime.UnixMilli()))
	}
	if r.msg.DeliverAfter > 0 {
		meta.DeliverAtTime = proto.Int64(time.Now().Add(r.msg.DeliverAfter).UnixMilli())
	}
	send := &pb.CommandSend{ProducerId: proto.Uint64(pp.id), SequenceId: proto.Uint64(seq), NumMessages: proto.Int32(1)}
	pp.sendEntry(&pendingEntry{seq: seq, reqs: []*sendReq{r}}, send, meta, r.msg.Payload)
}

func (pp *partProducer) metadata(seq uint64) *pb.MessageMetadata {
	return &pb.MessageMetadata{
		ProducerName: proto.String(pp.name.Load().(string)), SequenceId: proto.Uint64(seq),
		PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())),
	}
}

// sendEntry encodes the entry's frame, queues it as pending and writes it if connected.
func (pp *partProducer) sendEntry(e *pendingEntry, send *pb.CommandSend, meta *pb.MessageMetadata, payload []byte) {
	frame, err := pulsar.AppendPayloadCommand(nil, pulsar.Wrap(send), meta, payload)
	if err != nil {
		for _, r := range e.reqs {
			pp.complete(r, MessageID{}, err)
		}
		return
	}
	e.frame = frame
	pp.pending = append(pp.pending, e)
	if pp.state == producerReady {
		if err := pp.conn.writeRaw(frame); err != nil {
			// The connection is closing: its onClosed event starts the reconnection.
			pp.cl.log.Debug("pulsarclient: send on a closing connection", "topic", pp.topic, "err", err)
		}
	}
}

// complete releases a message's pending slot and calls its callback.
func (pp *partProducer) complete(r *sendReq, id MessageID, err error) {
	<-pp.slots
	if r.cb != nil {
		r.cb(id, err)
	}
}

func (pp *partProducer) handle(ev prodEvent) {
	switch ev.kind {
	case evReceipt:
		if ev.c != pp.conn {
			return // from a connection we left: the re-sent entries will be acknowledged anew
		}
		pp.onReceiptEvent(ev.receipt)
	case evSendError:
		if ev.c != pp.conn {
			return
		}
		e := ev.sendErr
		err := serverError(e.GetError(), e.GetMessage())
		switch e.GetError() {
		case pb.ServerError_TopicTerminatedError, pb.ServerError_NotAllowedError:
			pp.fail(fmt.Errorf("send to %s: %w", pp.topic, err))
		default:
			// As the Go client: drop the connection, reconnect and re-send.
			pp.cl.log.Warn("pulsarclient: send error, reconnecting", "topic", pp.topic, "err", err)
			ev.c.close(err)
		}
	case evConnClosed:
		if ev.c != pp.conn || pp.state != producerReady {
			return
		}
		pp.conn = nil
		pp.state = producerReconnecting
		pp.epoch++
		go pp.reconnect(pp.name.Load().(string), pp.epoch, ev.err)
	case evReconnected:
		if pp.state != producerReconnecting {
			pp.closeOnBroker(ev.c)
			ev.c.removeProducer(pp.id)
			return
		}
		pp.conn, pp.lastConn, pp.maxMsgSize = ev.c, ev.c, ev.c.maxMessageSize
		pp.state = producerReady
		for _, e := range pp.pending {
			if err := ev.c.writeRaw(e.frame); err != nil {
				break // closed again: its onClosed event restarts the reconnection
			}
		}
	case evReconnectFailed:
		if pp.state == producerReconnecting {
			pp.fail(ev.err)
		}
	}
}

func (pp *partProducer) onReceiptEvent(r *pb.CommandSendReceipt) {
	if len(pp.pending) == 0 {
		return
	}
	head := pp.pending[0]
	seq := r.GetSequenceId()
	switch {
	case seq < head.seq:
		return // a duplicate receipt of an entry already completed
	case seq > head.seq:
		// Receipts must come in order: as the Go client, drop the connection and re-send.
		pp.cl.log.Warn("pulsarclient: receipt out of order, reconnecting", "topic", pp.topic,
			"got", seq, "want", head.seq)
		pp.conn.close(fmt.Errorf("%w: receipt for sequence id %d, expected %d", ErrProtocol, seq, head.seq))
		return
	}
	pp.pending[0] = nil
	pp.pending = pp.pending[1:]
	mid := r.GetMessageId()
	for i, req := range head.reqs {
		id := MessageID{LedgerID: int64(mid.GetLedgerId()), EntryID: int64(mid.GetEntryId()), BatchIndex: -1, Partition: pp.partition}
		if head.batched {
			id.BatchIndex = int32(i)
		}
		pp.complete(req, id, nil)
	}
	for _, w := range head.waiters {
		w <- nil
	}
	if pp.canSend() {
		// An entry in flight is acknowledged: send what gathered meanwhile, with what is
		// queued behind it.
		pp.gather(nil)
		pp.flushBatch()
	}
}

// reconnect registers the producer again, with backoff, and reports to run.
func (pp *partProducer) reconnect(name string, epoch uint64, cause error) {
	pp.cl.log.Info("pulsarclient: producer reconnecting", "topic", pp.topic, "cause", cause)
	b := backoff.Retry{Policy: reconnectBackoff}
	for {
		select {
		case <-time.After(b.Next()):
		case <-pp.done:
			return
		}
		ctx, cancel := pp.cl.opContext(context.Background())
		go func() { // give up if the producer closes meanwhile
			select {
			case <-pp.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		c, _, err := pp.connect(ctx, name, epoch)
		cancel()
		if err == nil {
			pp.event(prodEvent{kind: evReconnected, c: c})
			return
		}
		if !retriable(err) {
			pp.event(prodEvent{kind: evReconnectFailed, err: err})
			return
		}
		pp.cl.log.Debug("pulsarclient: producer reconnect failed, retrying", "topic", pp.topic, "err", err)
	}
}

// fail closes the producer for good: every batched and pending message fails with err.
func (pp *partProducer) fail(err error) {
	if pp.state == producerClosed {
		return
	}
	pp.state = producerClosed
	pp.failure.Store(&err)
	if pp.conn != nil {
		pp.conn.removeProducer(pp.id)
	}
	pp.timer.Stop()
	for _, r := range pp.batch {
		pp.complete(r, MessageID{}, err)
	}
	pp.batch = nil
	for _, e := range pp.pending {
		for _, r := range e.reqs {
			pp.complete(r, MessageID{}, err)
		}
		for _, w := range e.waiters {
			w <- err
		}
	}
	pp.pending = nil
	// Messages queued in sendc but not yet taken fail too.
	for {
		select {
		case r := <-pp.sendc:
			pp.complete(r, MessageID{}, err)
		default:
			return
		}
	}
}

func (pp *partProducer) flush(ctx context.Context) error {
	w := make(chan error, 1)
	select {
	case pp.flushc <- w:
	case <-pp.done:
		return pp.failed()
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-w:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop makes run fail what is pending with ErrClosed and return; it waits for that.
func (pp *partProducer) stop() {
	pp.stopMu.Do(func() { close(pp.stopc) })
	<-pp.done
	pp.drainSends()
}

// drainSends fails the messages left in sendc after run returned (SendAsync may put one
// there concurrently with run's own final drain).
func (pp *partProducer) drainSends() {
	for {
		select {
		case r := <-pp.sendc:
			pp.complete(r, MessageID{}, pp.failed())
		default:
			return
		}
	}
}

// close stops the partition and closes the producer on the broker.
func (pp *partProducer) close(ctx context.Context) error {
	alreadyFailed := pp.failed()
	pp.stop()
	if alreadyFailed != nil || pp.lastConn == nil || pp.lastConn.isClosed() {
		return nil
	}
	c := pp.lastConn
	rid := pp.cl.nextID()
	_, err := c.request(ctx, rid, pulsar.Wrap(&pb.CommandCloseProducer{ProducerId: proto.Uint64(pp.id), RequestId: proto.Uint64(rid)}))
	if errors.Is(err, ErrConnectionClosed) {
		return nil
	}
	return err
}
