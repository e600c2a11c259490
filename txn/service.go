package txn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/magnetar-io/magnetar/internal/inbox"
	"github.com/magnetar-io/magnetar/metadata"
)

// CoordinatorConfig configures a running coordinator.
type CoordinatorConfig struct {
	CoreConfig
	Store  metadata.Store
	Logger *slog.Logger
	// Canon maps a topic name as a client sent it to the participant key of its topic
	// ("tenant/ns/domain/local"); names it cannot parse are skipped by garbage collection.
	Canon func(string) (string, error)
	// Metrics counts what the coordinator does (nil: not counted).
	Metrics *Metrics
	// OpTimeout bounds one metadata operation. Default 10s.
	OpTimeout time.Duration
	// Batcher group-commits the coordinator's writes (nil: one of its own on Store). The
	// broker shares one among its coordinators and transaction participants.
	Batcher *metadata.Batcher
	// OnDecided, if set, hears each END this coordinator decided (its header's status is
	// stored), on the coordinator's goroutine and before the client's reply: the broker
	// tells its own participants (Tracker.Decided), so a send or an ack the client makes
	// after the reply finds the transaction ended there. It must not block.
	OnDecided func(ID, Status)
}

// Coordinator runs a Core on the metadata store: one goroutine owns the core, each store
// operation runs on its own goroutine and posts its outcome back.
type Coordinator struct {
	cfg     CoordinatorConfig
	core    *Core
	log     *slog.Logger
	in      *inbox.Queue[func()]
	stop    chan struct{}
	stopped chan struct{}
	timer   *time.Timer
	timerAt int64
	started map[uint64]time.Time // commit latency: end requests in flight, by sequence
	// timeouts counts the transactions the timeout sweep aborted since the last log line.
	timeouts int
	batcher  *metadata.Batcher // header writes
	// collector group-commits collections.
	collector *metadata.Batcher
}

// StartCoordinator loads coordinator cfg.TC from the store and serves it.
func StartCoordinator(ctx context.Context, cfg CoordinatorConfig) (*Coordinator, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 10 * time.Second
	}
	if cfg.Batcher == nil {
		cfg.Batcher = metadata.NewBatcher(cfg.Store, 0, cfg.OpTimeout)
	}
	c := &Coordinator{cfg: cfg, core: NewCore(cfg.CoreConfig), log: cfg.Logger.With("tc", cfg.TC), batcher: cfg.Batcher,
		collector: metadata.NewBatcher(cfg.Store, 0, cfg.OpTimeout),
		in:        inbox.New[func()](), stop: make(chan struct{}), stopped: make(chan struct{}), started: map[uint64]time.Time{}}
	seq, seqVer, fence, hs, err := loadCoordinator(ctx, cfg.Store, cfg.TC)
	if err != nil {
		return nil, fmt.Errorf("transaction coordinator %d: load: %w", cfg.TC, err)
	}
	c.core.OnTimeout = func(ID) {
		c.timeouts++
		if m := cfg.Metrics; m != nil {
			m.timedOut.Inc()
		}
	}
	c.core.Load(seq, seqVer, fence, hs, time.Now().UnixMilli())
	open := c.core.Open()
	c.log.Info("transaction coordinator loaded", "open", open, "headers", len(hs), "nextSeq", seq.Next)
	go c.run()
	c.post(func() {})
	return c, nil
}

// loadCoordinator bumps the epoch record (fencing the header creations of earlier
// incarnations), then reads the sequence record and every header.
func loadCoordinator(ctx context.Context, st metadata.Store, tc uint64) (seq SeqRecord, seqVer, fence metadata.Version, hs []Loaded, err error) {
	ek := metadata.TxnEpochKey(tc)
	ev := metadata.NotExists
	kv, err := st.Get(ctx, ek)
	switch {
	case err == nil:
		ev = kv.Version
	case !errors.Is(err, metadata.ErrNotFound):
		return seq, 0, 0, nil, err
	}
	if fence, err = st.Put(ctx, ek, []byte(`{}`), ev); err != nil {
		return seq, 0, 0, nil, fmt.Errorf("fence earlier incarnations: %w", err)
	}
	kv, err = st.Get(ctx, metadata.TxnSeqKey(tc))
	switch {
	case err == nil:
		if err := json.Unmarshal(kv.Value, &seq); err != nil {
			return seq, 0, 0, nil, err
		}
		seqVer = kv.Version
	case !errors.Is(err, metadata.ErrNotFound):
		return seq, 0, 0, nil, err
	}
	kvs, _, err := st.List(ctx, metadata.TxnHeaderPrefix(tc))
	if err != nil {
		return seq, 0, 0, nil, err
	}
	hs = make([]Loaded, 0, len(kvs))
	for _, kv := range kvs {
		var s uint64
		if _, err := fmt.Sscanf(kv.Key[len(metadata.TxnHeaderPrefix(tc)):], "%d", &s); err != nil {
			continue
		}
		h, err := DecodeHeader(kv.Value)
		if err != nil {
			return seq, 0, 0, nil, fmt.Errorf("header %s: %w", kv.Key, err)
		}
		hs = append(hs, Loaded{Seq: s, Header: h, Version: kv.Version})
	}
	return seq, seqVer, fence, hs, nil
}

