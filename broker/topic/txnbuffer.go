package topic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic/txnbuf"
	"github.com/magnetar-io/magnetar/internal/inbox"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/txn"
)

// TxnConfig turns transactions on for a topic.
type TxnConfig struct {
	Store   metadata.Store
	Tracker TxnTracker
	// Canon maps a topic name as a client sent it to its participant key
	// (Name.ManagedLedgerName of the parsed name).
	Canon func(string) (string, error)
	// OpenLog opens managed ledger name (for the pending-ack logs); create false fails if it
	// does not exist.
	OpenLog func(ctx context.Context, name string, create bool) (Log, error)
	// Batcher, if set, group-commits the buffer's record writes with the broker's other
	// transaction metadata writes.
	Batcher *metadata.Batcher
}

// TxnTracker is what the transaction drivers need of *txn.Tracker (see there): the
// header of a transaction, and its outcome once it ends. Safe for concurrent use.
type TxnTracker interface {
	// Header reads id's header (ok false: it is gone).
	Header(ctx context.Context, id txn.ID) (h txn.Header, ok bool, err error)
	// Await calls fn once when id has ended, or with 0 if its header is gone; fn must not
	// block.
	Await(id txn.ID, fn func(txn.Status)) (cancel func())
}

var _ TxnTracker = (*txn.Tracker)(nil)

