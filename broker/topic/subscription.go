package topic

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Subscription is a named position on a topic with its consumers and dispatcher. One
// goroutine (run) owns everything below "owned by the run goroutine"; cursor reads run on
// helper goroutines and come back as events tagged with the dispatch epoch, which a seek or
// a close bumps so that a stale read is dropped.
type Subscription struct {
	name    string
	topic   *Topic
	cur     Cursor
	durable bool
	logger  *slog.Logger
	m       *Metrics
	in      *events
	stopped chan struct{}
	// nConsumers mirrors len(consumers) for other goroutines.
	nConsumers atomic.Int32

	// Owned by the run goroutine.
	state     SubState
	typ       SubType
	consumers []*Consumer // in attach order
	active    *Consumer   // Exclusive and Failover: the consumer that receives
	ks        keySelector
	ksSticky  bool
	ksOOO     bool // allowOutOfOrderDelivery
	rr        int  // Shared: next consumer to try

	epoch      uint64
	reading    bool // a cursor read is in flight (possibly cancelled)
	readCancel context.CancelFunc
	replaying  bool // a re-read of replay positions is in flight
	// replay holds delivered-then-returned, delayed-then-due and undeliverable entries, to
	// be re-read and dispatched before new ones (in position order).
	replay        map[Position]entryInfo
	replayHashes  map[uint32]int // Key_Shared: replay entries per hash
	replayBlocked bool           // the last replay pass could dispatch nothing
	// pending holds entries sent to a consumer and not acknowledged.
	pending     map[Position]*pendingEntry
	pendingHash map[uint32]*hashHold // Key_Shared: the consumer holding unacked entries of a hash
	redeliver   map[Position]uint32  // redelivery counts
	delayed     delayQueue
	delayTimer  *time.Timer
	delayAt     int64
	avgMsgs     float64 // messages per entry, smoothed
	// batchAcked holds the acknowledged messages (bit i set: message i) of partly
	// acknowledged batch entries, so a redelivery carries ack_set and the client skips them.
	// cursorPartials tells that the cursor had such entries before this subscription
	// object (they are looked up when read); partialsChecked that this was checked.
	batchAcked      map[Position][]uint64
	cursorPartials  bool
	partialsChecked bool
	reset           *resetReq
	closeWait       []func()

	msgsOut, bytesOut int64
	rateOut           rate
	redeliv           rate
	lastAck           int64
	lastConsumed      int64
}

type pendingEntry struct {
	c    *Consumer
	info entryInfo
}

type hashHold struct {
	c *Consumer
	n int
}

type resetReq struct {
	id          *MessageID
	publishTime int64
	done        func(error)
}

// readBatch bounds the entries of one cursor read or re-read.
const readBatch = 100

// maxReplayPerConsumer bounds the look-ahead of Key_Shared: new entries are not read while
// this many entries per consumer wait in the replay set.
const maxReplayPerConsumer = 1000

func newSubscription(t *Topic, name string, cur Cursor, durable bool) *Subscription {
	s := &Subscription{
		name: name, topic: t, cur: cur, durable: durable,
		logger: t.logger.With("sub", name), m: t.m, in: newEvents(), stopped: make(chan struct{}),
		state: SubActive, replay: map[Position]entryInfo{}, replayHashes: map[uint32]int{},
		pending: map[Position]*pendingEntry{}, pendingHash: map[uint32]*hashHold{},
		redeliver: map[Position]uint32{}, avgMsgs: 1, batchAcked: map[Position][]uint64{},
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
			fn()
			batch[i] = nil
		}
		if s.state == SubClosed {
			s.in.Close()
			s.m.subscriptions.Dec()
			return
		}
	}
}

func (s *Subscription) post(fn func()) bool { return s.in.Push(fn) }

func (s *Subscription) become(to SubState) error {
	if !legal(subEdges, s.state, to) {
		err := illegal("subscription "+s.name, s.state, to)
		s.logger.Error("bug", "err", err)
		return err
	}
	s.state = to
	return nil
}

func (s *Subscription) consumerCount() int { return int(s.nConsumers.Load()) }

// Consumers.

func (s *Subscription) addConsumer(c *Consumer, done func(error)) {
	c.sub = s
	c.connected = time.Now()
	if !s.post(func() { done(s.attach(c)); s.afterAttach(c) }) {
		done(ErrClosed)
	}
}

