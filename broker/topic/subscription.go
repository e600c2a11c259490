package topic

import (
	"context"
	"errors"
	"fmt"
	"github.com/magnetar-io/magnetar/internal/fsm"
	"github.com/magnetar-io/magnetar/internal/inbox"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic/dispatch"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Subscription is a named position on a topic with its consumers and dispatcher. One
// goroutine (run) owns everything below "owned by the run goroutine", including the
// dispatcher core (package dispatch), which decides every delivery; the goroutine performs
// the core's effects (sends, cursor reads and acks, timers) and feeds their outcomes back to
// it. Cursor I/O runs on helper goroutines (tracked: run waits for them before it ends) and
// comes back as events tagged with the dispatch epoch, which a seek or a close bumps so that
// the core drops a stale result.
type Subscription struct {
	name    string
	topic   *Topic
	cur     Cursor
	durable bool
	logger  *slog.Logger
	m       *Metrics
	in      *inbox.Queue[func()]
	stopped chan struct{}
	io      sync.WaitGroup // cursor I/O goroutines
	// nConsumers mirrors len(consumers) for other goroutines.
	nConsumers atomic.Int32

	// Owned by the run goroutine.
	state      SubState
	d          *dispatch.Core
	consumers  map[dispatch.CID]*Consumer
	readCancel context.CancelFunc
	timer      *time.Timer
	timerAt    int64
	// cursorPartials tells that the cursor had partly acknowledged batch entries before
	// this subscription object (they are looked up when read); partialsChecked that this
	// was checked.
	cursorPartials  bool
	partialsChecked bool
	resetDone       func(error)  // the seek in progress
	pa              *pendingAcks // transactional acknowledgements (nil: transactions off or non-durable)
	closeWait       []func()
	maxConsumers    int  // 0: unlimited (policy.go)
	noDelay         bool // delayed delivery is off: deliver_at_time is ignored (policy.go)
	// atEnd: a read found the end of the terminated log (endoftopic.go).
	atEnd bool

	rs replSub // the replicated subscription's state (replsub.go)

	msgsOut, bytesOut int64
	rateOut           rate
	redeliv           rate
	lastAck           int64
	lastConsumed      int64
}

func newSubscription(t *Topic, name string, cur Cursor, durable bool) *Subscription {
	s := &Subscription{
		name: name, topic: t, cur: cur, durable: durable,
		logger: t.logger.With("sub", name), m: t.m, in: inbox.New[func()](), stopped: make(chan struct{}),
		state: SubActive, d: dispatch.New(dispatch.Config{Partition: t.name.Partition, Shared: &t.dispatch}),
		consumers: map[dispatch.CID]*Consumer{},
	}
	t.m.subscriptions.Inc()
	go s.run()
	return s
}

// Name returns the subscription's name.
func (s *Subscription) Name() string { return s.name }

// Topic returns the subscription's topic.
func (s *Subscription) Topic() *Topic { return s.topic }

func (s *Subscription) run() {
	defer close(s.stopped)
	var batch []func()
	for range s.in.Signal() {
		batch = s.in.Drain(batch)
		for i, fn := range batch {
			s.d.SetTime(time.Now().UnixMilli()) // the dispatch rates are measured at each input
			fn()
			batch[i] = nil
		}
		if s.state == SubClosed {
			s.in.Close()
			if s.timer != nil {
				s.timer.Stop()
			}
			s.io.Wait()
			s.m.subscriptions.Dec()
			return
		}
	}
}

func (s *Subscription) post(fn func()) bool { return s.in.Push(fn) }

// spawn runs blocking cursor I/O off the owner goroutine; run waits for it before ending.
func (s *Subscription) spawn(fn func()) {
	s.io.Add(1)
	go func() {
		defer s.io.Done()
		fn()
	}()
}

func (s *Subscription) become(to SubState) error {
	if !subEdges.Legal(s.state, to) {
		err := fsm.Illegal(ErrIllegalTransition, "subscription "+s.name, s.state, to)
		s.logger.Error("bug", "err", err)
		return err
	}
	s.state = to
	return nil
}

func (s *Subscription) consumerCount() int { return int(s.nConsumers.Load()) }

// Performing the dispatcher's effects.

// flush performs what the dispatcher core asks for.
func (s *Subscription) flush() {
	r := s.d.Ready()
	for _, snd := range r.Sends {
		s.send(snd)
	}
	s.onMarkers(r.Markers)
	for _, a := range r.Acks {
		a = s.replAck(a)
		switch a.Kind {
		case dispatch.AckIndividual:
			s.m.acks.Add(float64(len(a.Positions)))
			s.cur.Ack(a.Positions, a.Done)
		case dispatch.AckCumulative:
			s.m.acks.Inc()
			s.cur.AckCumulative(a.Pos, a.Done)
		case dispatch.AckBatchIndex:
			s.cur.AckBatch(a.Pos, a.Index, a.Size, a.Done)
		}
	}
	for _, rep := range r.Replies {
		rep.Done(rep.Err)
	}
	for _, ac := range r.Active {
		if c := s.consumers[ac.To]; c != nil {
			id, on := c.ID, ac.Active
			c.Conn.Send(wrap(&pb.CommandActiveConsumerChange{ConsumerId: &id, IsActive: &on}))
		}
	}
	if r.CancelRead && s.readCancel != nil {
		s.readCancel()
	}
	if r.Read != nil {
		s.startRead(*r.Read)
	}
	if r.Replay != nil {
		s.startReplay(*r.Replay)
	}
	if r.Reset != nil {
		s.startReset(*r.Reset)
	}
	if r.TimerAt != 0 && (s.timer == nil || r.TimerAt < s.timerAt) {
		if s.timer != nil {
			s.timer.Stop()
		}
		s.timerAt = r.TimerAt
		s.timer = time.AfterFunc(time.Until(time.UnixMilli(r.TimerAt)), func() { s.post(s.onTimer) })
	}
}

func (s *Subscription) onTimer() {
	s.timer = nil
	if s.state != SubActive {
		return
	}
	s.d.Tick(time.Now().UnixMilli())
	s.flush()
}

func (s *Subscription) send(snd dispatch.Send) {
	c := s.consumers[snd.To]
	if c == nil {
		return
	}
	e := snd.Entry
	id, l, en := c.ID, uint64(e.Pos.LedgerID), uint64(e.Pos.EntryID)
	cmd := &pb.CommandMessage{ConsumerId: &id, MessageId: &pb.MessageIdData{LedgerId: &l, EntryId: &en}, AckSet: snd.AckSet}
	n, b := int64(e.Info.Msgs), int64(len(e.Data))
	if snd.RedeliveryCount > 0 {
		rc := snd.RedeliveryCount
		cmd.RedeliveryCount = &rc
		c.redeliv.add(n, 0)
		s.redeliv.add(n, 0)
		s.m.redelivered.Add(float64(n))
	}
	_, _, data := splitTxn(e.Data)
	c.Conn.SendMessage(wrap(cmd), data)
	c.msgsOut += n
	c.bytesOut += b
	c.rateOut.add(n, b)
	s.msgsOut += n
	s.bytesOut += b
	s.rateOut.add(n, b)
	s.lastConsumed = time.Now().UnixMilli()
	s.m.msgsOut.Add(float64(n))
	s.m.bytesOut.Add(float64(b))
}

// startRead reads new entries for the core.
func (s *Subscription) startRead(r dispatch.Read) {
	ctx, cancel := context.WithCancel(context.Background())
	s.readCancel = cancel
	cur := s.cur
	check, partials := !s.partialsChecked, s.cursorPartials
	s.spawn(func() {
		es, err := cur.Read(ctx, r.N)
		cancel()
		es = s.dropAborted(cur, es)
		if check {
			ictx, icancel := context.WithTimeout(context.Background(), 10*time.Second)
			if ci, ierr := cur.Info(ictx); ierr == nil {
				partials = ci.PartialBatches > 0
			}
			icancel()
		}
		entries := dispatchEntries(es, batchAckedOf(cur, es, partials))
		s.post(func() {
			s.readCancel = nil
			if check {
				s.partialsChecked, s.cursorPartials = true, partials
			}
			if s.noDelay {
				for i := range entries {
					entries[i].Info.DeliverAt = 0
				}
			}
			s.d.ReadDone(r.Epoch, entries, s.readStatus(err, "cursor read failed"), time.Now().UnixMilli())
			s.flush()
			if errors.Is(err, mledger.ErrNoMoreEntries) {
				s.onEndOfLog()
			}
		})
	})
}

// dropAborted removes the entries of aborted transactions from a read and acknowledges them
// on the cursor (they are never delivered, and must not hold the backlog). The read was
// bounded by the topic's max read position, so every other transactional entry in it is
// committed.
func (s *Subscription) dropAborted(cur Cursor, es []Entry) []Entry {
	if s.topic.txn == nil {
		return es
	}
	var drop []Position
	kept := es[:0:0]
	for i, e := range es {
		if id, ok, _ := splitTxn(e.Data); ok && s.topic.isAborted(id) {
			if drop == nil {
				kept = append(kept, es[:i]...)
			}
			drop = append(drop, e.Position)
			continue
		}
		if drop != nil {
			kept = append(kept, e)
		}
	}
	if drop == nil {
		return es
	}
	s.m.abortedSkipped.Add(float64(len(drop)))
	cur.Ack(drop, nil)
	return kept
}

// startReplay re-reads returned entries for the core.
func (s *Subscription) startReplay(r dispatch.Replay) {
	cur, partials := s.cur, s.cursorPartials
	s.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		es, err := cur.ReadPositions(ctx, r.Positions)
		cancel()
		entries := dispatchEntries(es, batchAckedOf(cur, es, partials))
		s.post(func() {
			status := s.readStatus(err, "replay read failed")
			if err != nil && status == dispatch.ReadIdle && !errors.Is(err, mledger.ErrFenced) {
				status = dispatch.ReadRetry // a re-read has no end of log to wait for
			}
			s.d.ReplayDone(r.Epoch, r.Positions, entries, status, time.Now().UnixMilli())
			s.flush()
		})
	})
}

