package mledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
)

// AsyncStore is the MetaStore port on a metadata.Store: each operation runs on its own
// goroutine with a timeout. Close waits for them.
type AsyncStore struct {
	s       metadata.Store
	timeout time.Duration
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex // guards closed: no more spawns join wg once Close waits on it
	closed  bool
}

// NewAsyncStore wraps s; timeout bounds each operation (default 10s).
func NewAsyncStore(s metadata.Store, timeout time.Duration) *AsyncStore {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &AsyncStore{s: s, timeout: timeout, ctx: ctx, cancel: cancel}
}

func (a *AsyncStore) spawn(fn func(ctx context.Context)) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		go fn(a.ctx) // canceled: the operation fails and reports so
		return
	}
	a.wg.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
		defer cancel()
		fn(ctx)
	}()
}

// Get implements MetaStore.
func (a *AsyncStore) Get(key string, cb func(metadata.KV, error)) {
	a.spawn(func(ctx context.Context) { cb(a.s.Get(ctx, key)) })
}

// Put implements MetaStore.
func (a *AsyncStore) Put(key string, value []byte, expected metadata.Version, cb func(metadata.Version, error)) {
	a.spawn(func(ctx context.Context) { cb(a.s.Put(ctx, key, value, expected)) })
}

// Delete implements MetaStore.
func (a *AsyncStore) Delete(key string, expected metadata.Version, cb func(error)) {
	a.spawn(func(ctx context.Context) { cb(a.s.Delete(ctx, key, expected)) })
}

// List implements MetaStore.
func (a *AsyncStore) List(prefix string, cb func([]metadata.KV, error)) {
	a.spawn(func(ctx context.Context) {
		kvs, _, err := a.s.List(ctx, prefix)
		cb(kvs, err)
	})
}

// Close cancels operations in flight and waits for them. The store is the caller's.
func (a *AsyncStore) Close() error {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.cancel()
	a.wg.Wait()
	return nil
}

// BookieLedgers is the Ledgers port on a ledger.Client (real bookies). Blocking client calls
// run on their own goroutines; appends use the handle's asynchronous path. Read handles are
// cached per ledger. Close waits for operations in flight and closes cached handles.
type BookieLedgers struct {
	c       *ledger.Client
	timeout time.Duration
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu struct {
		sync.Mutex // guards the fields below
		writers    map[int64]*ledger.Handle
		readers    map[int64]*ledger.Handle
		closed     bool // no more spawns join wg (Close waits on it)
	}
}

// NewBookieLedgers wraps a ledger client; timeout bounds each create, open, read, close or
// delete (default 30s). The client is the caller's.
func NewBookieLedgers(c *ledger.Client, timeout time.Duration) *BookieLedgers {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &BookieLedgers{c: c, timeout: timeout, ctx: ctx, cancel: cancel}
	b.mu.writers = map[int64]*ledger.Handle{}
	b.mu.readers = map[int64]*ledger.Handle{}
	return b
}

func (b *BookieLedgers) spawn(fn func(ctx context.Context)) {
	b.mu.Lock()
	if b.mu.closed {
		b.mu.Unlock()
		go fn(b.ctx) // canceled: the operation fails and reports so
		return
	}
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithTimeout(b.ctx, b.timeout)
		defer cancel()
		fn(ctx)
	}()
}

// portErr maps ledger-layer errors onto the port's categories.
func portErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ledger.ErrFenced):
		return fmt.Errorf("%w: %w", ErrLedgerFenced, err)
	case errors.Is(err, ledger.ErrNoSuchLedger):
		return fmt.Errorf("%w: %w", ErrNoSuchLedger, err)
	}
	return err
}

// Create implements Ledgers.
func (b *BookieLedgers) Create(cfg LedgerConfig, cb func(Writer, error)) {
	b.spawn(func(ctx context.Context) {
		h, err := b.c.Create(ctx, ledger.CreateOptions{Ensemble: cfg.Ensemble, WriteQuorum: cfg.WriteQuorum,
			AckQuorum: cfg.AckQuorum, Password: cfg.Password})
		if err != nil {
			cb(nil, portErr(err))
			return
		}
		b.mu.Lock()
		b.mu.writers[h.ID()] = h
		b.mu.Unlock()
		cb(&bookieWriter{b: b, h: h}, nil)
	})
}

