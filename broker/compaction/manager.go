package compaction

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar"
)

var (
	// ErrRunning: a compaction of the topic is in progress.
	ErrRunning = api.ErrCompactionRunning
	// ErrClosed: the manager is closed (its topic unloaded).
	ErrClosed = errors.New("compaction: closed")
)

// Status is the state of a topic's latest compaction (Pulsar's LongRunningProcessStatus).
type Status int

// The statuses, with Pulsar's names.
const (
	// NotRun: no compaction ran since the topic was loaded.
	NotRun Status = iota
	// Running: a compaction is in progress.
	Running
	// Success: the latest compaction completed.
	Success
	// Error: the latest compaction failed; the previous compacted state stays in force.
	Error
)

var statusNames = [...]string{NotRun: "NOT_RUN", Running: "RUNNING", Success: "SUCCESS", Error: "ERROR"}

func (s Status) String() string {
	if s < 0 || int(s) >= len(statusNames) {
		return fmt.Sprintf("Status(%d)", int(s))
	}
	return statusNames[s]
}

// OpenFunc opens (creating) the log named name that holds a compacted generation.
type OpenFunc func(ctx context.Context, name string) (topic.Log, error)

// Config configures a topic's Manager.
type Config struct {
	// Log is the topic's log: compaction reads it and records its State in its properties.
	Log topic.Log
	// Name is the base of the generation logs' names: generation g is Name + "-" + g.
	Name string
	// Open opens a generation's log. Required.
	Open OpenFunc
	// MaxMessageSize bounds the uncompressed size a compressed batch may claim (the
	// broker's max_message_size). Default pulsar.MaxMessageSizeDefault.
	MaxMessageSize int
	// Logger receives compaction outcomes. Default slog.Default().
	Logger *slog.Logger
	// BeforeCommit, if set, is called after a generation is written and before the State
	// naming it is recorded; an error aborts the compaction there (tests: a crash).
	BeforeCommit func(State) error
	// Committed, if set, is called once a new State is recorded (the broker moves the
	// topic's __compaction subscription past the horizon); an error is only logged.
	Committed func(context.Context, State) error
}

// Manager compacts one topic and serves its compacted view. Trigger runs a compaction on a
// goroutine of its own (at most one at a time); Close waits for it. Safe for concurrent use.
type Manager struct {
	cfg Config
	wg  sync.WaitGroup
	ctx context.Context
	end context.CancelFunc
	mu  struct {
		sync.Mutex // guards the fields below
		status     Status
		lastErr    string
		done       chan struct{} // closed when the running compaction ends
		view       *View         // the current generation, loaded (nil: not loaded yet)
		closed     bool
	}
}

// NewManager returns the Manager of a topic.
func NewManager(cfg Config) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxMessageSize <= 0 {
		cfg.MaxMessageSize = pulsar.MaxMessageSizeDefault
	}
	m := &Manager{cfg: cfg}
	m.ctx, m.end = context.WithCancel(context.Background())
	return m
}

// Close stops a running compaction (its generation is abandoned; the State in force stays)
// and waits for it.
func (m *Manager) Close() {
	m.mu.Lock()
	m.mu.closed = true
	m.mu.Unlock()
	m.end()
	m.wg.Wait()
}

// Status returns the latest compaction's status and, for Error, its error.
func (m *Manager) Status() (Status, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.status, m.mu.lastErr
}

