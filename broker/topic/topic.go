package topic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Config configures a topic.
type Config struct {
	Name topicname.Name
	Log  Log
	// Dedup turns message deduplication on: a (producer name, sequence id) already stored is
	// answered with a receipt and not stored again.
	Dedup bool
	// DedupSnapshotEvery is how many entries may be stored between two persisted
	// deduplication snapshots (replayed from the log on load). Default 1000.
	DedupSnapshotEvery int
	Logger             *slog.Logger
	Metrics            *Metrics
	// MaxPendingBytes bounds the bytes of publishes in flight (0: unbounded); see
	// AcquirePublish.
	MaxPendingBytes int64
	// OnClosed is called once, on the topic goroutine, when the topic has closed.
	OnClosed func(*Topic)
}

// MessageID addresses a message of the topic (BatchIndex -1: not in a batch, or the whole
// entry).
type MessageID struct {
	LedgerID, EntryID int64
	BatchIndex        int32
}

// Position returns the entry's position.
func (m MessageID) Position() Position { return Position{LedgerID: m.LedgerID, EntryID: m.EntryID} }

// Managed-ledger properties the topic records.
const (
	propDedup = "magnetar.dedup"       // deduplication snapshot (JSON)
	propEpoch = "magnetar.topic-epoch" // topic epoch of exclusive producers (decimal)
)

// Topic is a loaded persistent topic. One goroutine (run) owns its state, its producers and
// the publish pipeline; each subscription has its own goroutine. Methods are safe for
// concurrent use.
type Topic struct {
	name    topicname.Name
	cfg     Config
	log     Log
	logger  *slog.Logger
	m       *Metrics
	in      *events
	stopped chan struct{}
	created time.Time
	// pubBudget bounds the bytes in flight; every Publish holds len(Data) of it until done.
	pubBudget budget

	// Owned by the run goroutine.
	state     State
	producers map[*Producer]struct{}
	byName    map[string]*Producer
	// exclusive holds the topic for an Exclusive or WaitForExclusive producer.
	exclusive *Producer
	waiting   []*Producer // queued WaitForExclusive producers, in arrival order
	epoch     uint64      // topic epoch: bumped each time an exclusive producer takes over
	// inflight are the adds not completed yet, in add order (the managed ledger completes
	// them in that order). Invariant: inflight[i].seqNo < inflight[i+1].seqNo.
	inflight []*pubOp
	dedup    dedup
	subs     map[string]*Subscription
	opening  map[string][]func(*Subscription, error)
	// last is the newest stored entry and its message count (0: unknown, e.g. after load).
	last          Position
	lastMsgs      int
	lastPublish   int64
	terminateWait []func(MessageID, error)
	closeWait     []func(error)
	closeErr      error
	deleting      bool
	closingSubs   int
	rateIn        rate
}

// pubOp is one add in flight.
type pubOp struct {
	p    *Producer
	m    Message
	dups []*pubOp // duplicates of m that arrived while it was in flight
}

// Open loads a topic on its managed ledger: it recovers the deduplication state (the last
// snapshot plus a replay of the entries after it) and the topic epoch, then starts the
// topic goroutine.
func Open(ctx context.Context, cfg Config) (*Topic, error) {
	if cfg.DedupSnapshotEvery <= 0 {
		cfg.DedupSnapshotEvery = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	t := &Topic{
		name: cfg.Name, cfg: cfg, log: cfg.Log, logger: cfg.Logger.With("topic", cfg.Name.String()),
		m: cfg.Metrics, in: newEvents(), stopped: make(chan struct{}), created: time.Now(),
		state: StateActive, producers: map[*Producer]struct{}{}, byName: map[string]*Producer{},
		subs: map[string]*Subscription{}, opening: map[string][]func(*Subscription, error){},
	}
	t.pubBudget.limit = cfg.MaxPendingBytes
	st, err := cfg.Log.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("topic %s: stats: %w", cfg.Name, err)
	}
	if v := st.Properties[propEpoch]; v != "" {
		t.epoch, _ = strconv.ParseUint(v, 10, 64)
	}
	if st.Terminated != nil {
		t.state = StateTerminated
	}
	t.dedup.init(cfg.Dedup)
	if cfg.Dedup {
		n, err := t.dedup.recover(ctx, cfg.Log, st.Properties[propDedup], lastEntry(st))
		if err != nil {
			return nil, fmt.Errorf("topic %s: recover deduplication state: %w", cfg.Name, err)
		}
		t.dedup.sinceSnapshot = n
	}
	t.m.topics.Inc()
	go t.run()
	return t, nil
}

