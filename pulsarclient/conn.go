package pulsarclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// connProducer is what a connection tells a producer partition. The methods run on the
// connection's reader goroutine and must not block for long.
type connProducer interface {
	onReceipt(c *conn, r *pb.CommandSendReceipt)
	onSendError(c *conn, e *pb.CommandSendError)
	// onClosed: the broker closed the producer (CLOSE_PRODUCER) or the connection died.
	onClosed(c *conn, err error)
}

// connConsumer is what a connection tells a consumer partition, on the reader goroutine.
type connConsumer interface {
	onMessage(c *conn, f *pulsar.Frame)
	onCorrupt(c *conn, m *pb.CommandMessage, err error)
	onClosed(c *conn, err error)
	// onEndOfTopic: the broker sent REACHED_END_OF_TOPIC.
	onEndOfTopic(c *conn)
}

// maxFrameSize is the largest frame the client accepts: brokers may raise max_message_size
// well above the 1 MiB default, and a client has no reason to be stricter than its broker.
const maxFrameSize = 64<<20 + pulsar.FramePadding

// errClosedByBroker is the onClosed cause for CLOSE_PRODUCER and CLOSE_CONSUMER.
var errClosedByBroker = fmt.Errorf("%w: closed by the broker", ErrConnectionClosed)

// conn is one TCP connection to a broker, after a successful handshake. It is safe for
// concurrent use. Goroutines: readLoop owns the FrameReader and dispatches every frame;
// writeLoop drains the outbound buffer (filled by any goroutine under out's lock) and writes
// it in large batches.
type conn struct {
	addr           string
	nc             net.Conn
	log            *slog.Logger
	maxMessageSize int
	auth           *Authentication // nil: none
	// originalPrincipal is sent in CONNECT (Options.OriginalPrincipal).
	originalPrincipal string
	// proxyTo is the broker (host:port) a proxy at addr is asked to connect us to (CONNECT's
	// proxy_to_broker_url); "" for a direct connection.
	proxyTo string
	fr      *pulsar.FrameReader // owned by readLoop

	wake chan struct{} // cap 1: the outbound buffer has bytes
	done chan struct{} // closed by close
	wg   sync.WaitGroup

	out struct {
		sync.Mutex // guards the fields below
		buf        []byte
		spare      []byte
	}

	mu struct {
		sync.Mutex       // guards the fields below; never held while calling out of the conn
		err        error // why the connection closed (set once, before done is closed)
		pending    map[uint64]chan *pb.BaseCommand
		producers  map[uint64]connProducer
		consumers  map[uint64]connConsumer
	}

	scal       scalableHandlers // the scalable-topic sessions (scalable_watch.go)
	scalableOK bool             // CONNECTED set supports_scalable_topics (set before readLoop)
}

