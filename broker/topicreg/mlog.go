package topicreg

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/mledger"
)

// mlog binds topic.Log to a managed ledger.
type mlog struct{ ml *mledger.ManagedLedger }

var (
	_ topic.Log            = mlog{}
	_ topic.PropertyCursor = (*mcursor)(nil)
)

func newMLog(ml *mledger.ManagedLedger) topic.Log { return mlog{ml} }

func (l mlog) AddAsync(data []byte, cb func(topic.Position, error)) { l.ml.AddAsync(data, cb) }
func (l mlog) LastConfirmed() topic.Position                        { return l.ml.LastConfirmed() }
func (l mlog) SetMaxRead(p *topic.Position)                         { l.ml.SetMaxRead(p) }
func (l mlog) Read(ctx context.Context, from topic.Position, max int) ([]topic.Entry, error) {
	return l.ml.Read(ctx, from, max)
}
func (l mlog) Terminate(ctx context.Context) (topic.Position, error) { return l.ml.Terminate(ctx) }
func (l mlog) Stats(ctx context.Context) (mledger.Stats, error)      { return l.ml.Stats(ctx) }
func (l mlog) SetProperty(ctx context.Context, k, v string) error    { return l.ml.SetProperty(ctx, k, v) }
func (l mlog) Close(ctx context.Context) error                       { return l.ml.Close(ctx) }
func (l mlog) Delete(ctx context.Context) error                      { return l.ml.Delete(ctx) }
func (l mlog) SetRetention(ctx context.Context, d time.Duration, size int64) error {
	return l.ml.SetRetention(ctx, d, size)
}
func (l mlog) SetPersistence(ctx context.Context, e, wq, aq int) error {
	return l.ml.SetPersistence(ctx, e, wq, aq)
}
func (l mlog) SetMarkDeleteRate(ctx context.Context, rate float64) error {
	return l.ml.SetMarkDeleteRate(ctx, rate)
}
func (l mlog) Cursors(ctx context.Context) ([]string, error) { return l.ml.Cursors(ctx) }
func (l mlog) DeleteCursor(ctx context.Context, name string) error {
	return l.ml.DeleteCursor(ctx, name)
}

func (l mlog) OpenCursor(ctx context.Context, name string, start topic.Position) (topic.Cursor, error) {
	c, err := l.ml.OpenCursor(ctx, name, start)
	if err != nil {
		return nil, err
	}
	return newMCursor(c), nil
}

func (l mlog) OpenNonDurableCursor(ctx context.Context, start topic.Position) (topic.Cursor, error) {
	c, err := l.ml.NewNonDurableCursor(ctx, start)
	if err != nil {
		return nil, err
	}
	return newMCursor(c), nil
}

// mcursor binds topic.Cursor to a managed-ledger cursor. Acknowledgements and resets run in
// order on one worker goroutine (so a reset is never overtaken by an older ack); reads run on
// the caller's goroutine.
type mcursor struct {
	c *mledger.Cursor

	mu struct {
		sync.Mutex // guards the fields below
		q          []func()
		running    bool
	}
}

// cursorOpTimeout bounds one acknowledgement or reset on the managed ledger.
const cursorOpTimeout = 30 * time.Second

func newMCursor(c *mledger.Cursor) *mcursor { return &mcursor{c: c} }

// enqueue runs fn after every earlier one, on the worker goroutine (started on demand).
func (m *mcursor) enqueue(fn func()) {
	m.mu.Lock()
	m.mu.q = append(m.mu.q, fn)
	if m.mu.running {
		m.mu.Unlock()
		return
	}
	m.mu.running = true
	m.mu.Unlock()
	go func() {
		for {
			m.mu.Lock()
			if len(m.mu.q) == 0 {
				m.mu.running = false
				m.mu.Unlock()
				return
			}
			q := m.mu.q
			m.mu.q = nil
			m.mu.Unlock()
			for _, f := range q {
				f()
			}
		}
	}()
}

func (m *mcursor) async(done func(error), fn func(ctx context.Context) error) {
	m.enqueue(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cursorOpTimeout)
		err := fn(ctx)
		cancel()
		if done != nil {
			done(err)
		}
	})
}

func (m *mcursor) Read(ctx context.Context, max int) ([]topic.Entry, error) {
	return m.c.Read(ctx, max)
}
func (m *mcursor) ReadPositions(ctx context.Context, ps []topic.Position) ([]topic.Entry, error) {
	return m.c.ReadPositions(ctx, ps)
}

func (m *mcursor) Acked(ctx context.Context, p topic.Position) (bool, error) {
	return m.c.Acked(ctx, p)
}

// Flush runs after the acknowledgements queued before it, then waits for the cursor's
// state to be durable.
func (m *mcursor) Flush(ctx context.Context) error {
	errc := make(chan error, 1)
	m.enqueue(func() { errc <- m.c.Flush(ctx) })
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *mcursor) Ack(ps []topic.Position, done func(error)) {
	m.async(done, func(ctx context.Context) error { return m.c.Ack(ctx, ps...) })
}

func (m *mcursor) AckCumulative(p topic.Position, done func(error)) {
	m.async(done, func(ctx context.Context) error { return m.c.AckCumulative(ctx, p) })
}

func (m *mcursor) AckBatch(p topic.Position, idx, size int, done func(error)) {
	m.async(done, func(ctx context.Context) error { return m.c.AckBatchIndex(ctx, p, idx, size) })
}

func (m *mcursor) BatchAcked(ctx context.Context, p topic.Position) ([]bool, error) {
	return m.c.BatchAcked(ctx, p)
}

func (m *mcursor) Reset(ctx context.Context, p topic.Position) error {
	ch := make(chan error, 1)
	m.async(func(err error) { ch <- err }, func(octx context.Context) error { return m.c.Reset(octx, p) })
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *mcursor) MarkDelete(ctx context.Context) (topic.Position, error) {
	st, err := m.c.Stats(ctx)
	return st.MarkDelete, err
}

func (m *mcursor) Info(ctx context.Context) (topic.CursorInfo, error) {
	st, err := m.c.Stats(ctx)
	if err != nil {
		return topic.CursorInfo{}, err
	}
	props := st.Properties
	if props == nil {
		props = map[string]int64{}
	}
	return topic.CursorInfo{MarkDelete: st.MarkDelete, PersistedMarkDelete: st.PersistedMarkDelete,
		MarkDeleteHeld: st.Held, ReadPosition: st.ReadPosition, Backlog: st.Backlog,
		AckedRanges: st.AckedRanges, PartialBatches: st.PartialBatches,
		Acked: fmt.Sprintf("%d ranges", st.AckedRanges), Ledger: -1,
		State: "Open", Properties: props}, nil
}

// SetProperty sets a cursor property (durable when it returns).
func (m *mcursor) SetProperty(ctx context.Context, key string, value int64) error {
	return m.c.SetProperty(ctx, key, value)
}

// RemoveProperty removes a cursor property (durable when it returns).
func (m *mcursor) RemoveProperty(ctx context.Context, key string) error {
	return m.c.RemoveProperty(ctx, key)
}

func (m *mcursor) Close(ctx context.Context) error {
	ch := make(chan error, 1)
	m.async(func(err error) { ch <- err }, func(octx context.Context) error { return m.c.Close(octx) })
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