// Name returns the topic's name.
func (t *Topic) Name() topicname.Name { return t.name }

// Done is closed once the topic has closed.
func (t *Topic) Done() <-chan struct{} { return t.stopped }

func (t *Topic) run() {
	defer close(t.stopped)
	var batch []func()
	for range t.in.Signal() {
		batch = t.in.Drain(batch)
		for i, fn := range batch {
			fn()
			batch[i] = nil
		}
		if t.state == StateClosed {
			t.in.Close()
			t.m.topics.Dec()
			if t.cfg.OnClosed != nil {
				t.cfg.OnClosed(t)
			}
			return
		}
	}
}

func (t *Topic) become(to State) error {
	if !legal(topicEdges, t.state, to) {
		err := illegal("topic "+t.name.String(), t.state, to)
		t.logger.Error("bug", "err", err)
		return err
	}
	t.logger.Debug("topic state", "from", t.state, "to", to)
	t.state = to
	return nil
}

// post runs fn on the topic goroutine; false if the topic has stopped.
func (t *Topic) post(fn func()) bool { return t.in.Push(fn) }

// Producers.

// AddProducer attaches p (whose exported fields the caller set) and reports through cb.
func (t *Topic) AddProducer(p *Producer, cb ProducerCallbacks) {
	p.topic = t
	p.cb = cb
	p.connected = time.Now()
	if !t.post(func() { t.addProducer(p) }) {
		cb.Failed(ErrClosed)
	}
}

func (t *Topic) addProducer(p *Producer) {
	switch t.state {
	case StateTerminating, StateTerminated:
		p.cb.Failed(fmt.Errorf("%w: topic %s", ErrTerminated, t.name))
		return
	case StateActive:
	default:
		p.cb.Failed(ErrClosed)
		return
	}
	if old := t.byName[p.Name]; old != nil {
		if old.Conn != p.Conn || old.ID != p.ID {
			p.cb.Failed(fmt.Errorf("%w: producer named %q is already connected", ErrProducerBusy, p.Name))
			return
		}
		t.removeProducer(old, false) // the same client re-creating it
	}
	others := len(t.producers) > 0
	switch p.AccessMode {
	case pb.ProducerAccessMode_Shared:
		if t.exclusive != nil || len(t.waiting) > 0 {
			p.cb.Failed(fmt.Errorf("%w: topic has an exclusive producer", ErrProducerBusy))
			return
		}
	case pb.ProducerAccessMode_Exclusive, pb.ProducerAccessMode_ExclusiveWithFencing:
		if p.AccessMode == pb.ProducerAccessMode_ExclusiveWithFencing {
			for q := range t.producers {
				t.removeProducer(q, true)
			}
			for _, q := range t.waiting {
				q.state = producerClosed
				q.cb.Failed(fmt.Errorf("%w: fenced by an exclusive producer", ErrProducerFenced))
			}
			t.waiting, others = nil, false
		}
		switch {
		case t.exclusive != nil || len(t.waiting) > 0:
			p.cb.Failed(fmt.Errorf("%w: topic has an exclusive producer", ErrProducerFenced))
			return
		case others:
			p.cb.Failed(fmt.Errorf("%w: topic has shared producers", ErrProducerFenced))
			return
		case p.TopicEpoch != nil && *p.TopicEpoch < t.epoch:
			p.cb.Failed(fmt.Errorf("%w: topic epoch %d is older than %d", ErrProducerFenced, *p.TopicEpoch, t.epoch))
			return
		}
		t.takeExclusive(p)
		return
	case pb.ProducerAccessMode_WaitForExclusive:
		if t.exclusive != nil || others || len(t.waiting) > 0 {
			p.state = producerWaiting
			t.waiting = append(t.waiting, p)
			t.m.waitingProducers.Inc()
			p.cb.Queued()
			return
		}
		t.takeExclusive(p)
		return
	default:
		p.cb.Failed(fmt.Errorf("%w: access mode %v", ErrInvalid, p.AccessMode))
		return
	}
	t.ready(p)
}

