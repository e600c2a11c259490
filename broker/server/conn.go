package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
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

// conn is one client connection. The reader goroutine (serve, conn_io.go) owns state and
// the FrameReader and handles every command (slow ones — lookups, topic loads, schema — on
// their own goroutines); the writer goroutine (writeLoop) owns the socket's write side and
// writes what Send queued, in batches. The producer and consumer ids are registries (leaf
// locks) because creating goroutines and topic and subscription goroutines change them.
//
// The commands are served in conn_produce.go, conn_consume.go and conn_lookup.go.
type conn struct {
	s      *Server
	b      Backend
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
	// park holds the SENDs beyond the budget, and the commands that must stay behind them,
	// for the drainer (conn_park.go).
	park struct {
		sync.Mutex // guards the fields below, except room
		q          []parked
		bytes      int           // of the parked SENDs' data
		draining   bool          // a drainer runs; it clears this when it finds q empty
		room       chan struct{} // cap 1: the drainer took something off q
	}
	drainers sync.WaitGroup

	producers *registry[*topic.Producer]
	consumers *registry[*topic.Consumer]

	auth connAuth // conn_auth.go

	scalableOK bool             // CONNECT set supports_scalable_topics (written before serving)
	scal       scalableSessions // conn_scalable.go
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, b: s.b, nc: nc, remote: nc.RemoteAddr().String(), state: connHandshaking,
		wake: make(chan struct{}, 1), done: make(chan struct{}), writerEnd: make(chan struct{}),
		budget:    make(chan struct{}, s.cfg.MaxPendingPublishPerConnection),
		producers: newRegistry[*topic.Producer](), consumers: newRegistry[*topic.Consumer]()}
	c.park.room = make(chan struct{}, 1)
	c.log = s.log.With("remote", c.remote)
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

// ProducerClosed forgets p (topic.Conn).
func (c *conn) ProducerClosed(p *topic.Producer) { c.producers.forgetObj(p.ID, p) }

// ConsumerClosed forgets cs (topic.Conn).
func (c *conn) ConsumerClosed(cs *topic.Consumer) { c.consumers.forgetObj(cs.ID, cs) }

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