// readStatus classifies a read's error for the core (on the owner goroutine); a fenced
// managed ledger closes the topic.
func (s *Subscription) readStatus(err error, what string) dispatch.ReadStatus {
	switch {
	case err == nil:
		return dispatch.ReadOK
	case errors.Is(err, mledger.ErrFenced):
		t := s.topic
		t.post(func() { t.fence(err) })
		return dispatch.ReadIdle
	case errors.Is(err, context.Canceled) || errors.Is(err, mledger.ErrNoMoreEntries) || errors.Is(err, mledger.ErrClosed):
		return dispatch.ReadIdle
	}
	if s.state == SubActive {
		s.logger.Warn(what, "err", err)
		s.m.readErrors.Inc()
	}
	return dispatch.ReadRetry
}

// dispatchEntries decodes what the dispatcher needs of each entry (off the owner goroutine).
func dispatchEntries(es []Entry, acked map[Position][]bool) []dispatch.Entry {
	out := make([]dispatch.Entry, len(es))
	for i, e := range es {
		ei := infoOf(e.Data)
		out[i] = dispatch.Entry{Pos: e.Position, Data: e.Data,
			Info: dispatch.Info{Msgs: ei.msgs, Hash: ei.hash, DeliverAt: ei.deliverAt, Marker: ei.marker}}
		if bs := acked[e.Position]; bs != nil {
			words := make([]uint64, (len(bs)+63)/64)
			for j, a := range bs {
				if a {
					words[j/64] |= 1 << (j % 64)
				}
			}
			out[i].AckedBits = words
		}
	}
	return out
}

