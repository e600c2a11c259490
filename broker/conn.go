package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// connState is a client connection's state, owned by its reader goroutine (serve).
type connState uint8

const (
	// connHandshaking: waiting for CONNECT.
	connHandshaking connState = iota + 1
	// connConnected: CONNECTED was sent; commands are served.
	connConnected
	// connClosed: the reader stopped; producers and consumers were detached.
	connClosed
)

func (s connState) String() string {
	switch s {
	case connHandshaking:
		return "Handshaking"
	case connConnected:
		return "Connected"
	case connClosed:
		return "Closed"
	}
	return fmt.Sprintf("connState(%d)", uint8(s))
}

const serverVersion = "Magnetar-Pulsar-4.0"

// conn is one client connection. The reader goroutine (serve) owns state and the
// FrameReader and handles every command (slow ones — lookups, topic loads, schema — on
// their own goroutines); the writer goroutine (writeLoop) owns the socket's write side and
// writes what Send queued, in batches. producers/consumers are guarded by mu because topic
// and subscription goroutines register and remove entries.
type conn struct {
	s      *Service
	nc     net.Conn
	log    *slog.Logger
	remote string

	state         connState // reader goroutine only
	clientVersion string    // written before any producer or consumer exists

	out struct {
		sync.Mutex // guards the fields below
		buf        []byte
		closed     bool
	}
	wake      chan struct{}
	done      chan struct{} // closed by close
	closeOnce sync.Once
	writerEnd chan struct{}

	// budget bounds the SENDs handed to topics and not completed.
	budget chan struct{}

	mu struct {
		sync.Mutex // guards the fields below
		producers  map[uint64]*prodEntry
		consumers  map[uint64]*consEntry
	}
}

// prodEntry is a producer id of the connection: pending until the topic accepted it.
type prodEntry struct {
	p       *topic.Producer
	t       *topic.Topic
	pending bool
	// success is the PRODUCER_SUCCESS answered, repeated (with the new request id) when the
	// client asks again for a producer id that is ready (it does after a reconnect race).
	success *pb.CommandProducerSuccess
}

type consEntry struct {
	c       *topic.Consumer
	t       *topic.Topic
	pending bool
}

func newConn(s *Service, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String(), state: connHandshaking,
		wake: make(chan struct{}, 1), done: make(chan struct{}), writerEnd: make(chan struct{}),
		budget: make(chan struct{}, s.cfg.MaxPendingPublishPerConnection)}
	c.log = s.log.With("remote", c.remote)
	c.mu.producers = map[uint64]*prodEntry{}
	c.mu.consumers = map[uint64]*consEntry{}
	return c
}

// close starts closing the connection (idempotent): the writer flushes what is queued and
// closes the socket, which ends the reader.
func (c *conn) close(reason string) {
	c.closeOnce.Do(func() {
		c.log.Debug("closing connection", "reason", reason)
		close(c.done)
		c.nc.SetReadDeadline(time.Now())                   //nolint:errcheck // unblocks the reader
		c.nc.SetWriteDeadline(time.Now().Add(time.Second)) //nolint:errcheck // bounds the final flush
	})
}

// serve runs the reader loop until the connection ends, then detaches its producers and
// consumers.
func (c *conn) serve() {
	go c.writeLoop()
	defer func() {
		c.close("reader stopped")
		<-c.writerEnd
		c.nc.Close()
		c.state = connClosed
		c.detachAll()
	}()
	fr := pulsar.NewFrameReader(c.nc, c.s.cfg.MaxMessageSize+pulsar.FramePadding)
	idle := 2 * c.s.cfg.KeepAliveInterval
	for {
		c.nc.SetReadDeadline(time.Now().Add(idle)) //nolint:errcheck // a failing conn fails the read
		select {
		case <-c.done:
			return
		default:
		}
		f, err := fr.ReadFrame()
		if err != nil && !errors.Is(err, pulsar.ErrChecksum) {
			c.readFailed(err)
			return
		}
		if err != nil { // checksum mismatch: the stream is in sync, the frame is refused
			if f.Cmd.GetType() == pb.BaseCommand_SEND && c.state == connConnected {
				s := f.Cmd.GetSend()
				c.Send(wrapSendError(s.GetProducerId(), s.GetSequenceId(), pb.ServerError_ChecksumError, err.Error()))
				continue
			}
			c.badFrame("checksum", err)
			return
		}
		if err := c.handle(f); err != nil {
			c.badFrame("protocol", err)
			return
		}
	}
}

