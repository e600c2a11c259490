package pulsarclient

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// SessionProducer is a producer for exactly one session on one topic (a partition or a
// non-partitioned topic), for a caller that keeps its own retry state, as the broker's
// geo-replicator does (package replication): it publishes entries whose message metadata
// the caller built (the original producer name and sequence ids kept), it never reconnects
// and never re-sends, and the session ends for good at the first send error, a
// CLOSE_PRODUCER or a lost connection: every send without a receipt then fails, and
// OnEnd is called once. Receipts complete sends in order. It is safe for concurrent use.
type SessionProducer struct {
	cl    *Client
	c     *conn
	id    uint64
	topic string
	onEnd func(error)

	closeOnce sync.Once

	mu struct {
		sync.Mutex // guards the fields below
		ended      error
		nextSeq    uint64
		pending    []sessionSend // in send order
	}
}

type sessionSend struct {
	seq uint64
	cb  func(MessageID, error)
}

// SessionProducerOptions configures a SessionProducer.
type SessionProducerOptions struct {
	// Topic is the topic or partition (not a partitioned topic's parent).
	Topic string
	// Name is the producer name (the broker refuses a second producer of it: ProducerBusy).
	Name string
	// OnEnd, if set, is called once when the session ends (err is why), on a connection
	// goroutine or the caller's; it must not block.
	OnEnd func(err error)
}

// CreateSessionProducer registers a session producer on its topic's broker.
func (cl *Client) CreateSessionProducer(ctx context.Context, o SessionProducerOptions) (*SessionProducer, error) {
	full, err := fullTopicName(o.Topic)
	if err != nil {
		return nil, err
	}
	cctx, cancel := cl.opContext(ctx)
	defer cancel()
	c, err := cl.topicConn(cctx, full)
	if err != nil {
		return nil, err
	}
	p := &SessionProducer{cl: cl, c: c, id: cl.nextID(), topic: full, onEnd: o.OnEnd}
	if err := c.addProducer(p.id, p); err != nil {
		return nil, err
	}
	rid := cl.nextID()
	cmd := &pb.CommandProducer{Topic: proto.String(full), ProducerId: proto.Uint64(p.id), RequestId: proto.Uint64(rid),
		ProducerName: proto.String(o.Name), UserProvidedProducerName: proto.Bool(true), Epoch: proto.Uint64(0),
		ProducerAccessMode: pb.ProducerAccessMode_Shared.Enum(), InitialSubscriptionName: proto.String("")}
	resp, err := c.request(cctx, rid, pulsar.Wrap(cmd))
	if err == nil && resp.GetProducerSuccess() == nil {
		err = fmt.Errorf("%w: answer to PRODUCER is %v", ErrProtocol, resp.GetType())
	}
	if err != nil {
		c.removeProducer(p.id)
		p.closeOnBroker()
		return nil, fmt.Errorf("create producer %s on %s: %w", o.Name, full, err)
	}
	return p, nil
}

// Send publishes one entry: meta (its producer name, sequence ids and the rest as the
// caller wants them stored) and payload; marker sets CommandSend.marker. cb is called once,
// with the entry's id (EntryID -1: the broker dropped it as a duplicate) or an error, in
// send order; it runs on the connection's goroutine and must not block. After the session
// ended, cb gets the error at once.
func (p *SessionProducer) Send(meta *pb.MessageMetadata, payload []byte, marker bool, cb func(MessageID, error)) {
	p.mu.Lock()
	if err := p.mu.ended; err != nil {
		p.mu.Unlock()
		cb(MessageID{}, err)
		return
	}
	seq := p.mu.nextSeq
	p.mu.nextSeq++
	n := max(meta.GetNumMessagesInBatch(), 1)
	send := &pb.CommandSend{ProducerId: proto.Uint64(p.id), SequenceId: proto.Uint64(seq), NumMessages: proto.Int32(n)}
	if marker {
		send.Marker = proto.Bool(true)
	}
	frame, err := pulsar.AppendPayloadCommand(nil, pulsar.Wrap(send), meta, payload)
	if err != nil {
		p.mu.Unlock()
		cb(MessageID{}, err)
		p.end(fmt.Errorf("encode: %w", err))
		return
	}
	p.mu.pending = append(p.mu.pending, sessionSend{seq: seq, cb: cb})
	// Written under the lock, so frames go out in sequence order.
	err = p.c.writeRaw(frame)
	p.mu.Unlock()
	if err != nil {
		p.end(err)
	}
}

// Close ends the session (pending sends fail with ErrClosed) and closes the producer on
// the broker, also after the session ended by itself (a broker may keep a producer open
// after refusing one of its sends). Idempotent.
func (p *SessionProducer) Close() {
	p.end(ErrClosed)
	p.closeOnce.Do(p.closeOnBroker)
}

func (p *SessionProducer) closeOnBroker() {
	_ = p.c.write(pulsar.Wrap(&pb.CommandCloseProducer{ProducerId: proto.Uint64(p.id), RequestId: proto.Uint64(p.cl.nextID())}))
}

// end ends the session with err: every pending send fails, OnEnd is called. It reports
// whether this call ended it.
func (p *SessionProducer) end(err error) bool {
	p.mu.Lock()
	if p.mu.ended != nil {
		p.mu.Unlock()
		return false
	}
	p.mu.ended = err
	pending := p.mu.pending
	p.mu.pending = nil
	p.mu.Unlock()
	p.c.removeProducer(p.id)
	for _, s := range pending {
		s.cb(MessageID{}, err)
	}
	if p.onEnd != nil {
		p.onEnd(err)
	}
	return true
}

// The connProducer methods run on the connection's reader goroutine.

func (p *SessionProducer) onReceipt(_ *conn, r *pb.CommandSendReceipt) {
	p.mu.Lock()
	if p.mu.ended != nil || len(p.mu.pending) == 0 {
		p.mu.Unlock()
		return
	}
	head := p.mu.pending[0]
	if r.GetSequenceId() != head.seq {
		p.mu.Unlock()
		if r.GetSequenceId() > head.seq {
			p.end(fmt.Errorf("%w: receipt for sequence id %d, expected %d", ErrProtocol, r.GetSequenceId(), head.seq))
		}
		return
	}
	p.mu.pending = p.mu.pending[1:]
	p.mu.Unlock()
	mid := r.GetMessageId()
	id := MessageID{LedgerID: int64(mid.GetLedgerId()), EntryID: int64(mid.GetEntryId()), BatchIndex: -1, Partition: -1}
	if mid.GetEntryId() == ^uint64(0) || int64(mid.GetLedgerId()) == -1 {
		id.LedgerID, id.EntryID = -1, -1
	}
	head.cb(id, nil)
}

func (p *SessionProducer) onSendError(_ *conn, e *pb.CommandSendError) {
	p.end(fmt.Errorf("send to %s: %w", p.topic, serverError(e.GetError(), e.GetMessage())))
}

func (p *SessionProducer) onClosed(_ *conn, err error) {
	p.end(err)
}