func (s *Subscription) attach(c *Consumer) error {
	if s.state != SubActive {
		return ErrClosed
	}
	if len(s.consumers) > 0 && c.Type != s.typ {
		return fmt.Errorf("%w: subscription %s is of type %v, not %v", ErrConsumerBusy, s.name, s.typ, c.Type)
	}
	if len(s.consumers) == 0 && c.Type != s.typ {
		s.typ = c.Type
		s.ks = keySelector{}
	}
	switch s.typ {
	case pb.CommandSubscribe_Exclusive:
		if len(s.consumers) > 0 {
			return fmt.Errorf("%w: exclusive consumer is already connected to %s", ErrConsumerBusy, s.name)
		}
	case pb.CommandSubscribe_Key_Shared:
		sticky := c.KeyShared != nil && c.KeyShared.GetKeySharedMode() == pb.KeySharedMode_STICKY
		if len(s.consumers) > 0 && sticky != s.ksSticky {
			return fmt.Errorf("%w: key-shared mode differs from the subscription's", ErrConsumerBusy)
		}
		var ranges []hashRange
		if sticky {
			ranges = []hashRange{}
			for _, r := range c.KeyShared.GetHashRanges() {
				ranges = append(ranges, hashRange{uint32(r.GetStart()), uint32(r.GetEnd())})
			}
		}
		if err := s.ks.add(c, ranges); err != nil {
			return err
		}
		s.ksSticky = sticky
		if len(s.consumers) == 0 {
			s.ksOOO = c.KeyShared.GetAllowOutOfOrderDelivery()
		}
	}
	s.consumers = append(s.consumers, c)
	s.nConsumers.Store(int32(len(s.consumers)))
	s.m.consumers.Inc()
	return nil
}

func (s *Subscription) afterAttach(c *Consumer) {
	if c.sub != s || !slices.Contains(s.consumers, c) {
		return
	}
	s.pickActive()
	s.unblock()
	s.dispatch()
}

// pickActive chooses the consumer of an Exclusive or Failover subscription: the first by
// (priority, name), as Pulsar does for a non-partitioned topic (partition i: the i-th).
// On a change the previous one's unacknowledged entries go back for the new one, and
// Failover consumers are told who is active.
func (s *Subscription) pickActive() {
	if s.typ != pb.CommandSubscribe_Exclusive && s.typ != pb.CommandSubscribe_Failover {
		s.active = nil
		return
	}
	var next *Consumer
	if len(s.consumers) > 0 {
		sorted := slices.Clone(s.consumers)
		sort.SliceStable(sorted, func(i, j int) bool {
			if sorted[i].Priority != sorted[j].Priority {
				return sorted[i].Priority < sorted[j].Priority
			}
			return sorted[i].Name < sorted[j].Name
		})
		idx := 0
		if p := s.topic.name.Partition; p > 0 {
			idx = p % len(sorted)
		}
		next = sorted[idx]
	}
	prev := s.active
	s.active = next
	if prev != next && prev != nil && !prev.closed {
		s.returnPending(prev, false)
	}
	if s.typ == pb.CommandSubscribe_Failover && (prev != next || next == nil) {
		for _, c := range s.consumers {
			s.notifyActive(c, c == next)
		}
	} else if s.typ == pb.CommandSubscribe_Failover && next != nil {
		// A new standby consumer learns who is active.
		if c := s.consumers[len(s.consumers)-1]; c != next && !c.activeSent {
			s.notifyActive(c, false)
		}
	}
}

// notifyActive sends ACTIVE_CONSUMER_CHANGE to c — once c has sent its first FLOW: the Go
// client registers the consumer's handler only after SUBSCRIBE succeeded, and drops a
// notification that arrives earlier.
func (s *Subscription) notifyActive(c *Consumer, on bool) {
	c.active = on
	c.activeKnown = true
	if !c.flowed {
		return
	}
	c.activeSent = true
	id := c.ID
	c.Conn.Send(wrap(&pb.CommandActiveConsumerChange{ConsumerId: &id, IsActive: &on}))
}

// removeConsumer detaches c; its unacknowledged entries are redelivered. notify tells the
// client (CLOSE_CONSUMER) when the broker decides.
func (s *Subscription) removeConsumer(c *Consumer, notify bool) {
	if c.closed || c.sub != s {
		return
	}
	i := slices.Index(s.consumers, c)
	if i < 0 {
		return
	}
	c.closed = true
	s.consumers = slices.Delete(s.consumers, i, i+1)
	s.nConsumers.Store(int32(len(s.consumers)))
	s.m.consumers.Dec()
	if notify {
		c.Conn.ConsumerClosed(c)
		id, rid := c.ID, uint64(0)
		c.Conn.Send(wrap(&pb.CommandCloseConsumer{ConsumerId: &id, RequestId: &rid}))
	}
	if s.typ == pb.CommandSubscribe_Key_Shared {
		s.ks.remove(c, s.ksSticky)
	}
	s.returnPending(c, true)
	if s.active == c {
		s.active = nil
	}
	s.pickActive()
	if s.state != SubActive {
		return
	}
	if len(s.consumers) == 0 && !s.durable {
		s.startClose(nil) // a reader's subscription ends with its consumer
		return
	}
	s.unblock()
	s.dispatch()
}

