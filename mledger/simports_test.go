package mledger

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
)

// This file is the simulated ledger layer and metadata store the simulation drives the core
// with. Both model the real semantics the core relies on (BookKeeper's LAC and close, etcd's
// versions) and are adversarial about timing: every completion is delayed by the seed,
// callbacks of one ledger arrive in any order, close and recovery seal a ledger at its LAC
// at once (draining adds in flight), and metadata writes can fail ambiguously (applied or
// not, then a timeout; a write reported as a timeout may also be applied later, after the
// owner's re-read, as etcd may do).

var (
	errSimTransient = errors.New("sim: transient failure")
	errSimDrained   = errors.New("sim: ledger closed before the add was confirmed")
)

// simLedger is one ledger's ground truth.
type simLedger struct {
	w         *world
	id        int64
	creator   int // core id
	purpose   string
	data      [][]byte
	persisted []bool
	cbs       []func(int64, error)
	cbDone    []bool
	lac       int64 // contiguous persisted prefix: the durable, readable part of an open ledger
	closed    bool
	last      int64 // valid once closed
	byWriter  bool  // closed by its own writer
	fenced    bool
	deleted   bool
	broken    int64 // first entry that failed (-1: none); every later one fails too
}

// end is the last durable entry a reader (or recovery) sees.
func (l *simLedger) end() int64 {
	if l.closed {
		return l.last
	}
	return l.lac
}

func (l *simLedger) sizeThrough(e int64) int64 {
	var n int64
	for i := int64(0); i <= e; i++ {
		n += int64(len(l.data[i]))
	}
	return n
}

// seal closes the ledger at its LAC: entries after it can never be read; their adds fail.
func (l *simLedger) seal() {
	l.closed, l.last = true, l.lac
	for k := l.last + 1; k < int64(len(l.data)); k++ {
		if l.persisted[k] { // persisted past a hole: not part of the ledger
			l.failAdd(k)
		}
	}
}

func (l *simLedger) failAdd(e int64) {
	err := errSimDrained
	switch {
	case l.fenced && !l.byWriter:
		err = fmt.Errorf("%w: sim ledger %d", ErrLedgerFenced, l.id)
	case l.broken >= 0 && e >= l.broken:
		err = errSimTransient
	}
	l.w.deliver("add.fail-cb", l.w.delay(), func() {
		if !l.cbDone[e] {
			l.cbDone[e] = true
			l.cbs[e](-1, err)
		}
	})
}

func (l *simLedger) persist(e int64) {
	w := l.w
	if l.closed || l.fenced || l.deleted || (l.broken >= 0 && e >= l.broken) {
		l.failAdd(e)
		return
	}
	if w.s.Chance(w.p.addFail) {
		l.broken = e
		l.failAdd(e)
		for k := e + 1; k < int64(len(l.data)); k++ {
			if l.persisted[k] {
				l.failAdd(k)
			}
		}
		return
	}
	l.persisted[e] = true
	for l.lac+1 < int64(len(l.data)) && l.persisted[l.lac+1] {
		l.lac++
		k := l.lac
		w.deliver("add.ack", w.s.Between(0, w.p.cbMax), func() {
			if !l.cbDone[k] {
				l.cbDone[k] = true
				l.cbs[k](k, nil)
			}
		})
	}
}

// simLedgers is the ledger layer: ledgers by id.
type simLedgers struct {
	w    *world
	next int64
	ls   map[int64]*simLedger
}

// simLedgerPort is the Ledgers port of one core (so ledgers know their creator).
type simLedgerPort struct {
	sl *simLedgers
	sc *simCore
}

func (p *simLedgerPort) Create(cfg LedgerConfig, cb func(Writer, error)) {
	w := p.sl.w
	w.deliver("ledger.create", w.delay(), func() {
		if w.s.Chance(w.p.createFail) {
			cb(nil, errSimTransient)
			return
		}
		p.sl.next++
		l := &simLedger{w: w, id: p.sl.next, creator: p.sc.id, purpose: cfg.Purpose, lac: -1, last: -1, broken: -1}
		p.sl.ls[l.id] = l
		w.s.Tracef("sim: ledger %d created by core %d (%s)", l.id, p.sc.id, cfg.Purpose)
		cb(&simWriter{l: l}, nil)
	})
}