func (c *conn) readFailed(err error) {
	var fse *pulsar.FrameSizeError
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		c.log.Debug("connection closed by client")
	case errors.As(err, &fse):
		c.badFrame("oversized", err)
	case errors.Is(err, pulsar.ErrMalformed):
		c.badFrame("malformed", err)
	case errors.As(err, &ne) && ne.Timeout():
		select {
		case <-c.done:
		default:
			c.log.Info("closing idle connection: no data for twice the keep-alive interval")
		}
	default:
		select {
		case <-c.done:
		default:
			c.log.Debug("connection read failed", "err", err)
		}
	}
}

// badFrame closes the connection because of what the client sent.
func (c *conn) badFrame(reason string, err error) {
	c.s.m.malformed.WithLabelValues(reason).Inc()
	c.log.Warn("closing connection: bad frame", "reason", reason, "err", err)
	c.close(reason)
}

func (c *conn) writeLoop() {
	defer close(c.writerEnd)
	ping := time.NewTicker(c.s.cfg.KeepAliveInterval)
	defer ping.Stop()
	var spare []byte
	for {
		stop := false
		select {
		case <-c.wake:
		case <-ping.C:
			if c.state != connHandshaking {
				c.Send(pulsar.Wrap(&pb.CommandPing{}))
			}
			continue
		case <-c.done:
			stop = true
		}
		c.out.Lock()
		buf := c.out.buf
		c.out.buf = spare[:0]
		if stop {
			c.out.closed = true
		}
		c.out.Unlock()
		if len(buf) > 0 {
			if !stop {
				c.nc.SetWriteDeadline(time.Now().Add(2 * c.s.cfg.KeepAliveInterval)) //nolint:errcheck
			}
			if _, err := c.nc.Write(buf); err != nil {
				c.close("write failed: " + err.Error())
				c.out.Lock()
				c.out.closed = true
				c.out.buf = nil
				c.out.Unlock()
				return
			}
		}
		if stop {
			return
		}
		if cap(buf) > 4<<20 {
			buf = nil // do not keep a burst's buffer
		}
		spare = buf
	}
}