// returnPending moves c's unacknowledged entries back to the replay set with a higher
// redelivery count.
func (s *Subscription) returnPending(c *Consumer, countRedelivery bool) {
	for pos, pe := range s.pending {
		if pe.c != c {
			continue
		}
		s.unpend(pos, pe)
		s.addReplay(pos, pe.info)
		if countRedelivery {
			s.redeliver[pos]++
		}
	}
}

func (s *Subscription) unpend(pos Position, pe *pendingEntry) {
	delete(s.pending, pos)
	pe.c.unacked -= pe.info.msgs
	if h := s.pendingHash[pe.info.hash]; h != nil && h.c == pe.c {
		if h.n--; h.n <= 0 {
			delete(s.pendingHash, pe.info.hash)
		}
	}
}

func (s *Subscription) addReplay(pos Position, info entryInfo) {
	if _, ok := s.replay[pos]; ok {
		return
	}
	s.replay[pos] = info
	s.replayHashes[info.hash]++
}

func (s *Subscription) dropReplay(pos Position) {
	info, ok := s.replay[pos]
	if !ok {
		return
	}
	delete(s.replay, pos)
	if s.replayHashes[info.hash]--; s.replayHashes[info.hash] <= 0 {
		delete(s.replayHashes, info.hash)
	}
}

// unblock lets the replay set be tried again (something changed: an ack, permits, a
// consumer).
func (s *Subscription) unblock() { s.replayBlocked = false }

func (s *Subscription) onFlow(c *Consumer, n int) {
	if c.closed {
		return
	}
	c.permits += n
	if !c.flowed {
		c.flowed = true
		if c.activeKnown {
			s.notifyActive(c, c.active)
		}
	}
	s.unblock()
	s.dispatch()
}

// Dispatching.

// eligiblePermits is the number of messages the subscription's consumers can take now.
func (s *Subscription) eligiblePermits() int {
	switch s.typ {
	case pb.CommandSubscribe_Exclusive, pb.CommandSubscribe_Failover:
		if s.active == nil {
			return 0
		}
		return max(s.active.permits, 0)
	}
	n := 0
	for _, c := range s.consumers {
		n += max(c.permits, 0)
	}
	return n
}

// dispatch starts the reads the consumers' permits allow: first a re-read of the replay set,
// then (if it is empty or blocked) a read of new entries.
func (s *Subscription) dispatch() {
	if s.state != SubActive || s.reset != nil {
		return
	}
	permits := s.eligiblePermits()
	if permits <= 0 {
		return
	}
	if len(s.replay) > 0 && !s.replaying && !s.replayBlocked {
		s.readReplay(permits)
	}
	if s.reading || (len(s.replay) > 0 && !s.replayBlocked) {
		return
	}
	if s.typ == pb.CommandSubscribe_Key_Shared && len(s.replay) >= maxReplayPerConsumer*max(len(s.consumers), 1) {
		return
	}
	n := int(float64(permits)/max(s.avgMsgs, 1) + 0.5)
	n = min(max(n, 1), readBatch)
	s.reading = true
	ctx, cancel := context.WithCancel(context.Background())
	s.readCancel = cancel
	epoch, cur := s.epoch, s.cur
	check, partials := !s.partialsChecked, s.cursorPartials
	go func() {
		es, err := cur.Read(ctx, n)
		cancel()
		if check {
			ictx, icancel := context.WithTimeout(context.Background(), 10*time.Second)
			if ci, ierr := cur.Info(ictx); ierr == nil {
				partials = ci.PartialBatches > 0
			}
			icancel()
		}
		acked := batchAckedOf(cur, es, partials)
		s.post(func() {
			if check {
				s.partialsChecked, s.cursorPartials = true, partials
			}
			s.mergeBatchAcked(acked)
			s.onRead(epoch, es, err)
		})
	}()
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

func (s *Subscription) mergeBatchAcked(acked map[Position][]bool) {
	for p, bs := range acked {
		words := s.batchAcked[p]
		for i, a := range bs {
			if a {
				if i/64 >= len(words) {
					words = append(words, make([]uint64, i/64-len(words)+1)...)
				}
				words[i/64] |= 1 << (i % 64)
			}
		}
		s.batchAcked[p] = words
	}
}

func (s *Subscription) readReplay(permits int) {
	ps := make([]Position, 0, len(s.replay))
	for p := range s.replay {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b Position) int { return a.Compare(b) })
	limit := readBatch
	if s.typ != pb.CommandSubscribe_Key_Shared {
		limit = min(limit, max(int(float64(permits)/max(s.avgMsgs, 1)+0.5), 1))
	}
	if len(ps) > limit {
		ps = ps[:limit]
	}
	s.replaying = true
	epoch, cur, partials := s.epoch, s.cur, s.cursorPartials
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		es, err := cur.ReadPositions(ctx, ps)
		cancel()
		acked := batchAckedOf(cur, es, partials)
		s.post(func() {
			s.mergeBatchAcked(acked)
			s.onReplayRead(epoch, ps, es, err)
		})
	}()
}

