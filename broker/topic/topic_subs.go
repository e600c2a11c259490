package topic

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/magnetar-io/magnetar/internal/inbox"

	"github.com/magnetar-io/magnetar/mledger"
)

// SubscribeRequest attaches a consumer to a subscription.
type SubscribeRequest struct {
	// Consumer has its exported fields set by the caller.
	Consumer     *Consumer
	Subscription string
	// Durable subscriptions keep their position in the managed ledger; non-durable ones
	// (readers) live while their consumer is connected.
	Durable bool
	// Initial is where a new durable subscription starts: mledger.Earliest or mledger.Latest.
	Initial Position
	// Start is where a non-durable subscription starts (the first entry delivered):
	// Earliest, Latest or a position.
	Start Position
	// ReadCompacted asks for the compacted view up to the compaction horizon (see
	// Config.ReadCompacted); it applies if this consumer opens the subscription.
	ReadCompacted bool
	// ReplicateSubscriptionState makes the subscription a replicated one (CommandSubscribe
	// replicate_subscription_state; replsub.go).
	ReplicateSubscriptionState bool
}

// Subscribe attaches req.Consumer; done is called once with the outcome, on a goroutine
// that must not block (the caller registers the consumer and answers the client there).
func (t *Topic) Subscribe(req SubscribeRequest, done func(error)) {
	if !t.post(func() { t.subscribe(req, done) }) {
		done(ErrClosed)
	}
}

func (t *Topic) subscribe(req SubscribeRequest, done func(error)) {
	switch t.core.state {
	case StateActive, StateTerminating, StateTerminated:
	default:
		done(ErrClosed)
		return
	}
	if err := t.admitSubscribe(req.Subscription, req.Consumer); err != nil {
		done(err)
		return
	}
	start := req.Initial
	if !req.Durable {
		start = req.Start
	}
	create := !req.Durable || !t.core.pol.NoAutoSubscriptionCreation // policy.go
	t.withSub(req.Subscription, req.Durable, create, start, req.ReadCompacted, func(s *Subscription, err error) {
		if err != nil {
			done(err)
			return
		}
		if req.ReplicateSubscriptionState && req.Durable {
			s.post(s.setReplicated)
		}
		s.addConsumer(req.Consumer, done)
	})
}

// withSub calls fn (on the topic goroutine) with the open subscription name, opening its
// cursor if needed (creating it at start if create is set; wrapped by Config.ReadCompacted
// if compacted).
func (t *Topic) withSub(name string, durable, create bool, start Position, compacted bool, fn func(*Subscription, error)) {
	if s := t.subs[name]; s != nil {
		if s.durable != durable {
			fn(nil, fmt.Errorf("%w: subscription %s is durable=%v", ErrConsumerBusy, name, s.durable))
			return
		}
		fn(s, nil)
		return
	}
	if ws, ok := t.opening[name]; ok {
		t.opening[name] = append(ws, fn)
		return
	}
	t.opening[name] = []func(*Subscription, error){fn}
	log := t.log
	t.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var cur Cursor
		var err error
		hasLog := false
		if durable && t.txn != nil {
			if hasLog, err = t.txn.hasPendingAckLog(ctx, name); err != nil {
				err = fmt.Errorf("look up the pending-ack log of %s: %w", name, err)
				if !t.post(func() { t.onSubOpened(name, durable, false, nil, subProps{}, err) }) {
					return
				}
				return
			}
		}
		switch {
		case !durable:
			cur, err = log.OpenNonDurableCursor(ctx, start)
		case create:
			cur, err = log.OpenCursor(ctx, name, start)
		default:
			var names []string
			if names, err = log.Cursors(ctx); err == nil {
				if !slices.Contains(names, name) {
					err = fmt.Errorf("%w: %s", ErrSubscriptionNotFound, name)
				} else {
					cur, err = log.OpenCursor(ctx, name, mledger.Latest)
				}
			}
		}
		var props subProps
		if err == nil && durable {
			props = readSubProps(ctx, cur)
		}
		if err == nil && compacted && t.cfg.ReadCompacted != nil {
			cur = t.cfg.ReadCompacted(cur)
		}
		if !t.post(func() { t.onSubOpened(name, durable, hasLog, cur, props, err) }) && cur != nil {
			_ = cur.Close(ctx)
		}
	})
}

