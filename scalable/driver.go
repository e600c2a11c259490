package scalable

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// ErrStopped is returned by a Controller's calls after Close.
var ErrStopped = errors.New("scalable: controller closed")

// Segments performs a core's effects on segment topics (see Core and doc.go's obligations
// 3–4). The broker implements it over its topics and managed ledgers; every method must be
// idempotent and safe for concurrent use.
type Segments interface {
	// Create creates seg's topic if missing, with a cursor at the earliest for each of subs
	// it lacks.
	Create(ctx context.Context, t layout.Topic, seg layout.Segment, subs []string) error
	// Seal terminates seg's managed ledger.
	Seal(ctx context.Context, t layout.Topic, seg layout.Segment) error
	// Delete deletes seg's topic.
	Delete(ctx context.Context, t layout.Topic, seg layout.Segment) error
	// Drained reports whether sub's cursor is at the end of seg's terminated ledger; it
	// refuses a term older than one seen for seg.
	Drained(ctx context.Context, t layout.Topic, term uint64, sub string, seg layout.Segment) (bool, error)
	// Fence detaches sub's consumers of segs holding an assignment older than version and
	// refuses such attaches from now on; it refuses an older term.
	Fence(ctx context.Context, t layout.Topic, term uint64, sub string, segs []layout.Segment, version uint64) error
	// Reset moves sub's cursor on seg to to; it refuses an older term.
	Reset(ctx context.Context, t layout.Topic, term uint64, sub string, seg layout.Segment, to mledger.Position) error
}

// Listener receives what the leading controller publishes. Its methods run on the
// controller's goroutine and must not block.
type Listener interface {
	// Layout is the stored layout after a change (push it to DAG watchers and producers).
	Layout(l layout.Layout)
	// Assignment is a stream consumer's new assignment.
	Assignment(a Assignment)
}

