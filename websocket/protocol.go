package websocket

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

// The JSON of the WebSocket API, field for field as Pulsar's pulsar-websocket data classes
// (ProducerMessage, ProducerAck, ConsumerMessage, ConsumerCommand, EndOfTopicResponse).

// producerMessage is what a producer socket sends (Pulsar's ProducerMessage).
type producerMessage struct {
	Payload             *string           `json:"payload"`
	Properties          map[string]string `json:"properties,omitempty"`
	Context             *string           `json:"context,omitempty"`
	Key                 *string           `json:"key,omitempty"`
	ReplicationClusters []string          `json:"replicationClusters,omitempty"`
	EventTime           *string           `json:"eventTime,omitempty"`
	DeliverAt           int64             `json:"deliverAt,omitempty"`
	DeliverAfterMs      int64             `json:"deliverAfterMs,omitempty"`
}

// producerAck answers each producer message (Pulsar's ProducerAck: null members are left
// out; errorCode and schemaVersion are Java primitives, always written).
type producerAck struct {
	Result        string  `json:"result"`
	ErrorMsg      string  `json:"errorMsg,omitempty"`
	MessageID     string  `json:"messageId,omitempty"`
	Context       *string `json:"context,omitempty"`
	ErrorCode     int     `json:"errorCode"`
	SchemaVersion int64   `json:"schemaVersion"`
}

// consumerMessage is a message pushed to a consumer or reader socket (Pulsar's
// ConsumerMessage).
type consumerMessage struct {
	MessageID       string            `json:"messageId"`
	Payload         string            `json:"payload"`
	Properties      map[string]string `json:"properties"`
	PublishTime     string            `json:"publishTime"`
	RedeliveryCount uint32            `json:"redeliveryCount"`
	EventTime       string            `json:"eventTime,omitempty"`
	Key             string            `json:"key,omitempty"`
}

// consumerCommand is what a consumer or reader socket sends (Pulsar's ConsumerCommand):
// no type (or any other) is an acknowledgement of messageId.
type consumerCommand struct {
	Type           string `json:"type"`
	MessageID      string `json:"messageId"`
	PermitMessages *int   `json:"permitMessages"`
}

// The consumer commands' types.
const (
	cmdPermit      = "permit"
	cmdUnsubscribe = "unsubscribe"
	cmdNack        = "negativeAcknowledge"
	cmdEndOfTopic  = "isEndOfTopic"
)

// endOfTopicResponse answers isEndOfTopic.
type endOfTopicResponse struct {
	EndOfTopic bool `json:"endOfTopic"`
}

// wsError is Pulsar's WebSocketError: the code in a producer's "send-error:<code>" result and
// in the close status of a socket closed for an error.
type wsError int

// Pulsar's WebSocketError codes.
const (
	errCreateProducer wsError = 1
	errSubscribe      wsError = 2
	errDeserialize    wsError = 3
	errSerialize      wsError = 4
	errAuthentication wsError = 5
	errNotAuthorized  wsError = 6
	errPayload        wsError = 7
	errUnknown        wsError = 8
)

var wsErrorText = map[wsError]string{
	errCreateProducer: "Failed to create producer",
	errSubscribe:      "Failed to subscribe",
	errDeserialize:    "Failed to de-serialize from JSON",
	errSerialize:      "Failed to serialize to JSON",
	errAuthentication: "Failed to authenticate client",
	errNotAuthorized:  "Client is not authorized",
	errPayload:        "Invalid payload encoding",
	errUnknown:        "Unknown error",
}

func (e wsError) String() string { return wsErrorText[e] }

// closeStatusBase is added to a WebSocketError code to make the close status. Pulsar closes
// with the bare code (1 to 8), which RFC 6455 does not allow in a close frame (browsers then
// report 1006); 4000-4999 is the range for applications.
const closeStatusBase = 4000

func sendError(e wsError) string { return "send-error:" + strconv.Itoa(int(e)) }

// encodeMessageID is Pulsar's MessageId.toByteArray in base64: the MessageIdData protobuf,
// with the partition and batch index only when they are set (≥ 0).
func encodeMessageID(id pulsarclient.MessageID) string {
	d := &pb.MessageIdData{LedgerId: proto.Uint64(uint64(id.LedgerID)), EntryId: proto.Uint64(uint64(id.EntryID))}
	if id.Partition >= 0 {
		d.Partition = proto.Int32(id.Partition)
	}
	if id.BatchIndex >= 0 {
		d.BatchIndex = proto.Int32(id.BatchIndex)
	}
	b, err := proto.Marshal(d)
	if err != nil { // a MessageIdData of set scalars always marshals
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// errBadMessageID marks a message id that is not base64 of a MessageIdData.
var errBadMessageID = errors.New("websocket: invalid message id")

// decodeMessageID reverses encodeMessageID (Pulsar's MessageId.fromByteArray). A missing
// partition or batch index is -1.
func decodeMessageID(s string) (pulsarclient.MessageID, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return pulsarclient.MessageID{}, fmt.Errorf("%w: %v", errBadMessageID, err)
	}
	var d pb.MessageIdData
	if err := proto.Unmarshal(b, &d); err != nil {
		return pulsarclient.MessageID{}, fmt.Errorf("%w: %v", errBadMessageID, err)
	}
	if d.LedgerId == nil || d.EntryId == nil {
		return pulsarclient.MessageID{}, fmt.Errorf("%w: no ledger or entry id", errBadMessageID)
	}
	id := pulsarclient.MessageID{LedgerID: int64(d.GetLedgerId()), EntryID: int64(d.GetEntryId()), Partition: -1, BatchIndex: -1}
	if d.Partition != nil {
		id.Partition = d.GetPartition()
	}
	if d.BatchIndex != nil {
		id.BatchIndex = d.GetBatchIndex()
	}
	return id, nil
}

// formatTime is Pulsar's DateFormatter.format: ISO 8601 with milliseconds and the zone's
// offset (e.g. 2021-10-29T16:01:38.967-07:00).
func formatTime(t time.Time) string { return t.Format("2006-01-02T15:04:05.000Z07:00") }

// parseTime is Pulsar's DateFormatter.parse: ISO 8601 with an offset, or with none (local time).
func parseTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("invalid time %q: want ISO 8601, e.g. 2021-10-29T16:01:38.967-07:00", s)
}

func encodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
