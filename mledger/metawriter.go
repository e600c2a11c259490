package mledger

import (
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
)

// metaRecord is a record kept by a metaWriter (*Info, *CursorInfo).
type metaRecord[T any] interface {
	comparable
	owner() string
	epoch() int64
	clone() T
	marshal() []byte
}

func (in *Info) owner() string       { return in.Owner }
func (in *Info) epoch() int64        { return in.Epoch }
func (ci *CursorInfo) owner() string { return ci.Owner }
func (ci *CursorInfo) epoch() int64  { return ci.Epoch }
func (ci *CursorInfo) clone() *CursorInfo {
	out := *ci
	out.State = *ci.State.clone()
	return &out
}

func (s *CursorState) clone() *CursorState {
	out := *s
	out.Acked = append([]AckRange(nil), s.Acked...)
	out.Batches = make([]BatchAck, len(s.Batches))
	for i, b := range s.Batches {
		b.Acked = append([]uint64(nil), b.Acked...)
		out.Batches[i] = b
	}
	out.Properties = maps.Clone(s.Properties)
	return &out
}

// metaOp is one update of a record: apply mutates a private copy of the current record (an
// error aborts the op without writing); done runs on the owner goroutine with the outcome.
// apply must be idempotent: after a conflict with our own earlier write it runs again on the
// re-read record.
type metaOp[T any] struct {
	name  string
	apply func(T) error
	del   bool // delete the record instead of writing it
	// claim takes the record over: a re-read that finds an owner of an older epoch applies
	// the op again instead of fencing (used when opening, after claiming the managed ledger
	// record at a new epoch). A newer epoch fences.
	claim bool
	done  func(error)
}

// metaWriter serializes the updates of one metadata record (invariant M4): at most one
// compare-and-swap is in flight; the rest queue. A failed or conflicting write is followed by
// a re-read: if the record names another owner, the writer is fenced (every op, now and
// later, fails with ErrFenced); if it names us, the conflict was our own earlier write (e.g.
// a timed-out Put that was applied) and the op is applied again to the fresh record. So our
// own concurrent updates never fence.
//
// It is owned by the core's owner goroutine; completions come back through env.post, tagged
// with seq and checked against it.
type metaWriter[T metaRecord[T]] struct {
	c      *core
	key    string
	decode func([]byte) (T, error)

	cur     T // last record written or read; zero once deleted
	version metadata.Version
	q       []*metaOp[T]
	busy    bool   // a Put/Delete/Get (or a retry wait) is in flight for q[0]
	seq     uint64 // tags the in-flight request; completions with another seq are stale
	next    T      // the value being written
	fails   int    // consecutive failures, for backoff
	fenced  error  // set once another owner's write was found
	deleted bool

	onFenced func(error) // called once, when fenced
}

func newMetaWriter[T metaRecord[T]](c *core, key string, decode func([]byte) (T, error), cur T, v metadata.Version) *metaWriter[T] {
	return &metaWriter[T]{c: c, key: key, decode: decode, cur: cur, version: v}
}

func (m *metaWriter[T]) idle() bool { return !m.busy && len(m.q) == 0 }

func (m *metaWriter[T]) enqueue(op *metaOp[T]) {
	if m.c.mut.unserializedMeta && m.busy && !op.del && m.fenced == nil && !m.deleted {
		m.racingWrite(op)
		return
	}
	m.q = append(m.q, op)
	m.kick()
}

// racingWrite is the bug M4 forbids, on purpose (mutation only): write at once from the
// version we know, racing the write in flight, and take a conflict for fencing.
func (m *metaWriter[T]) racingWrite(op *metaOp[T]) {
	next := m.cur.clone()
	if err := op.apply(next); err != nil {
		op.done(err)
		return
	}
	m.c.ms.Put(m.key, next.marshal(), m.version, func(v metadata.Version, err error) {
		m.c.env.post("meta.racing-put-done", func() {
			if err != nil {
				op.done(fmt.Errorf("%w: %v", ErrFenced, err))
				m.fence(fmt.Errorf("%w: %s: %v", ErrFenced, m.key, err))
				return
			}
			m.cur, m.version = next, v
			op.done(nil)
		})
	})
}

func (m *metaWriter[T]) pop(err error) {
	op := m.q[0]
	m.q[0] = nil
	m.q = m.q[1:]
	op.done(err)
}

