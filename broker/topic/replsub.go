package topic

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/topic/dispatch"
	"github.com/magnetar-io/magnetar/internal/inbox"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/replication"
	"github.com/magnetar-io/magnetar/replication/replsub"
)

// Replicated subscriptions (package replication/replsub holds the protocol; package
// broker/replhost runs its controller per topic). The topic's part:
//
//   - markers: PublishMarker stores a marker entry (producer pulsar.marker, marker_type set)
//     through the topic's publish pipeline, in order with the other publishes, never
//     deduplicated;
//   - the dispatcher never delivers a marker (package dispatch, B7): it acknowledges it on
//     the subscription, and a replicated subscription hands the SNAPSHOT markers it reads
//     to its snapshot cache (replsub.Cache);
//   - when a replicated subscription's mark-delete position reaches a cached snapshot,
//     the topic calls the function SetReplicatedSubscriptions registered (replhost writes
//     the UPDATE);
//   - AckReplicated applies another cluster's UPDATE: a cumulative acknowledgement on the
//     subscription, created at the earliest entry if missing.
//
// A subscription is replicated once a consumer subscribes with replicate_subscription_state
// (CommandSubscribe field 14), an UPDATE creates it, or the admin sets it
// (SetSubscriptionReplicated). As in Pulsar, the flag is the cursor property
// pulsar.replicated.subscription=1 (replsub.CursorProperty, on a PropertyCursor): written
// when the flag changes (the admin's call returns once it is durable), read when the
// subscription opens, so a reload or a restart keeps it.

// replSubs is the topic's state for replicated subscriptions.
type replSubs struct {
	// advanced is called (on a subscription goroutine, must not block) when a replicated
	// subscription's mark-delete position reaches a cached snapshot; nil: replicated
	// subscriptions are off.
	advanced  atomic.Pointer[func(sub string, s replsub.Snapshot)]
	maxCached atomic.Int32

	// Owned by the topic goroutine.
	marker *Producer
	conn   *markerConn
	seq    uint64
}

// SetReplicatedSubscriptions turns replicated subscriptions on for the topic (advanced
// non-nil) or off: advanced is called with a replicated subscription's name and the newest
// snapshot its mark-delete position reached; each subscription caches at most maxCached
// snapshots (0: replsub.DefaultMaxCached). Safe for concurrent use.
func (t *Topic) SetReplicatedSubscriptions(maxCached int, advanced func(sub string, s replsub.Snapshot)) {
	t.rsub.maxCached.Store(int32(maxCached))
	if advanced == nil {
		t.rsub.advanced.Store(nil)
		return
	}
	t.rsub.advanced.Store(&advanced)
}

// markerConn is the connection of the topic's marker producer: it completes each marker's
// publish from its receipt or error.
type markerConn struct {
	mu struct {
		sync.Mutex // guards the fields below
		waiting    map[uint64]func(Position, error)
	}
}

func (c *markerConn) wait(seq uint64, done func(Position, error)) {
	c.mu.Lock()
	c.mu.waiting[seq] = done
	c.mu.Unlock()
}

func (c *markerConn) complete(seq uint64, pos Position, err error) {
	c.mu.Lock()
	done := c.mu.waiting[seq]
	delete(c.mu.waiting, seq)
	c.mu.Unlock()
	if done != nil {
		done(pos, err)
	}
}

// ErrMarkerRefused: the topic refused to store a marker (closing, terminated, fenced).
var ErrMarkerRefused = errors.New("topic: marker refused")

func (c *markerConn) Send(cmd *pb.BaseCommand) {
	switch {
	case cmd.SendReceipt != nil:
		r := cmd.SendReceipt
		id := r.GetMessageId()
		c.complete(r.GetSequenceId(), Position{LedgerID: int64(id.GetLedgerId()), EntryID: int64(id.GetEntryId())}, nil)
	case cmd.SendError != nil:
		e := cmd.SendError
		c.complete(e.GetSequenceId(), Position{}, errors.Join(ErrMarkerRefused, errors.New(e.GetMessage())))
	}
}
func (c *markerConn) SendMessage(*pb.BaseCommand, []byte) {}
func (c *markerConn) ProducerClosed(*Producer)            {}
func (c *markerConn) ConsumerClosed(*Consumer)            {}
func (c *markerConn) PublishDone()                        {}
func (c *markerConn) RemoteAddr() string                  { return "" }
func (c *markerConn) ClientVersion() string               { return "" }

// isMarkerProducer reports whether p is the topic's own marker producer (its entries are
// not deduplicated).
func isMarkerProducer(p *Producer) bool {
	_, ok := p.Conn.(*markerConn)
	return ok
}

