package replication

import (
	"fmt"

	"github.com/magnetar-io/magnetar/internal/backoff"
)

// slotState is the state of one entry of the window.
type slotState uint8

const (
	slotQueued   slotState = iota + 1 // to be sent (never sent, or rewound)
	slotInflight                      // sent under ticket, no receipt yet
	slotAcked                         // the remote has it (stored, or dropped as a duplicate)
	slotFiltered                      // not replicated (Classify): acknowledged locally
)

// slot is one entry of the window.
type slot struct {
	st     slotState
	e      Entry // Data and Meta dropped once acked or filtered
	ticket Ticket
	sends  int
}

// Core is the replicator of one local topic (a partition) to one remote cluster: the
// remote producer's epochs, the window of entries read from the replication cursor, their
// sends and receipts, the cursor's mark-delete position and the dispatch rate. It is a pure,
// thread-unsafe state machine: inputs are method calls, outputs are collected in a Ready that
// the owner takes with Ready() and performs; it does no I/O, reads no clock and starts no
// goroutine.
//
// Invariants (checked by the simulation, sim_test.go; names as in doc.go):
//   - win holds strictly increasing positions, all after md, and len(win) <= MaxPending (R5);
//   - md only passes slots that are acked or filtered, in log order (R4);
//   - a slot is in flight under the current epoch only, and inflight indexes exactly them
//     (R6: a receipt of another epoch matches nothing);
//   - slots are sent in window order, and after a rewind every unacknowledged slot is sent
//     again before anything newer (R1 per-producer order).
type Core struct {
	cfg   Config
	mut   Mutation
	state State
	link  link
	now   int64 // Unix ms: the last time told (SetTime, Tick, Start)
	ready Ready

	// epoch is the producer epoch of the last Connect; tickets carry it. sendN numbers the
	// sends of the epoch.
	epoch           uint64
	sendN           uint64
	connectDeadline int64 // Unix ms: a connect outstanding is abandoned then (0: none)
	reconnectAt     int64 // Unix ms: connect again then (0: none)
	reconnect       backoff.Retry

	// win is the window: the entries read after md, in log order. Invariant: every slot
	// before sendFrom is not queued.
	win      []*slot
	sendFrom int
	inflight map[uint64]*slot // the current epoch's sends without a receipt, by Ticket.N

	// md is the in-memory mark-delete position: every entry up to it is acked or filtered.
	md Position
	// readAfter is the position the next read starts after (the last entry read, or md).
	readAfter   Position
	reading     bool
	readTag     uint64
	readN       int
	readRetryAt int64
	readRetry   backoff.Retry

	// The mark-delete write: one in flight (mdWriting, tag mdTag, position mdWritingPos);
	// mdPersisted is the last one confirmed.
	mdWriting    bool
	mdTag        uint64
	mdWritingPos Position
	mdPersisted  Position
	mdRetryAt    int64

	resetTag uint64
	resetTo  Position

	rate   rate
	rateAt int64 // Unix ms: the rate allows the read it held back (0: none)
	ttl    int64 // the message TTL (ms, 0: none)

	freshSeq uint64 // the FreshSequenceOnResend mutation's counter
	stats    Stats
}

// New returns a stopped core for the cursor whose persisted mark-delete position is
// markDelete (Earliest for a new cursor): everything after it is read and sent
// again, and the remote's deduplication drops what it already has.
func New(cfg Config, markDelete Position) *Core {
	cfg = cfg.withDefaults()
	c := &Core{cfg: cfg, mut: cfg.Mutation, inflight: map[uint64]*slot{},
		md: markDelete, readAfter: markDelete, mdPersisted: markDelete, ttl: max(cfg.MessageTTLMs, 0)}
	c.reconnect.Policy = cfg.Reconnect
	c.readRetry.Policy = cfg.ReadRetry
	return c
}

// Ready returns what the owner must do now and resets it.
func (c *Core) Ready() Ready {
	r := c.ready
	c.ready = Ready{}
	r.TimerAt = c.timerAt()
	return r
}