func (c *conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Send queues a command (topic.Conn).
func (c *conn) Send(cmd *pb.BaseCommand) {
	c.out.Lock()
	if c.out.closed {
		c.out.Unlock()
		return
	}
	buf, err := pulsar.AppendCommand(c.out.buf, cmd)
	c.out.buf = buf
	c.out.Unlock()
	if err != nil {
		c.log.Error("bug: cannot encode a command", "type", cmd.GetType(), "err", err)
		return
	}
	c.signal()
}

// SendMessage queues a MESSAGE with a stored entry (topic.Conn).
func (c *conn) SendMessage(cmd *pb.BaseCommand, headersAndPayload []byte) {
	c.out.Lock()
	if c.out.closed {
		c.out.Unlock()
		return
	}
	buf, err := pulsar.AppendRawPayloadCommand(c.out.buf, cmd, nil, headersAndPayload)
	c.out.buf = buf
	c.out.Unlock()
	if err != nil {
		c.log.Error("bug: cannot encode a message", "err", err)
		return
	}
	c.signal()
}

// ProducerClosed forgets p (topic.Conn).
func (c *conn) ProducerClosed(p *topic.Producer) {
	c.mu.Lock()
	if e := c.mu.producers[p.ID]; e != nil && e.p == p {
		delete(c.mu.producers, p.ID)
	}
	c.mu.Unlock()
}

// ConsumerClosed forgets cs (topic.Conn).
func (c *conn) ConsumerClosed(cs *topic.Consumer) {
	c.mu.Lock()
	if e := c.mu.consumers[cs.ID]; e != nil && e.c == cs {
		delete(c.mu.consumers, cs.ID)
	}
	c.mu.Unlock()
}

// PublishDone releases one SEND of the connection's budget (topic.Conn).
func (c *conn) PublishDone() {
	select {
	case <-c.budget:
	default:
	}
}

// RemoteAddr and ClientVersion describe the client (topic.Conn).
func (c *conn) RemoteAddr() string    { return c.remote }
func (c *conn) ClientVersion() string { return c.clientVersion }

func (c *conn) detachAll() {
	// An entry's p, c and t are written under c.mu by the goroutine creating it: read them
	// under it too. Entries still being created find themselves gone and close what they made.
	var prods []*topic.Producer
	var cons []*topic.Consumer
	c.mu.Lock()
	for _, e := range c.mu.producers {
		if e.p != nil && e.t != nil {
			prods = append(prods, e.p)
		}
	}
	for _, e := range c.mu.consumers {
		if e.c != nil && e.t != nil {
			cons = append(cons, e.c)
		}
	}
	c.mu.producers = map[uint64]*prodEntry{}
	c.mu.consumers = map[uint64]*consEntry{}
	c.mu.Unlock()
	for _, p := range prods {
		p.Close(nil)
	}
	for _, cs := range cons {
		if cs.Subscription() != nil {
			cs.Close(nil)
		}
	}
}

// ctx returns a context for a request: it ends with the connection or after d.
func (c *conn) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(c.s.ctx, d)
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Responses.

func (c *conn) sendError(rid uint64, err error) {
	msg := err.Error()
	c.Send(pulsar.Wrap(&pb.CommandError{RequestId: &rid, Error: serverError(err).Enum(), Message: &msg}))
}

func (c *conn) sendSuccess(rid uint64) {
	c.Send(pulsar.Wrap(&pb.CommandSuccess{RequestId: &rid}))
}

func wrapSendError(pid, seq uint64, code pb.ServerError, msg string) *pb.BaseCommand {
	return pulsar.Wrap(&pb.CommandSendError{ProducerId: &pid, SequenceId: &seq, Error: code.Enum(), Message: &msg})
}

// requestID extracts the request_id of any command body, if it has one.
func requestID(cmd *pb.BaseCommand) (uint64, bool) {
	body := pulsar.Body(cmd)
	if body == nil {
		return 0, false
	}
	m := body.ProtoReflect()
	fd := m.Descriptor().Fields().ByName("request_id")
	if fd == nil || fd.Kind() != protoreflect.Uint64Kind || !m.Has(fd) {
		return 0, false
	}
	return m.Get(fd).Uint(), true
}

// handle serves one command on the reader goroutine. An error closes the connection.
func (c *conn) handle(f pulsar.Frame) error {
	cmd := f.Cmd
	t := cmd.GetType()
	c.s.m.commands.WithLabelValues(t.String()).Inc()
	if c.state == connHandshaking {
		if t != pb.BaseCommand_CONNECT {
			return fmt.Errorf("expected CONNECT, got %v", t)
		}
		return c.handleConnect(cmd.GetConnect())
	}
	switch t {
	case pb.BaseCommand_CONNECT:
		return errors.New("second CONNECT")
	case pb.BaseCommand_PING:
		c.Send(pulsar.Wrap(&pb.CommandPong{}))
	case pb.BaseCommand_PONG, pb.BaseCommand_AUTH_RESPONSE:
	case pb.BaseCommand_SEND:
		c.handleSend(f)
	case pb.BaseCommand_LOOKUP:
		go c.handleLookup(cmd.GetLookupTopic())
	case pb.BaseCommand_PARTITIONED_METADATA:
		go c.handlePartitionedMetadata(cmd.GetPartitionMetadata())
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE:
		go c.handleTopicsOfNamespace(cmd.GetGetTopicsOfNamespace())
	case pb.BaseCommand_PRODUCER:
		c.handleProducer(cmd.GetProducer())
	case pb.BaseCommand_CLOSE_PRODUCER:
		c.handleCloseProducer(cmd.GetCloseProducer())
	case pb.BaseCommand_SUBSCRIBE:
		c.handleSubscribe(cmd.GetSubscribe())
	case pb.BaseCommand_FLOW:
		if e := c.consumer(cmd.GetFlow().GetConsumerId()); e != nil {
			e.c.Flow(cmd.GetFlow().GetMessagePermits())
		}
	case pb.BaseCommand_ACK:
		c.handleAck(cmd.GetAck())
	case pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
		r := cmd.GetRedeliverUnacknowledgedMessages()
		if e := c.consumer(r.GetConsumerId()); e != nil {
			e.c.Redeliver(r.GetMessageIds())
		}
	case pb.BaseCommand_SEEK:
		c.handleSeek(cmd.GetSeek())
	case pb.BaseCommand_UNSUBSCRIBE:
		c.handleUnsubscribe(cmd.GetUnsubscribe())
	case pb.BaseCommand_CLOSE_CONSUMER:
		c.handleCloseConsumer(cmd.GetCloseConsumer())
	case pb.BaseCommand_GET_LAST_MESSAGE_ID:
		go c.handleGetLastMessageID(cmd.GetGetLastMessageId())
	case pb.BaseCommand_GET_SCHEMA:
		go c.handleGetSchema(cmd.GetGetSchema())
	case pb.BaseCommand_GET_OR_CREATE_SCHEMA:
		go c.handleGetOrCreateSchema(cmd.GetGetOrCreateSchema())
	default:
		// Commands Magnetar does not serve (transactions, topic watchers, ...): answer the
		// request, if it is one, so the client does not wait for its timeout.
		if rid, ok := requestID(cmd); ok {
			c.sendError(rid, fmt.Errorf("%w: %v is not supported", ErrNotAllowed, t))
		} else {
			c.log.Debug("ignoring unsupported command", "type", t)
		}
	}
	return nil
}

func (c *conn) handleConnect(cmd *pb.CommandConnect) error {
	c.clientVersion = cmd.GetClientVersion()
	pv := min(cmd.GetProtocolVersion(), pulsar.ProtocolVersion)
	sv, mms := serverVersion, int32(c.s.cfg.MaxMessageSize)
	c.Send(pulsar.Wrap(&pb.CommandConnected{ServerVersion: &sv, ProtocolVersion: &pv, MaxMessageSize: &mms,
		FeatureFlags: &pb.FeatureFlags{SupportsBrokerEntryMetadata: proto.Bool(false)}}))
	c.state = connConnected
	c.log.Debug("client connected", "client", c.clientVersion, "protocol", cmd.GetProtocolVersion())
	return nil
}

func (c *conn) producer(id uint64) *prodEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.mu.producers[id]
	if e == nil || e.pending {
		return nil
	}
	return e
}

