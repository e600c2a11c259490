package topic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/internal/inbox"
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
	// Txn turns transactions on (nil: transactional sends are refused).
	Txn *TxnConfig
	// ReadCompacted, if set, wraps the cursor of a subscription opened with ReadCompacted
	// (package broker/compaction); nil: such subscriptions read the topic as it is.
	ReadCompacted func(Cursor) Cursor
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

// Topic is a loaded persistent topic. One owner (step, run by an inbox.Owner on a goroutine
// that exists while events come) owns it: the topic core (its state, producers,
// epoch, deduplication, publish pipeline and rate decisions; see topicCore), which it feeds
// inputs through the core's methods and whose effects it performs, and the subscriptions'
// registry; each subscription has its own goroutine. Helper goroutines do the blocking log
// I/O (spawn); the owner waits for them before the topic is done. Methods are safe for
// concurrent use.
type Topic struct {
	name    topicname.Name
	cfg     Config
	log     Log
	logger  *slog.Logger
	m       *Metrics
	in      *inbox.Queue[func()]
	owner   *inbox.Owner  // runs step while events come (no goroutine while idle)
	stopped chan struct{} // closed when the owner stops taking events
	exited  chan struct{} // closed when the owner and every helper goroutine have ended
	helpers sync.WaitGroup
	created time.Time
	// pubBudget bounds the bytes in flight; every Publish holds len(Data) of it until done.
	pubBudget budget
	// assigned is where CloseTo sends the clients (nil: they look the topic up again).
	assigned atomic.Pointer[Redirect]
	// repl is the geo-replicators' view for the statistics (nil: none).
	repl atomic.Pointer[Replication]
	// rsub is the topic's part of replicated subscriptions (replsub.go).
	rsub replSubs

	// Owned by the owner (step).
	batch         []func() // the events being run
	ended         bool     // the topic closed: step ran its end
	core          *topicCore
	txn           *txnTopic // nil: transactions are off
	subs          map[string]*Subscription
	opening       map[string][]func(*Subscription, error)
	terminateWait []func(MessageID, error)
	closeWait     []func(error)
	closeErr      error
	deleting      bool
	closingSubs   int // subscriptions and close hooks the close waits for
	closeHooks    []func(done func())
	// timers perform the core's timer requests, one per kind (policy.go).
	timers [numTimers]*time.Timer
	// dispatch is the topic dispatch rate, shared by the subscriptions' goroutines.
	dispatch topicDispatch
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
		m: cfg.Metrics, stopped: make(chan struct{}), exited: make(chan struct{}),
		created: time.Now(),
		core:    newTopicCore(cfg.Name.String(), cfg.Dedup, cfg.DedupSnapshotEvery, cfg.Metrics),
		subs:    map[string]*Subscription{}, opening: map[string][]func(*Subscription, error){},
	}
	// Open holds the owner (it loads the core) until it releases it below.
	t.owner = inbox.NewOwner(t.step, inbox.DefaultLinger)
	t.in = inbox.NewOwned[func()](t.owner)
	t.pubBudget.limit = cfg.MaxPendingBytes
	st, err := cfg.Log.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("topic %s: stats: %w", cfg.Name, err)
	}
	if err := t.core.load(ctx, st, cfg.Log); err != nil {
		return nil, fmt.Errorf("topic %s: %w", cfg.Name, err)
	}
	if cfg.Txn != nil {
		tt, err := loadTxn(ctx, *cfg.Txn, cfg.Name.ManagedLedgerName(), cfg.Log.LastConfirmed())
		if err != nil {
			return nil, fmt.Errorf("topic %s: %w", cfg.Name, err)
		}
		t.txn = tt
		tt.logLoaded(t)
		t.performTxn()
	}
	t.m.topics.Inc()
	t.owner.Release()
	return t, nil
}

// Name returns the topic's name.
func (t *Topic) Name() topicname.Name { return t.name }

// Done is closed once the topic has closed and its goroutines have ended.
func (t *Topic) Done() <-chan struct{} { return t.exited }

// maxIdleBatch is the capacity of the event slice a topic keeps between bursts; a larger
// one (after a burst) is dropped, so an idle topic holds little.
const maxIdleBatch = 64