func (c *Core) timerAt() int64 {
	if c.state == StateStopped || c.state == StateClosed {
		return 0
	}
	at := int64(0)
	for _, t := range []int64{c.connectDeadline, c.reconnectAt, c.readRetryAt, c.rateAt, c.mdRetryAt} {
		if t != 0 && (at == 0 || t < at) {
			at = t
		}
	}
	return at
}

func (c *Core) become(to State) {
	c.state = edges.Must(ErrIllegalTransition, "replicator "+c.cfg.LocalCluster+"->"+c.cfg.RemoteCluster, c.state, to)
}

// State returns the lifecycle state.
func (c *Core) State() State { return c.state }

// Epoch returns the producer epoch of the last connect.
func (c *Core) Epoch() uint64 { return c.epoch }

// Connected reports whether the remote producer of the current epoch is connected.
func (c *Core) Connected() bool { return c.link == linkUp }

// MarkDelete returns the in-memory mark-delete position: every entry up to it is on the
// remote cluster or filtered.
func (c *Core) MarkDelete() Position { return c.md }

// InFlight returns how many sends of the current epoch wait for their receipt.
func (c *Core) InFlight() int { return len(c.inflight) }

// Held returns how many entries the window holds (at most MaxPending).
func (c *Core) Held() int { return len(c.win) }

// Stats returns the counters.
func (c *Core) Stats() Stats { return c.stats }

// ProducerName returns the remote producer's name.
func (c *Core) ProducerName() string { return ProducerName(c.cfg.LocalCluster, c.cfg.RemoteCluster) }

// SetTime tells the core the time (Unix ms) without acting on it. The owner calls it before
// an input when a dispatch rate is set, so that the rate is measured at that input.
func (c *Core) SetTime(now int64) { c.now = max(c.now, now) }

// Start starts replicating at now (Unix ms): the first connect.
func (c *Core) Start(now int64) {
	if c.state != StateStopped {
		return
	}
	c.SetTime(now)
	c.rate.set(c.cfg.RateMsgs, c.cfg.RateBytes, c.now)
	c.become(StateConnecting)
	c.connect()
}

// SetRate sets the replicator dispatch rate (0: off) from now on (a policy update).
func (c *Core) SetRate(msgs, bytes int64) {
	c.cfg.RateMsgs, c.cfg.RateBytes = msgs, bytes
	c.rate.set(msgs, bytes, c.now)
	c.rateAt = 0
	c.pump()
}

// Close stops the replicator (the topic unloads or closes, or the cluster is removed): the
// producer is closed, the read cancelled, and the mark-delete position written one last
// time if it moved. Final.
func (c *Core) Close() {
	if c.state == StateClosed {
		return
	}
	if c.link != linkIdle {
		c.ready.CloseProducer = append(c.ready.CloseProducer, c.epoch)
	}
	if c.reading {
		c.ready.CancelRead = c.readTag
		c.reading = false
	}
	if c.state != StateResetting && c.state != StateStopped && c.mdPersisted.Less(c.md) &&
		!(c.mdWriting && c.mdWritingPos == c.md) {
		c.mdTag++
		c.ready.MarkDelete = &MarkDelete{Tag: c.mdTag, Pos: c.md}
	}
	c.become(StateClosed)
	c.link = linkIdle
	c.win, c.inflight = nil, map[uint64]*slot{}
	c.connectDeadline, c.reconnectAt, c.readRetryAt, c.rateAt, c.mdRetryAt = 0, 0, 0, 0, 0
}

// Tick is the timer (Ready.TimerAt) firing at now (Unix ms).
func (c *Core) Tick(now int64) {
	if c.state == StateStopped || c.state == StateClosed {
		return
	}
	c.SetTime(now)
	if c.connectDeadline != 0 && c.now >= c.connectDeadline && c.link == linkConnecting {
		// The connect never answered: give it up; its producer is closed if it connects.
		c.stats.ConnectTimeouts++
		c.connectDeadline = 0
		c.ready.CloseProducer = append(c.ready.CloseProducer, c.epoch)
		c.link = linkIdle
		c.scheduleReconnect()
	}
	if c.reconnectAt != 0 && c.now >= c.reconnectAt {
		c.reconnectAt = 0
		if c.link == linkIdle {
			c.connect()
		}
	}
	if c.readRetryAt != 0 && c.now >= c.readRetryAt {
		c.readRetryAt = 0
	}
	if c.rateAt != 0 && c.now >= c.rateAt {
		c.rateAt = 0
	}
	if c.mdRetryAt != 0 && c.now >= c.mdRetryAt {
		c.mdRetryAt = 0
		c.maybeWriteMarkDelete()
	}
	c.pump()
}