func (p *simLedgerPort) OpenRecover(id int64, _ []byte, cb func(LedgerEnd, error)) {
	w := p.sl.w
	w.deliver("ledger.recover", w.delay(), func() {
		l := p.sl.ls[id]
		if l == nil || l.deleted {
			cb(LedgerEnd{}, fmt.Errorf("%w: sim %d", ErrNoSuchLedger, id))
			return
		}
		if w.s.Chance(w.p.recoverFail) {
			if w.s.Chance(0.5) {
				l.fenced = true // recovery fenced some bookies before failing
			}
			cb(LedgerEnd{}, errSimTransient)
			return
		}
		l.fenced = true
		if !l.closed {
			l.seal()
		}
		w.s.Tracef("sim: ledger %d recovered by core %d at %d", id, p.sc.id, l.last)
		cb(LedgerEnd{LastEntry: l.last, Size: l.sizeThrough(l.last)}, nil)
	})
}

func (p *simLedgerPort) Read(id int64, _ []byte, first, last int64, cb func([][]byte, error)) {
	w := p.sl.w
	w.deliver("ledger.read", w.delay(), func() {
		l := p.sl.ls[id]
		switch {
		case l == nil || l.deleted:
			cb(nil, fmt.Errorf("%w: sim %d", ErrNoSuchLedger, id))
			return
		case w.s.Chance(w.p.readFail):
			cb(nil, errSimTransient)
			return
		case first < 0 || last < first || last > l.end():
			w.failf("core %d read ledger %d entries %d..%d beyond its durable end %d", p.sc.id, id, first, last, l.end())
			cb(nil, errSimTransient)
			return
		}
		out := make([][]byte, 0, last-first+1)
		for e := first; e <= last; e++ {
			out = append(out, slices.Clone(l.data[e]))
		}
		cb(out, nil)
	})
}

func (p *simLedgerPort) Delete(id int64, cb func(error)) {
	w := p.sl.w
	w.deliver("ledger.delete", w.delay(), func() {
		l := p.sl.ls[id]
		if l == nil || l.deleted {
			cb(fmt.Errorf("%w: sim %d", ErrNoSuchLedger, id))
			return
		}
		l.deleted = true
		w.s.Tracef("sim: ledger %d deleted by core %d", id, p.sc.id)
		cb(nil)
	})
}

type simWriter struct{ l *simLedger }

func (sw *simWriter) ID() int64  { return sw.l.id }
func (sw *simWriter) LAC() int64 { return sw.l.lac }

func (sw *simWriter) Append(payload []byte, cb func(int64, error)) {
	l := sw.l
	e := int64(len(l.data))
	if strings.HasPrefix(l.purpose, "cursor:") {
		l.w.cursorAppends[l.creator]++
	}
	l.data = append(l.data, payload)
	l.persisted = append(l.persisted, false)
	l.cbs = append(l.cbs, cb)
	l.cbDone = append(l.cbDone, false)
	if l.closed || l.fenced || l.deleted || l.broken >= 0 {
		l.failAdd(e)
		return
	}
	l.w.deliver("add.persist", l.w.s.Between(0, l.w.p.persistMax), func() { l.persist(e) })
}

func (sw *simWriter) Close(cb func(LedgerEnd, error)) {
	l, w := sw.l, sw.l.w
	w.deliver("ledger.close", w.delay(), func() {
		switch {
		case l.deleted:
			cb(LedgerEnd{}, fmt.Errorf("%w: sim %d", ErrNoSuchLedger, l.id))
			return
		case l.fenced && !l.byWriter:
			cb(LedgerEnd{}, fmt.Errorf("%w: sim ledger %d", ErrLedgerFenced, l.id))
			return
		case w.s.Chance(w.p.closeFail):
			cb(LedgerEnd{}, errSimTransient)
			return
		}
		if !l.closed {
			l.byWriter = true
			l.seal()
		}
		cb(LedgerEnd{LastEntry: l.last, Size: l.sizeThrough(l.last)}, nil)
	})
}