// step is the owner loop's body, run by t.owner whenever events are queued (never twice at
// once, each run after the previous one: see inbox.Owner). It runs every queued event, in
// order, performing the core's Ready after each; once the core is Closed it stops taking
// events, waits for the helpers and reports the topic done.
func (t *Topic) step() {
	t.batch = t.in.Drain(t.batch)
	for i, fn := range t.batch {
		fn()
		t.batch[i] = nil
		t.perform()
	}
	if cap(t.batch) > maxIdleBatch {
		t.batch = nil
	}
	if t.core.state != StateClosed || t.ended {
		return
	}
	t.ended = true
	t.owner.Stop()
	t.in.Close()
	t.stopTimers()
	t.m.topics.Dec()
	if t.cfg.OnClosed != nil {
		t.cfg.OnClosed(t)
	}
	close(t.stopped)
	t.helpers.Wait() // after stopped is closed: a helper's call to the topic fails then
	close(t.exited)
}

// perform does what the core asked for: it hands adds to the log, starts property writes
// and a terminate (their completions come back as events, with their tags), and tells the
// clients.
func (t *Topic) perform() {
	t.publishReleased()
	t.performTxn()
	if t.core.ready.empty() {
		return
	}
	rd := t.core.takeReady()
	for _, op := range rd.adds {
		t.addAsync(op)
	}
	for _, w := range rd.props {
		t.setProperty(w)
	}
	if rd.terminate != 0 {
		tag, log := rd.terminate, t.log
		t.spawn(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			pos, err := log.Terminate(ctx)
			cancel()
			t.post(func() { t.onTerminated(tag, pos, err) })
		})
	}
	for i := range rd.out {
		t.tell(&rd.out[i])
	}
	if rd.retune != nil {
		t.retune(*rd.retune)
	}
	for _, ct := range rd.timers {
		t.armTimer(ct)
	}
	t.core.recycle(&rd)
}

func (t *Topic) addAsync(op *pubOp) {
	start := time.Now()
	t.log.AddAsync(op.m.Data, func(pos Position, err error) {
		t.pubDone(op.p, op.m)
		t.m.publishLatency.Observe(time.Since(start).Seconds())
		if !t.post(func() { t.onAdded(op, pos, err) }) {
			t.m.pendingAdds.Dec()
		}
	})
}

func (t *Topic) onAdded(op *pubOp, pos Position, err error) {
	t.core.added(op, pos, err, time.Now().UnixMilli())
	t.txnAdded(op.m, pos, err)
	if err != nil && errors.Is(err, mledger.ErrFenced) {
		t.fence(err)
	}
}

func (t *Topic) setProperty(w propWrite) {
	log := t.log
	t.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := log.SetProperty(ctx, w.key, w.value)
		cancel()
		t.post(func() {
			if err != nil && !errors.Is(err, mledger.ErrClosed) {
				t.logger.Warn("record topic property", "key", w.key, "value", w.value, "err", err)
			}
			t.core.propertyWritten(w.key, w.value, w.tag, err)
		})
	})
}

// tell performs one output of the core.
func (t *Topic) tell(o *output) {
	p := o.p
	switch o.kind {
	case outReceipt:
		id, seq, hi := p.ID, o.seq, o.hi
		l, e := uint64(o.pos.LedgerID), uint64(o.pos.EntryID)
		p.Conn.Send(wrap(&pb.CommandSendReceipt{ProducerId: &id, SequenceId: &seq, HighestSequenceId: &hi,
			MessageId: &pb.MessageIdData{LedgerId: &l, EntryId: &e}}))
	case outSendError:
		p.Conn.Send(sendError(p.ID, o.seq, o.code, o.msg))
	case outRefused:
		p.Conn.PublishDone()
		t.pubBudget.release(int64(o.size))
		p.Conn.Send(sendError(p.ID, o.seq, o.code, o.msg))
	case outClose:
		p.Conn.ProducerClosed(p)
		id, rid := p.ID, uint64(0)
		url, urlTLS := t.assignedURLs()
		p.Conn.Send(wrap(&pb.CommandCloseProducer{ProducerId: &id, RequestId: &rid,
			AssignedBrokerServiceUrl: url, AssignedBrokerServiceUrlTls: urlTLS}))
	case outReady:
		p.cb.Ready(o.ready)
	case outQueued:
		p.cb.Queued()
	case outFailed:
		p.cb.Failed(o.err)
	}
}

// post runs fn on the topic goroutine; false if the topic has stopped.
func (t *Topic) post(fn func()) bool { return t.in.Push(fn) }

