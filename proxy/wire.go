package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// serverVersion is what the proxy's own CONNECTED answers carry.
const serverVersion = "Magnetar-Proxy-4.0"

// connectRequestID is the request id of errors answering a CONNECT (Pulsar's -1).
const connectRequestID = uint64(math.MaxUint64)

// writeTimeout bounds one write to a client or broker by the proxy itself (not spliced
// bytes).
const writeTimeout = 10 * time.Second

var (
	// errNoBroker: no broker is known (none registered, none configured).
	errNoBroker = errors.New("proxy: no broker available")
	// errBadFrame wraps the reasons a client's frame is refused.
	errBadFrame = errors.New("proxy: bad frame")
)

// brokerError is a broker's (or the proxy's) ERROR answer: its code goes to the client.
type brokerError struct {
	code pb.ServerError
	msg  string
}

func (e *brokerError) Error() string { return fmt.Sprintf("%v: %s", e.code, e.msg) }

// notReady is a retryable error for the client: no broker could answer.
func notReady(format string, args ...any) *brokerError {
	return &brokerError{code: pb.ServerError_ServiceNotReady, msg: fmt.Sprintf(format, args...)}
}

// codeOf is the ServerError a client gets for err.
func codeOf(err error) *brokerError {
	var be *brokerError
	if errors.As(err, &be) {
		return be
	}
	return notReady("%v", err)
}

// writeCmd writes one command frame to nc, bounded by writeTimeout.
func writeCmd(nc net.Conn, cmd *pb.BaseCommand) error {
	b, err := pulsar.AppendCommand(nil, cmd)
	if err != nil {
		return err
	}
	return writeRaw(nc, b)
}

func writeRaw(nc net.Conn, b []byte) error {
	nc.SetWriteDeadline(time.Now().Add(writeTimeout)) //nolint:errcheck // the write reports it
	_, err := nc.Write(b)
	nc.SetWriteDeadline(time.Time{}) //nolint:errcheck
	return err
}

// readOneFrame reads exactly one frame from r, nothing beyond it (the bytes after a
// handshake belong to whoever the connection is spliced to). It returns the decoded frame
// and its raw bytes. A frame over max bytes is a *pulsar.FrameSizeError, one that does not
// decode an error wrapping errBadFrame.
func readOneFrame(r io.Reader, max int) (pulsar.Frame, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return pulsar.Frame{}, nil, err
	}
	total := binary.BigEndian.Uint32(hdr[:])
	if uint64(total) > uint64(max) {
		return pulsar.Frame{}, nil, &pulsar.FrameSizeError{Size: uint64(total), Max: max}
	}
	b := make([]byte, 4+int(total))
	copy(b, hdr[:])
	if _, err := io.ReadFull(r, b[4:]); err != nil {
		return pulsar.Frame{}, nil, err
	}
	f, err := pulsar.DecodeFrame(b)
	if err != nil {
		return pulsar.Frame{}, nil, fmt.Errorf("%w: %v", errBadFrame, err)
	}
	return f, b, nil
}

// errorCmd is an ERROR answer to request rid.
func errorCmd(rid uint64, e *brokerError) *pb.BaseCommand {
	msg := e.msg
	return pulsar.Wrap(&pb.CommandError{RequestId: &rid, Error: e.code.Enum(), Message: &msg})
}

// dialBroker connects to the broker at addr and performs the handshake with connect. It
// returns the connection and the raw CONNECTED frame the broker answered. A broker's ERROR
// answer is a *brokerError; every other failure (unreachable, no answer within
// Config.DialTimeout) is one too, with ServiceNotReady: the client may retry.
func (s *Service) dialBroker(ctx context.Context, addr string, connect *pb.CommandConnect) (net.Conn, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	d := net.Dialer{}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		s.m.dialFail.Inc()
		return nil, nil, notReady("broker %s unreachable: %v", addr, err)
	}
	if !s.trackUpstream(nc) {
		nc.Close()
		return nil, nil, notReady("%v", errClosed)
	}
	fail := func(err *brokerError) (net.Conn, []byte, error) {
		s.m.dialFail.Inc()
		s.untrack(nc)
		return nil, nil, err
	}
	dl, _ := ctx.Deadline()
	nc.SetDeadline(dl) //nolint:errcheck // the reads and writes report it
	if err := writeCmd(nc, pulsar.Wrap(connect)); err != nil {
		return fail(notReady("broker %s: sending CONNECT: %v", addr, err))
	}
	f, raw, err := readOneFrame(nc, pulsar.MaxFrameSizeDefault)
	if err != nil {
		return fail(notReady("broker %s: no CONNECTED: %v", addr, err))
	}
	nc.SetDeadline(time.Time{}) //nolint:errcheck
	switch f.Cmd.GetType() {
	case pb.BaseCommand_CONNECTED:
		return nc, raw, nil
	case pb.BaseCommand_ERROR:
		e := f.Cmd.GetError()
		return fail(&brokerError{code: e.GetError(), msg: fmt.Sprintf("broker %s: %s", addr, e.GetMessage())})
	}
	return fail(notReady("broker %s answered CONNECT with %v", addr, f.Cmd.GetType()))
}