// batchAckedOf looks up the partly acknowledged batch entries among es (only when the
// cursor has some).
func batchAckedOf(cur Cursor, es []Entry, partials bool) map[Position][]bool {
	if !partials {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out map[Position][]bool
	for _, e := range es {
		if m, err := parseMeta(e.Data); err != nil || m.GetNumMessagesInBatch() <= 1 {
			continue
		}
		if bs, err := cur.BatchAcked(ctx, e.Position); err == nil && bs != nil {
			if out == nil {
				out = map[Position][]bool{}
			}
			out[e.Position] = bs
		}
	}
	return out
}

// Consumers.

func (s *Subscription) addConsumer(c *Consumer, done func(error)) {
	c.sub = s
	c.connected = time.Now()
	if !s.post(func() { s.attachWhenReady(c, done) }) {
		done(ErrClosed)
	}
}

func (s *Subscription) attach(c *Consumer) error {
	if s.state != SubActive {
		return ErrClosed
	}
	if s.maxConsumers > 0 && len(s.consumers) >= s.maxConsumers {
		return fmt.Errorf("%w: Subscription reached max consumers limit", ErrConsumerBusy)
	}
	spec := dispatch.ConsumerSpec{Type: c.Type, Name: c.Name, Priority: c.Priority}
	if c.Type == pb.CommandSubscribe_Key_Shared {
		spec.Sticky = c.KeyShared != nil && c.KeyShared.GetKeySharedMode() == pb.KeySharedMode_STICKY
		for _, r := range c.KeyShared.GetHashRanges() {
			spec.Ranges = append(spec.Ranges, dispatch.HashRange{Start: uint32(r.GetStart()), End: uint32(r.GetEnd())})
		}
		spec.AllowOutOfOrder = c.KeyShared.GetAllowOutOfOrderDelivery()
	}
	id, err := s.d.AddConsumer(spec)
	switch {
	case errors.Is(err, dispatch.ErrConsumerBusy):
		return fmt.Errorf("%w: subscription %s: %v", ErrConsumerBusy, s.name, err)
	case errors.Is(err, dispatch.ErrConsumerAssign):
		return fmt.Errorf("%w: %v", ErrConsumerAssign, err)
	case err != nil:
		return ErrClosed
	}
	c.cid = id
	s.consumers[id] = c
	s.nConsumers.Store(int32(len(s.consumers)))
	s.m.consumers.Inc()
	return nil
}

// forget drops c from the owner's tables; notify tells the client (CLOSE_CONSUMER) when the
// broker decides.
func (s *Subscription) forget(c *Consumer, notify bool) {
	c.closed = true
	delete(s.consumers, c.cid)
	s.nConsumers.Store(int32(len(s.consumers)))
	s.m.consumers.Dec()
	if notify {
		c.Conn.ConsumerClosed(c)
		id, rid := c.ID, uint64(0)
		url, urlTLS := s.topic.assignedURLs()
		c.Conn.Send(wrap(&pb.CommandCloseConsumer{ConsumerId: &id, RequestId: &rid,
			AssignedBrokerServiceUrl: url, AssignedBrokerServiceUrlTls: urlTLS}))
	}
}

// removeConsumer detaches c; its unacknowledged entries are redelivered. notify tells the
// client (CLOSE_CONSUMER) when the broker decides.
func (s *Subscription) removeConsumer(c *Consumer, notify bool) {
	if c.closed || c.sub != s || s.consumers[c.cid] != c {
		return
	}
	s.forget(c, notify)
	s.d.RemoveConsumer(c.cid, true)
	if s.state == SubActive && len(s.consumers) == 0 && !s.durable {
		s.startClose(nil) // a reader's subscription ends with its consumer
		return
	}
	s.flush()
}

// disconnectAll detaches every consumer without counting a redelivery and tells the
// clients (CLOSE_CONSUMER): they reconnect.
func (s *Subscription) disconnectAll() {
	for _, c := range s.sortedConsumers() {
		s.forget(c, true)
		s.d.RemoveConsumer(c.cid, false)
	}
}

// sortedConsumers lists the consumers in attach order.
func (s *Subscription) sortedConsumers() []*Consumer {
	out := make([]*Consumer, 0, len(s.consumers))
	for _, c := range s.consumers {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].cid < out[j].cid })
	return out
}