// spawn runs blocking I/O off the topic goroutine (called on it); the owner waits for it
// before the topic is done.
func (t *Topic) spawn(fn func()) {
	t.helpers.Add(1)
	go func() {
		defer t.helpers.Done()
		fn()
	}()
}

// stopTimers stops the timers that post to the topic (it has stopped).
func (t *Topic) stopTimers() {
	for _, tm := range t.timers {
		if tm != nil {
			tm.Stop()
		}
	}
}

// Producers.

// AddProducer attaches p (whose exported fields the caller set) and reports through cb.
func (t *Topic) AddProducer(p *Producer, cb ProducerCallbacks) {
	p.topic = t
	p.cb = cb
	p.connected = time.Now()
	if !t.post(func() { t.core.addProducer(p) }) {
		cb.Failed(ErrClosed)
	}
}

// Publishing.

// pubDone releases what a publish held: the connection's slot and the topic's bytes.
func (t *Topic) pubDone(p *Producer, m Message) {
	p.Conn.PublishDone()
	t.pubBudget.release(int64(len(m.Data)))
}

// fence closes the topic because another owner took its managed ledger over (the clients
// reconnect, look the topic up and find the new owner).
func (t *Topic) fence(err error) {
	switch t.core.state {
	case StateFenced, StateClosing, StateClosed, StateTerminating:
		return
	}
	t.logger.Warn("managed ledger fenced: closing the topic", "err", err)
	if t.core.become(StateFenced) == nil {
		t.startClose(false, nil)
	}
}

// Terminate seals the topic and returns its last message id.
func (t *Topic) Terminate(ctx context.Context) (MessageID, error) {
	return inbox.Call(ctx, t.in, t.stopped, ErrClosed, func(reply func(MessageID, error)) {
		switch t.core.state {
		case StateTerminated:
			t.spawn(func() { reply(t.LastMessageID(ctx)) })
		case StateTerminating:
			t.terminateWait = append(t.terminateWait, reply)
		case StateActive:
			if !t.core.terminate() {
				reply(MessageID{}, ErrIllegalTransition)
				return
			}
			t.terminateWait = append(t.terminateWait, reply)
		default:
			reply(MessageID{}, ErrClosed)
		}
	})
}

func (t *Topic) onTerminated(tag uint64, pos Position, err error) {
	if !t.core.terminated(tag, err) {
		return
	}
	waiters := t.terminateWait
	t.terminateWait = nil
	if err != nil {
		for _, w := range waiters {
			w(MessageID{}, err)
		}
		if t.core.state == StateFenced {
			t.startClose(false, nil)
		}
		return
	}
	t.logger.Info("topic terminated", "last", pos)
	t.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		id, err := t.LastMessageID(ctx)
		for _, w := range waiters {
			w(id, err)
		}
	})
}

// LastMessageID returns the id of the topic's last message: the last entry, with the index
// of its last message if it is a batch. For an empty topic EntryID is -1. With transactions,
// it is the last entry a reader can be given: before the max read position, and not of an
// aborted transaction (apache/pulsar#22610), so a reader's HasNext ends.
func (t *Topic) LastMessageID(ctx context.Context) (MessageID, error) {
	type lastInfo struct {
		pos   Position
		msgs  int
		bound *Position
	}
	li, err := inbox.Call(ctx, t.in, t.stopped, ErrClosed, func(reply func(lastInfo, error)) {
		l := lastInfo{pos: t.core.last, msgs: t.core.lastMsgs}
		if t.txn != nil {
			l.msgs = 0 // the last entry may not be readable: look
			if b := t.txn.core.MaxRead(); b != nil {
				p := b.Pos
				l.bound = &p
			}
		}
		reply(l, nil)
	})
	if err != nil {
		return MessageID{}, err
	}
	if li.msgs > 0 {
		// Retention may have trimmed the ledger of the last message: then, as Pulsar does
		// (apache/pulsar#10087), the topic is empty at its current ledger, and a reader's
		// HasNext ends.
		st, err := t.log.Stats(ctx)
		if err != nil || !trimmed(st, li.pos) {
			return lastID(li.pos, li.msgs), nil
		}
		return emptyAt(st), nil
	}
	if t.txn != nil {
		return t.lastReadable(ctx, li.bound)
	}
	// Unknown since load: find the last entry and read it.
	st, err := t.log.Stats(ctx)
	if err != nil {
		return MessageID{}, err
	}
	pos := lastEntry(st)
	if trimmed(st, pos) {
		return emptyAt(st), nil
	}
	if pos.EntryID < 0 {
		return MessageID{LedgerID: pos.LedgerID, EntryID: -1, BatchIndex: -1}, nil
	}
	es, err := t.log.Read(ctx, pos, 1)
	if err != nil {
		return MessageID{}, err
	}
	msgs := 1
	if len(es) == 1 && es[0].Position == pos {
		if infoOf(es[0].Data).marker {
			return t.lastReadable(ctx, nil) // markers are never read (replsub.go)
		}
		msgs = infoOf(es[0].Data).msgs
		if m, err := parseMeta(es[0].Data); err == nil && m.NumMessagesInBatch == nil {
			msgs = 0 // not a batch
		}
	}
	t.post(func() { t.core.learnLast(pos, msgs) })
	if msgs == 0 {
		return MessageID{LedgerID: pos.LedgerID, EntryID: pos.EntryID, BatchIndex: -1}, nil
	}
	return lastID(pos, msgs), nil
}