// OpenRecover implements Ledgers.
func (b *BookieLedgers) OpenRecover(id int64, password []byte, cb func(LedgerEnd, error)) {
	b.spawn(func(ctx context.Context) {
		h, err := b.c.Open(ctx, id, ledger.OpenOptions{Recovery: true, Password: password})
		if err != nil {
			cb(LedgerEnd{}, portErr(err))
			return
		}
		m := h.Metadata()
		b.cacheReader(id, h)
		cb(LedgerEnd{LastEntry: m.LastEntryID, Size: m.Length}, nil)
	})
}

func (b *BookieLedgers) cacheReader(id int64, h *ledger.Handle) {
	b.mu.Lock()
	old := b.mu.readers[id]
	b.mu.readers[id] = h
	b.mu.Unlock()
	if old != nil && old != h {
		_ = old.Close(context.Background())
	}
}

// Read implements Ledgers: through our own writer handle if we write the ledger, else through
// a cached read handle.
func (b *BookieLedgers) Read(id int64, password []byte, first, last int64, cb func([][]byte, error)) {
	b.spawn(func(ctx context.Context) {
		b.mu.Lock()
		h := b.mu.writers[id]
		if h == nil {
			h = b.mu.readers[id]
		}
		b.mu.Unlock()
		if h == nil {
			var err error
			if h, err = b.c.Open(ctx, id, ledger.OpenOptions{Password: password}); err != nil {
				cb(nil, portErr(err))
				return
			}
			b.cacheReader(id, h)
		}
		es, err := h.Read(ctx, first, last)
		if err != nil {
			cb(nil, portErr(err))
			return
		}
		out := make([][]byte, len(es))
		for i, e := range es {
			out[i] = e.Payload
		}
		cb(out, nil)
	})
}

// Delete implements Ledgers.
func (b *BookieLedgers) Delete(id int64, cb func(error)) {
	b.spawn(func(ctx context.Context) {
		b.mu.Lock()
		r := b.mu.readers[id]
		delete(b.mu.readers, id)
		b.mu.Unlock()
		if r != nil {
			_ = r.Close(ctx)
		}
		cb(portErr(b.c.Delete(ctx, id)))
	})
}

// Close waits for operations in flight and closes the cached handles. Writers should have
// been closed by their managed ledgers.
func (b *BookieLedgers) Close() error {
	b.mu.Lock()
	b.mu.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	b.mu.Lock()
	var hs []*ledger.Handle
	for _, h := range b.mu.readers {
		hs = append(hs, h)
	}
	for _, h := range b.mu.writers {
		hs = append(hs, h)
	}
	b.mu.readers, b.mu.writers = map[int64]*ledger.Handle{}, map[int64]*ledger.Handle{}
	b.mu.Unlock()
	for _, h := range hs {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = h.Close(ctx)
		cancel()
	}
	return nil
}

type bookieWriter struct {
	b *BookieLedgers
	h *ledger.Handle
}

func (w *bookieWriter) ID() int64  { return w.h.ID() }
func (w *bookieWriter) LAC() int64 { return w.h.LAC() }

func (w *bookieWriter) Append(payload []byte, cb func(int64, error)) {
	w.h.AppendAsync(w.b.ctx, payload, func(id int64, err error) { cb(id, portErr(err)) })
}

// Close closes the ledger; if the writer cannot (it failed), recovery learns the end.
func (w *bookieWriter) Close(cb func(LedgerEnd, error)) {
	w.b.spawn(func(ctx context.Context) {
		err := w.h.Close(ctx)
		id := w.h.ID()
		if err == nil {
			m := w.h.Metadata()
			w.forget()
			cb(LedgerEnd{LastEntry: m.LastEntryID, Size: m.Length}, nil)
			return
		}
		if errors.Is(err, ledger.ErrFenced) {
			w.forget()
			cb(LedgerEnd{}, portErr(err))
			return
		}
		h, rerr := w.b.c.Open(ctx, id, ledger.OpenOptions{Recovery: true, Password: w.h.Metadata().Password})
		if rerr != nil {
			cb(LedgerEnd{}, fmt.Errorf("close ledger %d: %w (recovery: %w)", id, err, portErr(rerr)))
			return
		}
		w.forget()
		w.b.cacheReader(id, h)
		m := h.Metadata()
		cb(LedgerEnd{LastEntry: m.LastEntryID, Size: m.Length}, nil)
	})
}

// forget moves the handle from the writers to the readers (a closed writer still reads).
func (w *bookieWriter) forget() {
	w.b.mu.Lock()
	if w.b.mu.writers[w.h.ID()] == w.h {
		delete(w.b.mu.writers, w.h.ID())
	}
	w.b.mu.Unlock()
	w.b.cacheReader(w.h.ID(), w.h)
}