func (c *conn) consumer(id uint64) *consEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.mu.consumers[id]
	if e == nil || e.pending {
		return nil
	}
	return e
}

// Publishing.

func (c *conn) handleSend(f pulsar.Frame) {
	cmd := f.Cmd.GetSend()
	e := c.producer(cmd.GetProducerId())
	if e == nil {
		c.log.Debug("SEND for an unknown producer", "producer", cmd.GetProducerId())
		return
	}
	meta := f.Metadata
	if meta.GetProducerName() == "" || meta.PublishTime == nil {
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
	if meta.ChunkId != nil {
		m.Chunk = true
		m.LastChunk = meta.GetChunkId() == meta.GetNumChunksFromMsg()-1
	}
	select {
	case c.budget <- struct{}{}:
	default:
		c.s.m.throttled.Inc()
		select {
		case c.budget <- struct{}{}:
		case <-c.done:
			return
		}
	}
	if !e.t.AcquirePublish(len(m.Data), c.done) {
		c.PublishDone()
		return
	}
	e.p.Publish(m)
}

func (c *conn) handleProducer(cmd *pb.CommandProducer) {
	rid, pid := cmd.GetRequestId(), cmd.GetProducerId()
	c.mu.Lock()
	if e := c.mu.producers[pid]; e != nil {
		ok := e.success
		c.mu.Unlock()
		if ok == nil {
			c.sendError(rid, fmt.Errorf("%w: producer id %d is being created on this connection", ErrServiceNotReady, pid))
			return
		}
		// As Pulsar: a producer id that is ready is answered with its success again.
		ps := proto.Clone(ok).(*pb.CommandProducerSuccess)
		ps.RequestId = &rid
		c.Send(pulsar.Wrap(ps))
		return
	}
	e := &prodEntry{pending: true}
	c.mu.producers[pid] = e
	c.mu.Unlock()
	go c.createProducer(cmd, e)
}

func (c *conn) forgetProducer(id uint64, e *prodEntry) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.producers[id] == e {
		delete(c.mu.producers, id)
		return true
	}
	return false
}

