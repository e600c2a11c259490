package topic

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic/dispatch"
	"github.com/magnetar-io/magnetar/broker/topic/pendingack"
	"github.com/magnetar-io/magnetar/internal/inbox"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/txn"
)

// pendingAckCursor is the pending-ack log's cursor (Pulsar's name).
const pendingAckCursor = "__pending_ack_state"

// PendingAckLogName is the managed ledger of a subscription's pending acknowledgements
// (Pulsar's "<topic>-<subscription>__transaction_pending_ack").
func PendingAckLogName(topicKey, sub string) string {
	return topicKey + "-" + url.PathEscape(sub) + "__transaction_pending_ack"
}

// pendingAcks is a subscription's transactional acknowledgements, owned by the subscription
// goroutine: the core (package pendingack), its log and the subscribes waiting for it.
type pendingAcks struct {
	core    *pendingack.Core
	log     Log
	cur     Cursor
	timer   *time.Timer
	waiting []func()
	// failLogged rate-limits the replay failure log (one line per 30 s, with a count).
	failLogged time.Time
	failures   int
}

func (s *Subscription) initPendingAcks(hasLog bool) {
	if s.topic.txn == nil || !s.durable {
		return
	}
	s.pa = &pendingAcks{core: pendingack.New(hasLog, time.Now().UnixMilli())}
	s.post(s.performPA)
}

// attachWhenReady attaches c once the pending acknowledgements are replayed; a failed
// replay fails the subscribe with its cause.
func (s *Subscription) attachWhenReady(c *Consumer, done func(error)) {
	if s.pa != nil {
		switch st, err := s.pa.core.State(); st {
		case pendingack.StateReplaying:
			s.pa.waiting = append(s.pa.waiting, func() { s.attachWhenReady(c, done) })
			return
		case pendingack.StateFailed:
			done(fmt.Errorf("subscription %s: %w", s.name, err))
			return
		}
	}
	done(s.attach(c))
	s.flush()
}

func toPA(ids []dispatch.AckID) []pendingack.Ack {
	out := make([]pendingack.Ack, len(ids))
	for i, id := range ids {
		out[i] = pendingack.Ack{Pos: id.Pos, Size: id.BatchSize}
		if len(id.AckSet) > 0 && id.BatchSize > 0 {
			// ack_set has a bit set for each message still unacknowledged.
			bits := make([]uint64, (id.BatchSize+63)/64)
			for j := 0; j < id.BatchSize; j++ {
				w := j / 64
				still := w < len(id.AckSet) && uint64(id.AckSet[w])&(1<<(j%64)) != 0
				if !still {
					bits[w] |= 1 << (j % 64)
				}
			}
			out[i].Bits = bits
		}
	}
	return out
}

func fromPA(acks []pendingack.Ack) []dispatch.AckID {
	out := make([]dispatch.AckID, len(acks))
	for i, a := range acks {
		out[i] = dispatch.AckID{Pos: a.Pos, BatchSize: a.Size}
		if a.Bits != nil && a.Size > 0 {
			set := make([]int64, (a.Size+63)/64)
			for j := 0; j < a.Size; j++ {
				w := j / 64
				if w >= len(a.Bits) || a.Bits[w]&(1<<(j%64)) == 0 {
					set[w] |= 1 << (j % 64)
				}
			}
			out[i].AckSet = set
		}
	}
	return out
}

// onTxnAck takes a transactional acknowledgement.
func (s *Subscription) onTxnAck(_ *Consumer, ack *pb.CommandAck, ids []dispatch.AckID, done func(error)) {
	if done == nil {
		done = func(error) {}
	}
	switch {
	case s.pa == nil && s.topic.txn == nil:
		done(fmt.Errorf("%w: %v", ErrNotAllowed, ErrTxnDisabled))
		return
	case s.pa == nil:
		done(fmt.Errorf("%w: transactional acknowledgement on a non-durable subscription", ErrNotAllowed))
		return
	case ack.GetAckType() == pb.CommandAck_Cumulative:
		done(fmt.Errorf("%w: transactional cumulative acknowledgement is not supported", ErrNotAllowed))
		return
	}
	id := txn.ID{Most: ack.GetTxnidMostBits(), Least: ack.GetTxnidLeastBits()}
	acks := toPA(ids)
	// A position acknowledged already (e.g. by a committed transaction, then redelivered)
	// cannot be acknowledged again in a transaction: its output would be produced twice.
	cur := s.cur
	s.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		for _, a := range acks {
			var acked bool
			if acked, err = cur.Acked(ctx, a.Pos); err == nil && acked {
				err = fmt.Errorf("%w: %v was acknowledged before", pendingack.ErrConflict, a.Pos)
			}
			if err != nil {
				break
			}
		}
		s.post(func() {
			if err != nil {
				done(err)
				return
			}
			s.pa.core.Ack(id, acks, done)
			s.performPA()
		})
	})
}