func (c *Coordinator) post(fn func()) bool { return c.in.Push(fn) }

func (c *Coordinator) run() {
	defer close(c.stopped)
	var batch []func()
	for {
		select {
		case <-c.stop:
			c.core.Close()
			c.perform()
			c.in.Close()
			if c.timer != nil {
				c.timer.Stop()
			}
			return
		case <-c.in.Signal():
			batch = c.in.Drain(batch)
			for i, fn := range batch {
				fn()
				batch[i] = nil
			}
			c.perform()
		}
	}
}

// perform does what the core asks for.
func (c *Coordinator) perform() {
	r := c.core.TakeReady()
	for _, w := range r.Writes {
		c.doWrite(w)
	}
	for _, g := range r.Gets {
		c.doGet(g)
	}
	c.doChecks(r.Checks)
	for _, rep := range r.Replies {
		rep.Done(rep.ID, rep.Err)
	}
	if r.TimerAt != 0 && (c.timer == nil || r.TimerAt < c.timerAt) {
		if c.timer != nil {
			c.timer.Stop()
		}
		c.timerAt = r.TimerAt
		c.timer = time.AfterFunc(time.Until(time.UnixMilli(r.TimerAt)), func() {
			c.post(func() {
				c.timer = nil
				c.core.Tick(time.Now().UnixMilli())
			})
		})
	}
	if m := c.cfg.Metrics; m != nil {
		m.open.WithLabelValues(fmt.Sprint(c.cfg.TC)).Set(float64(c.core.Open()))
	}
	if c.timeouts > 0 {
		c.log.Info("timed-out transactions aborted", "count", c.timeouts, "open", c.core.Open())
		c.timeouts = 0
	}
}

// doWrite makes w durable through the batcher (one commit in flight, shared by the writes
// that queue meanwhile) and reports the outcome to the core.
func (c *Coordinator) doWrite(w Write) {
	ops := c.writeOps(w)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.OpTimeout)
		vs, err := c.batcher.Commit(ctx, ops)
		cancel()
		var ver metadata.Version
		if err == nil && !w.Delete {
			ver = vs[0]
		}
		c.post(func() { c.core.WriteDone(w.Tag, ver, err) })
	}()
}

// writeOps returns w's operations: the header's put or delete first, then (for a header
// that adds participants) the epoch check and the participants' records.
func (c *Coordinator) writeOps(w Write) []metadata.Op {
	if w.Delete {
		return []metadata.Op{{Key: w.Key, Expected: w.Expected, Delete: true}}
	}
	keys := ParticipantKeys(w.ID, w.Added, c.cfg.Canon)
	ops := make([]metadata.Op, 0, 2+len(keys))
	ops = append(ops, metadata.Op{Key: w.Key, Value: w.Value, Expected: w.Expected})
	if w.Fence != 0 {
		ops = append(ops, metadata.Op{Key: metadata.TxnEpochKey(w.ID.Most), Expected: w.Fence, Check: true})
	}
	for _, k := range keys {
		ops = append(ops, metadata.Op{Key: k, Value: []byte(`{}`), Expected: metadata.AnyVersion})
	}
	return ops
}

func (c *Coordinator) doGet(g Get) {
	st, d := c.cfg.Store, c.cfg.OpTimeout
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		kv, err := st.Get(ctx, g.Key)
		cancel()
		var p *metadata.KV
		if err == nil {
			p = &kv
		} else if errors.Is(err, metadata.ErrNotFound) {
			err = nil
		}
		c.post(func() { c.core.GetDone(g.Tag, p, err) })
	}()
}

// doChecks collects ended transactions: a commit deletes each header if none of its
// participants' records exists. The collections go by group commit of their own (not
// with the header writes: a refused collection, a record still there, sends the whole
// shared commit back call by call).
func (c *Coordinator) doChecks(chs []Check) {
	for _, ch := range chs {
		ops := c.collectOps(ch)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.OpTimeout)
			_, err := c.collector.Commit(ctx, ops)
			cancel()
			pending := errors.Is(err, metadata.ErrBadVersion)
			if pending {
				err = nil
			}
			c.post(func() { c.core.Checked(ch.Tag, pending, err) })
		}()
	}
}