// trimmed reports whether p lies in a ledger before the log's first: retention deleted it.
func trimmed(st mledger.Stats, p Position) bool {
	return len(st.Ledgers) > 0 && p.LedgerID < st.Ledgers[0].ID
}

// emptyAt is the last message id of a log with nothing left to read: its current ledger,
// entry -1.
func emptyAt(st mledger.Stats) MessageID {
	return MessageID{LedgerID: st.Ledgers[len(st.Ledgers)-1].ID, EntryID: -1, BatchIndex: -1}
}

// lastReadable walks back from the last entry (or from before the read bound) over entries
// of aborted transactions and markers, to the last entry a reader is given.
func (t *Topic) lastReadable(ctx context.Context, bound *Position) (MessageID, error) {
	st, err := t.log.Stats(ctx)
	if err != nil {
		return MessageID{}, err
	}
	prev := func(p Position) Position {
		if p.EntryID > 0 {
			return Position{LedgerID: p.LedgerID, EntryID: p.EntryID - 1}
		}
		for i := len(st.Ledgers) - 1; i >= 0; i-- {
			if l := st.Ledgers[i]; l.ID < p.LedgerID && l.Entries > 0 {
				return Position{LedgerID: l.ID, EntryID: l.Entries - 1}
			}
		}
		return Position{LedgerID: p.LedgerID, EntryID: -1}
	}
	pos := lastEntry(st)
	if bound != nil && !pos.Less(*bound) {
		pos = prev(*bound)
	}
	if trimmed(st, pos) {
		return emptyAt(st), nil
	}
	for steps := 0; pos.EntryID >= 0 && steps < 10_000; steps++ {
		es, err := t.log.Read(ctx, pos, 1)
		if err != nil {
			return MessageID{}, err
		}
		if len(es) != 1 || es[0].Position != pos {
			break // trimmed meanwhile: answer what was found last
		}
		if id, ok, _ := splitTxn(es[0].Data); ok && t.isAborted(id) {
			pos = prev(pos)
			continue
		}
		if infoOf(es[0].Data).marker {
			pos = prev(pos)
			continue
		}
		if m, err := parseMeta(es[0].Data); err == nil && m.NumMessagesInBatch != nil {
			return lastID(pos, max(infoFromMeta(m).msgs, 1)), nil
		}
		return MessageID{LedgerID: pos.LedgerID, EntryID: pos.EntryID, BatchIndex: -1}, nil
	}
	return MessageID{LedgerID: pos.LedgerID, EntryID: pos.EntryID, BatchIndex: -1}, nil
}

func lastID(pos Position, msgs int) MessageID {
	return MessageID{LedgerID: pos.LedgerID, EntryID: pos.EntryID, BatchIndex: int32(msgs - 1)}
}

// State returns the topic's state.
func (t *Topic) State(ctx context.Context) (State, error) {
	return inbox.Call(ctx, t.in, t.stopped, ErrClosed, func(reply func(State, error)) { reply(t.core.state, nil) })
}

// Closing.

