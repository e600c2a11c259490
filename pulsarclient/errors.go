package pulsarclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

var (
	// ErrClosed is returned by calls on a closed Client, Producer or Consumer, and completes
	// sends that were still pending when the producer was closed.
	ErrClosed = errors.New("pulsarclient: closed")
	// ErrConnectionClosed is wrapped when the connection a request was sent on closed before
	// the answer came. Producers and consumers reconnect by themselves; one-off requests
	// (lookup, partitioned metadata) fail with it.
	ErrConnectionClosed = errors.New("pulsarclient: connection closed")
	// ErrProtocol is wrapped when the broker breaks the protocol (an answer of the wrong type,
	// a receipt out of order, a frame we cannot decode). The connection is closed.
	ErrProtocol = errors.New("pulsarclient: protocol error")
	// ErrMessageTooLarge is returned by Send and SendAsync for a payload larger than the
	// broker's max_message_size.
	ErrMessageTooLarge = errors.New("pulsarclient: message too large")
	// ErrBadURL is returned by New for a service URL that is not pulsar://host:port.
	ErrBadURL = errors.New("pulsarclient: bad service url")
	// ErrUnsupportedCompression is wrapped when a consumer receives an entry compressed with
	// a codec this client does not know (with compression.ErrUnsupported).
	ErrUnsupportedCompression = errors.New("pulsarclient: unsupported compression")
	// ErrScalableUnsupported is returned for a scalable topic when the broker's CONNECTED
	// did not set FeatureFlags.supports_scalable_topics (e.g. through a proxy that does not
	// forward the scalable-topic commands): the client then sends none of them.
	ErrScalableUnsupported = errors.New("pulsarclient: the broker does not support scalable topics")
)

// ServerError is an error the broker answered with (CommandError, CommandSendError, a
// failed lookup). Its text follows the Go client's "server error: <Code>: <message>".
type ServerError struct {
	Code    pb.ServerError
	Message string
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("server error: %s: %s", e.Code, e.Message)
}

// Is makes errors.Is(err, &ServerError{Code: c}) match any ServerError with code c.
func (e *ServerError) Is(target error) bool {
	t, ok := target.(*ServerError)
	return ok && t.Code == e.Code && t.Message == ""
}

// IsServerError reports whether err is, or wraps, a ServerError with the given code.
func IsServerError(err error, code pb.ServerError) bool {
	var se *ServerError
	return errors.As(err, &se) && se.Code == code
}

// retriable classifies the broker errors after which a producer or consumer should try
// again (re-lookup, reconnect) rather than give up.
func retriable(err error) bool {
	if errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, ErrBadURL) {
		return false
	}
	var se *ServerError
	if !errors.As(err, &se) {
		// Connection-level failures (refused, reset, closed, timeouts) are transient.
		return true
	}
	switch se.Code {
	case pb.ServerError_ServiceNotReady, // topic loading or moving between brokers
		pb.ServerError_TooManyRequests,  // broker throttles lookups
		pb.ServerError_MetadataError,    // etcd hiccup
		pb.ServerError_PersistenceError, // bookie write failed; the broker recovers the ledger
		pb.ServerError_UnknownError,     // treat as transient, like the Go client
		pb.ServerError_ProducerBusy,     // our previous incarnation is still registered
		pb.ServerError_ConsumerBusy,     // idem, for an Exclusive subscription
		pb.ServerError_ProducerBlockedQuotaExceededException:
		return true
	default:
		// TopicNotFound, TopicTerminatedError, ProducerFenced, NotAllowed, auth errors,
		// InvalidTopicName, IncompatibleSchema ...: permanent.
		return false
	}
}
