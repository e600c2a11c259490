package websocket

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/coder/websocket"

	"github.com/magnetar-io/magnetar/pulsarclient"
)

// producerSession publishes what a producer socket sends. The socket's reader (run) decodes
// each message and hands it to the producer; the producer's receipts, and the answers to
// bad messages, go through an outbox to the writer goroutine, in the order they happen.
type producerSession struct {
	s      *Service
	p      *pulsarclient.Producer
	params producerParams
	topic  string
}

func (s *Service) newProducer(ctx context.Context, cl *pulsarclient.Client, rt route, pp producerParams) (session, error) {
	opts := pp.opts
	opts.Topic = rt.topic
	p, err := cl.CreateProducer(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &producerSession{s: s, p: p, params: pp, topic: rt.topic}, nil
}

func (ps *producerSession) close() { _ = ps.p.Close(context.Background()) }

func (ps *producerSession) run(svc context.Context, ws *websocket.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer goingAway(svc, ws)()
	out := newOutbox()
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		if err := out.drain(ctx, ws); err != nil {
			cancel()
		}
	}()
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			break
		}
		ps.handle(ctx, data, out)
	}
	cancel()
	<-writerDone
	ws.Close(websocket.StatusNormalClosure, "")
}

// handle publishes one producer message, or answers why it cannot (Pulsar's
// ProducerHandler.onWebSocketText: the socket stays open).
func (ps *producerSession) handle(ctx context.Context, data []byte, out *outbox) {
	var m producerMessage
	if err := json.Unmarshal(data, &m); err != nil {
		ps.fail(out, errDeserialize, err.Error(), nil)
		return
	}
	if m.Payload == nil {
		ps.fail(out, errPayload, "payload is required", m.Context)
		return
	}
	payload, err := decodeBase64(*m.Payload)
	if err != nil {
		ps.fail(out, errPayload, "Invalid Base64 message-payload error="+err.Error(), m.Context)
		return
	}
	msg := &pulsarclient.ProducerMessage{Payload: payload, Properties: m.Properties}
	if m.Key != nil {
		msg.Key = *m.Key
	}
	if m.EventTime != nil {
		t, err := parseTime(*m.EventTime)
		if err != nil {
			ps.fail(out, errPayload, err.Error(), m.Context)
			return
		}
		msg.EventTime = t
	}
	if m.DeliverAt > 0 {
		msg.DeliverAfter = max(time.Until(time.UnixMilli(m.DeliverAt)), time.Millisecond)
	}
	if m.DeliverAfterMs > 0 {
		msg.DeliverAfter = time.Duration(m.DeliverAfterMs) * time.Millisecond
	}
	reqCtx := m.Context
	err = ps.p.SendAsync(ctx, msg, func(id pulsarclient.MessageID, err error) {
		if err != nil {
			ps.fail(out, errUnknown, err.Error(), reqCtx)
			return
		}
		ps.s.m.messagesIn.WithLabelValues(kindProducer.String()).Inc()
		out.push(producerAck{Result: "ok", MessageID: encodeMessageID(id), Context: reqCtx})
	})
	if err != nil && ctx.Err() == nil {
		ps.fail(out, errUnknown, err.Error(), reqCtx)
	}
}

func (ps *producerSession) fail(out *outbox, code wsError, msg string, reqCtx *string) {
	ps.s.m.errors.WithLabelValues("send").Inc()
	if code == errDeserialize || code == errPayload {
		ps.s.m.errors.WithLabelValues("frame").Inc()
	}
	ps.s.log.Debug("websocket producer message refused", "topic", ps.topic, "code", int(code), "err", msg)
	out.push(producerAck{Result: sendError(code), ErrorMsg: msg, Context: reqCtx})
}

// decodeBase64 decodes standard base64, with or without its padding (as Java's decoder).
func decodeBase64(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		if b2, err2 := base64.RawStdEncoding.DecodeString(s); err2 == nil {
			return b2, nil
		}
	}
	return b, err
}
