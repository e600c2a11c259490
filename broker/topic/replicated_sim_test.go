package topic

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/replication"
)

// The simulation's replicator: another cluster's replicator publishing the messages of
// several original producers ("a", "b", ...) with a producer named as package replication
// names it, as replication.Core does it — one session per producer, a window of SENDs
// pipelined on one connection (a FIFO wire with delays: a SEND already on the wire arrives
// even after the replicator reacted to a refusal), and on a refusal, a close or a lost
// connection the session ends, its producer is closed (behind the SENDs on the wire) and
// everything without a receipt is sent again under a new producer, with its original
// identity. SENDs of a new session are numbered from 0 again, as a new client producer's.
//
// A seed with it refuses large SENDs (MaxMessageSize) until replBigUntil, so the
// replicator's head is refused while later SENDs are pipelined behind it.
//
// Checked (replicated.go's contract): every original message is stored exactly once
// (store's check, keyed on the original identity) and, per original producer, in sequence
// order; a duplicate receipt only for a stored message; at the end every message is stored.

// simReplMsg is one original message the replicator has to publish.
type simReplMsg struct {
	origin string
	seq    uint64
	big    bool
}

// simWireOp is one command on the replicator's connection.
type simWireOp struct {
	kind string // "producer", "send", "close"
	p    *Producer
	m    Message
}

type simRepl struct {
	name    string
	source  []simReplMsg
	avail   int // source[:avail] is there to replicate
	acked   int // source[:acked] has a receipt
	sess    *Producer
	ready   bool
	sent    int // source[acked:sent] is in flight in sess
	start   int // acked when sess started
	cmdSeq  uint64
	inSess  []int // source index of each SEND of sess, by its SEND sequence id
	wire    []simWireOp
	wiring  bool
	gaveUp  error
	last    map[string]int64 // per original producer, the highest sequence id stored
	pending bool             // a reconnect is scheduled
}

func (w *simWorld) newRepl() {
	p := w.p
	r := &simRepl{name: replication.ProducerName("west", "sim"), last: map[string]int64{}}
	next := map[string]uint64{}
	for i := 0; i < p.repl; i++ {
		o := fmt.Sprintf("%c", 'a'+w.s.Rand().IntN(p.replOrigins))
		r.source = append(r.source, simReplMsg{origin: o, seq: next[o], big: w.s.Chance(p.replBig)})
		next[o]++
		w.s.After(w.s.Between(0, p.window), "replicator: a local message", func() {
			r.avail++
			w.replPump()
		})
	}
	w.repl = r
	w.s.After(w.s.Between(0, p.window/4), "replicator connects", w.replConnect)
}

func (w *simWorld) replMessage(m simReplMsg, cmdSeq uint64) Message {
	meta := &pb.MessageMetadata{ProducerName: proto.String(m.origin), SequenceId: proto.Uint64(m.seq),
		PublishTime: proto.Uint64(1), ReplicatedFrom: proto.String("west")}
	payload := []byte("m")
	if m.big {
		payload = make([]byte, 200)
	}
	data, err := pulsar.AppendHeadersAndPayload(nil, meta, payload)
	if err != nil {
		w.failf("encode: %v", err)
	}
	return Message{SequenceID: cmdSeq, HighestSequenceID: cmdSeq, NumMessages: 1, Data: data, Origin: OriginOf(data)}
}

// replConnect starts a new session: a new producer of the replicator's name.
func (w *simWorld) replConnect() {
	r := w.repl
	r.pending = false
	if r.gaveUp != nil || r.sess != nil {
		return
	}
	if w.core == nil {
		w.replReconnectLater()
		return
	}
	w.nextID++
	p := &Producer{ID: w.nextID, Name: r.name, AccessMode: pb.ProducerAccessMode_Shared}
	r.sess, r.ready, r.sent, r.start, r.cmdSeq, r.inSess = p, false, r.acked, r.acked, 0, nil
	w.s.Tracef("replicator: session of producer %d from message %d", p.ID, r.acked)
	w.wirePush(simWireOp{kind: "producer", p: p})
}

func (w *simWorld) replReconnectLater() {
	r := w.repl
	if r.pending || r.gaveUp != nil {
		return
	}
	r.pending = true
	w.s.After(w.s.Between(time.Millisecond, 5*time.Millisecond), "replicator reconnects", w.replConnect)
}

// replEnd ends the session of p (a refusal, a close, a lost producer): the producer is
// closed behind what is on the wire, and a new session re-sends what has no receipt.
func (w *simWorld) replEnd(p *Producer, why string) {
	r := w.repl
	if r.sess != p {
		return
	}
	w.s.Tracef("replicator: session of producer %d ends (%s), %d in flight", p.ID, why, r.sent-r.acked)
	w.stats.ReplSessions++
	r.sess, r.ready = nil, false
	w.wirePush(simWireOp{kind: "close", p: p})
	w.replReconnectLater()
}