// takeExclusive gives the topic to exclusive producer p under a new topic epoch (or the
// epoch it resumes).
func (t *Topic) takeExclusive(p *Producer) {
	if p.TopicEpoch != nil && *p.TopicEpoch >= t.epoch {
		t.epoch = *p.TopicEpoch
	} else {
		t.epoch++
		t.persistEpoch(t.epoch)
	}
	t.exclusive = p
	t.ready(p)
}

func (t *Topic) persistEpoch(e uint64) {
	log := t.log
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := log.SetProperty(ctx, propEpoch, strconv.FormatUint(e, 10)); err != nil {
			t.logger.Warn("record topic epoch", "epoch", e, "err", err)
		}
	}()
}

func (t *Topic) ready(p *Producer) {
	p.state = producerReady
	t.producers[p] = struct{}{}
	t.byName[p.Name] = p
	t.m.producers.Inc()
	p.cb.Ready(ProducerReady{LastSequenceID: t.dedup.last(p.Name), TopicEpoch: t.epoch})
}

// removeProducer detaches p. notify tells the client (CLOSE_PRODUCER) — for removals the
// topic decides; a client that closed its producer is not told.
func (t *Topic) removeProducer(p *Producer, notify bool) {
	switch p.state {
	case producerClosed:
		return
	case producerWaiting:
		p.state = producerClosed
		for i, q := range t.waiting {
			if q == p {
				t.waiting = append(t.waiting[:i], t.waiting[i+1:]...)
				t.m.waitingProducers.Dec()
				break
			}
		}
		if notify {
			p.cb.Failed(ErrClosed)
		}
		return
	}
	p.state = producerClosed
	delete(t.producers, p)
	if t.byName[p.Name] == p {
		delete(t.byName, p.Name)
	}
	t.m.producers.Dec()
	if notify {
		p.Conn.ProducerClosed(p)
		id := p.ID
		rid := uint64(0)
		p.Conn.Send(wrap(&pb.CommandCloseProducer{ProducerId: &id, RequestId: &rid}))
	}
	if t.exclusive == p {
		t.exclusive = nil
	}
	t.promoteWaiting()
}

// promoteWaiting gives the topic to the first queued WaitForExclusive producer once no
// other producer holds it.
func (t *Topic) promoteWaiting() {
	if t.exclusive != nil || len(t.producers) > 0 || len(t.waiting) == 0 || t.state != StateActive {
		return
	}
	p := t.waiting[0]
	t.waiting = t.waiting[1:]
	t.m.waitingProducers.Dec()
	t.takeExclusive(p)
}

// Publishing.

func (t *Topic) onPublish(p *Producer, m Message) {
	if p.state != producerReady {
		t.pubDone(p, m)
		return
	}
	switch t.state {
	case StateActive:
	case StateTerminating, StateTerminated:
		t.pubDone(p, m)
		p.Conn.Send(sendError(p.ID, m.SequenceID, pb.ServerError_TopicTerminatedError, "topic "+t.name.String()+" is terminated"))
		return
	default:
		t.pubDone(p, m)
		p.Conn.Send(sendError(p.ID, m.SequenceID, pb.ServerError_ServiceNotReady, "topic "+t.name.String()+" is closing"))
		return
	}
	op := &pubOp{p: p, m: m}
	if t.dedup.on && (!m.Chunk || m.LastChunk) {
		switch t.dedup.check(p.Name, m) {
		case dupPersisted:
			t.m.duplicates.Inc()
			t.pubDone(p, m)
			t.sendReceipt(p, m, Position{LedgerID: -1, EntryID: -1})
			return
		case dupInFlight:
			t.m.duplicates.Inc()
			if orig := t.findInflight(p.Name, m.SequenceID); orig != nil {
				t.pubDone(p, m)
				orig.dups = append(orig.dups, op)
				return
			}
			// Not found: its original failed meanwhile; store it.
		}
		t.dedup.pushed(p.Name, m)
	}
	t.inflight = append(t.inflight, op)
	t.m.pendingAdds.Inc()
	start := time.Now()
	t.log.AddAsync(m.Data, func(pos Position, err error) {
		t.pubDone(p, m)
		t.m.publishLatency.Observe(time.Since(start).Seconds())
		if !t.post(func() { t.onAdded(op, pos, err) }) {
			t.m.pendingAdds.Dec()
		}
	})
}

