package mledger

import (
	"sort"
)

// Entry is one entry of a managed ledger. Data must not be modified (it may be shared with
// the entry cache).
type Entry struct {
	Position Position
	Data     []byte
}

// lastEntryOf returns the last readable entry of ledger id (-1: none readable).
func (c *core) lastEntryOf(id int64) int64 {
	if id == c.tail.id {
		return c.tail.entries - 1
	}
	in := c.info()
	if i := in.ledger(id); i >= 0 {
		return in.Ledgers[i].Entries - 1
	}
	return -1
}

// firstValid returns the first readable position at or after p, if any.
func (c *core) firstValid(p Position) (Position, bool) {
	ls := c.info().Ledgers
	i := sort.Search(len(ls), func(i int) bool { return ls[i].ID >= p.LedgerID })
	for ; i < len(ls); i++ {
		id := ls[i].ID
		start := int64(0)
		if id == p.LedgerID {
			start = max(p.EntryID, 0)
		}
		if start <= c.lastEntryOf(id) {
			return Position{LedgerID: id, EntryID: start}, true
		}
	}
	return Position{}, false
}

// after returns the position right after p (not necessarily readable).
func after(p Position) Position { return Position{LedgerID: p.LedgerID, EntryID: p.EntryID + 1} }

// countAfter returns how many readable entries follow p.
func (c *core) countAfter(p Position) int64 {
	ls := c.info().Ledgers
	i := sort.Search(len(ls), func(i int) bool { return ls[i].ID >= p.LedgerID })
	var n int64
	for ; i < len(ls); i++ {
		id := ls[i].ID
		start := int64(0)
		if id == p.LedgerID {
			start = p.EntryID + 1
		}
		if last := c.lastEntryOf(id); last >= start {
			n += last - start + 1
		}
	}
	return n
}

// atEnd reports whether p is past the end of a terminated log.
func (c *core) atEnd(p Position) bool {
	if c.state != StateTerminated {
		return false
	}
	_, ok := c.firstValid(p)
	return !ok
}

// segment is entries first..last of one ledger.
type segment struct{ ledger, first, last int64 }

// readOp is a read: a managed-ledger read from a position, a cursor read from its read
// position, or a re-read of given positions. It completes exactly once, through reply.
type readOp struct {
	cur       *cursor    // cursor reads: skip acknowledged entries, advance the read position
	from      Position   // managed-ledger reads
	positions []Position // re-reads (redelivery)
	max       int
	wait      bool // park until an entry is available
	reply     func([]Entry, error)

	segs      []segment
	data      [][][]byte
	left      int
	err       error
	parked    bool
	inFlight  bool
	cancelled bool
}

// startRead plans a read and issues it, parks it, or answers it.
func (c *core) startRead(op *readOp) {
	switch c.state {
	case StateFenced:
		op.reply(nil, c.stateErr)
		return
	case StateOpening, StateClosing, StateClosed:
		op.reply(nil, ErrClosed)
		return
	}
	if op.cur != nil && op.cur.closed {
		op.reply(nil, ErrClosed)
		return
	}
	segs, end := c.plan(op)
	if len(segs) == 0 {
		switch {
		case end:
			op.reply(nil, ErrNoMoreEntries)
		case op.wait:
			op.parked = true
			c.waiters = append(c.waiters, op)
		default:
			op.reply(nil, nil)
		}
		return
	}
	op.segs, op.data, op.left, op.inFlight = segs, make([][][]byte, len(segs)), len(segs), true
	if op.cur != nil && op.positions == nil {
		op.cur.reading = op
	}
	for i, s := range segs {
		if d := c.cache.get(s); d != nil {
			op.data[i] = d
			op.left--
			continue
		}
		c.readSegment(op, i)
	}
	if op.left == 0 {
		c.finishRead(op)
	}
}

// plan turns a read into segments of readable, unacknowledged entries. end reports that the
// read is past the end of a terminated log.
func (c *core) plan(op *readOp) (segs []segment, end bool) {
	add := func(p Position) {
		if n := len(segs); n > 0 && segs[n-1].ledger == p.LedgerID && segs[n-1].last+1 == p.EntryID {
			segs[n-1].last++
			return
		}
		segs = append(segs, segment{ledger: p.LedgerID, first: p.EntryID, last: p.EntryID})
	}
	if op.positions != nil {
		for _, p := range op.positions {
			if p.EntryID < 0 || p.EntryID > c.lastEntryOf(p.LedgerID) || !c.info().has(p.LedgerID) {
				continue
			}
			if op.cur != nil && op.cur.acked(p) {
				continue
			}
			add(p)
		}
		return segs, false
	}
	from := op.from
	if op.cur != nil {
		from = maxPos(op.cur.readPos, after(op.cur.md))
	}
	n := 0
	bulk := op.cur == nil || (op.cur.acks.empty() && len(op.cur.batches) == 0)
	var lim *Position
	if op.cur != nil {
		lim = c.maxRead
	}
	p, ok := c.firstValid(from)
	for ok && n < op.max {
		if lim != nil && !p.Less(*lim) {
			break
		}
		if op.cur != nil {
			if r, in := op.cur.acks.span(p); in {
				p, ok = c.firstValid(Position{LedgerID: r.Ledger, EntryID: r.Last + 1})
				continue
			}
			if b := op.cur.batches[p]; b != nil && b.full() {
				p, ok = c.firstValid(after(p))
				continue
			}
		}
		add(p)
		n++
		if bulk {
			// Nothing to skip: take the rest of this ledger in one step.
			take := min(int64(op.max-n), c.lastEntryOf(p.LedgerID)-p.EntryID)
			if lim != nil && lim.LedgerID == p.LedgerID {
				take = min(take, lim.EntryID-1-p.EntryID)
			}
			if take > 0 {
				segs[len(segs)-1].last += take
				n += int(take)
				p.EntryID += take
			}
		}
		p, ok = c.firstValid(after(p))
	}
	if len(segs) == 0 {
		end = c.atEnd(from)
	}
	return segs, end
}

