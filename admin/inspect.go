package admin

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// InspectService is the message inspection part of the broker API (peek, get by id,
// examine, message id by time). *broker.Service implements it; a Service that does not
// answers these paths with 501.
type InspectService interface {
	PeekMessage(ctx context.Context, topic, sub string, n int) (api.StoredMessage, error)
	MessageByID(ctx context.Context, topic string, ledger, entry int64) (api.StoredMessage, error)
	ExamineMessage(ctx context.Context, topic string, latest bool, n int) (api.StoredMessage, error)
	MessageIDByTime(ctx context.Context, topic string, at time.Time) (api.MessageID, error)
}

func (h *handler) inspectRoutes(route routeFunc, topicScope func(r *http.Request) scope) {
	const p = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
	route("GET "+p+"/subscription/{sub}/position/{n}", h.peek, topicScope)
	route("GET "+p+"/ledger/{ledger}/entry/{entry}", h.messageByID, topicScope)
	route("GET "+p+"/examinemessage", h.examine, topicScope)
	route("GET "+p+"/messageid/{timestamp}", h.messageIDByTime, topicScope)
}

func (h *handler) inspectService() (InspectService, error) {
	s, ok := h.svc.(InspectService)
	if !ok {
		return nil, restErr(http.StatusNotImplemented, "message inspection is not served")
	}
	return s, nil
}

// pathInt reads a non-negative integer path value (at least lowest).
func pathInt(r *http.Request, name string, lowest int64) (int64, error) {
	s := r.PathValue(name)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < lowest {
		return 0, restErr(http.StatusBadRequest, "invalid %s %q", name, s)
	}
	return v, nil
}

// inspectTopic validates the request's topic and returns the inspection service.
func (h *handler) inspectTopic(r *http.Request) (InspectService, string, error) {
	svc, err := h.inspectService()
	if err != nil {
		return nil, "", err
	}
	n, err := checkTopic(r)
	if err != nil {
		return nil, "", err
	}
	if !n.IsPartition() {
		if parts, err := h.partitions(r, n); err != nil {
			return nil, "", err
		} else if parts > 0 {
			return nil, "", restErr(http.StatusMethodNotAllowed, "Inspecting messages on a partitioned topic is not allowed: "+
				"name a partition")
		}
	}
	return svc, n.String(), nil
}

func (h *handler) peek(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.inspectTopic(r)
	if err != nil {
		return err
	}
	n, err := pathInt(r, "n", 1)
	if err != nil {
		return err
	}
	m, err := svc.PeekMessage(r.Context(), t, r.PathValue("sub"), int(min(n, 1<<30)))
	if err != nil {
		return err
	}
	return writeMessage(w, m)
}

func (h *handler) messageByID(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.inspectTopic(r)
	if err != nil {
		return err
	}
	l, err := pathInt(r, "ledger", 0)
	if err != nil {
		return err
	}
	e, err := pathInt(r, "entry", 0)
	if err != nil {
		return err
	}
	m, err := svc.MessageByID(r.Context(), t, l, e)
	if err != nil {
		return err
	}
	return writeMessage(w, m)
}

