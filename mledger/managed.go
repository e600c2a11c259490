package mledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/internal/inbox"
)

// Factory opens managed ledgers on one ledger layer and one metadata store. It is safe for
// concurrent use. Within one Factory a name is open at most once (Open returns the same
// *ManagedLedger until it is closed).
type Factory struct {
	bk  Ledgers
	ms  MetaStore
	off Offloader
	log *slog.Logger

	mu struct {
		sync.Mutex // guards the fields below
		open       map[string]*ManagedLedger
	}
}

// FactoryOptions configure a Factory.
type FactoryOptions struct {
	// Logger receives lifecycle logs. Default: discard.
	Logger *slog.Logger
	// Offloader is the Offloader of every managed ledger opened without one (Config.Offloader
	// nil), Delete's included: the broker's configured driver. Whether a managed ledger
	// offloads is its Config.Offload policy; with an Offloader, ledgers offloaded earlier stay
	// readable and deletable whatever the policy.
	Offloader Offloader
}

// NewFactory returns a factory on a ledger layer (e.g. NewBookieLedgers) and a metadata store
// (e.g. NewAsyncStore). The caller closes both after closing the factory.
func NewFactory(bk Ledgers, ms MetaStore, opts FactoryOptions) *Factory {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Factory{bk: bk, ms: ms, off: opts.Offloader, log: opts.Logger}
	f.mu.open = map[string]*ManagedLedger{}
	return f
}