func (c *core) onReadDone(op *readOp, i int, d [][]byte, err error) {
	if !op.inFlight || op.data[i] != nil {
		return
	}
	s := op.segs[i]
	if err == nil && int64(len(d)) != s.last-s.first+1 {
		err = assertionFailedf("read %d:%d..%d returned %d entries", s.ledger, s.first, s.last, len(d))
	}
	if err != nil && op.err == nil {
		op.err = err
	}
	if d == nil {
		d = [][]byte{}
	}
	op.data[i] = d
	op.left--
	if op.left == 0 {
		c.finishRead(op)
	}
}

func (c *core) finishRead(op *readOp) {
	op.inFlight = false
	if op.cur != nil && op.cur.reading == op {
		op.cur.reading = nil
	}
	switch {
	case op.cancelled:
		op.reply(nil, errCancelled)
		return
	case op.err != nil:
		op.reply(nil, op.err)
		return
	}
	var out []Entry
	for i, s := range op.segs {
		for j, d := range op.data[i] {
			out = append(out, Entry{Position: Position{LedgerID: s.ledger, EntryID: s.first + int64(j)}, Data: d})
		}
	}
	if op.cur != nil && op.positions == nil && len(out) > 0 {
		op.cur.readPos = after(out[len(out)-1].Position)
	}
	op.reply(out, nil)
}

// setMaxRead bounds cursor reads to the entries before p (nil: unbounded) and retries the
// parked reads.
func (c *core) setMaxRead(p *Position) {
	c.maxRead = p
	c.wakeReaders()
}

// cancelRead abandons a read: a parked one answers errCancelled at once; one in flight does
// when its data arrives, without moving the cursor.
func (c *core) cancelRead(op *readOp) {
	if op.parked {
		c.unpark(op)
		op.reply(nil, errCancelled)
		return
	}
	op.cancelled = true
}

func (c *core) unpark(op *readOp) {
	op.parked = false
	for i, w := range c.waiters {
		if w == op {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			return
		}
	}
}

// wakeReaders retries every parked read (new entries, termination, close, fencing).
func (c *core) wakeReaders() {
	if len(c.waiters) == 0 {
		return
	}
	ws := c.waiters
	c.waiters = nil
	for _, op := range ws {
		op.parked = false
		c.startRead(op)
	}
}

// entryCache keeps the most recently confirmed entries, in log order, for tailing reads.
// Invariant: positions strictly increase along ents.
type entryCache struct {
	limit int64 // bytes; <0: off
	bytes int64
	ents  []cachedEntry
	head  int
}

type cachedEntry struct {
	pos  Position
	data []byte
}

func (ec *entryCache) add(p Position, d []byte) {
	if ec.limit < 0 {
		return
	}
	ec.ents = append(ec.ents, cachedEntry{p, d})
	ec.bytes += int64(len(d))
	for ec.bytes > ec.limit && ec.head < len(ec.ents) {
		ec.bytes -= int64(len(ec.ents[ec.head].data))
		ec.ents[ec.head] = cachedEntry{}
		ec.head++
	}
	if ec.head > 1024 && ec.head*2 > len(ec.ents) {
		n := copy(ec.ents, ec.ents[ec.head:])
		clear(ec.ents[n:])
		ec.ents, ec.head = ec.ents[:n], 0
	}
}

// get returns the payloads of s if all are cached.
func (ec *entryCache) get(s segment) [][]byte {
	live := ec.ents[ec.head:]
	first := Position{LedgerID: s.ledger, EntryID: s.first}
	i := sort.Search(len(live), func(i int) bool { return !live[i].pos.Less(first) })
	n := int(s.last - s.first + 1)
	if i+n > len(live) || live[i].pos != first || live[i+n-1].pos != (Position{LedgerID: s.ledger, EntryID: s.last}) {
		return nil
	}
	out := make([][]byte, n)
	for j := range out {
		out[j] = live[i+j].data
	}
	return out
}