// detachAll closes the connection's producers and consumers. The ones still being created
// find their ids gone and close what they made.
func (c *conn) detachAll() {
	c.producers.closeAll()
	c.consumers.closeAll()
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
	c.s.m.Commands.WithLabelValues(t.String()).Inc()
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
	case pb.BaseCommand_PONG:
	case pb.BaseCommand_AUTH_RESPONSE:
		if err := c.handleAuthResponse(cmd.GetAuthResponse()); err != nil {
			c.close("authentication refresh failed")
		}
	case pb.BaseCommand_SEND:
		c.handleSend(f)
	case pb.BaseCommand_LOOKUP:
		go c.handleLookup(cmd.GetLookupTopic())
	case pb.BaseCommand_PARTITIONED_METADATA:
		go c.handlePartitionedMetadata(cmd.GetPartitionMetadata())
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE:
		go c.handleTopicsOfNamespace(cmd.GetGetTopicsOfNamespace())
	case pb.BaseCommand_TC_CLIENT_CONNECT_REQUEST:
		go c.handleTcClientConnect(cmd.GetTcClientConnectRequest())
	case pb.BaseCommand_NEW_TXN:
		go c.handleNewTxn(cmd.GetNewTxn())
	case pb.BaseCommand_ADD_PARTITION_TO_TXN:
		go c.handleAddPartitionToTxn(cmd.GetAddPartitionToTxn())
	case pb.BaseCommand_ADD_SUBSCRIPTION_TO_TXN:
		go c.handleAddSubscriptionToTxn(cmd.GetAddSubscriptionToTxn())
	case pb.BaseCommand_END_TXN:
		go c.handleEndTxn(cmd.GetEndTxn())
	case pb.BaseCommand_PRODUCER:
		c.handleProducer(cmd.GetProducer())
	case pb.BaseCommand_CLOSE_PRODUCER:
		closeID(c, c.producers, cmd.GetCloseProducer().GetProducerId(), cmd.GetCloseProducer().GetRequestId())
	case pb.BaseCommand_SUBSCRIBE:
		c.handleSubscribe(cmd.GetSubscribe())
	case pb.BaseCommand_FLOW:
		if e := c.consumers.get(cmd.GetFlow().GetConsumerId()); e != nil {
			e.obj.Flow(cmd.GetFlow().GetMessagePermits())
		}
	case pb.BaseCommand_ACK:
		c.handleAck(cmd.GetAck())
	case pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
		r := cmd.GetRedeliverUnacknowledgedMessages()
		if e := c.consumers.get(r.GetConsumerId()); e != nil {
			e.obj.Redeliver(r.GetMessageIds())
		}
	case pb.BaseCommand_SEEK:
		c.handleSeek(cmd.GetSeek())
	case pb.BaseCommand_UNSUBSCRIBE:
		c.handleUnsubscribe(cmd.GetUnsubscribe())
	case pb.BaseCommand_CLOSE_CONSUMER:
		closeID(c, c.consumers, cmd.GetCloseConsumer().GetConsumerId(), cmd.GetCloseConsumer().GetRequestId())
	case pb.BaseCommand_GET_LAST_MESSAGE_ID:
		go c.handleGetLastMessageID(cmd.GetGetLastMessageId())
	case pb.BaseCommand_GET_SCHEMA:
		go c.handleGetSchema(cmd.GetGetSchema())
	case pb.BaseCommand_GET_OR_CREATE_SCHEMA:
		go c.handleGetOrCreateSchema(cmd.GetGetOrCreateSchema())
	case pb.BaseCommand_SCALABLE_TOPIC_LOOKUP, pb.BaseCommand_SCALABLE_TOPIC_UPDATE, pb.BaseCommand_SCALABLE_TOPIC_CLOSE,
		pb.BaseCommand_SCALABLE_TOPIC_SUBSCRIBE, pb.BaseCommand_SCALABLE_TOPIC_SUBSCRIBE_RESPONSE,
		pb.BaseCommand_SCALABLE_TOPIC_ASSIGNMENT_UPDATE, pb.BaseCommand_WATCH_SCALABLE_TOPICS,
		pb.BaseCommand_WATCH_SCALABLE_TOPICS_UPDATE, pb.BaseCommand_WATCH_SCALABLE_TOPICS_CLOSE:
		c.handleScalable(cmd) // conn_scalable.go
	default:
		// Commands Magnetar does not serve (transactions, topic watchers, ...): answer the
		// request, if it is one, so the client does not wait for its timeout.
		if rid, ok := requestID(cmd); ok {
			c.sendError(rid, fmt.Errorf("%w: %v is not supported", api.ErrNotAllowed, t))
		} else {
			c.log.Debug("ignoring unsupported command", "type", t)
		}
	}
	return nil
}

func (c *conn) handleConnect(cmd *pb.CommandConnect) error {
	c.clientVersion = cmd.GetClientVersion()
	c.scalableOK = cmd.GetFeatureFlags().GetSupportsScalableTopics()
	if err := c.authenticate(cmd); err != nil {
		c.close("authentication failed") // after the AuthenticationError answer
		return nil
	}
	pv := min(cmd.GetProtocolVersion(), pulsar.ProtocolVersion)
	sv, mms := serverVersion, int32(c.s.cfg.MaxMessageSize)
	c.Send(pulsar.Wrap(&pb.CommandConnected{ServerVersion: &sv, ProtocolVersion: &pv, MaxMessageSize: &mms,
		FeatureFlags: &pb.FeatureFlags{SupportsBrokerEntryMetadata: proto.Bool(false), SupportsScalableTopics: proto.Bool(true)}}))
	c.state = connConnected
	c.log.Debug("client connected", "client", c.clientVersion, "protocol", cmd.GetProtocolVersion())
	return nil
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