// pubDone releases what a publish held: the connection's slot and the topic's bytes.
func (t *Topic) pubDone(p *Producer, m Message) {
	p.Conn.PublishDone()
	t.pubBudget.release(int64(len(m.Data)))
}

// findInflight returns the in-flight add of producer name that covers seq.
func (t *Topic) findInflight(name string, seq uint64) *pubOp {
	for i := len(t.inflight) - 1; i >= 0; i-- {
		op := t.inflight[i]
		if op.p.Name == name && op.m.SequenceID <= seq && seq <= op.m.HighestSequenceID {
			return op
		}
	}
	return nil
}

func (t *Topic) onAdded(op *pubOp, pos Position, err error) {
	t.m.pendingAdds.Dec()
	if len(t.inflight) == 0 || t.inflight[0] != op {
		t.logger.Error("bug: add completed out of order", "seq", op.m.SequenceID, "pos", pos)
	} else {
		t.inflight[0] = nil
		t.inflight = t.inflight[1:]
	}
	if err != nil {
		t.addFailed(op, err)
		return
	}
	t.last, t.lastMsgs, t.lastPublish = pos, op.m.NumMessages, time.Now().UnixMilli()
	n := int64(op.m.NumMessages)
	t.rateIn.add(n, int64(len(op.m.Data)))
	op.p.msgsIn += n
	op.p.bytesIn += int64(len(op.m.Data))
	op.p.rateIn.add(n, int64(len(op.m.Data)))
	t.m.msgsIn.Add(float64(n))
	t.m.bytesIn.Add(float64(len(op.m.Data)))
	if t.dedup.on && (!op.m.Chunk || op.m.LastChunk) {
		t.dedup.persisted(op.p.Name, op.m)
		t.maybeSnapshotDedup()
	}
	t.sendReceipt(op.p, op.m, pos)
	for _, d := range op.dups {
		t.sendReceipt(d.p, d.m, pos)
	}
}

func (t *Topic) sendReceipt(p *Producer, m Message, pos Position) {
	id, seq, hi := p.ID, m.SequenceID, m.HighestSequenceID
	l, e := uint64(pos.LedgerID), uint64(pos.EntryID)
	p.Conn.Send(wrap(&pb.CommandSendReceipt{ProducerId: &id, SequenceId: &seq, HighestSequenceId: &hi,
		MessageId: &pb.MessageIdData{LedgerId: &l, EntryId: &e}}))
}

func (t *Topic) addFailed(op *pubOp, err error) {
	t.m.addErrors.Inc()
	code, msg := pb.ServerError_PersistenceError, err.Error()
	switch {
	case errors.Is(err, mledger.ErrTerminated):
		code = pb.ServerError_TopicTerminatedError
	case errors.Is(err, mledger.ErrFenced):
		code = pb.ServerError_ServiceNotReady
	}
	if t.dedup.on {
		t.dedup.failed(op.p.Name, t.inflight)
	}
	for _, o := range append([]*pubOp{op}, op.dups...) {
		o.p.Conn.Send(sendError(o.p.ID, o.m.SequenceID, code, msg))
	}
	if errors.Is(err, mledger.ErrFenced) {
		t.fence(err)
	}
}

// fence closes the topic because another owner took its managed ledger over (the clients
// reconnect, look the topic up and find the new owner).
func (t *Topic) fence(err error) {
	switch t.state {
	case StateFenced, StateClosing, StateClosed, StateTerminating:
		return
	}
	t.logger.Warn("managed ledger fenced: closing the topic", "err", err)
	if t.become(StateFenced) == nil {
		t.startClose(false, nil)
	}
}

// Deduplication snapshots.

func (t *Topic) maybeSnapshotDedup() {
	t.dedup.sinceSnapshot++
	if t.dedup.sinceSnapshot < t.cfg.DedupSnapshotEvery || t.dedup.snapshotting {
		return
	}
	snap := t.dedup.snapshot(t.last)
	t.dedup.snapshotting, t.dedup.sinceSnapshot = true, 0
	log := t.log
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := log.SetProperty(ctx, propDedup, snap)
		cancel()
		t.post(func() {
			t.dedup.snapshotting = false
			if err != nil && !errors.Is(err, mledger.ErrClosed) {
				t.logger.Warn("deduplication snapshot", "err", err)
			}
		})
	}()
}