// DriverConfig configures a Controller.
type DriverConfig struct {
	// BrokerID is the election key's value (who leads).
	BrokerID string
	// SessionTTL is the election session's lease (0: 10 s).
	SessionTTL time.Duration
	// Core configures each term's core (Term is set by the election).
	Core Config
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// CreateTopic creates scalable topic t with n initial segments and subscriptions subs: the
// segments' topics first, then the layout record (refused with metadata.ErrBadVersion if
// the topic exists).
func CreateTopic(ctx context.Context, store metadata.Store, segs Segments, t layout.Topic, n int, subs []string, now time.Time) error {
	l := layout.Initial(n, subs, now.UnixMilli())
	for _, s := range l.Segments {
		if err := segs.Create(ctx, t, s, l.Subscriptions); err != nil {
			return fmt.Errorf("scalable: create segment %s: %w", t.SegmentName(s), err)
		}
	}
	b, err := l.Marshal()
	if err != nil {
		return err
	}
	_, err = store.Put(ctx, metadata.ScalableLayoutKey(t.Tenant, t.Namespace, t.Name), b, metadata.NotExists)
	return err
}

// Controller runs a scalable topic's controller on one broker: it campaigns for the
// topic's election key and, while it leads, owns a Core and performs it against the
// metadata store and Segments. Safe for concurrent use.
//
// Goroutines: run (the election and, while leading, the owner of the term's Core: it alone
// touches the Core) and, while leading, one watch goroutine and one goroutine per effect in
// flight, which hand their outcome back to run; Close cancels and waits for all of them.
type Controller struct {
	store metadata.Store
	segs  Segments
	lis   Listener
	cfg   DriverConfig

	reqs    chan ctlReq
	cancel  context.CancelFunc
	done    chan struct{}
	leading atomic.Bool
	once    sync.Once
}

type ctlReq struct {
	fn    func(c *Core) (uint64, error)
	reply chan error
}

// Start starts the controller of cfg.Core.Topic on this broker.
func Start(store metadata.Store, segs Segments, lis Listener, cfg DriverConfig) *Controller {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Controller{store: store, segs: segs, lis: lis, cfg: cfg, reqs: make(chan ctlReq), cancel: cancel, done: make(chan struct{})}
	go c.run(ctx)
	return c
}

// Close stops the controller (resigning leadership) and waits for its goroutines.
// Idempotent.
func (c *Controller) Close() error {
	c.once.Do(c.cancel)
	<-c.done
	return nil
}

// Topic returns the controller's topic.
func (c *Controller) Topic() layout.Topic { return c.cfg.Core.Topic }

// Leading reports whether this broker leads the topic now, with the record loaded.
func (c *Controller) Leading() bool { return c.leading.Load() }

// Split splits active segment seg at hash at (0: the midpoint) and returns once the layout
// is committed; ErrNotLeading on a broker that does not lead.
func (c *Controller) Split(ctx context.Context, seg SegmentID, at uint16) error {
	return c.do(ctx, func(core *Core) (uint64, error) { return core.Split(seg, at), nil })
}

// Merge merges adjacent active segments a and b.
func (c *Controller) Merge(ctx context.Context, a, b SegmentID) error {
	return c.do(ctx, func(core *Core) (uint64, error) { return core.Merge(a, b), nil })
}

// Subscribe adds subscription sub.
func (c *Controller) Subscribe(ctx context.Context, sub string) error {
	return c.do(ctx, func(core *Core) (uint64, error) { return core.Subscribe(sub), nil })
}

// Seek resets sub's cursor on seg to to, after re-blocking seg's descendants.
func (c *Controller) Seek(ctx context.Context, sub string, seg SegmentID, to mledger.Position) error {
	return c.do(ctx, func(core *Core) (uint64, error) { return core.Seek(sub, seg, to), nil })
}

// Register registers stream consumer name of sub through connection conn; its assignments
// go to the Listener.
func (c *Controller) Register(ctx context.Context, sub, name string, conn uint64) error {
	return c.do(ctx, func(core *Core) (uint64, error) { return 0, core.Register(sub, name, conn) })
}

// Disconnected reports the loss of consumer name's connection conn (its grace period starts).
func (c *Controller) Disconnected(ctx context.Context, sub, name string, conn uint64) error {
	return c.do(ctx, func(core *Core) (uint64, error) { return 0, core.Disconnected(sub, name, conn) })
}

// Unregister removes stream consumer name of sub.
func (c *Controller) Unregister(ctx context.Context, sub, name string) error {
	return c.do(ctx, func(core *Core) (uint64, error) { return 0, core.Unregister(sub, name) })
}

// Sample feeds active segment seg's load to the auto-scale policy (ErrNotLeading on a
// broker that does not lead).
func (c *Controller) Sample(ctx context.Context, seg SegmentID, s LoadSample) error {
	return c.do(ctx, func(core *Core) (uint64, error) {
		if core.State() != StateReady {
			return 0, ErrNotLeading
		}
		core.Sample(seg, s)
		return 0, nil
	})
}

// Layout returns the leader's view of the layout.
func (c *Controller) Layout(ctx context.Context) (layout.Layout, error) {
	var l layout.Layout
	err := c.do(ctx, func(core *Core) (uint64, error) {
		if core.State() != StateReady {
			return 0, ErrNotLeading
		}
		l, _ = core.Layout()
		return 0, nil
	})
	return l, err
}

func (c *Controller) do(ctx context.Context, fn func(*Core) (uint64, error)) error {
	r := ctlReq{fn: fn, reply: make(chan error, 1)}
	select {
	case c.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return ErrStopped
	}
	select {
	case err := <-r.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return ErrStopped
	}
}

func (c *Controller) topicKeys() (layoutKey, electionKey string) {
	t := c.cfg.Core.Topic
	return metadata.ScalableLayoutKey(t.Tenant, t.Namespace, t.Name), metadata.ScalableControllerKey(t.Tenant, t.Namespace, t.Name)
}

// run campaigns until closed: a session, then the election key, then lead.
func (c *Controller) run(ctx context.Context) {
	defer close(c.done)
	for ctx.Err() == nil {
		sess, err := c.store.NewSession(ctx, c.cfg.SessionTTL)
		if err != nil {
			c.idle(ctx, nil, time.Second)
			continue
		}
		c.campaign(ctx, sess)
		_ = sess.Close()
	}
}

// idle answers requests with ErrNotLeading for d, or until ctx or stop ends.
func (c *Controller) idle(ctx context.Context, stop <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case r := <-c.reqs:
			r.reply <- ErrNotLeading
		case <-t.C:
			return
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (c *Controller) campaign(ctx context.Context, sess metadata.Session) {
	_, key := c.topicKeys()
	for ctx.Err() == nil {
		select {
		case <-sess.Done():
			return
		default:
		}
		ver, err := sess.Put(ctx, key, []byte(c.cfg.BrokerID), metadata.NotExists)
		switch {
		case err == nil:
			c.lead(ctx, sess, uint64(ver))
			return
		case errors.Is(err, metadata.ErrBadVersion):
			c.awaitVacancy(ctx, sess, key)
		default:
			c.idle(ctx, sess.Done(), time.Second)
		}
	}
}

// awaitVacancy waits until the election key is gone (answering requests meanwhile): it
// follows the key (metadata.Follower) until a listing lacks it or a change deletes it.
func (c *Controller) awaitVacancy(ctx context.Context, sess metadata.Session, key string) {
	wctx, cancel := context.WithCancel(ctx)
	ups := metadata.Follower{Store: c.store, Prefix: key}.Chan(wctx)
	defer func() {
		cancel()
		for range ups { // the follower ends with wctx
		}
	}()
	for {
		select {
		case u := <-ups:
			if vacant(u, key) {
				return
			}
		case r := <-c.reqs:
			r.reply <- ErrNotLeading
		case <-sess.Done():
			return
		case <-ctx.Done():
			return
		}
	}
}

// vacant reports whether update u of a follower of key shows key absent.
func vacant(u metadata.Update, key string) bool {
	switch u.Kind {
	case metadata.Listed:
		return !slices.ContainsFunc(u.KVs, func(kv metadata.KV) bool { return kv.Key == key })
	case metadata.Changed:
		return slices.ContainsFunc(u.Events, func(ev metadata.Event) bool {
			return ev.Type == metadata.EventDelete && ev.KV.Key == key
		})
	}
	return false
}

// lead owns one term's Core until the session or ctx ends.
func (c *Controller) lead(ctx context.Context, sess metadata.Session, term uint64) {
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	defer c.leading.Store(false)

	cfg := c.cfg.Core
	cfg.Term = term
	core := New(cfg, Mutation{}, c.cfg.Now().UnixMilli())
	layoutKey, _ := c.topicKeys()
	results := make(chan func(*Core), 64)
	send := func(fn func(*Core)) {
		select {
		case results <- fn:
		case <-lctx.Done():
		}
	}
	spawn := func(fn func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn()
		}()
	}
	spawn(func() { c.watch(lctx, layoutKey, send) })
	pending := map[uint64]chan error{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	perform := func(r Ready) {
		c.perform(lctx, r, layoutKey, send, spawn, pending)
		c.leading.Store(core.State() == StateReady)
		if r.TimerAt != 0 {
			timer.Reset(max(time.Duration(r.TimerAt-c.cfg.Now().UnixMilli())*time.Millisecond, 0))
		}
	}
	perform(core.Ready())
	for {
		select {
		case <-lctx.Done():
			core.Stop()
			failAll(pending, ErrStopped)
			return
		case <-sess.Done():
			core.Stop()
			failAll(pending, ErrNotLeading)
			return
		case fn := <-results:
			fn(core)
		case r := <-c.reqs:
			tag, err := r.fn(core)
			if tag == 0 || err != nil {
				r.reply <- err
			} else {
				pending[tag] = r.reply
			}
		case <-timer.C:
			core.Tick(c.cfg.Now().UnixMilli())
		}
		perform(core.Ready())
	}
}

func failAll(pending map[uint64]chan error, err error) {
	for t, ch := range pending {
		ch <- err
		delete(pending, t)
	}
}

// watch feeds the record to the core (Watched) as listed, then at every change, listing
// again when the watch ends (the core ignores versions it has).
func (c *Controller) watch(ctx context.Context, key string, send func(func(*Core))) {
	watched := func(kv metadata.KV) {
		if kv.Key != key {
			return
		}
		l, err := layout.Unmarshal(kv.Value)
		if err != nil {
			return
		}
		ver := kv.Version
		send(func(core *Core) { core.Watched(l, ver) })
	}
	metadata.Follower{Store: c.store, Prefix: key}.Run(ctx, func(u metadata.Update) {
		for _, kv := range u.KVs {
			watched(kv)
		}
		for _, ev := range u.Events {
			if ev.Type == metadata.EventPut {
				watched(ev.KV)
			}
		}
	})
}

// perform starts every effect of r; each hands its outcome back through send.
func (c *Controller) perform(ctx context.Context, r Ready, key string, send func(func(*Core)), spawn func(func()),
	pending map[uint64]chan error) {
	t := c.cfg.Core.Topic
	if r.Reload {
		spawn(func() {
			for backoff := 10 * time.Millisecond; ctx.Err() == nil; backoff = min(2*backoff, time.Second) {
				kv, err := c.store.Get(ctx, key)
				var l layout.Layout
				if err == nil {
					if l, err = layout.Unmarshal(kv.Value); err == nil {
						send(func(core *Core) { core.Load(l, kv.Version) })
						return
					}
				}
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
				}
			}
		})
	}
	if w := r.Write; w != nil {
		spawn(func() {
			var ver metadata.Version
			b, err := w.Record.Marshal()
			if err == nil {
				ver, err = c.store.Put(ctx, key, b, w.Expected)
			}
			send(func(core *Core) { core.Written(w.Tag, ver, err) })
		})
	}
	done := func(tag uint64, fn func() error) {
		spawn(func() {
			err := fn()
			send(func(core *Core) { core.Done(tag, err) })
		})
	}
	for _, x := range r.Creates {
		done(x.Tag, func() error { return c.segs.Create(ctx, t, x.Segment, x.Subs) })
	}
	for _, x := range r.Seals {
		done(x.Tag, func() error { return c.segs.Seal(ctx, t, x.Segment) })
	}
	for _, x := range r.Deletes {
		done(x.Tag, func() error { return c.segs.Delete(ctx, t, x.Segment) })
	}
	for _, x := range r.Fences {
		done(x.Tag, func() error { return c.segs.Fence(ctx, t, x.Term, x.Sub, x.Segments, x.Version) })
	}
	for _, x := range r.Resets {
		done(x.Tag, func() error { return c.segs.Reset(ctx, t, x.Term, x.Sub, x.Segment, x.To) })
	}
	for _, x := range r.Checks {
		spawn(func() {
			ok, err := c.segs.Drained(ctx, t, x.Term, x.Sub, x.Segment)
			send(func(core *Core) { core.Checked(x.Tag, ok, err) })
		})
	}
	if c.lis != nil {
		if r.Layout != nil {
			c.lis.Layout(*r.Layout)
		}
		for _, a := range r.Assignments {
			c.lis.Assignment(a)
		}
	}
	for _, res := range r.Results {
		if ch, ok := pending[res.Tag]; ok {
			ch <- res.Err
			delete(pending, res.Tag)
		}
	}
}
