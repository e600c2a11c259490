package websocket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/coder/websocket"

	"github.com/magnetar-io/magnetar/pulsarclient"
)

// consumerSession serves a consumer or reader socket. The deliver goroutine receives
// messages and writes them to the socket while it has credit: in push mode fewer than
// maxPending messages unacknowledged on the socket, in pull mode the permits the client
// granted. The socket's reader (run) handles the client's commands: acknowledgements
// (which return credit in push mode), negative acknowledgements, permits, isEndOfTopic and
// unsubscribe. A reader acknowledges each message to the broker as it is delivered (as
// Pulsar's readers do); the client's acknowledgements only return credit.
type consumerSession struct {
	s      *Service
	kind   kind
	c      *pulsarclient.Consumer
	params consumerParams
	topic  string
	credit chan struct{} // cap 1: credit was returned or granted

	mu struct {
		sync.Mutex // guards the fields below
		// pending counts the messages written and not acknowledged (push mode).
		pending int
		// permits counts the messages the client still asked for (pull mode).
		permits int
		// unacked holds the delivered messages by their encoded id, to acknowledge the
		// message itself (a batch's messages are acknowledged to the broker together).
		unacked map[string]*pulsarclient.Message
	}
}

func (s *Service) newConsumer(ctx context.Context, cl *pulsarclient.Client, rt route, cp consumerParams) (session, error) {
	c, err := cl.Subscribe(ctx, cp.opts)
	if err != nil {
		return nil, err
	}
	cs := &consumerSession{s: s, kind: rt.kind, c: c, params: cp, topic: rt.topic, credit: make(chan struct{}, 1)}
	cs.mu.unacked = make(map[string]*pulsarclient.Message)
	return cs, nil
}

func (cs *consumerSession) close() { _ = cs.c.Close(context.Background()) }

func (cs *consumerSession) run(svc context.Context, ws *websocket.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer goingAway(svc, ws)()
	deliverDone := make(chan struct{})
	go func() {
		defer close(deliverDone)
		if err := cs.deliver(ctx, ws); err != nil && ctx.Err() == nil {
			// The consumer failed for good (its topic deleted, ...): the client is told.
			cs.s.log.Warn("websocket consumer stopped", "topic", cs.topic, "err", err)
			ws.Close(websocket.StatusCode(closeStatusBase+int(errSubscribe)), truncate(errSubscribe.String()+": "+err.Error()))
			cancel()
		}
	}()
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			break
		}
		if code, detail := cs.handle(ctx, ws, data); code != 0 {
			// Pulsar closes the socket on a command it cannot read; the client is told why
			// first, in JSON, then by the close status and reason.
			cs.s.m.errors.WithLabelValues("frame").Inc()
			cs.s.log.Debug("websocket consumer command refused", "topic", cs.topic, "err", detail)
			b, _ := json.Marshal(commandError{Result: "error", ErrorCode: int(code), ErrorMsg: code.String() + ": " + detail})
			_ = ws.Write(ctx, websocket.MessageText, b)
			ws.Close(websocket.StatusCode(closeStatusBase+int(code)), truncate(code.String()+": "+detail))
			cancel()
			<-deliverDone
			return
		}
	}
	cancel()
	<-deliverDone
	ws.Close(websocket.StatusNormalClosure, "")
}

// commandError tells a consumer or reader socket why its command was refused, just before
// the socket closes.
type commandError struct {
	Result    string `json:"result"`
	ErrorCode int    `json:"errorCode"`
	ErrorMsg  string `json:"errorMsg"`
}

// truncate keeps a close reason within the 123 bytes a close frame allows.
func truncate(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}