// dial connects to addr (host:port) and performs the CONNECT/CONNECTED handshake.
func dial(ctx context.Context, addr string, opts Options, log *slog.Logger) (*conn, error) {
	var d net.Dialer
	dialAddr, proxyTo := splitProxied(addr)
	nc, err := d.DialContext(ctx, "tcp", dialAddr)
	if err != nil {
		return nil, fmt.Errorf("pulsarclient: dial %s: %w", addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if opts.TLS != nil {
		cfg := opts.TLS.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(dialAddr)
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("pulsarclient: TLS handshake with %s: %w", addr, err)
		}
		nc = tc
	}
	c := &conn{addr: addr, nc: nc, auth: opts.Auth, originalPrincipal: opts.OriginalPrincipal, proxyTo: proxyTo, log: log.With("broker", addr), wake: make(chan struct{}, 1),
		done: make(chan struct{}), fr: pulsar.NewFrameReader(nc, maxFrameSize)}
	c.mu.pending = make(map[uint64]chan *pb.BaseCommand)
	c.mu.producers = make(map[uint64]connProducer)
	c.mu.consumers = make(map[uint64]connConsumer)
	if err := c.handshake(ctx, opts.ClientVersion); err != nil {
		nc.Close()
		return nil, fmt.Errorf("pulsarclient: handshake with %s: %w", addr, err)
	}
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	return c, nil
}

func (c *conn) handshake(ctx context.Context, clientVersion string) error {
	deadline := time.Now().Add(30 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	connect := &pb.CommandConnect{
		ClientVersion:   proto.String(clientVersion),
		ProtocolVersion: proto.Int32(pulsar.ProtocolVersion),
		AuthMethodName:  proto.String(""),
		FeatureFlags:    &pb.FeatureFlags{SupportsBrokerEntryMetadata: proto.Bool(true), SupportsScalableTopics: proto.Bool(true)},
	}
	if c.originalPrincipal != "" {
		connect.OriginalPrincipal = proto.String(c.originalPrincipal)
	}
	if c.proxyTo != "" {
		connect.ProxyToBrokerUrl = proto.String(c.proxyTo)
	}
	if c.auth != nil {
		data, err := c.auth.Data()
		if err != nil {
			return fmt.Errorf("credentials: %w", err)
		}
		connect.AuthMethodName, connect.AuthData = proto.String(c.auth.Method), data
		connect.FeatureFlags.SupportsAuthRefresh = proto.Bool(true)
	}
	out, err := pulsar.AppendCommand(nil, pulsar.Wrap(connect))
	if err != nil {
		return err
	}
	if _, err := c.nc.Write(out); err != nil {
		return err
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	switch f.Cmd.GetType() {
	case pb.BaseCommand_CONNECTED:
		c.maxMessageSize = int(f.Cmd.Connected.GetMaxMessageSize())
		c.scalableOK = f.Cmd.Connected.GetFeatureFlags().GetSupportsScalableTopics()
		if c.maxMessageSize <= 0 {
			c.maxMessageSize = pulsar.MaxMessageSizeDefault
		}
	case pb.BaseCommand_ERROR:
		return serverError(f.Cmd.Error.GetError(), f.Cmd.Error.GetMessage())
	default:
		return fmt.Errorf("%w: answer to CONNECT is %v", ErrProtocol, f.Cmd.GetType())
	}
	return c.nc.SetDeadline(time.Time{})
}

// answerChallenge answers the broker's AUTH_CHALLENGE with fresh credentials; without any
// (or when they cannot be read) the broker will close the connection.
func (c *conn) answerChallenge() {
	if c.auth == nil {
		return
	}
	data, err := c.auth.Data()
	if err != nil {
		c.log.Warn("pulsarclient: cannot refresh credentials", "err", err)
		return
	}
	_ = c.write(pulsar.Wrap(&pb.CommandAuthResponse{ClientVersion: proto.String("magnetar-pulsarclient"),
		ProtocolVersion: proto.Int32(pulsar.ProtocolVersion),
		Response:        &pb.AuthData{AuthMethodName: proto.String(c.auth.Method), AuthData: data}}))
}

func serverError(code pb.ServerError, msg string) error {
	return &ServerError{Code: code, Message: msg}
}

// close shuts the connection down with cause err (idempotent) and tells every registered
// producer and consumer. It does not wait for the goroutines (Close does).
func (c *conn) close(err error) {
	c.mu.Lock()
	if c.mu.err != nil {
		c.mu.Unlock()
		return
	}
	if err == nil {
		err = ErrConnectionClosed
	} else if !errors.Is(err, ErrConnectionClosed) {
		err = fmt.Errorf("%w: %w", ErrConnectionClosed, err)
	}
	c.mu.err = err
	pending := c.mu.pending
	producers, consumers := c.mu.producers, c.mu.consumers
	c.mu.pending = map[uint64]chan *pb.BaseCommand{}
	c.mu.producers, c.mu.consumers = map[uint64]connProducer{}, map[uint64]connConsumer{}
	c.mu.Unlock()
	close(c.done)
	_ = c.nc.Close()
	for _, ch := range pending {
		close(ch)
	}
	for _, p := range producers {
		p.onClosed(c, err)
	}
	for _, cons := range consumers {
		cons.onClosed(c, err)
	}
	c.scal.closeAll(err)
}

// Close closes the connection and waits for its goroutines.
func (c *conn) Close() {
	c.close(ErrClosed)
	c.wg.Wait()
}

// err returns why the connection closed, nil while it is open.
func (c *conn) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.err
}

func (c *conn) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// write queues an encoded command for the writer goroutine.
func (c *conn) write(cmd *pb.BaseCommand) error {
	return c.writeWith(func(dst []byte) ([]byte, error) { return pulsar.AppendCommand(dst, cmd) })
}

// writeWith appends what enc encodes to the outbound buffer.
func (c *conn) writeWith(enc func(dst []byte) ([]byte, error)) error {
	if c.isClosed() {
		return c.err()
	}
	c.out.Lock()
	buf, err := enc(c.out.buf)
	if err == nil {
		c.out.buf = buf
	}
	c.out.Unlock()
	if err != nil {
		return err
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// writeRaw queues an already encoded frame.
func (c *conn) writeRaw(frame []byte) error {
	return c.writeWith(func(dst []byte) ([]byte, error) { return append(dst, frame...), nil })
}

func (c *conn) writeLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		c.out.Lock()
		buf := c.out.buf
		c.out.buf = c.out.spare[:0]
		c.out.spare = nil
		c.out.Unlock()
		if len(buf) == 0 {
			continue
		}
		_, err := c.nc.Write(buf)
		if cap(buf) <= 4<<20 { // keep a reasonable buffer for reuse
			c.out.Lock()
			c.out.spare = buf[:0]
			c.out.Unlock()
		}
		if err != nil {
			c.close(fmt.Errorf("write: %w", err))
			return
		}
	}
}

// request sends cmd (whose request id is id) and waits for the answer with that id. A
// CommandError answer is returned as a *ServerError.
func (c *conn) request(ctx context.Context, id uint64, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	ch := make(chan *pb.BaseCommand, 1)
	c.mu.Lock()
	if err := c.mu.err; err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.mu.pending[id] = ch
	c.mu.Unlock()
	if err := c.write(cmd); err != nil {
		c.forget(id)
		return nil, err
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, c.err()
		}
		if resp.GetType() == pb.BaseCommand_ERROR {
			return nil, serverError(resp.Error.GetError(), resp.Error.GetMessage())
		}
		return resp, nil
	case <-ctx.Done():
		c.forget(id)
		return nil, ctx.Err()
	}
}

func (c *conn) forget(id uint64) {
	c.mu.Lock()
	delete(c.mu.pending, id)
	c.mu.Unlock()
}

func (c *conn) complete(id uint64, cmd *pb.BaseCommand) {
	c.mu.Lock()
	ch := c.mu.pending[id]
	delete(c.mu.pending, id)
	c.mu.Unlock()
	if ch != nil {
		ch <- cmd
	}
}

// addProducer registers a producer partition for receipts; it fails if the conn is closed.
func (c *conn) addProducer(id uint64, p connProducer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.err != nil {
		return c.mu.err
	}
	c.mu.producers[id] = p
	return nil
}

func (c *conn) removeProducer(id uint64) {
	c.mu.Lock()
	delete(c.mu.producers, id)
	c.mu.Unlock()
}

func (c *conn) addConsumer(id uint64, cons connConsumer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.err != nil {
		return c.mu.err
	}
	c.mu.consumers[id] = cons
	return nil
}

func (c *conn) removeConsumer(id uint64) {
	c.mu.Lock()
	delete(c.mu.consumers, id)
	c.mu.Unlock()
}

func (c *conn) producer(id uint64) connProducer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.producers[id]
}