// PublishMarker stores a marker of type markerType with payload in the topic (metadata:
// producer_name pulsar.marker, publish_time now, marker_type, replicate_to when given), in
// order with the topic's other publishes, and calls done with its position or an error
// (from any goroutine). It waits while the topic's pending-publish budget is exhausted, so
// it must not be called on the topic goroutine.
func (t *Topic) PublishMarker(ctx context.Context, markerType int32, payload []byte, replicateTo []string, done func(Position, error)) {
	now := uint64(time.Now().UnixMilli())
	name := replsub.MarkerProducer
	seq := uint64(0)
	meta := &pb.MessageMetadata{ProducerName: &name, SequenceId: &seq, PublishTime: &now, MarkerType: proto.Int32(markerType),
		ReplicateTo: replicateTo}
	data, err := pulsar.AppendHeadersAndPayload(nil, meta, payload)
	if err != nil {
		done(Position{}, err)
		return
	}
	if !t.AcquirePublish(len(data), ctx.Done()) {
		done(Position{}, ctx.Err())
		return
	}
	if !t.post(func() { t.publishMarker(data, done) }) {
		t.pubBudget.release(int64(len(data)))
		done(Position{}, ErrClosed)
	}
}

func (t *Topic) publishMarker(data []byte, done func(Position, error)) {
	r := &t.rsub
	if r.marker == nil {
		r.conn = &markerConn{}
		r.conn.mu.waiting = map[uint64]func(Position, error){}
		r.marker = &Producer{Name: replsub.MarkerProducer, Conn: r.conn, topic: t, state: producerReady, connected: time.Now()}
	}
	r.seq++
	m := Message{SequenceID: r.seq, HighestSequenceID: r.seq, NumMessages: 1, Data: data}
	r.conn.wait(r.seq, done)
	if !t.publish(r.marker, m) {
		t.pubDone(r.marker, m)
		r.conn.complete(r.seq, Position{}, ErrMarkerRefused)
	}
}

// AckReplicated applies another cluster's update of replicated subscription name: a
// cumulative acknowledgement up to pos (nothing if its mark-delete position is there
// already), creating the subscription at the earliest entry if it does not exist, as
// Pulsar's ReplicatedSubscriptionsController does. The subscription is replicated from then
// on.
func (t *Topic) AckReplicated(ctx context.Context, name string, pos Position) error {
	s, err := inbox.Call(ctx, t.in, t.stopped, ErrClosed, func(reply func(*Subscription, error)) {
		t.withSub(name, true, true, mledger.Earliest, false, reply)
	})
	if err != nil {
		return err
	}
	return inbox.Call0(ctx, s.in, s.stopped, ErrClosed, func(reply func(error)) {
		if s.state != SubActive {
			reply(ErrClosed)
			return
		}
		s.rs.on = true
		s.syncReplicated(nil)
		s.d.AckUpTo(pos, reply)
		s.flush()
	})
}

// SetSubscriptionReplicated sets whether subscription name is replicated (Pulsar's POST
// …/subscription/{sub}/replicatedSubscriptionStatus); it returns once the cursor property
// that keeps the flag is durable.
func (t *Topic) SetSubscriptionReplicated(ctx context.Context, name string, on bool) error {
	s, err := t.sub(ctx, name)
	if err != nil {
		return err
	}
	return inbox.Call0(ctx, s.in, s.stopped, ErrClosed, func(reply func(error)) {
		s.rs.on = on
		if !on {
			s.rs.cache = nil
		}
		s.syncReplicated(reply)
	})
}

// replSub is a subscription's replicated-subscription state, owned by its goroutine.
type replSub struct {
	on    bool
	cache *replsub.Cache // the SNAPSHOT markers read (nil until the first)
	// checking: a look-up of the mark-delete position is on its way; again: another ack
	// completed meanwhile.
	checking, again bool

	// The flag's cursor property (props nil: the cursor keeps none, a non-durable one).
	// persisted is the value durable (or last read); writing: a write is on its way, after
	// which on is compared again; waiters are called once persisted equals on.
	props     PropertyCursor
	persisted bool
	writing   bool
	waiters   []func(error)
}

// subProps is what a durable subscription's cursor holds for it when it opens.
type subProps struct {
	pc         PropertyCursor // nil: the cursor keeps no properties
	replicated bool           // the cursor has pulsar.replicated.subscription=1
}