// The remote producer.

func (c *Core) connect() {
	c.epoch++
	c.sendN = 0
	c.link = linkConnecting
	c.connectDeadline = c.now + c.cfg.ConnectTimeoutMs
	c.ready.Connect = &Connect{Epoch: c.epoch, ProducerName: c.ProducerName()}
}

func (c *Core) scheduleReconnect() {
	c.reconnectAt = c.now + max(int64(c.reconnect.Next()/1e6), 1)
}

// ProducerConnected: the remote producer of epoch is connected. A producer of an epoch the
// core gave up (timed out, replaced, closed) is closed again.
func (c *Core) ProducerConnected(epoch uint64) {
	if c.state == StateClosed || c.state == StateStopped || epoch != c.epoch || c.link != linkConnecting {
		c.stats.AbandonedClosed++
		if !c.mut.KeepAbandonedProducer {
			c.ready.CloseProducer = append(c.ready.CloseProducer, epoch)
		}
		return
	}
	c.link = linkUp
	c.connectDeadline = 0
	c.reconnectAt = 0
	if c.state == StateConnecting {
		c.become(StateReplicating)
	}
	c.pump()
}

// ConnectFailed: the connect of epoch failed (the cluster is unreachable, the producer name
// is still busy with an older producer, refused...): connect again after the backoff.
func (c *Core) ConnectFailed(epoch uint64, err error) {
	_ = err
	if c.state == StateClosed || epoch != c.epoch || c.link != linkConnecting {
		return
	}
	c.stats.ConnectFailures++
	c.link = linkIdle
	c.connectDeadline = 0
	if c.mut.NoRetryAfterConnectFailure {
		return
	}
	c.scheduleReconnect()
}

// Disconnected: the producer (or the connect) of epoch is gone. The epoch ends: its
// unacknowledged sends are rewound, to be sent again under the next epoch.
func (c *Core) Disconnected(epoch uint64, err error) {
	_ = err
	if c.state == StateClosed || epoch != c.epoch || c.link == linkIdle {
		return
	}
	c.stats.Disconnects++
	if c.link == linkConnecting {
		c.link = linkIdle
		c.connectDeadline = 0
		c.scheduleReconnect()
		return
	}
	c.endEpoch()
}

// endEpoch ends the current producer epoch (a failed send, a disconnect): the producer is
// closed, every send without a receipt is rewound (queued again, to go before anything
// newer, with the same identity), and a reconnect is timed.
func (c *Core) endEpoch() {
	c.stats.Rewinds++
	for _, s := range c.win {
		if s.st == slotInflight && s.ticket.Epoch == c.epoch && !c.mut.LoseWindowOnReconnect {
			s.st = slotQueued
		}
	}
	c.sendFrom = 0
	clear(c.inflight)
	c.ready.CloseProducer = append(c.ready.CloseProducer, c.epoch)
	c.link = linkIdle
	if c.state == StateReplicating {
		c.become(StateConnecting)
	}
	c.scheduleReconnect()
}

// receipt finds the send of t (nil: stale — another epoch, or already answered).
func (c *Core) receipt(t Ticket) *slot {
	if c.state == StateClosed || c.link != linkUp {
		if !(c.mut.AcceptStaleEpoch && c.state != StateClosed) {
			return nil
		}
	}
	if t.Epoch != c.epoch && !c.mut.AcceptStaleEpoch {
		return nil
	}
	return c.inflight[t.N]
}

// SendAcked: the remote has the entry of t (stored, or dropped as a duplicate: dup). A
// receipt of another epoch, or a second one, changes nothing.
func (c *Core) SendAcked(t Ticket, dup bool) {
	s := c.receipt(t)
	if s == nil {
		c.stats.StaleReceipts++
		return
	}
	delete(c.inflight, s.ticket.N)
	s.st = slotAcked
	s.e.Data, s.e.Meta = nil, Meta{}
	c.stats.Acked++
	if dup {
		c.stats.Duplicates++
	}
	c.reconnect.Reset()
	c.advance()
	c.pump()
}