func (s *Subscription) onFlow(c *Consumer, n int) {
	if c.closed {
		return
	}
	c.lastFlow = time.Now().UnixMilli()
	s.d.Flow(c.cid, n)
	s.flush()
}

// Acknowledgements.

func (s *Subscription) onAck(c *Consumer, ack *pb.CommandAck, done func(error)) {
	s.lastAck = time.Now().UnixMilli()
	ids := make([]dispatch.AckID, len(ack.GetMessageId()))
	for i, id := range ack.GetMessageId() {
		ids[i] = dispatch.AckID{Pos: Position{LedgerID: int64(id.GetLedgerId()), EntryID: int64(id.GetEntryId())},
			AckSet: id.GetAckSet(), BatchSize: int(id.GetBatchSize())}
	}
	if ack.TxnidMostBits != nil || ack.TxnidLeastBits != nil {
		s.onTxnAck(c, ack, ids, done)
		return
	}
	if s.pa != nil {
		if err := s.pa.core.CheckPlain(toPA(ids)); err != nil {
			if done != nil {
				done(err)
			}
			return
		}
	}
	s.d.Ack(c.cid, ack.GetAckType() == pb.CommandAck_Cumulative, ids, mapAckErr(s.endOfTopicAfter(done)))
	s.flush()
}