// deliver writes messages to the socket while there is credit, until ctx ends or the
// consumer fails.
func (cs *consumerSession) deliver(ctx context.Context, ws *websocket.Conn) error {
	for {
		if err := cs.waitCredit(ctx); err != nil {
			return nil
		}
		m, err := cs.c.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, pulsarclient.ErrClosed) { // closed by the session (unsubscribe)
				return nil
			}
			return err
		}
		id := encodeMessageID(m.ID)
		cm := consumerMessage{MessageID: id, Payload: encodeBase64(m.Payload), Properties: m.Properties,
			PublishTime: formatTime(m.PublishTime), RedeliveryCount: m.RedeliveryCount, Key: m.Key}
		if cm.Properties == nil {
			cm.Properties = map[string]string{}
		}
		if !m.EventTime.IsZero() {
			cm.EventTime = formatTime(m.EventTime)
		}
		b, err := json.Marshal(cm)
		if err != nil {
			return fmt.Errorf("%s: %w", errSerialize, err)
		}
		cs.mu.Lock()
		if cs.params.pullMode {
			cs.mu.permits--
		} else {
			cs.mu.pending++
		}
		if cs.kind == kindConsumer {
			cs.mu.unacked[id] = m
		}
		cs.mu.Unlock()
		if cs.kind == kindReader {
			_ = cs.c.Ack(m)
		}
		cs.s.m.messagesOut.WithLabelValues(cs.kind.String()).Inc()
		if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
			return nil // the socket is gone: run ends
		}
	}
}

// waitCredit waits until a message may be written.
func (cs *consumerSession) waitCredit(ctx context.Context) error {
	for {
		cs.mu.Lock()
		ok := cs.mu.pending < cs.params.maxPending
		if cs.params.pullMode {
			ok = cs.mu.permits > 0
		}
		cs.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-cs.credit:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (cs *consumerSession) signal() {
	select {
	case cs.credit <- struct{}{}:
	default:
	}
}

// handle serves one command; a nonzero code refuses it (the socket then closes).
func (cs *consumerSession) handle(ctx context.Context, ws *websocket.Conn, data []byte) (wsError, string) {
	var cmd consumerCommand
	if err := json.Unmarshal(data, &cmd); err != nil {
		return errDeserialize, err.Error()
	}
	switch cmd.Type {
	case cmdEndOfTopic:
		b, _ := json.Marshal(endOfTopicResponse{EndOfTopic: cs.c.HasReachedEndOfTopic()})
		_ = ws.Write(ctx, websocket.MessageText, b)
		return 0, ""
	case cmdPermit:
		if cmd.PermitMessages == nil {
			return errDeserialize, "Missing required permitMessages field for 'permit' command"
		}
		if cs.params.pullMode {
			cs.mu.Lock()
			cs.mu.permits += *cmd.PermitMessages
			cs.mu.Unlock()
			cs.signal()
		}
		return 0, ""
	case cmdUnsubscribe:
		if cs.kind != kindConsumer {
			return 0, ""
		}
		if err := cs.c.Unsubscribe(ctx); err != nil {
			cs.s.log.Warn("websocket unsubscribe failed", "topic", cs.topic, "err", err)
		}
		// The consumer is closed: so is the socket (Pulsar leaves it open, delivering nothing).
		ws.Close(websocket.StatusNormalClosure, "unsubscribed")
		return 0, ""
	}
	// An acknowledgement (no type, or one Pulsar does not know), or a negative one.
	if cmd.MessageID == "" {
		if cmd.Type != "" && cmd.Type != cmdNack {
			return errDeserialize, fmt.Sprintf("unknown command type %q", cmd.Type)
		}
		return errDeserialize, "messageId is required"
	}
	id, err := decodeMessageID(cmd.MessageID)
	if err != nil {
		return errDeserialize, err.Error()
	}
	if cs.kind == kindConsumer {
		cs.mu.Lock()
		m := cs.mu.unacked[cmd.MessageID]
		delete(cs.mu.unacked, cmd.MessageID)
		cs.mu.Unlock()
		switch {
		case cmd.Type == cmdNack && m != nil:
			err = cs.c.Nack(m)
		case cmd.Type == cmdNack:
			err = cs.c.NackID(id)
		case m != nil:
			err = cs.c.Ack(m)
		default:
			err = cs.c.AckID(id)
		}
		if err != nil && !errors.Is(err, pulsarclient.ErrClosed) {
			return errDeserialize, err.Error()
		}
	}
	if !cs.params.pullMode {
		cs.mu.Lock()
		cs.mu.pending--
		cs.mu.Unlock()
		cs.signal()
	}
	return 0, ""
}