func (s *Subscription) onRead(epoch uint64, es []Entry, err error) {
	s.reading = false
	s.readCancel = nil
	if epoch != s.epoch || s.state != SubActive {
		s.maybeStartReset()
		return
	}
	if err != nil {
		if errors.Is(err, mledger.ErrFenced) {
			t := s.topic
			t.post(func() { t.fence(err) })
			return
		}
		if !errors.Is(err, context.Canceled) && !errors.Is(err, mledger.ErrNoMoreEntries) && !errors.Is(err, mledger.ErrClosed) {
			s.logger.Warn("cursor read failed", "err", err)
			s.m.readErrors.Inc()
			time.AfterFunc(100*time.Millisecond, func() { s.post(s.dispatch) })
		}
		return
	}
	now := time.Now().UnixMilli()
	for _, e := range es {
		info := infoOf(e.Data)
		s.avgMsgs = 0.9*s.avgMsgs + 0.1*float64(info.msgs)
		s.offer(e, info, false, now, nil)
	}
	s.dispatch()
}

func (s *Subscription) onReplayRead(epoch uint64, asked []Position, es []Entry, err error) {
	s.replaying = false
	if epoch != s.epoch || s.state != SubActive {
		s.maybeStartReset()
		return
	}
	if err != nil {
		s.logger.Warn("replay read failed", "err", err)
		s.m.readErrors.Inc()
		time.AfterFunc(100*time.Millisecond, func() { s.post(s.dispatch) })
		return
	}
	got := make(map[Position]bool, len(es))
	for _, e := range es {
		got[e.Position] = true
	}
	for _, p := range asked {
		if !got[p] { // acknowledged meanwhile (or trimmed)
			s.dropReplay(p)
			delete(s.redeliver, p)
		}
	}
	now := time.Now().UnixMilli()
	blocked := map[uint32]bool{}
	keyOrder := s.typ == pb.CommandSubscribe_Key_Shared && !s.ksOOO
	// Entries returned to the replay set while this re-read was in flight (a consumer left)
	// may be older than what it brought back: a key's entries wait for its oldest one.
	oldest := map[uint32]Position{}
	if keyOrder {
		for p, info := range s.replay {
			if !got[p] {
				if o, ok := oldest[info.hash]; !ok || p.Less(o) {
					oldest[info.hash] = p
				}
			}
		}
	}
	sent := 0
	for _, e := range es {
		info, ok := s.replay[e.Position]
		if !ok {
			continue // acknowledged or already dispatched
		}
		if info.msgs == 0 {
			info = infoOf(e.Data)
		}
		if keyOrder {
			if o, ok := oldest[info.hash]; ok && o.Less(e.Position) {
				blocked[info.hash] = true
			}
			if blocked[info.hash] {
				continue
			}
		}
		s.dropReplay(e.Position)
		if s.offer(e, info, true, now, blocked) {
			sent++
		}
	}
	if sent == 0 && len(s.replay) > 0 {
		s.replayBlocked = true
	}
	s.dispatch()
}

// offer delivers one entry if a consumer can take it now; otherwise it goes to the replay
// set (or the delayed queue). It reports whether the entry was sent.
func (s *Subscription) offer(e Entry, info entryInfo, replayed bool, now int64, blocked map[uint32]bool) bool {
	if _, dup := s.pending[e.Position]; dup {
		return false // already with a consumer
	}
	shared := s.typ == pb.CommandSubscribe_Shared || s.typ == pb.CommandSubscribe_Key_Shared
	if shared && info.deliverAt > now && !replayed {
		s.delay(e.Position, info)
		return false
	}
	c := s.pick(info, replayed)
	if c == nil {
		s.addReplay(e.Position, info)
		if blocked != nil {
			blocked[info.hash] = true
		}
		return false
	}
	s.send(c, e, info)
	return true
}