// simMeta is the metadata store.
type simMeta struct {
	w        *world
	rev      int64
	kv       map[string]simKV
	inflight map[string]int // "core|key": writes in flight (M4: at most one per core and key)
}

type simKV struct {
	value   []byte
	version metadata.Version
}

type simMetaPort struct {
	m  *simMeta
	sc *simCore
}

func (p *simMetaPort) Get(key string, cb func(metadata.KV, error)) {
	w := p.m.w
	w.deliver("meta.get", w.delay(), func() {
		e, ok := p.m.kv[key]
		if !ok {
			cb(metadata.KV{}, metadata.ErrNotFound)
			return
		}
		cb(metadata.KV{Key: key, Value: slices.Clone(e.value), Version: e.version}, nil)
	})
}

func (p *simMetaPort) write(kind, key string, apply func() (metadata.Version, error), cb func(metadata.Version, error)) {
	w := p.m.w
	k := fmt.Sprintf("%d|%s", p.sc.id, key)
	if p.m.inflight[k] > 0 {
		w.failf("M4: core %d issued a second write of %s while one is in flight", p.sc.id, key)
	}
	p.m.inflight[k]++
	w.deliver(kind, w.delay(), func() {
		p.m.inflight[k]--
		ambiguous := w.s.Chance(w.p.metaFail)
		applied := !ambiguous || w.s.Chance(0.5)
		if w.ambiguousNext > 0 { // scenario: applied, then reported as a timeout
			w.ambiguousNext--
			ambiguous, applied = true, true
		}
		late := ambiguous && !applied && w.s.Chance(0.5)
		if w.lateNext > 0 { // scenario: reported as a timeout, applied late
			w.lateNext--
			ambiguous, applied, late = true, false, true
		}
		if late {
			// A timeout whose write the store applies later, maybe after our re-read (etcd
			// may): the owner's next write of the record then conflicts with its own.
			w.deliver("meta.late-apply", w.s.Between(0, 4*w.p.maxDelay+5*time.Millisecond), func() { _, _ = apply() })
		}
		var v metadata.Version
		var err error
		if applied {
			v, err = apply()
		}
		if ambiguous {
			v, err = 0, errSimTransient // a timeout: applied or not
		}
		cb(v, err)
	})
}

func (p *simMetaPort) Put(key string, value []byte, expected metadata.Version, cb func(metadata.Version, error)) {
	value = slices.Clone(value)
	p.write("meta.put", key, func() (metadata.Version, error) {
		cur, ok := p.m.kv[key]
		if expected != metadata.AnyVersion && (ok && cur.version != expected || !ok && expected != metadata.NotExists) {
			return 0, metadata.ErrBadVersion
		}
		p.m.rev++
		p.m.kv[key] = simKV{value: value, version: metadata.Version(p.m.rev)}
		p.m.w.onMetaChange(p.sc, key, cur.value, value)
		return metadata.Version(p.m.rev), nil
	}, cb)
}

func (p *simMetaPort) Delete(key string, expected metadata.Version, cb func(error)) {
	p.write("meta.delete", key, func() (metadata.Version, error) {
		cur, ok := p.m.kv[key]
		if !ok {
			if expected == metadata.AnyVersion {
				return 0, nil
			}
			return 0, metadata.ErrBadVersion
		}
		if expected != metadata.AnyVersion && cur.version != expected {
			return 0, metadata.ErrBadVersion
		}
		delete(p.m.kv, key)
		p.m.w.onMetaChange(p.sc, key, cur.value, nil)
		return 0, nil
	}, func(_ metadata.Version, err error) { cb(err) })
}

func (p *simMetaPort) List(prefix string, cb func([]metadata.KV, error)) {
	w := p.m.w
	w.deliver("meta.list", w.delay(), func() {
		var keys []string
		for k := range p.m.kv {
			if strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		out := make([]metadata.KV, 0, len(keys))
		for _, k := range keys {
			e := p.m.kv[k]
			out = append(out, metadata.KV{Key: k, Value: slices.Clone(e.value), Version: e.version})
		}
		cb(out, nil)
	})
}