// hasPendingAckLog reports whether subscription sub of the topic has a pending-ack log.
func (tt *txnTopic) hasPendingAckLog(ctx context.Context, sub string) (bool, error) {
	_, err := tt.cfg.Store.Get(ctx, metadata.ManagedLedgerKey(PendingAckLogName(tt.key, sub)))
	if errors.Is(err, metadata.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// txnTopic is the transaction side of a topic, owned by the topic goroutine: the buffer
// core (package txnbuf) and the sends held while their transaction registers.
type txnTopic struct {
	cfg  TxnConfig
	key  string // participant key of the topic
	core *txnbuf.Core
	// held are each producer's sends waiting behind a registration, in order.
	held  map[*Producer][]Message
	timer *time.Timer
	// aborted is the aborted set as the subscriptions filter by it (replaced on change).
	aborted atomic.Pointer[map[txn.ID]txnbuf.Position]
	// failed holds, while held sends are judged again, the transactions whose registration
	// failed and the error to refuse their sends with.
	failed map[txn.ID]error
}

// loadTxn reads the buffer's durable state (one listing of the topic's records).
func loadTxn(ctx context.Context, cfg TxnConfig, key string, last Position) (*txnTopic, error) {
	tt := &txnTopic{cfg: cfg, key: key, core: txnbuf.New(), held: map[*Producer][]Message{}}
	prefix := metadata.TxnBufferPrefix(key)
	kvs, _, err := cfg.Store.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("load transaction buffer: %w", err)
	}
	l := txnbuf.Loaded{Aborted: map[txn.ID]txnbuf.Position{}, Last: last}
	for _, kv := range kvs {
		rest := strings.TrimPrefix(kv.Key, prefix)
		switch {
		case rest == "watermark":
			if err := json.Unmarshal(kv.Value, &l.Watermark); err != nil {
				return nil, fmt.Errorf("load transaction buffer: watermark: %w", err)
			}
			l.WatermarkVer = kv.Version
		case strings.HasPrefix(rest, "aborted/"):
			id, err := txn.ParseKey(strings.TrimPrefix(rest, "aborted/"))
			if err != nil {
				continue
			}
			var p txnbuf.Position
			if err := json.Unmarshal(kv.Value, &p); err != nil {
				return nil, fmt.Errorf("load transaction buffer: %s: %w", kv.Key, err)
			}
			l.Aborted[id] = p
		case strings.HasPrefix(rest, "open/"):
			if id, err := txn.ParseKey(strings.TrimPrefix(rest, "open/")); err == nil {
				l.Open = append(l.Open, id)
			}
		}
	}
	tt.core.Load(l)
	return tt, nil
}

func (tt *txnTopic) logLoaded(t *Topic) {
	c := tt.core
	if c.Open() == 0 && len(c.Aborted()) == 0 {
		return
	}
	var mr any = "unbounded"
	if b := c.MaxRead(); b != nil {
		mr = b.Pos.String()
	}
	t.logger.Info("transaction buffer loaded", "open", c.Open(), "aborted", len(c.Aborted()),
		"watermark", c.Watermark().String(), "maxRead", mr)
}

// IsAborted reports whether the topic filters the entries of id (safe for concurrent use).
func (t *Topic) isAborted(id txn.ID) bool {
	if t.txn == nil {
		return false
	}
	m := t.txn.aborted.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[id]
	return ok
}

// TxnBufferStats describe a topic's transaction buffer.
type TxnBufferStats struct {
	Enabled bool
	State   string
	// MaxRead is the read bound (nil: unbounded); LastStored the newest stored entry.
	MaxRead    *Position
	LastStored Position
	Watermark  Position
	// Open counts the transactions not applied yet; Aborted the aborted set.
	Open, Aborted int
	HeldSends     int
	// MaxReadLag counts the stored entries readers may not read yet: from the max read
	// position to the newest stored entry (0 when unbounded).
	MaxReadLag int64
}

// TxnBufferStats returns the transaction buffer's statistics.
func (t *Topic) TxnBufferStats(ctx context.Context) (TxnBufferStats, error) {
	st, err := inbox.Call(ctx, t.in, t.stopped, ErrClosed, func(reply func(TxnBufferStats, error)) {
		if t.txn == nil {
			reply(TxnBufferStats{}, nil)
			return
		}
		c := t.txn.core
		st := TxnBufferStats{Enabled: true, Open: c.Open(), Aborted: len(c.Aborted()), Watermark: c.Watermark(),
			LastStored: t.core.last, State: c.State().String()}
		if b := c.MaxRead(); b != nil {
			p := b.Pos
			st.MaxRead = &p
		}
		for _, q := range t.txn.held {
			st.HeldSends += len(q)
		}
		reply(st, nil)
	})
	if err != nil || st.MaxRead == nil {
		return st, err
	}
	ls, err := t.log.Stats(ctx)
	if err != nil {
		return st, err
	}
	st.MaxReadLag = entriesBetween(ls, *st.MaxRead, st.LastStored)
	return st, nil
}

// entriesBetween counts the entries of the log's ledgers from position from to position to,
// both included.
func entriesBetween(ls mledger.Stats, from, to Position) int64 {
	var n int64
	for _, l := range ls.Ledgers {
		if l.ID < from.LedgerID || l.ID > to.LedgerID || l.Entries == 0 {
			continue
		}
		first, last := int64(0), l.Entries-1
		if l.ID == from.LedgerID {
			first = max(first, from.EntryID)
		}
		if l.ID == to.LedgerID {
			last = min(last, to.EntryID)
		}
		if last >= first {
			n += last - first + 1
		}
	}
	return n
}

// TxnInBuffer returns what the buffer knows of transaction id: its first entry here (nil:
// none known) and whether it is aborted.
func (t *Topic) TxnInBuffer(ctx context.Context, id txn.ID) (start *Position, aborted bool, err error) {
	type res struct {
		start   *Position
		aborted bool
	}
	r, err := inbox.Call(ctx, t.in, t.stopped, ErrClosed, func(reply func(res, error)) {
		if t.txn == nil {
			reply(res{}, nil)
			return
		}
		var out res
		if p, ok := t.txn.core.Start(id); ok {
			out.start = &p
		}
		out.aborted = t.txn.core.IsAborted(id)
		reply(out, nil)
	})
	return r.start, r.aborted, err
}

// onPublish takes a SEND: behind the producer's held sends if it has any.
func (t *Topic) onPublish(p *Producer, m Message) {
	if t.txn != nil && len(t.txn.held[p]) > 0 {
		t.txn.held[p] = append(t.txn.held[p], m)
		return
	}
	if t.publishOne(p, m) {
		t.txn.held[p] = append(t.txn.held[p], m)
	}
}

// publishOne publishes m, or reports that it must be held (its transaction registers).
func (t *Topic) publishOne(p *Producer, m Message) (hold bool) {
	if m.Txn == nil {
		if !t.publish(p, m) {
			t.pubDone(p, m)
		}
		return false
	}
	refuse := func(code pb.ServerError, msg string) {
		t.pubDone(p, m)
		p.Conn.Send(sendError(p.ID, m.SequenceID, code, msg))
	}
	if t.txn == nil {
		refuse(pb.ServerError_NotAllowedError, ErrTxnDisabled.Error())
		return false
	}
	id := *m.Txn
	if err, ok := t.txn.failed[id]; ok {
		refuse(txnSendCode(err), err.Error())
		return false
	}
	v, err := t.txn.core.Admit(id)
	switch v {
	case txnbuf.Hold:
		return true
	case txnbuf.Refuse:
		refuse(txnSendCode(err), err.Error())
		return false
	}
	m.Data = withTxn(id, m.Data)
	if t.publish(p, m) {
		t.txn.core.Appending(id)
	} else {
		t.pubDone(p, m)
	}
	return false
}

func txnSendCode(err error) pb.ServerError {
	switch {
	case errors.Is(err, txnbuf.ErrEnded), errors.Is(err, txn.ErrNotFound):
		return pb.ServerError_TransactionNotFound
	case errors.Is(err, errTxnNotAdded):
		return pb.ServerError_NotAllowedError
	}
	return pb.ServerError_ServiceNotReady
}

var errTxnNotAdded = errors.New("the transaction did not add this topic")

// drainHeld judges the held sends again, in order, after a registration ended.
func (t *Topic) drainHeld() {
	for p, q := range t.txn.held {
		delete(t.txn.held, p)
		if p.state != producerReady {
			for _, m := range q {
				t.pubDone(p, m)
			}
			continue
		}
		for i, m := range q {
			if t.publishOne(p, m) {
				t.txn.held[p] = q[i:]
				break
			}
		}
	}
}

// releaseHeld drops every held send (the topic closes).
func (t *Topic) releaseHeld() {
	if t.txn == nil {
		return
	}
	for p, q := range t.txn.held {
		for _, m := range q {
			t.pubDone(p, m)
			p.Conn.Send(sendError(p.ID, m.SequenceID, pb.ServerError_ServiceNotReady, "topic is closing"))
		}
	}
	t.txn.held = map[*Producer][]Message{}
}

// pruneAborted tells the buffer where the log now starts, so that the aborted records of
// transactions wholly in trimmed ledgers are deleted (checked whenever the aborted set
// changes, and at load).
func (t *Topic) pruneAborted() {
	tt, log := t.txn, t.log
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := log.Stats(ctx)
		cancel()
		if err != nil || len(st.Ledgers) == 0 {
			return
		}
		first := Position{LedgerID: st.Ledgers[0].ID, EntryID: 0}
		t.post(func() { tt.core.Trimmed(first) })
	}()
}