// Terminate seals the topic and returns its last message id.
func (t *Topic) Terminate(ctx context.Context) (MessageID, error) {
	return call(ctx, t.in, t.stopped, func(reply func(MessageID, error)) {
		switch t.state {
		case StateTerminated:
			go func() { reply(t.LastMessageID(ctx)) }()
			return
		case StateTerminating:
			t.terminateWait = append(t.terminateWait, reply)
			return
		case StateActive:
		default:
			reply(MessageID{}, ErrClosed)
			return
		}
		if t.become(StateTerminating) != nil {
			reply(MessageID{}, ErrIllegalTransition)
			return
		}
		t.terminateWait = append(t.terminateWait, reply)
		log := t.log
		go func() {
			tctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			pos, err := log.Terminate(tctx)
			cancel()
			t.post(func() { t.onTerminated(pos, err) })
		}()
	})
}

func (t *Topic) onTerminated(pos Position, err error) {
	if t.state != StateTerminating {
		return
	}
	waiters := t.terminateWait
	t.terminateWait = nil
	if err != nil {
		for _, w := range waiters {
			w(MessageID{}, err)
		}
		if errors.Is(err, mledger.ErrFenced) {
			if t.become(StateFenced) == nil {
				t.startClose(false, nil)
			}
			return
		}
		t.become(StateActive) //nolint:errcheck // legal edge
		t.promoteWaiting()
		return
	}
	t.become(StateTerminated) //nolint:errcheck // legal edge
	t.logger.Info("topic terminated", "last", pos)
	// Disconnect the producers (as Pulsar does): they reconnect, are refused with
	// TopicTerminatedError, and fail their pending messages with it.
	for p := range t.producers {
		t.removeProducer(p, true)
	}
	for _, p := range t.waiting {
		p.state = producerClosed
		p.cb.Failed(fmt.Errorf("%w: topic %s", ErrTerminated, t.name))
	}
	t.waiting = nil
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		id, err := t.LastMessageID(ctx)
		for _, w := range waiters {
			w(id, err)
		}
	}()
}

// LastMessageID returns the id of the topic's last message: the last entry, with the index
// of its last message if it is a batch. For an empty topic EntryID is -1.
func (t *Topic) LastMessageID(ctx context.Context) (MessageID, error) {
	type lastInfo struct {
		pos  Position
		msgs int
	}
	li, err := call(ctx, t.in, t.stopped, func(reply func(lastInfo, error)) {
		reply(lastInfo{t.last, t.lastMsgs}, nil)
	})
	if err != nil {
		return MessageID{}, err
	}
	if li.msgs > 0 {
		return lastID(li.pos, li.msgs), nil
	}
	// Unknown since load: find the last entry and read it.
	st, err := t.log.Stats(ctx)
	if err != nil {
		return MessageID{}, err
	}
	pos := lastEntry(st)
	if pos.EntryID < 0 {
		return MessageID{LedgerID: pos.LedgerID, EntryID: -1, BatchIndex: -1}, nil
	}
	es, err := t.log.Read(ctx, pos, 1)
	if err != nil {
		return MessageID{}, err
	}
	msgs := 1
	if len(es) == 1 && es[0].Position == pos {
		msgs = infoOf(es[0].Data).msgs
		if m, err := parseMeta(es[0].Data); err == nil && m.NumMessagesInBatch == nil {
			msgs = 0 // not a batch
		}
	}
	t.post(func() {
		if t.lastMsgs == 0 && !pos.Less(t.last) {
			t.last, t.lastMsgs = pos, max(msgs, 1)
		}
	})
	if msgs == 0 {
		return MessageID{LedgerID: pos.LedgerID, EntryID: pos.EntryID, BatchIndex: -1}, nil
	}
	return lastID(pos, msgs), nil
}

func lastID(pos Position, msgs int) MessageID {
	return MessageID{LedgerID: pos.LedgerID, EntryID: pos.EntryID, BatchIndex: int32(msgs - 1)}
}