// mapAckErr turns the core's refusal into the topic's error.
func mapAckErr(done func(error)) func(error) {
	if done == nil {
		return nil
	}
	return func(err error) {
		if errors.Is(err, dispatch.ErrNotAllowed) {
			err = fmt.Errorf("%w: %v", ErrNotAllowed, err)
		}
		done(err)
	}
}

func (s *Subscription) onReattach(c *Consumer) bool {
	if c.closed {
		return false
	}
	s.d.Reattach(c.cid)
	s.flush()
	return true
}

func (s *Subscription) onRedeliver(c *Consumer, ids []*pb.MessageIdData) {
	if c.closed {
		return
	}
	ps := make([]Position, len(ids))
	for i, id := range ids {
		ps[i] = Position{LedgerID: int64(id.GetLedgerId()), EntryID: int64(id.GetEntryId())}
	}
	s.d.Redeliver(c.cid, ps)
	s.flush()
}

// Seek.

func (s *Subscription) onSeek(id *MessageID, publishTime int64, done func(error)) {
	if s.state != SubActive {
		done(ErrClosed)
		return
	}
	t := dispatch.SeekTarget{PublishTime: publishTime}
	if id != nil {
		t = dispatch.SeekTarget{Pos: id.Position()}
	}
	if err := s.d.Seek(t); err != nil {
		done(fmt.Errorf("%w: %v", ErrNotAllowed, err))
		return
	}
	s.resetDone = done
	s.flush()
}

// startReset moves the cursor for the core (no read of it is in flight).
func (s *Subscription) startReset(t dispatch.SeekTarget) {
	cur, log := s.cur, s.topic.log
	s.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pos, err := t.Pos, error(nil)
		if t.PublishTime > 0 {
			pos, err = findByPublishTime(ctx, log, t.PublishTime)
		}
		if err == nil {
			err = cur.Reset(ctx, pos)
		}
		s.post(func() { s.onReset(err) })
	})
}