// SendFailed: the remote refused the send of t. The epoch ends (its later sends may still
// be in flight: the remote side ends the producer's session on a refused send, see doc.go);
// the entry is sent again under the next one.
func (c *Core) SendFailed(t Ticket, err error) {
	_ = err
	s := c.receipt(t)
	current := c.state != StateClosed && c.link == linkUp && t.Epoch == c.epoch
	if s == nil && !current {
		c.stats.StaleReceipts++
		return
	}
	// A refusal of the current epoch ends it even when its send is no longer in the
	// window (dropped by a reset): the remote ended the producer's session.
	c.stats.SendFailures++
	if s != nil && c.mut.AdvanceOnFailure {
		delete(c.inflight, s.ticket.N)
		s.st = slotAcked
		c.advance()
	}
	if c.link == linkUp {
		c.endEpoch()
	}
	c.pump()
}

// The cursor.

// ReadDone completes the read of tag with its entries (in log order, each after the last)
// or an error. A read of an older tag (cancelled by a reset or a close) is dropped.
func (c *Core) ReadDone(tag uint64, entries []Entry, err error) error {
	if c.state == StateClosed || c.state == StateStopped {
		return nil
	}
	if !c.reading || tag != c.readTag {
		if !c.mut.AcceptStaleRead || c.state == StateResetting || err != nil {
			c.stats.StaleReads++
			return nil
		}
	} else {
		c.reading = false
	}
	if err != nil {
		c.stats.ReadFailures++
		c.readRetryAt = c.now + max(int64(c.readRetry.Next()/1e6), 1)
		return nil
	}
	if len(entries) == 0 {
		c.stats.EmptyReads++
		c.readRetryAt = c.now + max(int64(c.readRetry.Next()/1e6), 1)
		return nil
	}
	if len(entries) > c.readN && tag == c.readTag {
		return assertionFailedf("read %d brought %d entries, asked for %d", tag, len(entries), c.readN)
	}
	c.readRetry.Reset()
	for _, e := range entries {
		if !c.readAfter.Less(e.Pos) {
			if c.mut.AcceptStaleRead {
				continue
			}
			return assertionFailedf("read %d: entry %v is not after %v", tag, e.Pos, c.readAfter)
		}
		s := &slot{e: e}
		switch r := c.classify(e.Meta); r {
		case Replicate:
			s.st = slotQueued
			c.rate.spend(float64(max(e.Meta.NumMessages, 1)), float64(len(e.Data)))
		default:
			s.st = slotFiltered
			s.e.Data, s.e.Meta = nil, Meta{}
			c.stats.Filtered[r]++
		}
		c.win = append(c.win, s)
		c.readAfter = e.Pos
	}
	c.advance()
	c.pump()
	return nil
}

func (c *Core) classify(m Meta) Reason {
	r := Classify(m, c.cfg.RemoteCluster, c.cfg.ReplicatedSubscriptions)
	switch {
	case r == FilteredReplicated && c.mut.ReplicateReplicated:
		return Replicate
	case r == FilteredMarker && c.mut.ReplicateMarkers:
		return Replicate
	case r == Replicate && c.ttl > 0 && m.PublishTime > 0 && c.now-m.PublishTime > c.ttl && !c.mut.TTLIgnored:
		return FilteredExpired
	}
	return r
}

// SetMessageTTL changes the message TTL (ms, 0: none) for the entries read from now on.
func (c *Core) SetMessageTTL(ms int64) { c.ttl = max(ms, 0) }

// MarkDeleteDone completes the mark-delete write of tag. A failed write is retried after
// MarkDeleteRetryMs.
func (c *Core) MarkDeleteDone(tag uint64, err error) {
	if c.state == StateClosed || !c.mdWriting || tag != c.mdTag {
		return
	}
	c.mdWriting = false
	if err != nil {
		c.stats.MarkDeleteFailures++
		c.mdRetryAt = c.now + c.cfg.MarkDeleteRetryMs
		return
	}
	if c.mdPersisted.Less(c.mdWritingPos) {
		c.mdPersisted = c.mdWritingPos
	}
	c.maybeWriteMarkDelete()
}