// pick chooses the consumer for an entry, nil if none can take it now.
func (s *Subscription) pick(info entryInfo, replayed bool) *Consumer {
	switch s.typ {
	case pb.CommandSubscribe_Exclusive, pb.CommandSubscribe_Failover:
		if s.active != nil && s.active.permits > 0 {
			return s.active
		}
		return nil
	case pb.CommandSubscribe_Shared:
		n := len(s.consumers)
		for i := 0; i < n; i++ {
			c := s.consumers[(s.rr+i)%n]
			if c.permits > 0 {
				s.rr = (s.rr + i + 1) % n
				return c
			}
		}
		return nil
	case pb.CommandSubscribe_Key_Shared:
		c := s.ks.pick(info.hash)
		if c == nil || c.permits <= 0 {
			return nil
		}
		if s.ksOOO {
			return c
		}
		// Per-key order: older entries of this key still waiting for redelivery go first,
		// and a key moves to a new consumer only once its previous consumer acknowledged
		// everything it got of it.
		if !replayed && s.replayHashes[info.hash] > 0 {
			return nil
		}
		if h := s.pendingHash[info.hash]; h != nil && h.c != c {
			return nil
		}
		return c
	}
	return nil
}

func (s *Subscription) send(c *Consumer, e Entry, info entryInfo) {
	id, l, en := c.ID, uint64(e.Position.LedgerID), uint64(e.Position.EntryID)
	cmd := &pb.CommandMessage{ConsumerId: &id, MessageId: &pb.MessageIdData{LedgerId: &l, EntryId: &en}}
	if words := s.batchAcked[e.Position]; words != nil && info.msgs > 1 {
		// A set bit of ack_set is a message the client must still deliver.
		set := make([]int64, (info.msgs+63)/64)
		for i := 0; i < info.msgs; i++ {
			if i/64 >= len(words) || words[i/64]&(1<<(i%64)) == 0 {
				set[i/64] |= 1 << (i % 64)
			}
		}
		cmd.AckSet = set
	}
	if n := s.redeliver[e.Position]; n > 0 {
		cmd.RedeliveryCount = &n
		c.redeliv.add(int64(info.msgs), 0)
		s.redeliv.add(int64(info.msgs), 0)
		s.m.redelivered.Add(float64(info.msgs))
	}
	c.Conn.SendMessage(wrap(cmd), e.Data)
	c.permits -= info.msgs
	c.unacked += info.msgs
	s.pending[e.Position] = &pendingEntry{c: c, info: info}
	if s.typ == pb.CommandSubscribe_Key_Shared {
		h := s.pendingHash[info.hash]
		if h == nil || h.c != c {
			h = &hashHold{c: c}
			s.pendingHash[info.hash] = h
		}
		h.n++
	}
	n, b := int64(info.msgs), int64(len(e.Data))
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

// Delayed delivery.

func (s *Subscription) delay(pos Position, info entryInfo) {
	heap.Push(&s.delayed, delayedEntry{at: info.deliverAt, pos: pos, info: info})
	s.armDelayTimer()
}

func (s *Subscription) armDelayTimer() {
	if len(s.delayed) == 0 {
		return
	}
	at := s.delayed[0].at
	if s.delayTimer != nil && s.delayAt <= at {
		return
	}
	if s.delayTimer != nil {
		s.delayTimer.Stop()
	}
	s.delayAt = at
	epoch := s.epoch
	s.delayTimer = time.AfterFunc(time.Until(time.UnixMilli(at)), func() {
		s.post(func() { s.onDelayTimer(epoch) })
	})
}

func (s *Subscription) onDelayTimer(epoch uint64) {
	s.delayTimer = nil
	if epoch != s.epoch || s.state != SubActive {
		return
	}
	now := time.Now().UnixMilli()
	for len(s.delayed) > 0 && s.delayed[0].at <= now {
		d := heap.Pop(&s.delayed).(delayedEntry)
		d.info.deliverAt = 0
		s.addReplay(d.pos, d.info)
	}
	s.armDelayTimer()
	s.unblock()
	s.dispatch()
}

type delayedEntry struct {
	at   int64
	pos  Position
	info entryInfo
}

// delayQueue is a min-heap of delayed entries by delivery time.
type delayQueue []delayedEntry

func (q delayQueue) Len() int { return len(q) }
func (q delayQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].pos.Less(q[j].pos)
}
func (q delayQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *delayQueue) Push(x any)   { *q = append(*q, x.(delayedEntry)) }
func (q *delayQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// Acknowledgements.

func (s *Subscription) onAck(c *Consumer, ack *pb.CommandAck, done func(error)) {
	s.lastAck = time.Now().UnixMilli()
	ids := ack.GetMessageId()
	if ack.GetAckType() == pb.CommandAck_Cumulative {
		if s.typ == pb.CommandSubscribe_Shared || s.typ == pb.CommandSubscribe_Key_Shared {
			if done != nil {
				done(fmt.Errorf("%w: cumulative ack on a %v subscription", ErrNotAllowed, s.typ))
			}
			return
		}
		if len(ids) == 0 {
			if done != nil {
				done(nil)
			}
			return
		}
		id := ids[0]
		pos := Position{LedgerID: int64(id.GetLedgerId()), EntryID: int64(id.GetEntryId())}
		if len(id.GetAckSet()) > 0 && pos.EntryID > 0 {
			// A batch acknowledged up to some index: everything before the entry, and the
			// acknowledged messages of the entry.
			s.ackBatchBits(pos, id)
			pos.EntryID--
		} else if len(id.GetAckSet()) > 0 {
			s.ackBatchBits(pos, id)
			if done != nil {
				done(nil)
			}
			return
		}
		for p, pe := range s.pending {
			if !pos.Less(p) {
				s.unpend(p, pe)
				delete(s.redeliver, p)
			}
		}
		for p := range s.replay {
			if !pos.Less(p) {
				s.dropReplay(p)
				delete(s.redeliver, p)
			}
		}
		for p := range s.batchAcked {
			if !pos.Less(p) {
				delete(s.batchAcked, p)
			}
		}
		s.m.acks.Inc()
		s.cur.AckCumulative(pos, done)
		s.unblock()
		s.dispatch()
		return
	}
	var ps []Position
	for _, id := range ids {
		pos := Position{LedgerID: int64(id.GetLedgerId()), EntryID: int64(id.GetEntryId())}
		if len(id.GetAckSet()) > 0 {
			if s.ackBatchBits(pos, id) {
				ps = append(ps, pos)
			}
			continue
		}
		ps = append(ps, pos)
	}
	for _, p := range ps {
		if pe := s.pending[p]; pe != nil {
			s.unpend(p, pe)
		}
		s.dropReplay(p)
		delete(s.redeliver, p)
		delete(s.batchAcked, p)
	}
	s.m.acks.Add(float64(len(ps)))
	if len(ps) > 0 {
		s.cur.Ack(ps, done)
	} else if done != nil {
		done(nil)
	}
	s.unblock()
	s.dispatch()
}

// ackBatchBits applies a batch-index ack (ack_set: a set bit is a message still
// unacknowledged). It reports whether the whole entry is now acknowledged.
func (s *Subscription) ackBatchBits(pos Position, id *pb.MessageIdData) bool {
	size := int(id.GetBatchSize())
	if pe := s.pending[pos]; pe != nil && size <= 0 {
		size = pe.info.msgs
	}
	if size <= 0 {
		return false // unknown batch size: the entry stays unacknowledged
	}
	words := id.GetAckSet()
	all := true
	acked := s.batchAcked[pos]
	for i := 0; i < size; i++ {
		w := i / 64
		unacked := w < len(words) && uint64(words[w])&(1<<(i%64)) != 0
		if unacked {
			all = false
			continue
		}
		if w >= len(acked) {
			acked = append(acked, make([]uint64, w-len(acked)+1)...)
		}
		if acked[w]&(1<<(i%64)) == 0 {
			acked[w] |= 1 << (i % 64)
			s.cur.AckBatch(pos, i, size, nil)
		}
	}
	if all {
		delete(s.batchAcked, pos)
	} else {
		s.batchAcked[pos] = acked
	}
	return all
}

func (s *Subscription) onRedeliver(c *Consumer, ids []*pb.MessageIdData) {
	if c.closed {
		return
	}
	if len(ids) == 0 {
		s.returnPending(c, true)
	} else {
		for _, id := range ids {
			pos := Position{LedgerID: int64(id.GetLedgerId()), EntryID: int64(id.GetEntryId())}
			pe := s.pending[pos]
			if pe == nil || pe.c != c {
				continue
			}
			s.unpend(pos, pe)
			s.addReplay(pos, pe.info)
			s.redeliver[pos]++
		}
	}
	s.unblock()
	s.dispatch()
}

// Seek.

func (s *Subscription) onSeek(id *MessageID, publishTime int64, done func(error)) {
	if s.state != SubActive {
		done(ErrClosed)
		return
	}
	if s.reset != nil {
		done(fmt.Errorf("%w: a reset is in progress", ErrNotAllowed))
		return
	}
	s.reset = &resetReq{id: id, publishTime: publishTime, done: done}
	s.epoch++
	if s.readCancel != nil {
		s.readCancel()
	}
	s.maybeStartReset()
}

// maybeStartReset moves the cursor once no read of it is in flight (a read finishing after
// the reset would move the read position back).
func (s *Subscription) maybeStartReset() {
	r := s.reset
	if r == nil || s.reading || s.replaying || r.done == nil {
		return
	}
	done := r.done
	r.done = nil
	cur, log := s.cur, s.topic.log
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var pos Position
		var err error
		if r.id != nil {
			pos = r.id.Position()
		} else {
			pos, err = findByPublishTime(ctx, log, r.publishTime)
		}
		if err == nil {
			err = cur.Reset(ctx, pos)
		}
		s.post(func() { s.onReset(err, done) })
	}()
}