func (h *handler) examine(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.inspectTopic(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	latest := true
	switch strings.ToLower(q.Get("initialPosition")) {
	case "", "latest":
	case "earliest":
		latest = false
	default:
		return restErr(http.StatusBadRequest, "initialPosition must be earliest or latest, not %q", q.Get("initialPosition"))
	}
	n := int64(1)
	if s := q.Get("messagePosition"); s != "" {
		if n, err = strconv.ParseInt(s, 10, 64); err != nil || n < 1 {
			return restErr(http.StatusBadRequest, "messagePosition must be a positive number, not %q", s)
		}
	}
	m, err := svc.ExamineMessage(r.Context(), t, latest, int(min(n, 1<<30)))
	if err != nil {
		return err
	}
	return writeMessage(w, m)
}

func (h *handler) messageIDByTime(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.inspectTopic(r)
	if err != nil {
		return err
	}
	ms, err := pathInt(r, "timestamp", 0)
	if err != nil {
		return err
	}
	id, err := svc.MessageIDByTime(r.Context(), t, time.UnixMilli(ms))
	if err != nil {
		return err
	}
	return ok(w, id)
}

// pulsarTime formats a Unix ms time as Pulsar's admin headers do (ISO 8601, ms, UTC).
func pulsarTime(ms uint64) string {
	return time.UnixMilli(int64(ms)).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// writeMessage answers a stored message as Pulsar does: the payload as the body and the
// metadata in X-Pulsar-* headers.
func writeMessage(w http.ResponseWriter, m api.StoredMessage) error {
	hd := w.Header()
	md := m.Metadata
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("X-Pulsar-Message-ID", fmt.Sprintf("%d:%d", m.ID.LedgerID, m.ID.EntryID))
	props := map[string]string{}
	for _, kv := range md.GetProperties() {
		props[kv.GetKey()] = kv.GetValue()
		hd.Set("X-Pulsar-PROPERTY-"+kv.GetKey(), kv.GetValue())
	}
	if len(props) > 0 {
		b, _ := json.Marshal(props)
		hd.Set("X-Pulsar-Property", string(b))
	}
	set := func(k string, present bool, v string) {
		if present {
			hd.Set(k, v)
		}
	}
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	set("X-Pulsar-publish-time", md.PublishTime != nil, pulsarTime(md.GetPublishTime()))
	set("X-Pulsar-event-time", md.GetEventTime() > 0, pulsarTime(md.GetEventTime()))
	set("X-Pulsar-deliver-at-time", md.DeliverAtTime != nil, pulsarTime(uint64(md.GetDeliverAtTime())))
	if md.NumMessagesInBatch != nil {
		hd.Set("X-Pulsar-num-batch-message", strconv.Itoa(int(md.GetNumMessagesInBatch())))
		hd.Set("X-Pulsar-batch-size", strconv.Itoa(len(m.Payload)))
	}
	set("X-Pulsar-null-value", md.GetNullValue(), "true")
	set("X-Pulsar-producer-name", md.ProducerName != nil, md.GetProducerName())
	set("X-Pulsar-sequence-id", md.SequenceId != nil, u(md.GetSequenceId()))
	set("X-Pulsar-highest-sequence-id", md.HighestSequenceId != nil, u(md.GetHighestSequenceId()))
	set("X-Pulsar-replicated-from", md.ReplicatedFrom != nil, md.GetReplicatedFrom())
	set("X-Pulsar-partition-key", md.PartitionKey != nil, md.GetPartitionKey())
	set("X-Pulsar-ordering-key", len(md.OrderingKey) > 0, base64.StdEncoding.EncodeToString(md.OrderingKey))
	set("X-Pulsar-compression", md.GetCompression() != pb.CompressionType_NONE, md.GetCompression().String())
	set("X-Pulsar-uncompressed-size", md.UncompressedSize != nil, u(uint64(md.GetUncompressedSize())))
	set("X-Pulsar-encryption-algo", md.EncryptionAlgo != nil, md.GetEncryptionAlgo())
	set("X-Pulsar-uuid", md.Uuid != nil, md.GetUuid())
	set("X-Pulsar-num-chunks-from-msg", md.NumChunksFromMsg != nil, strconv.Itoa(int(md.GetNumChunksFromMsg())))
	set("X-Pulsar-total-chunk-msg-size", md.TotalChunkMsgSize != nil, strconv.Itoa(int(md.GetTotalChunkMsgSize())))
	set("X-Pulsar-chunk-id", md.ChunkId != nil, strconv.Itoa(int(md.GetChunkId())))
	set("X-Pulsar-txnid-most-bits", md.TxnidMostBits != nil, u(md.GetTxnidMostBits()))
	set("X-Pulsar-txnid-least-bits", md.TxnidLeastBits != nil, u(md.GetTxnidLeastBits()))
	if v := md.GetSchemaVersion(); len(v) == 8 {
		hd.Set("X-Pulsar-schema-version", u(binary.BigEndian.Uint64(v)))
	}
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(m.Payload)
	return err
}