// State returns the topic's state.
func (t *Topic) State(ctx context.Context) (State, error) {
	return call(ctx, t.in, t.stopped, func(reply func(State, error)) { reply(t.state, nil) })
}

// Closing.

// Close unloads the topic: producers and consumers are disconnected (they reconnect and find
// the topic again), subscriptions and the managed ledger are closed. Idempotent.
func (t *Topic) Close(ctx context.Context) error {
	err := call0(ctx, t.in, t.stopped, func(reply func(error)) { t.startClose(false, reply) })
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

// Delete deletes the topic and its data. Without force it fails with ErrNotEmpty while
// producers or consumers are connected.
func (t *Topic) Delete(ctx context.Context, force bool) error {
	err := call0(ctx, t.in, t.stopped, func(reply func(error)) {
		if !force && t.state != StateClosing {
			if len(t.producers) > 0 || len(t.waiting) > 0 {
				reply(fmt.Errorf("%w: topic has producers", ErrNotEmpty))
				return
			}
			for _, s := range t.subs {
				if s.consumerCount() > 0 {
					reply(fmt.Errorf("%w: subscription %s has consumers", ErrNotEmpty, s.name))
					return
				}
			}
		}
		t.startClose(true, reply)
	})
	return err
}

// startClose disconnects everything and closes (or deletes) the managed ledger; done (may
// be nil) runs when the topic is closed.
func (t *Topic) startClose(del bool, done func(error)) {
	if done != nil {
		t.closeWait = append(t.closeWait, done)
	}
	if del {
		t.deleting = true
	}
	switch t.state {
	case StateClosing:
		return
	case StateClosed:
		t.finishClose()
		return
	case StateTerminating:
		// Let terminate finish first: it reports through onTerminated, then we close.
		t.terminateWait = append(t.terminateWait, func(MessageID, error) {
			t.post(func() { t.startClose(false, nil) })
		})
		return
	}
	if t.become(StateClosing) != nil {
		return
	}
	for p := range t.producers {
		t.removeProducer(p, true)
	}
	for _, p := range t.waiting {
		p.state = producerClosed
		p.cb.Failed(ErrClosed)
		t.m.waitingProducers.Dec()
	}
	t.waiting = nil
	for name, ws := range t.opening {
		for _, w := range ws {
			w(nil, ErrClosed)
		}
		delete(t.opening, name)
	}
	t.closingSubs = len(t.subs)
	for _, s := range t.subs {
		s.close(func() { t.post(t.subClosed) })
	}
	if t.closingSubs == 0 {
		t.closeLog()
	}
}

func (t *Topic) subClosed() {
	t.closingSubs--
	if t.closingSubs == 0 && t.state == StateClosing {
		t.closeLog()
	}
}

func (t *Topic) closeLog() {
	log, del := t.log, t.deleting
	snap := ""
	if t.dedup.on && t.dedup.sinceSnapshot > 0 && !del {
		snap = t.dedup.snapshot(t.last)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var err error
		if del {
			err = log.Delete(ctx)
		} else {
			if snap != "" {
				if err := log.SetProperty(ctx, propDedup, snap); err != nil && !errors.Is(err, mledger.ErrFenced) {
					t.logger.Debug("final deduplication snapshot", "err", err)
				}
			}
			err = log.Close(ctx)
		}
		t.post(func() {
			t.closeErr = err
			for _, op := range t.inflight { // the log completes every add before closing
				t.m.pendingAdds.Dec()
				op.p.Conn.Send(sendError(op.p.ID, op.m.SequenceID, pb.ServerError_ServiceNotReady, "topic closed"))
			}
			t.inflight = nil
			t.become(StateClosed) //nolint:errcheck // legal edge
			t.finishClose()
		})
	}()
}

func (t *Topic) finishClose() {
	for _, w := range t.closeWait {
		w(t.closeErr)
	}
	t.closeWait = nil
}

// Counts returns the number of producers and consumers connected (for admin checks).
func (t *Topic) Counts(ctx context.Context) (producers, consumers int, err error) {
	type counts struct{ p, c int }
	r, err := call(ctx, t.in, t.stopped, func(reply func(counts, error)) {
		c := 0
		for _, s := range t.subs {
			c += s.consumerCount()
		}
		reply(counts{len(t.producers) + len(t.waiting), c}, nil)
	})
	return r.p, r.c, err
}