func (t *Topic) onSubOpened(name string, durable, hasPendingAckLog bool, cur Cursor, props subProps, err error) {
	ws := t.opening[name]
	delete(t.opening, name)
	if err == nil && t.core.state != StateActive && t.core.state != StateTerminated && t.core.state != StateTerminating {
		err = ErrClosed
	}
	if err != nil {
		if cur != nil {
			t.spawn(func() { _ = cur.Close(context.Background()) }) // best effort
		}
		for _, w := range ws {
			w(nil, err)
		}
		return
	}
	s := newSubscription(t, name, cur, durable)
	s.restoreReplicated(props) // before the waiters' calls on s
	s.initPendingAcks(hasPendingAckLog)
	s.setPolicies(t.core.pol)
	t.subs[name] = s
	for _, w := range ws {
		w(s, nil)
	}
}

// subGone forgets a subscription that closed or was deleted.
func (t *Topic) subGone(s *Subscription) {
	if t.subs[s.name] == s {
		delete(t.subs, s.name)
	}
}

// sub returns the open subscription name (opening an existing durable one), for admin calls.
func (t *Topic) sub(ctx context.Context, name string) (*Subscription, error) {
	return inbox.Call(ctx, t.in, t.stopped, ErrClosed, func(reply func(*Subscription, error)) {
		if t.core.state == StateClosing || t.core.state == StateClosed || t.core.state == StateFenced {
			reply(nil, ErrClosed)
			return
		}
		if s := t.subs[name]; s != nil {
			reply(s, nil)
			return
		}
		t.withSub(name, true, false, mledger.Latest, false, reply)
	})
}

// Subscriptions lists the durable subscriptions and the readers connected now.
func (t *Topic) Subscriptions(ctx context.Context) ([]string, error) {
	all, err := t.log.Cursors(ctx)
	if err != nil {
		return nil, err
	}
	names := slices.DeleteFunc(all, IsReplicationCursor)
	open, err := inbox.Call(ctx, t.in, t.stopped, ErrClosed, func(reply func([]string, error)) {
		var out []string
		for n := range t.subs {
			out = append(out, n)
		}
		reply(out, nil)
	})
	if err != nil {
		return nil, err
	}
	for _, n := range open {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names, nil
}

// CreateInitialSubscription creates the subscription a producer names in
// initial_subscription_name (the clients' dead-letter producers do), as Pulsar does before
// it adds the producer: durable, at the earliest message, and only if the topic has no
// subscription (durable or not) of that name yet. Pulsar refuses it with NotAllowedError when
// auto subscription creation is off; Magnetar has no such switch. Compaction creates its
// own subscription this way.
func (t *Topic) CreateInitialSubscription(ctx context.Context, name string) error {
	subs, err := t.Subscriptions(ctx)
	if err == nil && !slices.Contains(subs, name) {
		earliest := MessageID{LedgerID: mledger.Earliest.LedgerID, EntryID: mledger.Earliest.EntryID, BatchIndex: -1}
		err = t.CreateSubscription(ctx, name, earliest)
		if errors.Is(err, ErrAlreadyExists) {
			err = nil // created meanwhile (by another producer of the topic)
		}
	}
	if err != nil {
		return fmt.Errorf("failed to create the initial subscription %s: %w", name, err)
	}
	return nil
}

// CreateSubscription creates durable subscription name at id (Earliest, Latest or an id).
func (t *Topic) CreateSubscription(ctx context.Context, name string, at MessageID) error {
	if name == "" {
		return fmt.Errorf("%w: empty subscription name", ErrInvalid)
	}
	names, err := t.log.Cursors(ctx)
	if err != nil {
		return err
	}
	if slices.Contains(names, name) {
		return fmt.Errorf("%w: subscription %s", ErrAlreadyExists, name)
	}
	start := at.Position()
	_, err = inbox.Call(ctx, t.in, t.stopped, ErrClosed, func(reply func(*Subscription, error)) {
		t.withSub(name, true, true, start, false, reply)
	})
	return err
}

// DeleteSubscription deletes subscription name (ErrNotEmpty with consumers unless force).
func (t *Topic) DeleteSubscription(ctx context.Context, name string, force bool) error {
	s, err := t.sub(ctx, name)
	if err != nil {
		return err
	}
	return s.Delete(ctx, force)
}

// ResetCursor moves subscription name to id; its consumers are disconnected.
func (t *Topic) ResetCursor(ctx context.Context, name string, id MessageID) error {
	s, err := t.sub(ctx, name)
	if err != nil {
		return err
	}
	return inbox.Call0(ctx, s.in, s.stopped, ErrClosed, func(reply func(error)) { s.onSeek(&id, 0, reply) })
}

// ResetCursorToTime moves subscription name to the first message published at or after at.
func (t *Topic) ResetCursorToTime(ctx context.Context, name string, at time.Time) error {
	s, err := t.sub(ctx, name)
	if err != nil {
		return err
	}
	ms := max(at.UnixMilli(), 1)
	return inbox.Call0(ctx, s.in, s.stopped, ErrClosed, func(reply func(error)) { s.onSeek(nil, ms, reply) })
}

// Skip acknowledges the next n entries of subscription name (n < 0: all of them).
func (t *Topic) Skip(ctx context.Context, name string, n int) error {
	s, err := t.sub(ctx, name)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if n < 0 {
		st, err := t.log.Stats(ctx)
		if err != nil {
			return err
		}
		last := lastEntry(st)
		if last.EntryID < 0 {
			return nil
		}
		return ackWait(func(done func(error)) { s.cur.AckCumulative(last, done) })
	}
	md, err := s.cur.MarkDelete(ctx)
	if err != nil {
		return err
	}
	from := Position{LedgerID: md.LedgerID, EntryID: md.EntryID + 1}
	if md == mledger.Earliest {
		from = mledger.Earliest
	}
	if t.log.LastConfirmed().Less(from) {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	es, err := t.log.Read(rctx, from, n)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, mledger.ErrNoMoreEntries) {
			return nil
		}
		return err
	}
	ps := make([]Position, len(es))
	for i, e := range es {
		ps[i] = e.Position
	}
	return ackWait(func(done func(error)) { s.cur.Ack(ps, done) })
}