// collectOps deletes ch's header at its version, checking its participants' records gone.
func (c *Coordinator) collectOps(ch Check) []metadata.Op {
	keys := ParticipantKeys(ch.ID, ch.Header, c.cfg.Canon)
	ops := make([]metadata.Op, 0, 1+len(keys))
	ops = append(ops, metadata.Op{Key: ch.Key, Expected: ch.Version, Delete: true})
	for _, k := range keys {
		ops = append(ops, metadata.Op{Key: k, Expected: metadata.NotExists, Check: true})
	}
	return ops
}

// ParticipantKeys returns the record keys the participants of h write for transaction id.
func ParticipantKeys(id ID, h Header, canon func(string) (string, error)) []string {
	var keys []string
	for _, p := range h.Partitions {
		if t, err := canon(p); err == nil {
			keys = append(keys, metadata.TxnOpenKey(t, id.Key()))
		}
	}
	for _, s := range h.Subscriptions {
		if t, err := canon(s.Topic); err == nil {
			keys = append(keys, metadata.TxnPendingAckKey(t, s.Subscription, id.Key()))
		}
	}
	return keys
}

// Requests. Each answers through done, on the coordinator goroutine (done must not block).

// NewTxn opens a transaction with the given timeout.
func (c *Coordinator) NewTxn(timeout time.Duration, done func(ID, error)) {
	if !c.post(func() {
		c.core.NewTxn(timeout.Milliseconds(), time.Now().UnixMilli(), func(id ID, err error) {
			if m := c.cfg.Metrics; m != nil && err == nil {
				m.created.Inc()
			}
			done(id, err)
		})
	}) {
		done(ID{}, ErrNotReady)
	}
}

// AddPartitions records topics as written by id.
func (c *Coordinator) AddPartitions(id ID, topics []string, done func(ID, error)) {
	if !c.post(func() { c.core.AddPartitions(id.Least, topics, done) }) {
		done(id, ErrNotReady)
	}
}

// AddSubscriptions records subscriptions as acknowledged on by id.
func (c *Coordinator) AddSubscriptions(id ID, subs []SubRef, done func(ID, error)) {
	if !c.post(func() { c.core.AddSubscriptions(id.Least, subs, done) }) {
		done(id, ErrNotReady)
	}
}

// End commits or aborts id.
func (c *Coordinator) End(id ID, commit bool, done func(ID, error)) {
	start := time.Now()
	if !c.post(func() {
		c.core.End(id.Least, commit, time.Now().UnixMilli(), func(id ID, err error) {
			if fn := c.cfg.OnDecided; fn != nil && err == nil {
				s := Aborted
				if commit {
					s = Committed
				}
				fn(id, s)
			}
			if m := c.cfg.Metrics; m != nil && err == nil {
				if commit {
					m.committed.Inc()
					m.commitLatency.Observe(time.Since(start).Seconds())
				} else {
					m.aborted.Inc()
				}
			}
			done(id, err)
		})
	}) {
		done(id, ErrNotReady)
	}
}

// Settled returns id's header from the coordinator's memory if it is known to be the
// stored one (see Core.Settled); ok false: ask the store.
func (c *Coordinator) Settled(ctx context.Context, id ID) (Header, bool) {
	type res struct {
		h  Header
		ok bool
	}
	r, err := inbox.Call(ctx, c.in, c.stopped, ErrNotReady, func(reply func(res, error)) {
		h, ok := c.core.Settled(id.Least)
		reply(res{h, ok}, nil)
	})
	return r.h, err == nil && r.ok
}

// Info describes a coordinator for the admin API.
type Info struct {
	TC    uint64
	State CoreState
	Open  int
	Txns  map[uint64]Header
}

// Describe returns the coordinator's state and the headers it holds.
func (c *Coordinator) Describe(ctx context.Context) (Info, error) {
	return inbox.Call(ctx, c.in, c.stopped, ErrNotReady, func(reply func(Info, error)) {
		in := Info{TC: c.cfg.TC, State: c.core.State(), Open: c.core.Open(), Txns: map[uint64]Header{}}
		for _, s := range c.core.Transactions() {
			in.Txns[s], _ = c.core.Lookup(s)
		}
		reply(in, nil)
	})
}

// Close stops the coordinator; requests waiting fail with ErrNotReady. Headers stay in the
// store for the next owner.
func (c *Coordinator) Close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.stopped
}

// ParticipantTopic is the participant key of a topic given by its parts.
func ParticipantTopic(tenant, ns, domain, local string) string {
	return tenant + "/" + ns + "/" + domain + "/" + local
}