func (c *conn) createProducer(cmd *pb.CommandProducer, e *prodEntry) {
	rid, pid := cmd.GetRequestId(), cmd.GetProducerId()
	fail := func(err error) {
		if c.forgetProducer(pid, e) {
			c.sendError(rid, err)
		}
	}
	ctx, cancel := c.ctx(time.Minute)
	defer cancel()
	name, err := topicname.Parse(cmd.GetTopic())
	if err != nil {
		fail(err)
		return
	}
	t, err := c.s.topicFor(ctx, name, true, false)
	if err != nil {
		fail(err)
		return
	}
	var schemaVersion []byte
	if sc := cmd.GetSchema(); sc != nil {
		if schemaVersion, err = c.s.schemas.getOrCreate(ctx, name, sc); err != nil {
			fail(err)
			return
		}
	}
	pname := cmd.GetProducerName()
	if pname == "" {
		pname = c.s.newProducerName()
	}
	p := &topic.Producer{ID: pid, Name: pname, Conn: c, AccessMode: cmd.GetProducerAccessMode(),
		TopicEpoch: cmd.TopicEpoch, Metadata: kvMap(cmd.GetMetadata()), UserProvidedName: cmd.GetUserProvidedProducerName()}
	c.mu.Lock()
	e.p, e.t = p, t
	c.mu.Unlock()
	success := func(r topic.ProducerReady, ready bool) *pb.BaseCommand {
		ps := &pb.CommandProducerSuccess{RequestId: &rid, ProducerName: &pname, LastSequenceId: &r.LastSequenceID,
			TopicEpoch: &r.TopicEpoch, ProducerReady: &ready}
		if schemaVersion != nil {
			ps.SchemaVersion = schemaVersion
		}
		return pulsar.Wrap(ps)
	}
	t.AddProducer(p, topic.ProducerCallbacks{
		Queued: func() { c.Send(success(topic.ProducerReady{LastSequenceID: -1}, false)) },
		Ready: func(r topic.ProducerReady) {
			cmd := success(r, true)
			c.mu.Lock()
			live := c.mu.producers[pid] == e
			if live {
				e.pending = false
				e.success = cmd.GetProducerSuccess()
			}
			c.mu.Unlock()
			if !live {
				p.Close(nil)
				return
			}
			c.Send(cmd)
		},
		Failed: fail,
	})
}

func (c *conn) handleCloseProducer(cmd *pb.CommandCloseProducer) {
	rid, pid := cmd.GetRequestId(), cmd.GetProducerId()
	c.mu.Lock()
	e := c.mu.producers[pid]
	delete(c.mu.producers, pid)
	var p *topic.Producer
	if e != nil && e.t != nil {
		p = e.p // written under c.mu by createProducer
	}
	c.mu.Unlock()
	if p == nil {
		// Not created yet: createProducer finds its entry gone and closes what it made.
		c.sendSuccess(rid)
		return
	}
	p.Close(func() { c.sendSuccess(rid) })
}

// Consuming.

func (c *conn) handleSubscribe(cmd *pb.CommandSubscribe) {
	rid, cid := cmd.GetRequestId(), cmd.GetConsumerId()
	c.mu.Lock()
	if e := c.mu.consumers[cid]; e != nil {
		pending := e.pending
		c.mu.Unlock()
		if pending {
			c.sendError(rid, fmt.Errorf("%w: consumer id %d is being created on this connection", ErrServiceNotReady, cid))
			return
		}
		c.sendSuccess(rid) // as Pulsar: the consumer is already created
		return
	}
	e := &consEntry{pending: true}
	c.mu.consumers[cid] = e
	c.mu.Unlock()
	go c.subscribe(cmd, e)
}

func (c *conn) forgetConsumer(id uint64, e *consEntry) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.consumers[id] == e {
		delete(c.mu.consumers, id)
		return true
	}
	return false
}