func ackWait(f func(done func(error))) error {
	ch := make(chan error, 1)
	f(func(err error) { ch <- err })
	return <-ch
}

// Stats returns the topic's statistics.
func (t *Topic) Stats(ctx context.Context) (Stats, error) {
	type snap struct {
		st   Stats
		subs []*Subscription
	}
	sn, err := inbox.Call(ctx, t.in, t.stopped, ErrClosed, func(reply func(snap, error)) {
		now := time.Now()
		st := Stats{
			MsgInCounter: t.core.rateIn.msgs, BytesInCounter: t.core.rateIn.bytes, Publishers: []PublisherStats{},
			Subscriptions: map[string]SubscriptionStats{}, Replication: map[string]any{},
			WaitingPublishers: len(t.core.waiting), LastPublishTimestamp: t.core.lastPublish,
			Terminated: t.core.state == StateTerminated, DeduplicationStatus: "Disabled",
		}
		if t.core.dedup.on {
			st.DeduplicationStatus = "Enabled"
		}
		t.policyStats(&st)
		st.MsgRateIn, st.MsgThroughputIn = t.core.rateIn.rates(now)
		if t.core.rateIn.msgs > 0 {
			st.AverageMsgSize = float64(t.core.rateIn.bytes) / float64(t.core.rateIn.msgs)
		}
		for p := range t.core.producers {
			ps := PublisherStats{
				AccessMode: accessModeName(p.AccessMode), ProducerID: int64(p.ID), ProducerName: p.Name,
				Address: p.Conn.RemoteAddr(), ConnectedSince: p.connected.UTC().Format(time.RFC3339Nano),
				ClientVersion: p.Conn.ClientVersion(), Metadata: p.Metadata,
			}
			if ps.Metadata == nil {
				ps.Metadata = map[string]string{}
			}
			ps.MsgRateIn, ps.MsgThroughputIn = p.rateIn.rates(now)
			if p.msgsIn > 0 {
				ps.AverageMsgSize = float64(p.bytesIn) / float64(p.msgsIn)
			}
			st.Publishers = append(st.Publishers, ps)
		}
		subs := make([]*Subscription, 0, len(t.subs))
		for _, s := range t.subs {
			subs = append(subs, s)
		}
		reply(snap{st, subs}, nil)
	})
	if err != nil {
		return Stats{}, err
	}
	st := sn.st
	if ls, err := t.log.Stats(ctx); err == nil {
		st.StorageSize = ls.Size
	}
	for _, s := range sn.subs {
		ss, err := s.Stats(ctx)
		if err != nil {
			continue
		}
		st.Subscriptions[s.name] = ss
		st.MsgRateOut += ss.MsgRateOut
		st.MsgThroughputOut += ss.MsgThroughputOut
		st.MsgOutCounter += ss.MsgOutCounter
		st.BytesOutCounter += ss.BytesOutCounter
		st.MsgDropRate += ss.MsgDropRate
	}
	if r := t.repl.Load(); r != nil {
		for c, rs := range (*r).Stats(ctx) {
			st.Replication[c] = rs
		}
	}
	addInbound(&st)
	// Durable subscriptions not open on this broker right now.
	if names, err := t.log.Cursors(ctx); err == nil {
		for _, n := range names {
			if _, ok := st.Subscriptions[n]; ok || IsReplicationCursor(n) {
				continue
			}
			if s, err := t.sub(ctx, n); err == nil {
				if ss, err := s.Stats(ctx); err == nil {
					st.Subscriptions[n] = ss
				}
			}
		}
	}
	return st, nil
}