// Trigger starts a compaction unless one is running (ErrRunning). The returned channel is
// closed when it ends.
func (m *Manager) Trigger() (<-chan struct{}, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.mu.closed:
		return nil, ErrClosed
	case m.mu.status == Running:
		return nil, ErrRunning
	}
	m.mu.status, m.mu.lastErr = Running, ""
	done := make(chan struct{})
	m.mu.done = done
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(done)
		start := time.Now()
		st, view, err := m.compact(m.ctx)
		m.mu.Lock()
		if err != nil {
			m.mu.status, m.mu.lastErr = Error, err.Error()
		} else {
			m.mu.status, m.mu.view = Success, view
		}
		m.mu.Unlock()
		if err != nil {
			m.cfg.Logger.Warn("compaction failed", "topic", m.cfg.Name, "err", err)
			return
		}
		m.cfg.Logger.Info("compaction done", "topic", m.cfg.Name, "generation", st.Generation, "horizon",
			st.Horizon().String(), "read", st.InputEntries, "kept", st.Messages, "took", time.Since(start).Round(time.Millisecond))
	}()
	return done, nil
}

func (m *Manager) genName(g int64) string { return fmt.Sprintf("%s-%d", m.cfg.Name, g) }

// compact runs one compaction: it folds the current generation and the topic's entries
// after its horizon (up to the last entry now) into the latest message per key, writes
// them as the next generation, and only then records the State naming it. The previous
// generation is deleted last.
func (m *Manager) compact(ctx context.Context) (State, *View, error) {
	prev, err := ReadState(ctx, m.cfg.Log)
	if err != nil {
		return State{}, nil, err
	}
	st, err := m.cfg.Log.Stats(ctx)
	if err != nil {
		return State{}, nil, err
	}
	target := lastEntry(st)
	if target.EntryID < 0 || !prev.Horizon().Less(target) {
		view, err := m.View(ctx)
		return prev, view, err // nothing new
	}
	latest := map[string]kept{}
	if prev.Generation > 0 {
		entries, err := m.loadGen(ctx, prev.Generation)
		if err != nil {
			return State{}, nil, fmt.Errorf("read generation %d: %w", prev.Generation, err)
		}
		for _, e := range entries {
			if err := absorb(latest, e, m.cfg.MaxMessageSize); err != nil {
				return State{}, nil, err
			}
		}
	}
	n, err := readAll(ctx, m.cfg.Log, after(prev.Horizon()), target, func(e topic.Entry) error {
		return absorb(latest, e, m.cfg.MaxMessageSize)
	})
	if err != nil {
		return State{}, nil, fmt.Errorf("read the topic: %w", err)
	}
	out, err := build(latest)
	if err != nil {
		return State{}, nil, err
	}
	next := State{Generation: prev.Generation + 1, HorizonLedger: target.LedgerID, HorizonEntry: target.EntryID,
		Entries: int64(len(out)), InputEntries: n}
	if err := m.writeGen(ctx, next.Generation, out, &next); err != nil {
		return State{}, nil, fmt.Errorf("write generation %d: %w", next.Generation, err)
	}
	if m.cfg.BeforeCommit != nil {
		if err := m.cfg.BeforeCommit(next); err != nil {
			return State{}, nil, err
		}
	}
	b, _ := json.Marshal(next)
	if err := m.cfg.Log.SetProperty(ctx, PropState, string(b)); err != nil {
		return State{}, nil, fmt.Errorf("record the compaction state: %w", err)
	}
	if m.cfg.Committed != nil {
		if err := m.cfg.Committed(ctx, next); err != nil {
			m.cfg.Logger.Warn("compaction: after the commit", "topic", m.cfg.Name, "err", err)
		}
	}
	if prev.Generation > 0 {
		if err := m.deleteGen(ctx, prev.Generation); err != nil {
			m.cfg.Logger.Warn("compaction: delete the previous generation", "topic", m.cfg.Name, "err", err)
		}
	}
	view := newView(next, entriesOf(out))
	return next, view, nil
}

func entriesOf(out []compactedEntry) []topic.Entry {
	es := make([]topic.Entry, len(out))
	for i, e := range out {
		es[i] = topic.Entry{Position: e.pos, Data: e.data}
	}
	return es
}