// performPA does what the pending-ack core asks for.
func (s *Subscription) performPA() {
	pa := s.pa
	if pa == nil {
		return
	}
	r := pa.core.TakeReady()
	tt := s.topic.txn
	key := s.topic.name.ManagedLedgerName()
	if o := r.OpenLog; o != nil {
		s.spawn(func() { s.openPALog(o, key) })
	}
	if rd := r.ReadLog; rd != nil {
		log := pa.log
		s.spawn(func() {
			es, atEnd, err := readPALog(log, rd.From)
			s.post(func() {
				if err != nil {
					s.logPAFailure(err)
				}
				pa.core.LogRead(time.Now().UnixMilli(), rd.Tag, es, atEnd, err)
				s.performPA()
			})
		})
	}
	for _, reg := range r.Registers {
		reg := reg
		s.spawn(func() {
			ok, rejected, err := registerPA(tt, key, s.name, reg.ID)
			s.post(func() { pa.core.Registered(reg.Tag, ok, rejected, err); s.performPA() })
		})
	}
	for _, a := range r.Appends {
		a := a
		pa.log.AddAsync(a.Record.Encode(), func(p Position, err error) {
			s.post(func() { pa.core.Appended(a.Tag, p, err); s.performPA() })
		})
	}
	for _, id := range r.Awaits {
		id := id
		tt.cfg.Tracker.Await(id, func(st txn.Status) { s.post(func() { pa.core.Ended(id, st); s.performPA() }) })
	}
	for _, ap := range r.Applies {
		s.applyPA(ap)
	}
	for _, d := range r.Deletes {
		d := d
		s.spawn(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := tt.cfg.Store.Delete(ctx, metadata.TxnPendingAckKey(key, s.name, d.ID.Key()), metadata.AnyVersion)
			cancel()
			s.post(func() { pa.core.Deleted(d.Tag, err); s.performPA() })
		})
	}
	for _, id := range r.Drops {
		tt.dropRecord(metadata.TxnPendingAckKey(key, s.name, id.Key()))
	}
	if r.Trim != nil && pa.cur != nil {
		pa.cur.AckCumulative(*r.Trim, nil)
	}
	for _, rep := range r.Replies {
		rep.Done(rep.Err)
	}
	if r.StateChanged {
		ws := pa.waiting
		pa.waiting = nil
		for _, w := range ws {
			w()
		}
	}
	if r.TimerAt != 0 {
		if pa.timer != nil {
			pa.timer.Stop()
		}
		pa.timer = time.AfterFunc(time.Until(time.UnixMilli(r.TimerAt)), func() {
			s.post(func() { pa.core.Tick(time.Now().UnixMilli()); s.performPA() })
		})
	}
}

// logPAFailure logs a replay failure: the first one, then at most one line per 30 s with
// the count (never one line per retry).
func (s *Subscription) logPAFailure(err error) {
	pa := s.pa
	pa.failures++
	if time.Since(pa.failLogged) < 30*time.Second {
		return
	}
	pa.failLogged = time.Now()
	s.logger.Warn("pending-ack log replay failed", "err", err, "permanent", pendingack.Permanent(err), "failures", pa.failures)
}

func (s *Subscription) openPALog(o *pendingack.OpenLog, key string) {
	pa := s.pa
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log, err := s.topic.txn.cfg.OpenLog(ctx, PendingAckLogName(key, s.name), o.Create)
	var cur Cursor
	var start Position
	var recorded []txn.ID
	if err == nil {
		if cur, err = log.OpenCursor(ctx, pendingAckCursor, mledger.Earliest); err == nil {
			var md Position
			if md, err = cur.MarkDelete(ctx); err == nil {
				start = Position{LedgerID: md.LedgerID, EntryID: md.EntryID + 1}
			}
		}
		if err == nil && !o.Create {
			recorded, err = listPA(ctx, s.topic.txn, key, s.name)
		}
		if err != nil {
			_ = log.Close(ctx)
		}
	}
	s.post(func() {
		if err == nil {
			if s.state != SubActive {
				go func() { _ = log.Close(context.Background()) }()
				return
			}
			pa.log, pa.cur = log, cur
		} else {
			s.logPAFailure(err)
		}
		pa.core.Recorded(recorded)
		pa.core.LogOpened(time.Now().UnixMilli(), o.Tag, start, err)
		s.performPA()
	})
}

