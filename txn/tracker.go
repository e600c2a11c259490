package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/metadata"
)

// Tracker tells a broker's participants (transaction buffers, pending acknowledgements)
// how their transactions end. It watches every header; Await calls back once per
// registration when the transaction has ended, or with 0 when its header is gone. It
// is safe for concurrent use; callbacks run on the tracker's goroutines and must not block.
type Tracker struct {
	store metadata.Store
	log   *slog.Logger
	ctx   context.Context
	stop  context.CancelFunc
	done  chan struct{}

	// local, if set, answers Header from a coordinator of this process (see SetLocal).
	local atomic.Pointer[func(context.Context, ID) (Header, bool)]
	// onEnded, if set, hears every header the watch sees end (see OnEnded).
	onEnded atomic.Pointer[func(ID, Header)]

	mu struct {
		sync.Mutex // leaf lock
		waits      map[ID][]*await
		ready      bool // the watch runs: a Get after registering cannot miss an event
		readyCh    chan struct{}
	}
}

type await struct {
	fn    func(Status)
	fired bool
}

// NewTracker starts watching the headers of store.
func NewTracker(store metadata.Store, log *slog.Logger) *Tracker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tracker{store: store, log: log, done: make(chan struct{})}
	t.ctx, t.stop = context.WithCancel(context.Background())
	t.mu.waits = map[ID][]*await{}
	t.mu.readyCh = make(chan struct{})
	go t.run()
	return t
}

// Close stops the tracker; pending registrations are never called.
func (t *Tracker) Close() {
	t.stop()
	<-t.done
}

// SetLocal installs a lookup of headers in this process's coordinators: when it answers,
// its header is the stored one (the coordinator owns it and has no write in flight), so
// Header saves a store read.
func (t *Tracker) SetLocal(fn func(context.Context, ID) (Header, bool)) { t.local.Store(&fn) }

// OnEnded installs fn, called from the watch (it must not block) for every header seen
// ending, before the registrations of its transaction fire: participants that never
// registered it drop the records the coordinator created for them.
func (t *Tracker) OnEnded(fn func(ID, Header)) { t.onEnded.Store(&fn) }

// Decided tells the tracker that id's header is stored with status s (Committed or
// Aborted) by a coordinator of this process, before the watch shows it: its registrations
// fire now. The watch's event later finds none left.
func (t *Tracker) Decided(id ID, s Status) {
	if s.Ended() {
		t.fire(id, s)
	}
}

// Header reads the header of id (linearizable: from the store, or from the coordinator of
// this process that owns it): ok false if it is gone.
func (t *Tracker) Header(ctx context.Context, id ID) (Header, bool, error) {
	if fn := t.local.Load(); fn != nil {
		if h, ok := (*fn)(ctx, id); ok {
			return h, true, nil
		}
	}
	kv, err := t.store.Get(ctx, metadata.TxnHeaderKey(id.Most, id.Least))
	if errors.Is(err, metadata.ErrNotFound) {
		return Header{}, false, nil
	}
	if err != nil {
		return Header{}, false, err
	}
	h, err := DecodeHeader(kv.Value)
	return h, err == nil, err
}

// Await calls fn once when id has ended (Committed or Aborted), or with 0 if its header is
// gone. The returned function cancels the registration.
func (t *Tracker) Await(id ID, fn func(Status)) (cancel func()) {
	a := &await{fn: fn}
	t.mu.Lock()
	t.mu.waits[id] = append(t.mu.waits[id], a)
	readyCh := t.mu.readyCh
	t.mu.Unlock()
	go func() {
		select {
		case <-readyCh:
		case <-t.ctx.Done():
			return
		}
		t.check(id)
	}()
	return func() {
		t.mu.Lock()
		a.fired = true
		t.mu.Unlock()
	}
}

// check reads id's header and fires its registrations if it has ended or is gone. A
// failed read is retried with backoff.
func (t *Tracker) check(id ID) {
	r := backoff.Retry{Policy: backoff.Policy{Base: 100 * time.Millisecond, Max: 10 * time.Second}}
	for {
		ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
		h, ok, err := t.Header(ctx, id)
		cancel()
		switch {
		case err == nil && !ok:
			t.fire(id, 0)
			return
		case err == nil:
			if h.Status.Ended() {
				t.fire(id, h.Status)
			}
			return
		}
		select {
		case <-time.After(r.Next()):
		case <-t.ctx.Done():
			return
		}
	}
}

func (t *Tracker) fire(id ID, s Status) {
	t.mu.Lock()
	ws := t.mu.waits[id]
	delete(t.mu.waits, id)
	var fns []func(Status)
	for _, a := range ws {
		if !a.fired {
			a.fired = true
			fns = append(fns, a.fn)
		}
	}
	t.mu.Unlock()
	for _, fn := range fns {
		fn(s)
	}
}

// run keeps a watch on every header; after a broken watch it re-checks every registered
// transaction (it may have missed their events).
func (t *Tracker) run() {
	defer close(t.done)
	metadata.Follower{
		Store:           t.store,
		Prefix:          metadata.PrefixTxnHeaders,
		RevisionKey:     metadata.TxnSeqKey(0), // a cheap read for the revision
		Retry:           backoff.Policy{Base: 100 * time.Millisecond, Max: 10 * time.Second},
		PauseAfterWatch: true,
	}.Run(t.ctx, func(u metadata.Update) {
		switch u.Kind {
		case metadata.Listed:
			t.watching()
		case metadata.Changed:
			t.apply(u.Events)
		case metadata.WatchEnded:
			t.mu.Lock()
			t.mu.ready = false
			t.mu.readyCh = make(chan struct{})
			t.mu.Unlock()
			t.log.Warn("transaction header watch ended; restarting", "err", u.Err)
		}
	})
}

// watching marks the watch running and re-checks every registered transaction.
func (t *Tracker) watching() {
	t.mu.Lock()
	t.mu.ready = true
	close(t.mu.readyCh)
	ids := make([]ID, 0, len(t.mu.waits))
	for id := range t.mu.waits {
		ids = append(ids, id)
	}
	t.mu.Unlock()
	for _, id := range ids {
		go t.check(id)
	}
}

// apply fires the registrations of the transactions whose headers events show ended or gone.
func (t *Tracker) apply(events []metadata.Event) {
	for _, ev := range events {
		id, ok := headerID(ev.KV.Key)
		if !ok {
			continue
		}
		if ev.Type == metadata.EventDelete {
			t.fire(id, 0)
			continue
		}
		if h, err := DecodeHeader(ev.KV.Value); err == nil && h.Status.Ended() {
			if fn := t.onEnded.Load(); fn != nil {
				(*fn)(id, h)
			}
			t.fire(id, h.Status)
		}
	}
}

// headerID parses a key built by metadata.TxnHeaderKey.
func headerID(key string) (ID, bool) {
	rest, ok := strings.CutPrefix(key, metadata.PrefixTxnHeaders)
	if !ok {
		return ID{}, false
	}
	var id ID
	if _, err := fmt.Sscanf(rest, "%d/%d", &id.Most, &id.Least); err != nil {
		return ID{}, false
	}
	return id, true
}