func (c *conn) consumer(id uint64) connConsumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.consumers[id]
}

func (c *conn) readLoop() {
	defer c.wg.Done()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			if errors.Is(err, pulsar.ErrChecksum) && f.Cmd.GetType() == pb.BaseCommand_MESSAGE {
				if cons := c.consumer(f.Cmd.Message.GetConsumerId()); cons != nil {
					cons.onCorrupt(c, f.Cmd.Message, err)
				}
				continue
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.log.Warn("pulsarclient: connection failed", "err", err)
			}
			c.close(fmt.Errorf("read: %w", err))
			return
		}
		c.dispatch(&f)
	}
}

// dispatch handles one frame on the reader goroutine.
func (c *conn) dispatch(f *pulsar.Frame) {
	cmd := f.Cmd
	switch cmd.GetType() {
	case pb.BaseCommand_SEND_RECEIPT:
		if p := c.producer(cmd.SendReceipt.GetProducerId()); p != nil {
			p.onReceipt(c, cmd.SendReceipt)
		}
	case pb.BaseCommand_SEND_ERROR:
		if p := c.producer(cmd.SendError.GetProducerId()); p != nil {
			p.onSendError(c, cmd.SendError)
		}
	case pb.BaseCommand_MESSAGE:
		if cons := c.consumer(cmd.Message.GetConsumerId()); cons != nil {
			cons.onMessage(c, f)
		}
	case pb.BaseCommand_SUCCESS:
		c.complete(cmd.Success.GetRequestId(), cmd)
	case pb.BaseCommand_ERROR:
		c.complete(cmd.Error.GetRequestId(), cmd)
	case pb.BaseCommand_PRODUCER_SUCCESS:
		if cmd.ProducerSuccess.ProducerReady != nil && !cmd.ProducerSuccess.GetProducerReady() {
			return // WaitForExclusive: the broker answers again when the producer is ready
		}
		c.complete(cmd.ProducerSuccess.GetRequestId(), cmd)
	case pb.BaseCommand_LOOKUP_RESPONSE:
		c.complete(cmd.LookupTopicResponse.GetRequestId(), cmd)
	case pb.BaseCommand_PARTITIONED_METADATA_RESPONSE:
		c.complete(cmd.PartitionMetadataResponse.GetRequestId(), cmd)
	case pb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE:
		c.complete(cmd.GetLastMessageIdResponse.GetRequestId(), cmd)
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE:
		c.complete(cmd.GetTopicsOfNamespaceResponse.GetRequestId(), cmd)
	case pb.BaseCommand_ACK_RESPONSE:
		c.complete(cmd.AckResponse.GetRequestId(), cmd)
	case pb.BaseCommand_CLOSE_PRODUCER:
		id := cmd.CloseProducer.GetProducerId()
		if p := c.producer(id); p != nil {
			c.removeProducer(id)
			p.onClosed(c, errClosedByBroker)
		}
	case pb.BaseCommand_CLOSE_CONSUMER:
		id := cmd.CloseConsumer.GetConsumerId()
		if cons := c.consumer(id); cons != nil {
			c.removeConsumer(id)
			cons.onClosed(c, errClosedByBroker)
		}
	case pb.BaseCommand_SCALABLE_TOPIC_UPDATE, pb.BaseCommand_SCALABLE_TOPIC_SUBSCRIBE_RESPONSE,
		pb.BaseCommand_SCALABLE_TOPIC_ASSIGNMENT_UPDATE:
		c.scal.dispatch(c, cmd)
	case pb.BaseCommand_PING:
		_ = c.write(pulsar.Wrap(&pb.CommandPong{}))
	case pb.BaseCommand_AUTH_CHALLENGE:
		c.answerChallenge()
	case pb.BaseCommand_REACHED_END_OF_TOPIC:
		if cons := c.consumer(cmd.ReachedEndOfTopic.GetConsumerId()); cons != nil {
			cons.onEndOfTopic(c)
		}
	case pb.BaseCommand_PONG, pb.BaseCommand_ACTIVE_CONSUMER_CHANGE:
		// Nothing to do: keep-alive answer; the failover state is not surfaced.
	default:
		c.log.Debug("pulsarclient: ignoring command", "type", cmd.GetType())
	}
}