// Reset asks for the replication cursor to be reset so that its mark-delete position is to
// (an admin's reset or skip): forward, the entries skipped are not replicated; backward, the
// entries after to are sent again and the remote's deduplication drops what it has. The
// window is dropped (receipts of its sends no longer match anything) and nothing is read or
// sent until ResetDone.
func (c *Core) Reset(to Position) error {
	switch c.state {
	case StateStopped, StateClosed:
		return ErrClosed
	case StateResetting:
		return ErrResetInProgress
	}
	c.become(StateResetting)
	c.dropWindow()
	c.resetTag++
	c.resetTo = to
	c.ready.Reset = &CursorReset{Tag: c.resetTag, To: to}
	return nil
}

// dropWindow forgets the window, the read in flight and the mark-delete write in flight
// (their answers no longer match).
func (c *Core) dropWindow() {
	c.win = nil
	c.sendFrom = 0
	clear(c.inflight)
	if c.reading {
		c.ready.CancelRead = c.readTag
		c.reading = false
	}
	c.readRetryAt, c.rateAt = 0, 0
	c.mdWriting, c.mdRetryAt = false, 0
}

// ResetDone completes the reset of tag: on success the mark-delete position is the reset's;
// on failure it stays, and everything after it is read again.
func (c *Core) ResetDone(tag uint64, err error) {
	if c.state != StateResetting || tag != c.resetTag {
		return
	}
	c.stats.Resets++
	if err == nil {
		c.md, c.mdPersisted = c.resetTo, c.resetTo
	} else {
		c.stats.ResetFailures++
	}
	c.readAfter = c.md
	c.readRetry.Reset()
	if c.link == linkUp {
		c.become(StateReplicating)
	} else {
		c.become(StateConnecting)
		if c.link == linkIdle && c.reconnectAt == 0 {
			c.connect()
		}
	}
	c.maybeWriteMarkDelete()
	c.pump()
}

// advance moves md over the acked and filtered entries at the head of the window.
func (c *Core) advance() {
	n := 0
	for n < len(c.win) && (c.win[n].st == slotAcked || c.win[n].st == slotFiltered) {
		n++
	}
	if n == 0 {
		return
	}
	c.md = c.win[n-1].e.Pos
	clear(c.win[:n])
	c.win = c.win[n:]
	c.sendFrom = max(c.sendFrom-n, 0)
	c.maybeWriteMarkDelete()
}

func (c *Core) maybeWriteMarkDelete() {
	if c.state == StateResetting || c.state == StateStopped || c.state == StateClosed ||
		c.mdWriting || c.mdRetryAt != 0 || !c.mdPersisted.Less(c.md) {
		return
	}
	c.mdWriting = true
	c.mdTag++
	c.mdWritingPos = c.md
	c.ready.MarkDelete = &MarkDelete{Tag: c.mdTag, Pos: c.md}
}

// pump sends what is queued and reads more, as the state, the window and the rate allow.
func (c *Core) pump() {
	if c.state != StateReplicating || c.link != linkUp {
		return
	}
	for ; c.sendFrom < len(c.win); c.sendFrom++ {
		if s := c.win[c.sendFrom]; s.st == slotQueued {
			c.send(s)
		}
	}
	c.maybeRead()
}

func (c *Core) send(s *slot) {
	c.sendN++
	s.st = slotInflight
	s.ticket = Ticket{Epoch: c.epoch, N: c.sendN}
	s.sends++
	c.inflight[c.sendN] = s
	c.stats.Sent++
	m := s.e.Meta
	seq, hi := m.SequenceID, max(m.HighestSequenceID, m.SequenceID)
	if s.sends > 1 {
		c.stats.Resent++
		if c.mut.FreshSequenceOnResend {
			c.freshSeq++
			seq, hi = 1<<40+c.freshSeq, 1<<40+c.freshSeq
		}
	}
	c.ready.Sends = append(c.ready.Sends, Send{Ticket: s.ticket, Pos: s.e.Pos, ProducerName: m.ProducerName,
		SequenceID: seq, HighestSequenceID: hi, ReplicatedFrom: c.cfg.LocalCluster, Marker: m.Marker,
		Resend: s.sends > 1, Entry: s.e})
}