func (s *Subscription) onReset(err error, done func(error)) {
	s.reset = nil
	if err != nil {
		done(err)
		s.dispatch()
		return
	}
	s.clearDispatchState()
	for _, c := range slices.Clone(s.consumers) {
		s.removeConsumerQuiet(c)
	}
	done(nil)
}

// clearDispatchState forgets every delivered, returned and delayed entry (after a reset
// the cursor decides again what is delivered).
func (s *Subscription) clearDispatchState() {
	s.epoch++
	for _, c := range s.consumers {
		c.unacked = 0
	}
	s.pending = map[Position]*pendingEntry{}
	s.pendingHash = map[uint32]*hashHold{}
	s.replay = map[Position]entryInfo{}
	s.replayHashes = map[uint32]int{}
	s.redeliver = map[Position]uint32{}
	s.batchAcked = map[Position][]uint64{}
	s.partialsChecked = false // a reset dropped acknowledgements: ask the cursor again
	s.delayed = nil
	if s.delayTimer != nil {
		s.delayTimer.Stop()
		s.delayTimer = nil
	}
	s.replayBlocked = false
}

// removeConsumerQuiet disconnects c (CLOSE_CONSUMER) without redelivering anything.
func (s *Subscription) removeConsumerQuiet(c *Consumer) {
	i := slices.Index(s.consumers, c)
	if i < 0 {
		return
	}
	c.closed = true
	s.consumers = slices.Delete(s.consumers, i, i+1)
	s.nConsumers.Store(int32(len(s.consumers)))
	s.m.consumers.Dec()
	if s.typ == pb.CommandSubscribe_Key_Shared {
		s.ks.remove(c, s.ksSticky)
	}
	if s.active == c {
		s.active = nil
	}
	c.Conn.ConsumerClosed(c)
	id, rid := c.ID, uint64(0)
	c.Conn.Send(wrap(&pb.CommandCloseConsumer{ConsumerId: &id, RequestId: &rid}))
}