// closeTxn stops the buffer: held sends are refused, its timer stops.
func (t *Topic) closeTxn() {
	if t.txn == nil {
		return
	}
	t.releaseHeld()
	t.txn.core.Close()
	if t.txn.timer != nil {
		t.txn.timer.Stop()
	}
}

// txnAdded feeds a completed add to the buffer.
func (t *Topic) txnAdded(m Message, pos Position, err error) {
	if t.txn != nil {
		t.txn.core.Added(m.Txn, pos, err == nil)
	}
}

// performTxn does what the buffer core asks for. The read bound is handed to the log first,
// so it takes effect before any add of this step.
func (t *Topic) performTxn() {
	if t.txn == nil {
		return
	}
	tt := t.txn
	r := tt.core.TakeReady()
	// The aborted set first: a bound that moves past an aborted transaction's entries lets
	// the log's readers (other goroutines) read them at once, and they filter by the set
	// published here (isAborted).
	if r.AbortedChanged {
		m := tt.core.Aborted()
		tt.aborted.Store(&m)
		if len(m) > 0 {
			t.pruneAborted()
		}
	}
	if r.BoundChanged {
		var p *Position
		if r.MaxRead != nil {
			q := r.MaxRead.Pos
			p = &q
		}
		t.log.SetMaxRead(p)
	}
	for _, reg := range r.Registers {
		t.register(reg)
	}
	for _, id := range r.Awaits {
		tt.cfg.Tracker.Await(id, func(s txn.Status) { t.post(func() { tt.core.Ended(id, s) }) })
	}
	for _, w := range r.Writes {
		t.writeTxnRecord(w)
	}
	for _, id := range r.Lookups {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := tt.cfg.Store.Get(ctx, metadata.TxnAbortedKey(tt.key, id.Key()))
			cancel()
			found := err == nil
			if errors.Is(err, metadata.ErrNotFound) {
				err = nil
			}
			t.post(func() { tt.core.LookedUp(time.Now().UnixMilli(), id, found, err) })
		}()
	}
	for _, id := range r.Drops {
		tt.dropRecord(metadata.TxnOpenKey(tt.key, id.Key()))
	}
	if len(r.Released) > 0 {
		t.drainHeld()
		tt.failed = nil
		t.performTxn()
	}
	if r.TimerAt != 0 {
		if tt.timer != nil {
			tt.timer.Stop()
		}
		tt.timer = time.AfterFunc(time.Until(time.UnixMilli(r.TimerAt)), func() {
			t.post(func() { tt.core.Tick(time.Now().UnixMilli()) })
		})
	}
}