func (c *conn) subscribe(cmd *pb.CommandSubscribe, e *consEntry) {
	rid, cid := cmd.GetRequestId(), cmd.GetConsumerId()
	fail := func(err error) {
		if c.forgetConsumer(cid, e) {
			c.sendError(rid, err)
		}
	}
	ctx, cancel := c.ctx(time.Minute)
	defer cancel()
	name, err := topicname.Parse(cmd.GetTopic())
	if err != nil {
		fail(err)
		return
	}
	if cmd.GetSubscription() == "" {
		fail(fmt.Errorf("%w: empty subscription name", ErrNotAllowed))
		return
	}
	t, err := c.s.topicFor(ctx, name, cmd.GetForceTopicCreation(), false)
	if err != nil {
		fail(err)
		return
	}
	if sc := cmd.GetSchema(); sc != nil && sc.GetType() != pb.Schema_None {
		if _, err := c.s.schemas.getOrCreate(ctx, name, sc); err != nil {
			fail(err)
			return
		}
	}
	cons := &topic.Consumer{ID: cid, Name: cmd.GetConsumerName(), Conn: c, Type: cmd.GetSubType(),
		Priority: cmd.GetPriorityLevel(), Metadata: kvMap(cmd.GetMetadata()), KeyShared: cmd.GetKeySharedMeta()}
	c.mu.Lock()
	e.c, e.t = cons, t
	c.mu.Unlock()
	req := topic.SubscribeRequest{Consumer: cons, Subscription: cmd.GetSubscription(), Durable: cmd.GetDurable(),
		Initial: mledger.Latest}
	if cmd.GetInitialPosition() == pb.CommandSubscribe_Earliest {
		req.Initial = mledger.Earliest
	}
	req.Start = req.Initial
	if id := cmd.GetStartMessageId(); id != nil {
		req.Start = startPosition(id)
	}
	t.Subscribe(req, func(err error) {
		if err != nil {
			fail(err)
			return
		}
		c.mu.Lock()
		live := c.mu.consumers[cid] == e
		if live {
			e.pending = false
		}
		c.mu.Unlock()
		if !live {
			cons.Close(nil)
			return
		}
		c.sendSuccess(rid)
	})
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
	e := c.consumer(cmd.GetConsumerId())
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
	e.c.Ack(cmd, done)
}

func (c *conn) handleSeek(cmd *pb.CommandSeek) {
	rid := cmd.GetRequestId()
	e := c.consumer(cmd.GetConsumerId())
	if e == nil {
		c.sendError(rid, fmt.Errorf("%w: consumer %d not found", ErrNotAllowed, cmd.GetConsumerId()))
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
		e.c.Seek(&topic.MessageID{LedgerID: p.LedgerID, EntryID: p.EntryID, BatchIndex: -1}, 0, done)
	case cmd.MessagePublishTime != nil:
		e.c.Seek(nil, max(int64(cmd.GetMessagePublishTime()), 1), done)
	default:
		c.sendError(rid, fmt.Errorf("%w: seek without a message id or publish time", ErrNotAllowed))
	}
}

func (c *conn) handleUnsubscribe(cmd *pb.CommandUnsubscribe) {
	rid, cid := cmd.GetRequestId(), cmd.GetConsumerId()
	e := c.consumer(cid)
	if e == nil {
		c.sendError(rid, fmt.Errorf("%w: consumer %d not found", ErrNotAllowed, cid))
		return
	}
	e.c.Unsubscribe(cmd.GetForce(), func(err error) {
		if err != nil {
			c.sendError(rid, err)
			return
		}
		c.forgetConsumer(cid, e)
		c.sendSuccess(rid)
	})
}

func (c *conn) handleCloseConsumer(cmd *pb.CommandCloseConsumer) {
	rid, cid := cmd.GetRequestId(), cmd.GetConsumerId()
	c.mu.Lock()
	var cons *topic.Consumer
	if e := c.mu.consumers[cid]; e != nil {
		cons = e.c // written under c.mu by createConsumer
	}
	delete(c.mu.consumers, cid)
	c.mu.Unlock()
	if cons == nil || cons.Subscription() == nil {
		c.sendSuccess(rid)
		return
	}
	cons.Close(func() { c.sendSuccess(rid) })
}