func (c *Core) maybeRead() {
	if c.reading || c.readRetryAt != 0 || c.rateAt != 0 {
		return
	}
	room := c.cfg.MaxPending - len(c.win)
	if c.mut.ReadPastWindow {
		room = c.cfg.ReadBatch
	}
	if room <= 0 {
		c.stats.WindowFull++
		return
	}
	n := min(room, c.cfg.ReadBatch)
	if c.rate.on() && !c.mut.RateIgnored {
		allowed, at := c.rate.allow(c.now)
		if allowed <= 0 {
			c.stats.RateWaits++
			c.rateAt = max(at, c.now+1)
			return
		}
		n = min(n, allowed)
	}
	c.reading = true
	c.readTag++
	c.readN = n
	c.ready.Read = &Read{Tag: c.readTag, After: c.readAfter, N: n}
}

// String describes the core for traces.
func (c *Core) String() string {
	return fmt.Sprintf("%v link=%v epoch=%d md=%v read-after=%v window=%d in-flight=%d", c.state, c.link, c.epoch,
		c.md, c.readAfter, len(c.win), len(c.inflight))
}

// Delay returns how far the replication lags at now (Unix ms): the age of the oldest entry
// read and not yet on the remote cluster, by its publish time (0: none waits). It is
// replicationDelayInSeconds of the topic's stats, in milliseconds; entries not read yet
// (the cursor's backlog beyond the window) are not counted.
func (c *Core) Delay(now int64) int64 {
	if len(c.win) == 0 || c.win[0].e.Meta.PublishTime == 0 {
		return 0
	}
	return max(now-c.win[0].e.Meta.PublishTime, 0)
}

// invariantErr checks the core's own invariants (the Core's doc comment); the simulation
// calls it after every step of an unmutated core.
func (c *Core) invariantErr() error {
	if len(c.win) > c.cfg.MaxPending {
		return fmt.Errorf("the window holds %d entries, more than %d", len(c.win), c.cfg.MaxPending)
	}
	prev := c.md
	inflight := 0
	for k, s := range c.win {
		if !prev.Less(s.e.Pos) {
			return fmt.Errorf("window entry %d at %v is not after %v", k, s.e.Pos, prev)
		}
		prev = s.e.Pos
		if k == 0 && (s.st == slotAcked || s.st == slotFiltered) {
			return fmt.Errorf("the window's head %v is done but the mark-delete position is %v", s.e.Pos, c.md)
		}
		if k < c.sendFrom && s.st == slotQueued {
			return fmt.Errorf("entry %v is queued behind the send position %d", s.e.Pos, c.sendFrom)
		}
		if s.st == slotInflight {
			inflight++
			if s.ticket.Epoch != c.epoch || c.inflight[s.ticket.N] != s {
				return fmt.Errorf("entry %v in flight under %v, not indexed in epoch %d", s.e.Pos, s.ticket, c.epoch)
			}
		}
	}
	if inflight != len(c.inflight) {
		return fmt.Errorf("%d entries in flight, %d indexed", inflight, len(c.inflight))
	}
	if len(c.inflight) > 0 && c.link != linkUp {
		return fmt.Errorf("%d sends in flight with the producer %v", len(c.inflight), c.link)
	}
	if (c.state == StateReplicating && c.link != linkUp) || (c.state == StateConnecting && c.link == linkUp) {
		return fmt.Errorf("state %v with the producer %v", c.state, c.link)
	}
	if !c.readAfter.Less(c.md) && len(c.win) > 0 && c.readAfter != c.win[len(c.win)-1].e.Pos {
		return fmt.Errorf("read position %v is not the window's tail %v", c.readAfter, c.win[len(c.win)-1].e.Pos)
	}
	if c.mdPersisted.Compare(c.md) > 0 {
		return fmt.Errorf("persisted mark-delete %v is ahead of the in-memory one %v", c.mdPersisted, c.md)
	}
	return nil
}
