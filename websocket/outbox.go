package websocket

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/coder/websocket"
)

// outbox is the ordered queue of a socket's answers, written by one goroutine (drain). push
// never blocks: the producer's receipts arrive on the producer's goroutine, which must not
// wait for the socket. Its length is bounded by the producer's pending messages plus the
// answers to the messages being read.
type outbox struct {
	wake chan struct{} // cap 1: items were pushed

	mu struct {
		sync.Mutex // guards the fields below
		items      [][]byte
	}
}

func newOutbox() *outbox { return &outbox{wake: make(chan struct{}, 1)} }

// push queues v's JSON.
func (o *outbox) push(v any) {
	b, err := json.Marshal(v)
	if err != nil { // the answers are plain structs of strings and numbers
		panic(err)
	}
	o.mu.Lock()
	o.mu.items = append(o.mu.items, b)
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// drain writes the queued items until ctx ends or a write fails.
func (o *outbox) drain(ctx context.Context, ws *websocket.Conn) error {
	var batch [][]byte
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-o.wake:
		}
		o.mu.Lock()
		batch, o.mu.items = o.mu.items, batch[:0]
		o.mu.Unlock()
		for i, b := range batch {
			if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
				return err
			}
			batch[i] = nil
		}
	}
}

// goingAway closes ws with 1001 (going away) when the service stops (svc ends) and returns
// the function that stops watching. A socket's reads and writes use a context of their
// own: ending one closes the connection abruptly, without a close frame.
func goingAway(svc context.Context, ws *websocket.Conn) (stop func() bool) {
	return context.AfterFunc(svc, func() { ws.Close(websocket.StatusGoingAway, "service closing") })
}