// writeGen writes generation g afresh (a leftover of a crashed compaction is deleted first)
// and fills the State's counts.
func (m *Manager) writeGen(ctx context.Context, g int64, out []compactedEntry, st *State) error {
	if err := m.deleteGen(ctx, g); err != nil {
		return err
	}
	log, err := m.cfg.Open(ctx, m.genName(g))
	if err != nil {
		return err
	}
	defer log.Close(context.Background()) //nolint:errcheck // the entries are durable once added
	for _, e := range out {
		ch := make(chan error, 1)
		log.AddAsync(record(e), func(_ Position, err error) { ch <- err })
		select {
		case err := <-ch:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		st.Messages += int64(e.msgs)
		st.Bytes += int64(len(e.data))
	}
	return nil
}

func (m *Manager) loadGen(ctx context.Context, g int64) ([]topic.Entry, error) {
	log, err := m.cfg.Open(ctx, m.genName(g))
	if err != nil {
		return nil, err
	}
	defer log.Close(context.Background()) //nolint:errcheck // read only
	return loadGeneration(ctx, log)
}

// Generation returns the current generation (0: never compacted).
func (m *Manager) Generation(ctx context.Context) (int64, error) {
	st, err := ReadState(ctx, m.cfg.Log)
	return st.Generation, err
}

// DeleteGeneration deletes generation g's log (its topic is being deleted).
func (m *Manager) DeleteGeneration(ctx context.Context, g int64) error {
	if g <= 0 {
		return nil
	}
	return m.deleteGen(ctx, g)
}

// deleteGen deletes generation g's log if it exists.
func (m *Manager) deleteGen(ctx context.Context, g int64) error {
	log, err := m.cfg.Open(ctx, m.genName(g))
	if err != nil {
		return err
	}
	if err := log.Delete(ctx); err != nil && !errors.Is(err, mledger.ErrClosed) {
		return err
	}
	return nil
}

// View returns the current compacted view, loading the generation the topic's State names
// the first time.
func (m *Manager) View(ctx context.Context) (*View, error) {
	m.mu.Lock()
	v := m.mu.view
	m.mu.Unlock()
	if v != nil {
		return v, nil
	}
	st, err := ReadState(ctx, m.cfg.Log)
	if err != nil {
		return nil, err
	}
	var entries []topic.Entry
	if st.Generation > 0 {
		if entries, err = m.loadGen(ctx, st.Generation); err != nil {
			return nil, fmt.Errorf("read generation %d: %w", st.Generation, err)
		}
	}
	v = newView(st, entries)
	m.mu.Lock()
	if m.mu.view == nil || m.mu.view.state.Generation < st.Generation {
		m.mu.view = v
	}
	v = m.mu.view
	m.mu.Unlock()
	return v, nil
}

// firstEntry is the position of the first entry the topic holds (ok false: none).
func (m *Manager) firstEntry(ctx context.Context) (Position, bool, error) {
	st, err := m.cfg.Log.Stats(ctx)
	if err != nil {
		return Position{}, false, err
	}
	for _, l := range st.Ledgers {
		if l.Entries > 0 {
			return Position{LedgerID: l.ID, EntryID: 0}, true, nil
		}
	}
	return Position{}, false, nil
}

// BytesAfterHorizon estimates how many bytes the topic holds after the compaction horizon
// (the compaction-threshold policy compares it): whole ledgers after the horizon's, and the
// horizon ledger's share of entries after it.
func (m *Manager) BytesAfterHorizon(ctx context.Context) (int64, error) {
	prev, err := ReadState(ctx, m.cfg.Log)
	if err != nil {
		return 0, err
	}
	st, err := m.cfg.Log.Stats(ctx)
	if err != nil {
		return 0, err
	}
	h := prev.Horizon()
	var n int64
	for _, l := range st.Ledgers {
		switch {
		case l.ID > h.LedgerID:
			n += l.Size
		case l.ID == h.LedgerID && l.Entries > 0:
			left := l.Entries - (h.EntryID + 1)
			n += l.Size * max(left, 0) / l.Entries
		}
	}
	return n, nil
}