// TxnEnded tells the topic that transaction id, which listed it (sub "": as a produced
// partition; else as an acknowledged subscription), has ended: if it never registered id,
// it deletes the record the coordinator created for it, so the header can be collected
// (the buffer or the pending acknowledgements decide: their cores' EndedNotice).
func (t *Topic) TxnEnded(id txn.ID, sub string) {
	t.post(func() {
		tt := t.txn
		if tt == nil {
			return
		}
		if sub == "" {
			tt.core.EndedNotice(id)
			return
		}
		s := t.subs[sub]
		if s == nil {
			return
		}
		s.post(func() {
			if s.pa != nil {
				s.pa.core.EndedNotice(id)
				s.performPA()
			}
		})
	})
}

// dropRecord deletes a participant record, in the background (a failure leaves it to the
// participant's next load).
func (tt *txnTopic) dropRecord(key string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tt.cfg.Store.Delete(ctx, key, metadata.AnyVersion)
	}()
}

// register performs a registration of the buffer core (see registerRecord).
func (t *Topic) register(reg txnbuf.Register) {
	tt := t.txn
	go func() {
		ok, rejected, err := tt.registerRecord(reg.ID, metadata.TxnOpenKey(tt.key, reg.ID.Key()), "on "+tt.key,
			func(h txn.Header) error {
				switch {
				case h.Status != txn.Open:
					return fmt.Errorf("%w: %v is %v", txnbuf.ErrEnded, reg.ID, h.Status)
				case !h.HasPartition(tt.key, canonOrSelf(tt.cfg.Canon)):
					return fmt.Errorf("%w: transaction %v did not add %s", errTxnNotAdded, reg.ID, t.name)
				}
				return nil
			})
		out := txnbuf.Failed // the record may stay: the buffer awaits the transaction's end
		switch {
		case ok:
			out = txnbuf.Registered
		case rejected:
			out = txnbuf.Rejected
		}
		t.post(func() {
			if ferr := tt.core.Registered(reg.Tag, out, err); ferr != nil {
				if tt.failed == nil {
					tt.failed = map[txn.ID]error{}
				}
				tt.failed[reg.ID] = ferr
			}
		})
	}()
}