// Open opens managed ledger name (creating it unless cfg.MustExist): it claims ownership of
// the record, recovers the last ledger — fencing any previous owner — and the cursors, and
// creates a writable ledger (unless the log is terminated). If ctx ends first, Open returns
// ctx.Err() and the managed ledger closes once opened.
func (f *Factory) Open(ctx context.Context, name string, cfg Config) (*ManagedLedger, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: empty name", ErrInvalidArgument)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Offloader == nil {
		cfg.Offloader = f.off
	}
	f.mu.Lock()
	for m := f.mu.open[name]; m != nil; m = f.mu.open[name] {
		f.mu.Unlock()
		select {
		case <-m.opened:
			if st := m.State(); m.openErr == nil && st != StateClosing && st != StateClosed {
				return m, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select { // closing or failed: wait until it is gone, then open anew
		case <-m.stopped:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		f.mu.Lock()
		if f.mu.open[name] == m {
			delete(f.mu.open, name)
		}
	}
	m := newManagedLedger(f, name, cfg)
	f.mu.open[name] = m
	f.mu.Unlock()

	m.in.Push(func() {
		m.c.open(func(err error) {
			m.openErr = err
			m.syncMirror()
			close(m.opened)
		})
	})
	m.owner.Release()
	select {
	case <-m.opened:
		if m.openErr != nil {
			<-m.stopped
			return nil, m.openErr
		}
		return m, nil
	case <-ctx.Done():
		m.in.Push(func() { m.c.closeML(func(error) {}) })
		return nil, ctx.Err()
	}
}

// Delete deletes managed ledger name: it opens it (fencing any other owner) and deletes its
// cursors, record and ledgers.
func (f *Factory) Delete(ctx context.Context, name string) error {
	m, err := f.Open(ctx, name, Config{MustExist: true})
	if err != nil {
		return err
	}
	return m.Delete(ctx)
}

// Close closes every managed ledger opened by the factory.
func (f *Factory) Close(ctx context.Context) error {
	f.mu.Lock()
	var ms []*ManagedLedger
	for _, m := range f.mu.open {
		ms = append(ms, m)
	}
	f.mu.Unlock()
	var first error
	for _, m := range ms {
		if err := m.Close(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (f *Factory) forget(m *ManagedLedger) {
	f.mu.Lock()
	if f.mu.open[m.name] == m {
		delete(f.mu.open, m.name)
	}
	f.mu.Unlock()
}

// ManagedLedger is an open managed ledger: a named, append-only log made of a chain of
// ledgers. It is safe for concurrent use; one owner runs its state machine and all of its
// cursors (see doc.go): step, on a goroutine that exists only while events come
// (internal/inbox Owner: started by the first event, ended inbox.DefaultLinger after the
// last), so an idle managed ledger — whose periodic timers (trim, cursor snapshot and
// flush) are time.AfterFunc that post events — costs no goroutine.
type ManagedLedger struct {
	f       *Factory
	name    string
	c       *core // owned by the owner (step)
	in      *events
	owner   *inbox.Owner // runs step while events come (no goroutine while idle)
	batch   []func()     // owned by step: the events being run
	ended   bool         // owned by step: the core closed and step ran its end
	opened  chan struct{}
	openErr error // set before opened closes
	stopped chan struct{}

	mirror struct {
		sync.Mutex    // guards the fields below; state on each transition, lastConfirmed after each batch
		state         State
		lastConfirmed Position
	}
}

func newManagedLedger(f *Factory, name string, cfg Config) *ManagedLedger {
	m := &ManagedLedger{f: f, name: name, opened: make(chan struct{}), stopped: make(chan struct{})}
	m.owner = inbox.NewOwner(m.step, inbox.DefaultLinger) // held until Factory.Open queued the open
	m.in = inbox.NewOwned[func()](m.owner)
	m.c = newCore(name, cfg, &liveEnv{in: m.in}, f.bk, f.ms, newToken(), f.log)
	m.mirror.state = StateOpening
	m.c.published = func(s State) {
		m.mirror.Lock()
		m.mirror.state = s
		m.mirror.Unlock()
	}
	return m
}

func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// maxIdleBatch is the capacity of the event slice a managed ledger keeps between bursts; a
// larger one (after a burst) is dropped, so an idle managed ledger holds little.
const maxIdleBatch = 64

// step is the owner loop's body, run by m.owner whenever events are queued (never twice at
// once, each run after the previous one: see inbox.Owner): it runs every queued event of
// the core, in order, and once the core is Closed stops taking events.
func (m *ManagedLedger) step() {
	m.batch = m.in.Drain(m.batch)
	for i, fn := range m.batch {
		fn()
		m.batch[i] = nil
	}
	if cap(m.batch) > maxIdleBatch {
		m.batch = nil
	}
	m.syncMirror()
	if m.c.state != StateClosed || m.ended {
		return
	}
	m.ended = true
	m.owner.Stop()
	m.in.Close()
	m.f.forget(m)
	close(m.stopped)
}

func (m *ManagedLedger) syncMirror() {
	m.mirror.Lock()
	m.mirror.lastConfirmed = m.c.lastConfirmed // state is published by each transition
	m.mirror.Unlock()
}

// Name returns the managed ledger's name.
func (m *ManagedLedger) Name() string { return m.name }

// State returns the owner's state. It changes before any reply of the step that changed it,
// so a caller that got a reply sees the state that decided it (or a later one).
func (m *ManagedLedger) State() State {
	m.mirror.Lock()
	defer m.mirror.Unlock()
	return m.mirror.state
}

// LastConfirmed returns the position of the last confirmed add as of the owner's last step.
func (m *ManagedLedger) LastConfirmed() Position {
	m.mirror.Lock()
	defer m.mirror.Unlock()
	return m.mirror.lastConfirmed
}

// do runs fn on the owner goroutine and waits for its reply (called at most once; extra
// calls are dropped), for ctx, or for the owner to stop (ErrClosed).
func do[T any](ctx context.Context, m *ManagedLedger, fn func(c *core, reply func(T, error))) (T, error) {
	return inbox.Call(ctx, m.in, m.stopped, ErrClosed, func(reply func(T, error)) { fn(m.c, reply) })
}

func do0(ctx context.Context, m *ManagedLedger, fn func(c *core, reply func(error))) error {
	return inbox.Call0(ctx, m.in, m.stopped, ErrClosed, func(reply func(error)) { fn(m.c, reply) })
}

// Add appends data and returns its position once it is durable (confirmed by the ack quorum
// of the ledger). Adds complete in the order they were made. If ctx ends first, Add returns
// ctx.Err() and the add goes on (it may still be confirmed). Do not modify data afterwards:
// the managed ledger keeps it (entry cache).
func (m *ManagedLedger) Add(ctx context.Context, data []byte) (Position, error) {
	return do(ctx, m, func(c *core, reply func(Position, error)) { c.add(data, reply) })
}

// AddAsync appends data and calls cb exactly once with its position or error. Callbacks run
// on the owner goroutine, in add order, and must not block.
func (m *ManagedLedger) AddAsync(data []byte, cb func(Position, error)) {
	if !m.in.Push(func() { m.c.add(data, cb) }) {
		cb(Position{}, ErrClosed)
	}
}

// SetMaxRead bounds what cursors read: from now on no cursor read returns an entry at or
// after before (nil: unbounded). Re-reads of given positions and Read are not bounded.
// Calls take effect in order, before any later AddAsync of the caller.
func (m *ManagedLedger) SetMaxRead(before *Position) {
	if before != nil {
		p := *before
		before = &p
	}
	m.in.Push(func() { m.c.setMaxRead(before) })
}

// Terminate seals the log: no add is accepted any more, adds in flight that the ledger
// confirmed complete and the others fail with ErrTerminated. It returns the terminated
// position (the last entry), after recording it in metadata. Idempotent.
func (m *ManagedLedger) Terminate(ctx context.Context) (Position, error) {
	return do(ctx, m, func(c *core, reply func(Position, error)) { c.terminate(reply) })
}

// Close closes the managed ledger and its cursors and stops its goroutine. Idempotent.
func (m *ManagedLedger) Close(ctx context.Context) error {
	err := do0(ctx, m, func(c *core, reply func(error)) { c.closeML(reply) })
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	if err == nil {
		select {
		case <-m.stopped:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

// Delete closes the managed ledger and deletes its cursors, its record and all its ledgers.
func (m *ManagedLedger) Delete(ctx context.Context) error {
	err := do0(ctx, m, func(c *core, reply func(error)) { c.deleteML(reply) })
	if err == nil {
		select {
		case <-m.stopped:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

// Read returns up to max entries from the first entry at or after from, waiting until one
// is confirmed. It returns ErrNoMoreEntries past the end of a terminated log.
func (m *ManagedLedger) Read(ctx context.Context, from Position, max int) ([]Entry, error) {
	if max <= 0 {
		return nil, fmt.Errorf("%w: max %d", ErrInvalidArgument, max)
	}
	return m.read(ctx, &readOp{from: from, max: max, wait: true})
}

// read runs op and waits; if ctx ends, the read is cancelled — unless it already completed,
// in which case its entries are returned (a cursor has already moved past them).
func (m *ManagedLedger) read(ctx context.Context, op *readOp) ([]Entry, error) {
	type result struct {
		es  []Entry
		err error
	}
	ch := make(chan result, 1)
	op.reply = func(es []Entry, err error) {
		select {
		case ch <- result{es, err}:
		default:
		}
	}
	if !m.in.Push(func() {
		if op.cur != nil && op.positions == nil && op.cur.reading != nil {
			op.reply(nil, fmt.Errorf("%w: cursor %s has a read in progress", ErrInvalidArgument, op.cur.name))
			return
		}
		m.c.startRead(op)
	}) {
		return nil, ErrClosed
	}
	select {
	case r := <-ch:
		return r.es, r.err
	case <-m.stopped:
		return nil, ErrClosed
	case <-ctx.Done():
	}
	m.in.Push(func() { m.c.cancelRead(op) })
	select {
	case r := <-ch:
		if errors.Is(r.err, errCancelled) {
			return nil, ctx.Err()
		}
		return r.es, r.err
	case <-m.stopped:
		return nil, ErrClosed
	}
}

// Stats describe a managed ledger.
type Stats struct {
	State         State
	LastConfirmed Position
	// Ledgers are the ledgers of the chain; the last one's statistics are live. A ledger's
	// Offload is its tiered-storage state (Pulsar's internal stats show offloaded =
	// Offload != nil && Offload.Complete).
	Ledgers     []LedgerInfo
	Terminated  *Position
	Properties  map[string]string
	Entries     int64
	Size        int64
	PendingAdds int
	// OffloadedSize is the payload bytes of the ledgers with a complete offloaded copy
	// (Pulsar's pulsar_storage_offloaded_size).
	OffloadedSize int64
	// Offload is the status of the last requested offload; OffloadCounters count the offload
	// work since the managed ledger opened.
	Offload         OffloadStatus
	OffloadCounters OffloadCounters
}

// Stats returns the managed ledger's statistics.
func (m *ManagedLedger) Stats(ctx context.Context) (Stats, error) {
	return do(ctx, m, func(c *core, reply func(Stats, error)) { reply(c.stats(), nil) })
}

func (c *core) stats() Stats {
	st := Stats{State: c.state, LastConfirmed: c.lastConfirmed, PendingAdds: c.adds.len()}
	if c.ml == nil || c.info() == nil { // not opened yet, or deleted: no record
		return st
	}
	in := c.info().clone()
	if l := in.last(); l != nil && l.ID == c.tail.id {
		l.Entries, l.Size = c.tail.entries, c.tail.size
	}
	st.Ledgers, st.Terminated, st.Properties = in.Ledgers, in.Terminated, in.Properties
	for _, l := range in.Ledgers {
		st.Entries += l.Entries
		st.Size += l.Size
		if l.Offload != nil && l.Offload.Complete {
			st.OffloadedSize += l.Size
		}
	}
	st.Offload, st.OffloadCounters = c.offloadStatus(), c.off.count
	return st
}

// Offload starts offloading every closed ledger before p to the object store (Pulsar's PUT
// …/offload with a message id: the ledgers entirely before it; never the current ledger) and
// returns at once with the status (RUNNING, or SUCCESS if there is nothing to do). It fails
// with ErrOffloadDisabled without an Offloader, and ErrOffloadInProgress while an earlier
// request runs. OffloadStatus follows its progress.
func (m *ManagedLedger) Offload(ctx context.Context, p Position) (OffloadStatus, error) {
	return do(ctx, m, func(c *core, reply func(OffloadStatus, error)) { c.offloadTrigger(p, reply) })
}

// OffloadStatus returns the status of the last requested offload (NOT_RUN if none since the
// managed ledger opened) and the first entry not offloaded.
func (m *ManagedLedger) OffloadStatus(ctx context.Context) (OffloadStatus, error) {
	return do(ctx, m, func(c *core, reply func(OffloadStatus, error)) { reply(c.offloadStatus(), nil) })
}

// SetOffloadPolicy changes when ledgers are offloaded, when their bookie copies are deleted
// and where reads go (Config.Offload: the broker's resolved namespace or topic policy), and
// applies it at once. Without an Offloader it only takes effect for reads.
func (m *ManagedLedger) SetOffloadPolicy(ctx context.Context, p OffloadPolicy) error {
	if err := p.validate(); err != nil {
		return err
	}
	return do0(ctx, m, func(c *core, reply func(error)) {
		c.setOffloadPolicy(p)
		reply(nil)
	})
}

// SetProperty sets (or, with an empty value, removes) a property in the record.
func (m *ManagedLedger) SetProperty(ctx context.Context, key, value string) error {
	return do0(ctx, m, func(c *core, reply func(error)) { c.setProperty(key, value, reply) })
}

// Trim deletes consumed ledgers now (it also happens periodically and after acks) and returns
// once they are out of the record (their deletion follows).
func (m *ManagedLedger) Trim(ctx context.Context) error {
	return do0(ctx, m, func(c *core, reply func(error)) {
		c.trim(func() { reply(nil) })
	})
}

// SetRetention changes how long and how much consumed data is kept (Config.RetentionTime
// and RetentionSize) and trims under the new values; it returns once that trim is out of
// the record.
func (m *ManagedLedger) SetRetention(ctx context.Context, d time.Duration, size int64) error {
	return do0(ctx, m, func(c *core, reply func(error)) {
		c.cfg.RetentionTime, c.cfg.RetentionSize = d, size
		c.trim(func() { reply(nil) })
	})
}

// SetPersistence changes the Ensemble, WriteQuorum and AckQuorum of the ledgers created
// from now on (data ledgers at the next rollover, cursor ledgers at their next switch); the
// ledgers already created keep theirs.
func (m *ManagedLedger) SetPersistence(ctx context.Context, ensemble, writeQuorum, ackQuorum int) error {
	q := Config{Ensemble: ensemble, WriteQuorum: writeQuorum, AckQuorum: ackQuorum}
	if err := q.validate(); err != nil {
		return err
	}
	return do0(ctx, m, func(c *core, reply func(error)) {
		c.cfg.Ensemble, c.cfg.WriteQuorum, c.cfg.AckQuorum = ensemble, writeQuorum, ackQuorum
		reply(nil)
	})
}

// SetMarkDeleteRate changes how many times a second each durable cursor persists its state
// (Config.MaxMarkDeleteRate; <= 0: unlimited, which persists the held states at once). It
// applies to the next change of every cursor.
func (m *ManagedLedger) SetMarkDeleteRate(ctx context.Context, rate float64) error {
	return do0(ctx, m, func(c *core, reply func(error)) {
		c.setMarkDeleteRate(rate)
		reply(nil)
	})
}

// events is the owner goroutine's event queue: unbounded, so that completions posted from
// other goroutines never block.
type events = inbox.Queue[func()]

// liveEnv is the env of a core run by an owner goroutine.
type liveEnv struct{ in *events }

func (e *liveEnv) post(_ string, fn func()) { e.in.Push(fn) }

func (e *liveEnv) after(d time.Duration, _ string, fn func()) func() {
	cancelled := false // read and written on the owner goroutine only
	t := time.AfterFunc(d, func() {
		e.in.Push(func() {
			if !cancelled {
				fn()
			}
		})
	})
	return func() {
		cancelled = true
		t.Stop()
	}
}

func (e *liveEnv) now() time.Time { return time.Now() }