// findByPublishTime returns the position of the first entry published at or after ms (Unix
// ms), or Latest if there is none, by binary search over the log's entries.
func findByPublishTime(ctx context.Context, log Log, ms int64) (Position, error) {
	st, err := log.Stats(ctx)
	if err != nil {
		return Position{}, err
	}
	type span struct{ id, first, n int64 }
	var spans []span
	var total int64
	for _, l := range st.Ledgers {
		if l.Entries > 0 {
			spans = append(spans, span{l.ID, total, l.Entries})
			total += l.Entries
		}
	}
	at := func(i int64) Position {
		k := sort.Search(len(spans), func(k int) bool { return spans[k].first+spans[k].n > i })
		return Position{LedgerID: spans[k].id, EntryID: i - spans[k].first}
	}
	var ferr error
	i := sort.Search(int(total), func(i int) bool {
		if ferr != nil {
			return true
		}
		p := at(int64(i))
		es, err := log.Read(ctx, p, 1)
		if err != nil || len(es) == 0 {
			ferr = fmt.Errorf("read %v: %w", p, err)
			return true
		}
		if es[0].Position != p {
			return false // trimmed
		}
		m, err := parseMeta(es[0].Data)
		return err == nil && int64(m.GetPublishTime()) >= ms
	})
	if ferr != nil {
		return Position{}, ferr
	}
	if int64(i) >= total {
		return mledger.Latest, nil
	}
	return at(int64(i)), nil
}

// Unsubscribe and close.