// registerRecord registers a participant (its record key) on transaction id: it reads the
// header, and check says whether the transaction may take part (open, and this participant
// added). The coordinator created the participant's record in the same commit that added
// it to the header, so a header that passes the check proves the record exists (T3), and
// the header's garbage collection waits for it. A refused registration is rejected (the
// record of an ended transaction is deleted: nothing was written here); if the store
// fails, neither ok nor rejected.
func (tt *txnTopic) registerRecord(id txn.ID, key, where string, check func(txn.Header) error) (ok, rejected bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, found, err := tt.cfg.Tracker.Header(ctx, id)
	if err != nil {
		return false, false, fmt.Errorf("read transaction %v %s: %w", id, where, err)
	}
	if !found {
		return false, true, fmt.Errorf("%w: %v", txn.ErrNotFound, id)
	}
	if err = check(h); err == nil {
		return true, false, nil
	}
	if h.Status.Ended() {
		if derr := tt.cfg.Store.Delete(ctx, key, metadata.AnyVersion); derr != nil {
			return false, false, err
		}
	}
	return false, true, err
}

func canonOrSelf(canon func(string) (string, error)) func(string) string {
	return func(s string) string {
		if canon == nil {
			return s
		}
		c, err := canon(s)
		if err != nil {
			return s
		}
		return c
	}
}

// writeTxnRecord performs one record write of the buffer core.
func (t *Topic) writeTxnRecord(w txnbuf.Write) {
	tt := t.txn
	st := tt.cfg.Store
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var ver metadata.Version
		var err error
		switch w.Kind {
		case txnbuf.WriteApply:
			// One commit: aborted records, the watermark, the applied open records' deletes.
			ops := make([]metadata.Op, 0, len(w.Aborted)+1+len(w.Applied))
			for id, p := range w.Aborted {
				v, _ := json.Marshal(p)
				ops = append(ops, metadata.Op{Key: metadata.TxnAbortedKey(tt.key, id.Key()), Value: v, Expected: metadata.AnyVersion})
			}
			if w.Watermark != nil {
				v, _ := json.Marshal(*w.Watermark)
				ops = append(ops, metadata.Op{Key: metadata.TxnWatermarkKey(tt.key), Value: v, Expected: w.Expected})
			}
			for _, id := range w.Applied {
				ops = append(ops, metadata.Op{Key: metadata.TxnOpenKey(tt.key, id.Key()), Expected: metadata.AnyVersion, Delete: true})
			}
			commit := st.Commit
			if tt.cfg.Batcher != nil {
				commit = tt.cfg.Batcher.Commit
			}
			var vs []metadata.Version
			if vs, err = commit(ctx, ops); err == nil && w.Watermark != nil {
				ver = vs[len(w.Aborted)]
			}
			if errors.Is(err, metadata.ErrBadVersion) {
				if kv, gerr := st.Get(ctx, metadata.TxnWatermarkKey(tt.key)); gerr == nil {
					var p Position
					if json.Unmarshal(kv.Value, &p) == nil {
						t.post(func() { tt.core.WatermarkReloaded(p, kv.Version) })
					}
				} else if errors.Is(gerr, metadata.ErrNotFound) {
					t.post(func() { tt.core.WatermarkReloaded(Position{}, metadata.NotExists) })
				}
			}
		case txnbuf.WriteDeleteAborted:
			err = st.Delete(ctx, metadata.TxnAbortedKey(tt.key, w.ID.Key()), metadata.AnyVersion)
		}
		if err != nil {
			t.logger.Warn("transaction buffer record write failed; retrying", "kind", w.Kind, "txn", w.ID.String(), "err", err)
		}
		t.post(func() { tt.core.Written(time.Now().UnixMilli(), w.Tag, ver, err) })
	}()
}