// replPump sends what the window allows.
func (w *simWorld) replPump() {
	r := w.repl
	if r == nil || r.sess == nil || !r.ready {
		return
	}
	for r.sent < r.avail && r.sent-r.acked < w.p.replWindow {
		m := w.replMessage(r.source[r.sent], r.cmdSeq)
		r.inSess = append(r.inSess, r.sent)
		r.cmdSeq++
		r.sent++
		w.stats.ReplSends++
		w.wirePush(simWireOp{kind: "send", p: r.sess, m: m})
	}
}

// wirePush queues op on the replicator's connection; ops arrive in order, one per delay.
func (w *simWorld) wirePush(op simWireOp) {
	r := w.repl
	if w.core == nil {
		return // no connection
	}
	r.wire = append(r.wire, op)
	if r.wiring {
		return
	}
	r.wiring = true
	w.at(w.delay(), "replicator wire", w.wireStep)
}

func (w *simWorld) wireStep() {
	r := w.repl
	r.wiring = false
	if len(r.wire) == 0 {
		return
	}
	op := r.wire[0]
	r.wire = r.wire[1:]
	switch op.kind {
	case "producer":
		w.prodsRepl[op.p] = true
		w.core.addProducer(op.p)
		w.perform()
	case "send":
		if op.p.state == producerReady {
			w.submit(op.p, op.m)
		}
	case "close":
		w.core.removeProducer(op.p, false)
		w.perform()
	}
	if len(r.wire) > 0 && !r.wiring {
		r.wiring = true
		w.at(w.delay(), "replicator wire", w.wireStep)
	}
}

// replCrash: the topic's core is lost; the connection with it.
func (w *simWorld) replCrash() {
	r := w.repl
	if r == nil {
		return
	}
	r.wire, r.wiring = nil, false
	if r.sess != nil {
		r.sess, r.ready = nil, false
		w.replReconnectLater()
	}
}

// replDeliver hands an output of the core for a replicator producer to the replicator.
func (w *simWorld) replDeliver(o output) {
	r := w.repl
	current := o.p == r.sess
	switch o.kind {
	case outReady:
		if current {
			r.ready = true
			w.replPump()
		}
	case outFailed:
		if !current {
			return
		}
		w.s.Tracef("replicator: producer %d refused: %v", o.p.ID, o.err)
		if errors.Is(o.err, ErrTerminated) {
			r.gaveUp = o.err
			r.sess = nil
			return
		}
		r.sess, r.ready = nil, false
		w.replReconnectLater()
	case outClose:
		w.replEnd(o.p, "closed by the topic")
	case outSendError, outRefused:
		w.stats.ReplRefused++
		if o.code == pb.ServerError_TopicTerminatedError && current {
			r.gaveUp = fmt.Errorf("terminated")
		}
		w.replEnd(o.p, fmt.Sprintf("SEND %d refused: %v %s", o.seq, o.code, o.msg))
	case outReceipt:
		if !current {
			return
		}
		k := r.acked - r.start // the session's oldest SEND without a receipt
		if k < 0 || k >= len(r.inSess) || uint64(k) != o.seq {
			w.failf("replicator: receipt for SEND %d, oldest in flight is %d", o.seq, k)
			return
		}
		m := r.source[r.inSess[k]]
		e := simEntry{m.origin, m.seq}
		if o.pos.EntryID < 0 {
			w.stats.ReplDups++
			if w.stored[e] == 0 {
				w.failf("replicator: duplicate receipt for %s/%d, which is not stored", e.name, e.seq)
			}
		} else if o.pos.EntryID >= int64(len(w.log.entries)) || w.log.entries[o.pos.EntryID] != e {
			w.failf("replicator: receipt for %s/%d at %v, which does not hold it", e.name, e.seq, o.pos)
		}
		r.acked++
		w.replPump()
		w.replMaybeLeave()
	}
}

// replMaybeLeave closes the replicator's producer once the run is over and every message
// has its receipt (a WaitForExclusive client waits for that).
func (w *simWorld) replMaybeLeave() {
	r := w.repl
	if r == nil || !w.ended || r.sess == nil || r.acked < len(r.source) {
		return
	}
	p := r.sess
	r.sess, r.ready = nil, false
	r.gaveUp = errors.New("done")
	w.wirePush(simWireOp{kind: "close", p: p})
}

// replStored checks the order of a replicated message stored: per original producer, in
// sequence order.
func (w *simWorld) replStored(e simEntry) {
	r := w.repl
	if last, ok := r.last[e.name]; ok && int64(e.seq) <= last {
		w.failf("replicated %s/%d stored after %s/%d", e.name, e.seq, e.name, last)
	}
	r.last[e.name] = max(r.last[e.name], int64(e.seq))
}

// replLiveness checks at the end that every original message is stored.
func (w *simWorld) replLiveness() {
	r := w.repl
	if r == nil || (r.gaveUp != nil && r.acked < len(r.source)) {
		return
	}
	for _, m := range r.source {
		if w.stored[simEntry{m.origin, m.seq}] == 0 {
			w.failf("replicated %s/%d never stored (%d of %d acknowledged)", m.origin, m.seq, r.acked, len(r.source))
			return
		}
	}
	if r.acked != len(r.source) {
		w.failf("replicator: %d of %d acknowledged", r.acked, len(r.source))
	}
}