// brokerConnect builds the CONNECT the proxy sends to a broker for a client that sent
// client and authenticated as principal (auth on; "" otherwise). The proxy presents its
// own credentials if it has some, else the client's when it does not authenticate clients
// itself (then the broker does). With authentication on, the client's role goes as
// original_principal, and its credentials too if Config.ForwardAuthorizationCredentials.
func (s *Service) brokerConnect(client *pb.CommandConnect, principal string) (*pb.CommandConnect, error) {
	c := proto.Clone(client).(*pb.CommandConnect)
	c.ProxyToBrokerUrl = nil
	c.OriginalPrincipal, c.OriginalAuthData, c.OriginalAuthMethod = nil, nil, nil
	authOn := s.cfg.Auth.Enabled()
	switch {
	case s.cfg.BrokerAuthMethod != "":
		data, err := s.cfg.BrokerAuthData()
		if err != nil {
			return nil, notReady("proxy credentials: %v", err)
		}
		c.AuthMethodName, c.AuthData = proto.String(s.cfg.BrokerAuthMethod), data
	case authOn:
		c.AuthMethodName, c.AuthData = nil, nil
	}
	if s.cfg.BrokerAuthMethod != "" && c.FeatureFlags != nil {
		// The broker would challenge the proxy's credentials, and the client would answer
		// with its own: without refresh, the broker closes the connection when they expire.
		c.FeatureFlags = proto.Clone(c.FeatureFlags).(*pb.FeatureFlags)
		c.FeatureFlags.SupportsAuthRefresh = proto.Bool(false)
	}
	if authOn {
		c.OriginalPrincipal = proto.String(principal)
		if s.cfg.ForwardAuthorizationCredentials {
			c.OriginalAuthMethod = proto.String(client.GetAuthMethodName())
			c.OriginalAuthData = proto.String(string(client.GetAuthData()))
		}
	}
	return c, nil
}

// requestOf returns the request id of a request or response body, if it has one.
func requestOf(cmd *pb.BaseCommand) (uint64, bool) {
	r, ok := pulsar.Body(cmd).(interface{ GetRequestId() uint64 })
	if !ok {
		return 0, false
	}
	return r.GetRequestId(), true
}

// setRequestID sets the request id of the requests the proxy forwards and of the
// responses it relays; false for other commands.
func setRequestID(cmd *pb.BaseCommand, id uint64) bool {
	switch b := pulsar.Body(cmd).(type) {
	case *pb.CommandLookupTopic:
		b.RequestId = &id
	case *pb.CommandPartitionedTopicMetadata:
		b.RequestId = &id
	case *pb.CommandGetTopicsOfNamespace:
		b.RequestId = &id
	case *pb.CommandGetSchema:
		b.RequestId = &id
	case *pb.CommandGetOrCreateSchema:
		b.RequestId = &id
	case *pb.CommandLookupTopicResponse:
		b.RequestId = &id
	case *pb.CommandPartitionedTopicMetadataResponse:
		b.RequestId = &id
	case *pb.CommandGetTopicsOfNamespaceResponse:
		b.RequestId = &id
	case *pb.CommandGetSchemaResponse:
		b.RequestId = &id
	case *pb.CommandGetOrCreateSchemaResponse:
		b.RequestId = &id
	case *pb.CommandError:
		b.RequestId = &id
	default:
		return false
	}
	return true
}