// readSubProps reads the replicated-subscription flag of a durable cursor just opened.
func readSubProps(ctx context.Context, cur Cursor) subProps {
	pc, ok := cur.(PropertyCursor)
	if !ok {
		return subProps{}
	}
	p := subProps{pc: pc}
	if ci, err := cur.Info(ctx); err == nil {
		p.replicated = ci.Properties[replsub.CursorProperty] == 1
	}
	return p
}

// restoreReplicated gives a subscription just created what its cursor holds (the first
// event on its goroutine).
func (s *Subscription) restoreReplicated(p subProps) {
	s.post(func() {
		s.rs.props, s.rs.persisted = p.pc, p.replicated
		s.rs.on = s.rs.on || p.replicated
	})
}

// setReplicated marks the subscription replicated (a consumer asked for it).
func (s *Subscription) setReplicated() {
	s.rs.on = true
	s.syncReplicated(nil)
}

// syncReplicated writes the flag's cursor property until it equals the flag, one write at
// a time, and then calls done (and the earlier waiters); a failed write fails them.
func (s *Subscription) syncReplicated(done func(error)) {
	r := &s.rs
	if done != nil {
		r.waiters = append(r.waiters, done)
	}
	if r.writing {
		return // the write's completion compares again
	}
	if r.props == nil || r.on == r.persisted {
		ws := r.waiters
		r.waiters = nil
		for _, w := range ws {
			w(nil)
		}
		return
	}
	if s.state != SubActive {
		ws := r.waiters
		r.waiters = nil
		for _, w := range ws {
			w(ErrClosed)
		}
		return
	}
	r.writing = true
	want, pc := r.on, r.props
	s.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var err error
		if want {
			err = pc.SetProperty(ctx, replsub.CursorProperty, 1)
		} else {
			err = pc.RemoveProperty(ctx, replsub.CursorProperty)
		}
		cancel()
		s.post(func() {
			r.writing = false
			if err != nil {
				s.logger.Warn("replicated subscription: write the cursor property", "replicated", want, "err", err)
				ws := r.waiters
				r.waiters = nil
				for _, w := range ws {
					w(err)
				}
				return
			}
			r.persisted = want
			s.syncReplicated(nil)
		})
	})
}

// onMarkers takes the marker entries the dispatcher skipped (and acknowledged): a
// replicated subscription caches the snapshots among them.
func (s *Subscription) onMarkers(es []dispatch.Entry) {
	if len(es) == 0 || !s.rs.on || s.topic.rsub.advanced.Load() == nil {
		return
	}
	for _, e := range es {
		m, payload, err := pulsar.ParseHeadersAndPayload(stripTxn(e.Data))
		if err != nil || m.GetMarkerType() != replication.MarkerSnapshot {
			continue
		}
		snap, err := replsub.DecodeSnapshot(payload)
		if err != nil {
			s.logger.Warn("replicated subscription: bad snapshot marker", "pos", e.Pos, "err", err)
			continue
		}
		if s.rs.cache == nil {
			s.rs.cache = replsub.NewCache(int(s.topic.rsub.maxCached.Load()), replsub.Mutation{})
		}
		s.rs.cache.Add(snap)
	}
}

func stripTxn(data []byte) []byte {
	_, _, rest := splitTxn(data)
	return rest
}

// replAck wraps a cursor acknowledgement of a replicated subscription so that, once it is
// applied, the mark-delete position is compared with the cached snapshots.
func (s *Subscription) replAck(a dispatch.CursorAck) dispatch.CursorAck {
	if !s.rs.on || s.rs.cache == nil || s.rs.cache.Len() == 0 {
		return a
	}
	done := a.Done
	a.Done = func(err error) {
		if done != nil {
			done(err)
		}
		if err == nil {
			s.post(s.checkMarkDelete)
		}
	}
	return a
}

// checkMarkDelete looks the mark-delete position up (off the goroutine) and hands the
// newest snapshot it reached to the topic's advanced function.
func (s *Subscription) checkMarkDelete() {
	if s.rs.checking {
		s.rs.again = true
		return
	}
	if s.state != SubActive || s.rs.cache == nil || s.rs.cache.Len() == 0 {
		return
	}
	s.rs.checking = true
	cur := s.cur
	s.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		md, err := cur.MarkDelete(ctx)
		cancel()
		s.post(func() {
			s.rs.checking = false
			if err == nil && s.rs.cache != nil {
				if snap, ok := s.rs.cache.Advanced(replication.Position(md)); ok {
					if fn := s.topic.rsub.advanced.Load(); fn != nil && s.rs.on {
						(*fn)(s.name, snap)
					}
				}
			}
			if s.rs.again {
				s.rs.again = false
				s.checkMarkDelete()
			}
		})
	})
}