func (s *Subscription) onReset(err error) {
	for _, id := range s.d.ResetDone(err) {
		if c := s.consumers[id]; c != nil {
			s.forget(c, true)
		}
	}
	if err == nil {
		s.partialsChecked = false // a reset dropped acknowledgements: ask the cursor again
	}
	if done := s.resetDone; done != nil {
		s.resetDone = nil
		done(err)
	}
	s.flush()
}

// Unsubscribe and close.

func (s *Subscription) onUnsubscribe(c *Consumer, force bool, done func(error)) {
	if s.state != SubActive {
		done(ErrClosed)
		return
	}
	if !force && (len(s.consumers) > 1 || (len(s.consumers) == 1 && s.consumers[c.cid] != c)) {
		done(fmt.Errorf("%w: subscription %s has other consumers", ErrNotEmpty, s.name))
		return
	}
	// The requester is simply detached; the client closes it on success.
	if !c.closed && s.consumers[c.cid] == c {
		s.forget(c, false)
		s.d.RemoveConsumer(c.cid, false)
		c.Conn.ConsumerClosed(c)
	}
	s.startDelete(done)
}

// Delete deletes the subscription (admin). Without force it fails with ErrNotEmpty while
// consumers are connected.
func (s *Subscription) Delete(ctx context.Context, force bool) error {
	return inbox.Call0(ctx, s.in, s.stopped, ErrClosed, func(reply func(error)) {
		if s.state != SubActive {
			reply(ErrClosed)
			return
		}
		if !force && len(s.consumers) > 0 {
			reply(fmt.Errorf("%w: subscription %s has consumers", ErrNotEmpty, s.name))
			return
		}
		s.startDelete(reply)
	})
}

func (s *Subscription) startDelete(done func(error)) {
	if s.become(SubDeleting) != nil {
		done(ErrIllegalTransition)
		return
	}
	s.stopDispatch()
	var log Log
	if s.pa != nil {
		log = s.pa.log
		s.pa.log = nil // deleted below, not closed
		s.closePA()
	}
	cur, t, name, durable := s.cur, s.topic, s.name, s.durable
	s.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var err error
		if durable {
			_ = cur.Close(ctx)
			err = t.log.DeleteCursor(ctx, name)
			if errors.Is(err, mledger.ErrCursorNotFound) {
				err = nil
			}
			if err == nil {
				err = t.deletePendingAckLog(ctx, name, log)
			}
		} else {
			err = cur.Close(ctx)
		}
		s.post(func() {
			if err != nil {
				s.logger.Warn("delete subscription", "err", err)
				s.become(SubActive) //nolint:errcheck // legal edge
				s.d.Restart()
				done(err)
				s.flush()
				return
			}
			s.become(SubClosed) //nolint:errcheck // legal edge
			t.post(func() { t.subGone(s) })
			done(nil)
			for _, w := range s.closeWait {
				w()
			}
		})
	})
}

// stopDispatch stops the core (reads in flight are cancelled and dropped) and disconnects
// every consumer.
func (s *Subscription) stopDispatch() {
	s.d.Stop()
	s.disconnectAll()
	s.flush()
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// close disconnects every consumer and closes the cursor (topic unload); done (may be nil)
// runs when the subscription is closed.
func (s *Subscription) close(done func()) {
	if !s.post(func() { s.startClose(done) }) && done != nil {
		done()
	}
}

func (s *Subscription) startClose(done func()) {
	if done != nil {
		s.closeWait = append(s.closeWait, done)
	}
	if s.state != SubActive {
		return // closing or deleting: closeWait runs at the end
	}
	s.become(SubClosing) //nolint:errcheck // legal edge
	s.stopDispatch()
	s.closePA()
	cur, t := s.cur, s.topic
	s.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cur.Close(ctx); err != nil && !errors.Is(err, mledger.ErrClosed) {
			s.logger.Debug("close cursor", "err", err)
		}
		s.post(func() {
			s.become(SubClosed) //nolint:errcheck // legal edge
			t.post(func() { t.subGone(s) })
			for _, w := range s.closeWait {
				w()
			}
			s.closeWait = nil
		})
	})
}