func (c *conn) handleGetLastMessageID(cmd *pb.CommandGetLastMessageId) {
	rid := cmd.GetRequestId()
	e := c.consumer(cmd.GetConsumerId())
	if e == nil {
		c.sendError(rid, fmt.Errorf("%w: consumer %d not found", ErrNotAllowed, cmd.GetConsumerId()))
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
	md, err := e.c.Subscription().MarkDelete(ctx)
	if err != nil {
		c.sendError(rid, err)
		return
	}
	ml, me := uint64(md.LedgerID), uint64(md.EntryID)
	c.Send(pulsar.Wrap(&pb.CommandGetLastMessageIdResponse{RequestId: &rid, LastMessageId: last,
		ConsumerMarkDeletePosition: &pb.MessageIdData{LedgerId: &ml, EntryId: &me}}))
}

// Lookups and metadata.

func (c *conn) handleLookup(cmd *pb.CommandLookupTopic) {
	rid := cmd.GetRequestId()
	ctx, cancel := c.ctx(30 * time.Second)
	defer cancel()
	c.s.m.lookups.Inc()
	r, err := c.s.lookup(ctx, cmd.GetTopic())
	resp := &pb.CommandLookupTopicResponse{RequestId: &rid}
	if err != nil {
		msg := err.Error()
		resp.Response = pb.CommandLookupTopicResponse_Failed.Enum()
		resp.Error, resp.Message = serverError(err).Enum(), &msg
	} else {
		resp.Response = pb.CommandLookupTopicResponse_Connect.Enum()
		resp.BrokerServiceUrl = &r.ServiceURL
		resp.Authoritative = proto.Bool(true)
		resp.ProxyThroughServiceUrl = proto.Bool(false)
	}
	c.Send(pulsar.Wrap(resp))
}

func (c *conn) handlePartitionedMetadata(cmd *pb.CommandPartitionedTopicMetadata) {
	rid := cmd.GetRequestId()
	ctx, cancel := c.ctx(30 * time.Second)
	defer cancel()
	n, err := c.s.res.partitions(ctx, cmd.GetTopic())
	resp := &pb.CommandPartitionedTopicMetadataResponse{RequestId: &rid}
	if err != nil {
		msg := err.Error()
		resp.Response = pb.CommandPartitionedTopicMetadataResponse_Failed.Enum()
		resp.Error, resp.Message = serverError(err).Enum(), &msg
	} else {
		p := uint32(n)
		resp.Partitions = &p
		resp.Response = pb.CommandPartitionedTopicMetadataResponse_Success.Enum()
	}
	c.Send(pulsar.Wrap(resp))
}

func (c *conn) handleTopicsOfNamespace(cmd *pb.CommandGetTopicsOfNamespace) {
	rid := cmd.GetRequestId()
	ctx, cancel := c.ctx(30 * time.Second)
	defer cancel()
	var topics []string
	if cmd.GetMode() != pb.CommandGetTopicsOfNamespace_NON_PERSISTENT {
		var err error
		if topics, err = c.s.res.topics(ctx, cmd.GetNamespace()); err != nil {
			c.sendError(rid, err)
			return
		}
	}
	c.Send(pulsar.Wrap(&pb.CommandGetTopicsOfNamespaceResponse{RequestId: &rid, Topics: topics}))
}

func (c *conn) handleGetSchema(cmd *pb.CommandGetSchema) {
	rid := cmd.GetRequestId()
	ctx, cancel := c.ctx(30 * time.Second)
	defer cancel()
	resp := &pb.CommandGetSchemaResponse{RequestId: &rid}
	name, err := topicname.Parse(cmd.GetTopic())
	var sc *pb.Schema
	var v []byte
	if err == nil {
		sc, v, err = c.s.schemas.get(ctx, name, cmd.GetSchemaVersion())
	}
	if err != nil {
		msg := err.Error()
		code := serverError(err)
		if errors.Is(err, ErrSchemaNotFound) {
			code = pb.ServerError_TopicNotFound
		}
		resp.ErrorCode, resp.ErrorMessage = code.Enum(), &msg
	} else {
		resp.Schema, resp.SchemaVersion = sc, v
	}
	c.Send(pulsar.Wrap(resp))
}

func (c *conn) handleGetOrCreateSchema(cmd *pb.CommandGetOrCreateSchema) {
	rid := cmd.GetRequestId()
	ctx, cancel := c.ctx(30 * time.Second)
	defer cancel()
	resp := &pb.CommandGetOrCreateSchemaResponse{RequestId: &rid}
	name, err := topicname.Parse(cmd.GetTopic())
	var v []byte
	if err == nil {
		v, err = c.s.schemas.getOrCreate(ctx, name, cmd.GetSchema())
	}
	if err != nil {
		msg := err.Error()
		resp.ErrorCode, resp.ErrorMessage = serverError(err).Enum(), &msg
	} else {
		resp.SchemaVersion = v
	}
	c.Send(pulsar.Wrap(resp))
}

func kvMap(kvs []*pb.KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}
