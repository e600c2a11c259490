package mledger

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/magnetar-io/magnetar/metadata"
)

// memLedgers and memMeta are thread-safe in-memory ports for tests of the public API (real
// owner goroutines). Completions run on fresh goroutines.

type memLedger struct {
	data   [][]byte
	closed bool
	fenced bool
}

type memLedgers struct {
	mu      sync.Mutex
	next    int64
	ls      map[int64]*memLedger
	deleted map[int64]bool
	wg      sync.WaitGroup
	// holdDeletes, when set, makes each Delete send its ledger id to it and then wait for
	// releaseDeletes to close before deleting.
	holdDeletes    chan int64
	releaseDeletes chan struct{}
}

func newMemLedgers() *memLedgers {
	return &memLedgers{ls: map[int64]*memLedger{}, deleted: map[int64]bool{}}
}

func (m *memLedgers) async(fn func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		fn()
	}()
}

func (m *memLedgers) live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ls)
}

func (m *memLedgers) Create(_ LedgerConfig, cb func(Writer, error)) {
	m.async(func() {
		m.mu.Lock()
		m.next++
		id := m.next
		m.ls[id] = &memLedger{}
		m.mu.Unlock()
		cb(&memWriter{m: m, id: id}, nil)
	})
}

func (m *memLedgers) OpenRecover(id int64, _ []byte, cb func(LedgerEnd, error)) {
	m.async(func() {
		m.mu.Lock()
		l := m.ls[id]
		if l == nil {
			m.mu.Unlock()
			cb(LedgerEnd{}, fmt.Errorf("%w: %d", ErrNoSuchLedger, id))
			return
		}
		l.fenced, l.closed = true, true
		end := l.end()
		m.mu.Unlock()
		cb(end, nil)
	})
}

func (l *memLedger) end() LedgerEnd {
	var n int64
	for _, d := range l.data {
		n += int64(len(d))
	}
	return LedgerEnd{LastEntry: int64(len(l.data)) - 1, Size: n}
}

func (m *memLedgers) Read(id int64, _ []byte, first, last int64, cb func([][]byte, error)) {
	m.async(func() {
		m.mu.Lock()
		l := m.ls[id]
		if l == nil || last >= int64(len(l.data)) {
			m.mu.Unlock()
			cb(nil, fmt.Errorf("%w: %d (read %d..%d)", ErrNoSuchLedger, id, first, last))
			return
		}
		out := slices.Clone(l.data[first : last+1])
		m.mu.Unlock()
		cb(out, nil)
	})
}

func (m *memLedgers) Delete(id int64, cb func(error)) {
	m.async(func() {
		if m.holdDeletes != nil {
			m.holdDeletes <- id
			<-m.releaseDeletes
		}
		m.mu.Lock()
		_, ok := m.ls[id]
		delete(m.ls, id)
		m.deleted[id] = true
		m.mu.Unlock()
		if !ok {
			cb(fmt.Errorf("%w: %d", ErrNoSuchLedger, id))
			return
		}
		cb(nil)
	})
}

type memWriter struct {
	m  *memLedgers
	id int64
}

func (w *memWriter) ID() int64 { return w.id }

func (w *memWriter) LAC() int64 {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	if l := w.m.ls[w.id]; l != nil {
		return int64(len(l.data)) - 1
	}
	return -1
}

func (w *memWriter) Append(p []byte, cb func(int64, error)) {
	w.m.mu.Lock()
	l := w.m.ls[w.id]
	switch {
	case l == nil:
		w.m.mu.Unlock()
		cb(-1, ErrNoSuchLedger)
		return
	case l.fenced:
		w.m.mu.Unlock()
		cb(-1, ErrLedgerFenced)
		return
	case l.closed:
		w.m.mu.Unlock()
		cb(-1, ErrClosed)
		return
	}
	l.data = append(l.data, p)
	e := int64(len(l.data)) - 1
	w.m.mu.Unlock()
	cb(e, nil)
}

func (w *memWriter) Close(cb func(LedgerEnd, error)) {
	w.m.async(func() {
		w.m.mu.Lock()
		l := w.m.ls[w.id]
		if l == nil {
			w.m.mu.Unlock()
			cb(LedgerEnd{}, ErrNoSuchLedger)
			return
		}
		if l.fenced && !l.closed {
			w.m.mu.Unlock()
			cb(LedgerEnd{}, ErrLedgerFenced)
			return
		}
		l.closed = true
		end := l.end()
		w.m.mu.Unlock()
		cb(end, nil)
	})
}

type memMeta struct {
	mu  sync.Mutex
	rev int64
	kv  map[string]simKV
	wg  sync.WaitGroup
}

func newMemMeta() *memMeta { return &memMeta{kv: map[string]simKV{}} }

func (m *memMeta) async(fn func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		fn()
	}()
}

func (m *memMeta) Get(key string, cb func(metadata.KV, error)) {
	m.async(func() {
		m.mu.Lock()
		e, ok := m.kv[key]
		m.mu.Unlock()
		if !ok {
			cb(metadata.KV{}, metadata.ErrNotFound)
			return
		}
		cb(metadata.KV{Key: key, Value: e.value, Version: e.version}, nil)
	})
}

func (m *memMeta) Put(key string, value []byte, expected metadata.Version, cb func(metadata.Version, error)) {
	value = slices.Clone(value)
	m.async(func() {
		m.mu.Lock()
		cur, ok := m.kv[key]
		if expected != metadata.AnyVersion && (ok && cur.version != expected || !ok && expected != metadata.NotExists) {
			m.mu.Unlock()
			cb(0, metadata.ErrBadVersion)
			return
		}
		m.rev++
		v := metadata.Version(m.rev)
		m.kv[key] = simKV{value: value, version: v}
		m.mu.Unlock()
		cb(v, nil)
	})
}

func (m *memMeta) Delete(key string, expected metadata.Version, cb func(error)) {
	m.async(func() {
		m.mu.Lock()
		cur, ok := m.kv[key]
		if expected != metadata.AnyVersion && (!ok || cur.version != expected) {
			m.mu.Unlock()
			cb(metadata.ErrBadVersion)
			return
		}
		delete(m.kv, key)
		m.mu.Unlock()
		cb(nil)
	})
}

func (m *memMeta) List(prefix string, cb func([]metadata.KV, error)) {
	m.async(func() {
		m.mu.Lock()
		var out []metadata.KV
		for k, e := range m.kv {
			if strings.HasPrefix(k, prefix) {
				out = append(out, metadata.KV{Key: k, Value: e.value, Version: e.version})
			}
		}
		m.mu.Unlock()
		sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
		cb(out, nil)
	})
}

func (m *memMeta) keys(prefix string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k := range m.kv {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