// InternalStats returns the managed-ledger view of the topic.
func (t *Topic) InternalStats(ctx context.Context) (InternalStats, error) {
	ls, err := t.log.Stats(ctx)
	if err != nil {
		return InternalStats{}, err
	}
	is := InternalStats{
		NumberOfEntries: ls.Entries, TotalSize: ls.Size, PendingAddEntriesCount: ls.PendingAdds,
		LastConfirmedEntry: ls.LastConfirmed.String(), State: ls.State.String(),
		Ledgers: []LedgerStats{}, Cursors: map[string]CursorStats{},
	}
	is.EntriesAddedCounter = ls.Entries
	if ls.Terminated != nil {
		is.TerminatedPosition = ls.Terminated.String()
	}
	for _, l := range ls.Ledgers {
		is.Ledgers = append(is.Ledgers, LedgerStats{LedgerID: l.ID, Entries: l.Entries, Size: l.Size, Timestamp: l.CTime,
			Offloaded: l.Offload != nil && l.Offload.Complete})
	}
	if n := len(ls.Ledgers); n > 0 {
		l := ls.Ledgers[n-1]
		is.CurrentLedgerEntries, is.CurrentLedgerSize = l.Entries, l.Size
		is.LastLedgerCreatedTimestamp = time.UnixMilli(l.CTime).UTC().Format(time.RFC3339Nano)
	}
	names, err := t.Subscriptions(ctx)
	if err != nil {
		return is, err
	}
	for _, n := range names {
		s, err := t.sub(ctx, n)
		if err != nil {
			continue
		}
		ci, err := s.cur.Info(ctx)
		if err != nil {
			continue
		}
		if ci.ReadWaiting {
			is.WaitingCursorsCount++
		}
		is.Cursors[n] = cursorStats(ci, s.durable)
	}
	if r := t.repl.Load(); r != nil {
		for n, ci := range (*r).Cursors(ctx) {
			if ci.ReadWaiting {
				is.WaitingCursorsCount++
			}
			is.Cursors[n] = cursorStats(ci, true)
		}
	}
	return is, nil
}

func accessModeName(m interface{ String() string }) string { return m.String() }

// PendingAckStats returns the pending acknowledgements of subscription name.
func (t *Topic) PendingAckStats(ctx context.Context, name string) (PendingAckStats, error) {
	s, err := t.sub(ctx, name)
	if err != nil {
		return PendingAckStats{}, err
	}
	return s.PendingAckStats(ctx)
}

// Disconnect detaches the consumers of subscription name for which stale reports true and
// tells their clients (CLOSE_CONSUMER: they may reconnect); their unacknowledged entries are
// redelivered. A subscription without consumers is left as it is.
func (t *Topic) Disconnect(ctx context.Context, name string, stale func(*Consumer) bool) error {
	s, err := t.sub(ctx, name)
	if err != nil {
		return err
	}
	return inbox.Call0(ctx, s.in, s.stopped, ErrClosed, func(reply func(error)) {
		for _, c := range s.sortedConsumers() {
			if stale(c) {
				s.removeConsumer(c, true)
			}
		}
		reply(nil)
	})
}