// MarkDelete returns the subscription's mark-delete position.
func (s *Subscription) MarkDelete(ctx context.Context) (Position, error) {
	return s.cur.MarkDelete(ctx)
}

// Stats returns the subscription's statistics.
func (s *Subscription) Stats(ctx context.Context) (SubscriptionStats, error) {
	st, err := inbox.Call(ctx, s.in, s.stopped, ErrClosed, func(reply func(SubscriptionStats, error)) { reply(s.stats(), nil) })
	if err != nil {
		return st, err
	}
	if ci, err := s.cur.Info(ctx); err == nil {
		st.MsgBacklog = ci.Backlog
		st.MsgBacklogNoDelayed = max(ci.Backlog-st.MsgDelayed, 0)
		st.NonContiguousDeletedMessagesRanges = ci.AckedRanges
		st.MsgDropped, st.MsgDropRate = ci.Dropped, ci.DropRate
		if ls, err := s.topic.log.Stats(ctx); err == nil && ci.Backlog > 0 {
			st.BacklogSize = backlogBytes(ls, ci.MarkDelete)
		}
	}
	return st, nil
}

func (s *Subscription) stats() SubscriptionStats {
	now := time.Now()
	typ := s.d.Type()
	st := SubscriptionStats{
		Type: subTypeName(typ), BytesOutCounter: s.bytesOut, MsgOutCounter: s.msgsOut,
		MsgDelayed: int64(s.d.Delayed()), IsDurable: s.durable, LastAckedTimestamp: s.lastAck,
		LastConsumedTimestamp: s.lastConsumed, Consumers: []ConsumerStats{}, IsReplicated: s.rs.on,
		SubscriptionProperties: map[string]string{}, ConsumersAfterMarkDeletePosition: map[string]string{},
	}
	st.MsgRateOut, st.MsgThroughputOut = s.rateOut.rates(now)
	st.MsgRateRedeliver, _ = s.redeliv.rates(now)
	st.BlockedSubscriptionOnUnackedMsgs = s.d.Blocked(0)
	if id, ok := s.d.Active(); ok && s.consumers[id] != nil {
		st.ActiveConsumerName = s.consumers[id].Name
	}
	for _, c := range s.sortedConsumers() {
		permits, unacked := s.d.ConsumerState(c.cid)
		cs := ConsumerStats{
			ConsumerName: c.Name, AvailablePermits: permits, UnackedMessages: unacked,
			BytesOutCounter: c.bytesOut, MsgOutCounter: c.msgsOut, Address: c.Conn.RemoteAddr(),
			ConnectedSince: c.connected.UTC().Format(time.RFC3339Nano), ClientVersion: c.Conn.ClientVersion(),
			Metadata: c.Metadata, LastConsumedFlowTimestamp: c.lastFlow,
		}
		if cs.Metadata == nil {
			cs.Metadata = map[string]string{}
		}
		cs.MsgRateOut, cs.MsgThroughputOut = c.rateOut.rates(now)
		cs.MsgRateRedeliver, _ = c.redeliv.rates(now)
		cs.KeyHashRanges = s.d.RangesOf(c.cid)
		cs.BlockedConsumerOnUnackedMsgs = s.d.Blocked(c.cid)
		st.UnackedMessages += int64(unacked)
		st.Consumers = append(st.Consumers, cs)
	}
	return st
}

func subTypeName(t SubType) string {
	switch t {
	case pb.CommandSubscribe_Exclusive:
		return "Exclusive"
	case pb.CommandSubscribe_Shared:
		return "Shared"
	case pb.CommandSubscribe_Failover:
		return "Failover"
	case pb.CommandSubscribe_Key_Shared:
		return "Key_Shared"
	}
	return t.String()
}