func (s *Subscription) onUnsubscribe(c *Consumer, force bool, done func(error)) {
	if s.state != SubActive {
		done(ErrClosed)
		return
	}
	if !force && (len(s.consumers) > 1 || (len(s.consumers) == 1 && s.consumers[0] != c)) {
		done(fmt.Errorf("%w: subscription %s has other consumers", ErrNotEmpty, s.name))
		return
	}
	// The requester is simply detached; the client closes it on success.
	if i := slices.Index(s.consumers, c); i >= 0 {
		c.closed = true
		s.consumers = slices.Delete(s.consumers, i, i+1)
		s.nConsumers.Store(int32(len(s.consumers)))
		s.m.consumers.Dec()
		c.Conn.ConsumerClosed(c)
	}
	s.startDelete(done)
}

// Delete deletes the subscription (admin). Without force it fails with ErrNotEmpty while
// consumers are connected.
func (s *Subscription) Delete(ctx context.Context, force bool) error {
	return call0(ctx, s.in, s.stopped, func(reply func(error)) {
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
	for _, c := range slices.Clone(s.consumers) {
		s.removeConsumerQuiet(c)
	}
	cur, t, name, durable := s.cur, s.topic, s.name, s.durable
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var err error
		if durable {
			_ = cur.Close(ctx)
			err = t.log.DeleteCursor(ctx, name)
			if errors.Is(err, mledger.ErrCursorNotFound) {
				err = nil
			}
		} else {
			err = cur.Close(ctx)
		}
		s.post(func() {
			if err != nil {
				s.logger.Warn("delete subscription", "err", err)
				s.become(SubActive) //nolint:errcheck // legal edge
				done(err)
				return
			}
			s.become(SubClosed) //nolint:errcheck // legal edge
			t.post(func() { t.subGone(s) })
			done(nil)
			for _, w := range s.closeWait {
				w()
			}
		})
	}()
}

func (s *Subscription) stopDispatch() {
	s.epoch++
	if s.readCancel != nil {
		s.readCancel()
	}
	if s.delayTimer != nil {
		s.delayTimer.Stop()
		s.delayTimer = nil
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
	for _, c := range slices.Clone(s.consumers) {
		s.removeConsumerQuiet(c)
	}
	cur, t := s.cur, s.topic
	go func() {
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
	}()
}

// MarkDelete returns the subscription's mark-delete position.
func (s *Subscription) MarkDelete(ctx context.Context) (Position, error) {
	return s.cur.MarkDelete(ctx)
}

// Stats returns the subscription's statistics.
func (s *Subscription) Stats(ctx context.Context) (SubscriptionStats, error) {
	st, err := call(ctx, s.in, s.stopped, func(reply func(SubscriptionStats, error)) { reply(s.stats(), nil) })
	if err != nil {
		return st, err
	}
	if ci, err := s.cur.Info(ctx); err == nil {
		st.MsgBacklog = ci.Backlog
		st.MsgBacklogNoDelayed = max(ci.Backlog-st.MsgDelayed, 0)
		st.NonContiguousDeletedMessagesRanges = ci.AckedRanges
	}
	return st, nil
}

func (s *Subscription) stats() SubscriptionStats {
	now := time.Now()
	st := SubscriptionStats{
		Type: subTypeName(s.typ), BytesOutCounter: s.bytesOut, MsgOutCounter: s.msgsOut,
		MsgDelayed: int64(len(s.delayed)), IsDurable: s.durable, LastAckedTimestamp: s.lastAck,
		LastConsumedTimestamp: s.lastConsumed, Consumers: []ConsumerStats{},
	}
	st.MsgRateOut, st.MsgThroughputOut = s.rateOut.rates(now)
	st.MsgRateRedeliver, _ = s.redeliv.rates(now)
	if s.active != nil {
		st.ActiveConsumerName = s.active.Name
	}
	for _, c := range s.consumers {
		cs := ConsumerStats{
			ConsumerName: c.Name, AvailablePermits: c.permits, UnackedMessages: c.unacked,
			BytesOutCounter: c.bytesOut, MsgOutCounter: c.msgsOut, Address: c.Conn.RemoteAddr(),
			ConnectedSince: c.connected.UTC().Format(time.RFC3339Nano), ClientVersion: c.Conn.ClientVersion(),
			Metadata: c.Metadata,
		}
		if cs.Metadata == nil {
			cs.Metadata = map[string]string{}
		}
		cs.MsgRateOut, cs.MsgThroughputOut = c.rateOut.rates(now)
		cs.MsgRateRedeliver, _ = c.redeliv.rates(now)
		if s.typ == pb.CommandSubscribe_Key_Shared {
			cs.KeyHashRanges = s.ks.rangesOf(c)
		}
		st.UnackedMessages += int64(c.unacked)
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