// listPA returns the transactions with a pending-ack record on subscription sub.
func listPA(ctx context.Context, tt *txnTopic, key, sub string) ([]txn.ID, error) {
	prefix := metadata.TxnPendingAckKey(key, sub, "")
	kvs, _, err := tt.cfg.Store.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list pending-ack records: %w", err)
	}
	var ids []txn.ID
	for _, kv := range kvs {
		if id, err := txn.ParseKey(strings.TrimPrefix(kv.Key, prefix)); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// readPALog reads the pending-ack log from from to its end, at most 1000 entries. Nothing
// appends to the log while it is replayed, so its last entry is the end.
func readPALog(log Log, from Position) ([]pendingack.LogEntry, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := log.Stats(ctx)
	if err != nil {
		return nil, false, err
	}
	last := lastEntry(st)
	if last.EntryID < 0 || last.Less(from) {
		return nil, true, nil
	}
	es, err := log.Read(ctx, from, 1000)
	if err != nil {
		return nil, false, err
	}
	out := make([]pendingack.LogEntry, 0, len(es))
	atEnd := len(es) == 0
	for _, e := range es {
		if last.Less(e.Position) {
			atEnd = true
			break
		}
		out = append(out, pendingack.LogEntry{Pos: e.Position, Data: e.Data})
		if e.Position == last {
			atEnd = true
		}
	}
	return out, atEnd, nil
}

// registerPA registers transaction id on subscription sub (see registerRecord).
func registerPA(tt *txnTopic, key, sub string, id txn.ID) (ok, rejected bool, err error) {
	return tt.registerRecord(id, metadata.TxnPendingAckKey(key, sub, id.Key()), "on subscription "+sub,
		func(h txn.Header) error {
			switch {
			case h.Status != txn.Open:
				return fmt.Errorf("%w: %v is %v", txn.ErrNotFound, id, h.Status)
			case !h.HasSubscription(key, sub, canonOrSelf(tt.cfg.Canon)):
				return fmt.Errorf("%w: transaction %v did not add subscription %s", ErrNotAllowed, id, sub)
			}
			return nil
		})
}

// applyPA applies a transaction's outcome to the subscription: a commit acknowledges
// through the dispatcher (so that nothing acknowledged is delivered again) and waits until
// the cursor has it durably; an abort hands the messages back for redelivery.
func (s *Subscription) applyPA(ap pendingack.Apply) {
	pa := s.pa
	if !ap.Commit {
		ps := make([]Position, len(ap.Acks))
		for i, a := range ap.Acks {
			ps[i] = a.Pos
		}
		for _, c := range s.sortedConsumers() {
			s.d.Redeliver(c.cid, ps)
		}
		s.flush()
		// Reported as an input of its own, so that what it asks (the abort marker, the
		// record deletion) is performed.
		s.post(func() { pa.core.Applied(ap.Tag, nil); s.performPA() })
		return
	}
	cur := s.cur
	s.d.Ack(0, false, fromPA(ap.Acks), func(err error) {
		// Called by the cursor's worker: continue on the owner.
		s.post(func() {
			s.spawn(func() {
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					err = cur.Flush(ctx)
					cancel()
				}
				s.post(func() { pa.core.Applied(ap.Tag, err); s.performPA() })
			})
		})
	})
	s.flush()
}

// closePA stops the pending acknowledgements and closes their log.
func (s *Subscription) closePA() {
	pa := s.pa
	if pa == nil {
		return
	}
	pa.core.Close()
	s.performPA()
	if pa.timer != nil {
		pa.timer.Stop()
	}
	if pa.log != nil {
		log := pa.log
		s.spawn(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = log.Close(ctx)
			cancel()
		})
	}
}

// PendingAckStats describe a subscription's pending acknowledgements.
type PendingAckStats struct {
	State string
	// Err is the replay failure (StateFailed).
	Err       string
	Txns      int
	Positions int
	Attempts  int
	// ByTxn lists each transaction's acknowledged positions.
	ByTxn map[txn.ID][]Position
}

// PendingAckStats returns the subscription's pending acknowledgements.
func (s *Subscription) PendingAckStats(ctx context.Context) (PendingAckStats, error) {
	return inbox.Call(ctx, s.in, s.stopped, ErrClosed, func(reply func(PendingAckStats, error)) {
		if s.pa == nil {
			reply(PendingAckStats{State: "None"}, nil)
			return
		}
		st, err := s.pa.core.State()
		out := PendingAckStats{State: st.String(), Attempts: s.pa.core.Attempts(), ByTxn: map[txn.ID][]Position{}}
		if err != nil {
			out.Err = err.Error()
		}
		out.Txns, out.Positions = s.pa.core.Pending()
		for id, acks := range s.pa.core.Transactions() {
			for _, a := range acks {
				out.ByTxn[id] = append(out.ByTxn[id], a.Pos)
			}
		}
		reply(out, nil)
	})
}

// deletePendingAckLog deletes subscription sub's pending-ack log, if it has one (log: the
// open one, nil if none is open).
func (t *Topic) deletePendingAckLog(ctx context.Context, sub string, log Log) error {
	if t.txn == nil {
		return nil
	}
	if log == nil {
		has, err := t.txn.hasPendingAckLog(ctx, sub)
		if err != nil || !has {
			return err
		}
		if log, err = t.txn.cfg.OpenLog(ctx, PendingAckLogName(t.txn.key, sub), false); err != nil {
			if errors.Is(err, mledger.ErrNotFound) {
				return nil
			}
			return err
		}
	}
	if err := log.Delete(ctx); err != nil && !errors.Is(err, mledger.ErrNotFound) {
		return fmt.Errorf("delete the pending-ack log of %s: %w", sub, err)
	}
	return nil
}