// Close unloads the topic: producers and consumers are disconnected (they reconnect and find
// the topic again), subscriptions and the managed ledger are closed. It returns once the
// topic's goroutines have ended. Idempotent.
func (t *Topic) Close(ctx context.Context) error {
	err := inbox.Call0(ctx, t.in, t.stopped, ErrClosed, func(reply func(error)) { t.startClose(false, reply) })
	if errors.Is(err, ErrClosed) {
		err = nil
	} else if err != nil {
		return err
	}
	return t.wait(ctx, err)
}

// wait waits for the topic's goroutines to end, then returns err.
func (t *Topic) wait(ctx context.Context, err error) error {
	select {
	case <-t.exited:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Redirect names the broker a closed topic's clients reconnect to: CLOSE_PRODUCER and
// CLOSE_CONSUMER carry its URLs as the assigned broker service URLs, so the clients connect
// there without a lookup.
type Redirect struct {
	ServiceURL, ServiceURLTLS string
}

// CloseTo closes the topic as Close does, telling its producers and consumers to reconnect
// to r (a bundle transfer).
func (t *Topic) CloseTo(ctx context.Context, r Redirect) error {
	t.assigned.Store(&r)
	return t.Close(ctx)
}

// assignedURLs are the assigned broker service URLs of a CLOSE_PRODUCER or CLOSE_CONSUMER
// (nil if CloseTo was not called). Safe on any goroutine.
func (t *Topic) assignedURLs() (url, urlTLS *string) {
	r := t.assigned.Load()
	if r == nil {
		return nil, nil
	}
	if r.ServiceURL != "" {
		url = &r.ServiceURL
	}
	if r.ServiceURLTLS != "" {
		urlTLS = &r.ServiceURLTLS
	}
	return url, urlTLS
}

// Delete deletes the topic and its data. Without force it fails with ErrNotEmpty while
// producers or consumers are connected.
func (t *Topic) Delete(ctx context.Context, force bool) error {
	err := inbox.Call0(ctx, t.in, t.stopped, ErrClosed, func(reply func(error)) {
		if !force && t.core.state != StateClosing {
			if len(t.core.producers) > 0 || len(t.core.waiting) > 0 {
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
	if err != nil {
		return err
	}
	return t.wait(ctx, nil)
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
	switch t.core.state {
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
	if t.core.become(StateClosing) != nil {
		return
	}
	t.core.closeProducers(ErrClosed)
	t.flushThrottled()
	t.closeTxn()
	for name, ws := range t.opening {
		for _, w := range ws {
			w(nil, ErrClosed)
		}
		delete(t.opening, name)
	}
	t.closingSubs = len(t.subs) + len(t.closeHooks)
	for _, s := range t.subs {
		s.close(func() { t.post(t.subClosed) })
	}
	for _, h := range t.closeHooks {
		h(func() { t.post(t.subClosed) })
	}
	t.closeHooks = nil
	if t.closingSubs == 0 {
		t.closeLog()
	}
}

func (t *Topic) subClosed() {
	t.closingSubs--
	if t.closingSubs == 0 && t.core.state == StateClosing {
		t.closeLog()
	}
}

func (t *Topic) closeLog() {
	log, del := t.log, t.deleting
	snap := ""
	if !del {
		snap = t.core.finalSnapshot()
	}
	var subs []string
	if del && t.txn != nil {
		for name, s := range t.subs {
			if s.durable {
				subs = append(subs, name)
			}
		}
	}
	t.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var err error
		if del {
			if t.txn != nil {
				if cs, cerr := log.Cursors(ctx); cerr == nil {
					subs = append(subs, cs...)
				}
			}
			err = log.Delete(ctx)
			for _, sub := range subs {
				if perr := t.deletePendingAckLog(ctx, sub, nil); perr != nil {
					t.logger.Warn("delete pending-ack log", "sub", sub, "err", perr)
				}
			}
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
			t.core.failInflight()      // the log completes every add before closing
			t.core.become(StateClosed) //nolint:errcheck // legal edge
			t.finishClose()
		})
	})
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
	r, err := inbox.Call(ctx, t.in, t.stopped, ErrClosed, func(reply func(counts, error)) {
		c := 0
		for _, s := range t.subs {
			c += s.consumerCount()
		}
		reply(counts{len(t.core.producers) + len(t.core.waiting), c}, nil)
	})
	return r.p, r.c, err
}

// publish hands m of p to the core's publish pipeline (see topicCore.publish).
func (t *Topic) publish(p *Producer, m Message) bool { return t.core.publish(p, m) }