func (m *metaWriter[T]) kick() {
	var zero T
	for !m.busy && len(m.q) > 0 {
		op := m.q[0]
		switch {
		case m.fenced != nil:
			m.pop(m.fenced)
			continue
		case m.deleted || m.cur == zero:
			m.pop(fmt.Errorf("%w: record %s deleted", ErrClosed, m.key))
			continue
		}
		m.seq++
		seq := m.seq
		if op.del {
			if op.apply != nil {
				if err := op.apply(m.cur.clone()); err != nil {
					m.pop(err)
					continue
				}
			}
			m.busy = true
			m.c.tracef("meta delete %s %s v%d", op.name, m.key, m.version)
			m.c.ms.Delete(m.key, m.version, func(err error) {
				m.c.env.post("meta.delete-done "+op.name, func() { m.onWritten(seq, 0, err) })
			})
			return
		}
		next := m.cur.clone()
		if err := op.apply(next); err != nil {
			m.pop(err)
			continue
		}
		m.busy, m.next = true, next
		m.c.tracef("meta put %s %s v%d", op.name, m.key, m.version)
		m.c.ms.Put(m.key, next.marshal(), m.version, func(v metadata.Version, err error) {
			m.c.env.post("meta.put-done "+op.name, func() { m.onWritten(seq, v, err) })
		})
	}
}

func (m *metaWriter[T]) onWritten(seq uint64, v metadata.Version, err error) {
	if seq != m.seq || !m.busy {
		m.c.tracef("stale meta completion %s seq %d (now %d)", m.key, seq, m.seq)
		return
	}
	if err == nil {
		m.busy, m.fails = false, 0
		if m.q[0].del {
			var zero T
			m.cur, m.deleted = zero, true
		} else {
			m.cur, m.version = m.next, v
		}
		m.pop(nil)
		m.kick()
		return
	}
	if m.c.mut.fenceOnConflict && errors.Is(err, metadata.ErrBadVersion) {
		m.fence(fmt.Errorf("%w: %s: %v", ErrFenced, m.key, err)) // on purpose: M4's bug
		return
	}
	// A conflict, or a failure that may or may not have been applied: re-read and decide.
	m.c.tracef("meta %s write failed (%v): re-reading", m.key, err)
	delay := time.Duration(0)
	if !errors.Is(err, metadata.ErrBadVersion) {
		m.fails++
		delay = m.c.backoff(m.fails)
	}
	m.reread(seq, delay)
}

func (m *metaWriter[T]) reread(seq uint64, delay time.Duration) {
	get := func() {
		if seq != m.seq {
			return
		}
		m.c.ms.Get(m.key, func(kv metadata.KV, err error) {
			m.c.env.post("meta.get-done", func() { m.onReread(seq, kv, err) })
		})
	}
	if delay <= 0 {
		get()
		return
	}
	m.c.env.after(delay, "meta.reread", get)
}

func (m *metaWriter[T]) onReread(seq uint64, kv metadata.KV, err error) {
	if seq != m.seq || !m.busy {
		return
	}
	if errors.Is(err, metadata.ErrNotFound) {
		if len(m.q) > 0 && m.q[0].del { // our own ambiguous delete went through
			m.onWritten(seq, 0, nil)
			return
		}
		if m.version == metadata.NotExists { // our create was not applied: try again
			m.busy = false
			m.kick()
			return
		}
		m.fence(fmt.Errorf("%w: record %s was deleted", ErrFenced, m.key))
		return
	}
	if err != nil {
		m.fails++
		m.reread(seq, m.c.backoff(m.fails))
		return
	}
	rec, derr := m.decode(kv.Value)
	if derr != nil {
		m.fence(fmt.Errorf("%w: %s: %v", ErrFenced, m.key, derr))
		return
	}
	m.cur, m.version = rec, kv.Version
	if rec.owner() != m.c.token && (!m.q[0].claim || rec.epoch() > m.c.epoch) {
		m.fence(fmt.Errorf("%w: %s now owned by %s", ErrFenced, m.key, rec.owner()))
		return
	}
	// Our own write: apply the op again on the fresh record.
	m.c.tracef("meta %s conflict was our own write (v%d): retrying", m.key, kv.Version)
	m.busy = false
	m.kick()
}

func (m *metaWriter[T]) fence(err error) {
	m.busy = false
	m.seq++
	if m.fenced == nil {
		m.fenced = err
		m.c.tracef("meta %s fenced: %v", m.key, err)
	}
	for len(m.q) > 0 {
		m.pop(m.fenced)
	}
	if m.onFenced != nil {
		f := m.onFenced
		m.onFenced = nil
		f(err)
	}
}
