package storage

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// flushStage names the points of a generation's flush where a test hook
// runs (Options.flushHook).
type flushStage int

const (
	stageSealed    flushStage = iota // sealed, nothing written yet
	stageSynced                      // records written and synced, index not committed
	stageCommitted                   // index committed, generation not yet dropped
	stageDropped                     // generation dropped: readers use the index
)

// cachePut copies the entry into the active generation. If the active
// generation is full while the sealed one is still being flushed it waits
// (back-pressure); a put that fills the active generation seals it and
// kicks the flusher. Requires the ledger's stripe.
func (s *Storage) cachePut(ledgerID, entryID int64, entry []byte, mayBeIndexed bool) error {
	c := &s.cache
	c.Lock()
	for c.active.bytes >= s.opts.WriteCacheSize && c.sealed != nil {
		if p := s.failErr.Load(); p != nil {
			c.Unlock()
			return *p
		}
		wait := c.drained // non-nil: failErr is set before drained is cleared
		c.blocked++
		c.Unlock()
		s.hurry()
		if s.opts.blockedHook != nil {
			s.opts.blockedHook()
		}
		select {
		case <-wait:
		case <-s.done:
			return ErrClosed
		}
		c.Lock()
	}
	if p := s.failErr.Load(); p != nil {
		c.Unlock()
		return *p
	}
	c.active.put(ledgerID, entryID, entry, mayBeIndexed, s.allocChunkLocked)
	if c.active.bytes >= s.opts.WriteCacheSize && c.sealed == nil {
		s.sealLocked()
	}
	c.Unlock()
	return nil
}

// allocChunkLocked returns an empty arena chunk. Requires cache.
func (s *Storage) allocChunkLocked() []byte {
	return s.cache.chunks.Get()
}

// sealLocked makes the active generation the sealed one, installs an empty
// active generation and kicks the flusher. Requires cache locked, sealed nil.
func (s *Storage) sealLocked() *writeCache {
	c := &s.cache
	if c.sealed != nil {
		panic("storage: seal with a sealed generation pending")
	}
	c.sealed, c.drained = c.active, make(chan struct{})
	c.sealed.sealed = time.Now()
	if c.spare != nil {
		c.active, c.spare = c.spare, nil
	} else {
		c.active = newWriteCache()
	}
	select {
	case s.fl.kick <- struct{}{}:
	default:
	}
	return c.sealed
}

// cachedEqual compares entry with the newest cached version of the key (the
// active generation's, else the sealed one's). inCache is false if neither
// holds the key.
func (s *Storage) cachedEqual(ledgerID, entryID int64, entry []byte) (equal, inCache bool) {
	c := &s.cache
	c.RLock()
	defer c.RUnlock()
	b, ok := s.newestCachedLocked(ledgerID, entryID)
	return ok && bytes.Equal(b, entry), ok
}

// newestCachedLocked returns the newest cached version of the key (the active
// generation's, else the sealed one's), aliasing the arena. Requires cache
// (read) locked.
func (s *Storage) newestCachedLocked(ledgerID, entryID int64) ([]byte, bool) {
	c := &s.cache
	b, ok := c.active.get(ledgerID, entryID)
	if !ok && c.sealed != nil {
		b, ok = c.sealed.get(ledgerID, entryID)
	}
	return b, ok
}

// cacheGet returns a copy of the newest cached version of the key.
func (s *Storage) cacheGet(ledgerID, entryID int64) ([]byte, bool) {
	c := &s.cache
	c.RLock()
	defer c.RUnlock()
	b, ok := s.newestCachedLocked(ledgerID, entryID)
	if !ok {
		return nil, false
	}
	return bytes.Clone(b), true
}

// cacheLast returns the ledger's highest cached entry ID, or -1.
func (s *Storage) cacheLast(ledgerID int64) int64 {
	c := &s.cache
	c.RLock()
	defer c.RUnlock()
	last := int64(-1)
	if cl := c.active.ledger(ledgerID); cl != nil {
		last = cl.last
	}
	if c.sealed != nil {
		if cl := c.sealed.ledger(ledgerID); cl != nil {
			last = max(last, cl.last)
		}
	}
	return last
}

// cacheEntryIDs returns the ledger's cached entry IDs, unordered.
func (s *Storage) cacheEntryIDs(ledgerID int64) []int64 {
	c := &s.cache
	c.RLock()
	defer c.RUnlock()
	ids := c.active.appendEntryIDs(nil, ledgerID)
	if c.sealed != nil {
		ids = c.sealed.appendEntryIDs(ids, ledgerID)
	}
	return ids
}

// cacheLedgers returns the ledgers with cached entries, unordered.
func (s *Storage) cacheLedgers() []int64 {
	c := &s.cache
	c.RLock()
	defer c.RUnlock()
	ids := c.active.appendLedgers(nil)
	if c.sealed != nil {
		ids = c.sealed.appendLedgers(ids)
	}
	return ids
}

// cacheDeleteLedger drops the ledger's cached entries. Requires indexMu.
func (s *Storage) cacheDeleteLedger(ledgerID int64) {
	c := &s.cache
	c.Lock()
	defer c.Unlock()
	c.active.deleteLedger(ledgerID)
	if c.sealed != nil {
		c.sealed.markDeleted(ledgerID)
	}
}

// wakeBlockedPuts releases Puts waiting for the sealed generation after the
// Storage failed (the generation stays, readable, until Close). Requires
// failErr set.
func (s *Storage) wakeBlockedPuts() {
	c := &s.cache
	c.Lock()
	defer c.Unlock()
	if c.drained != nil {
		close(c.drained)
		c.drained = nil
	}
}

// flushLoop is the flusher goroutine: it owns writing sealed generations to
// the entry logs and the index. Fed by fl.kick (a Put sealed a generation)
// and fl.reqs (Flush wants everything cached so far flushed); stopped by
// fl.stop.
func (s *Storage) flushLoop() {
	defer close(s.fl.exited)
	var (
		reqs []flushReq
		fw   flushWriter
	)
	for {
		select {
		case <-s.fl.kick:
		case r := <-s.fl.reqs:
			reqs = append(reqs, r)
		case <-s.fl.stop:
			return
		}
		// Flush callers that queued up meanwhile share this drain.
	more:
		for {
			select {
			case r := <-s.fl.reqs:
				reqs = append(reqs, r)
			default:
				break more
			}
		}
		urgent := false
		for _, r := range reqs {
			urgent = urgent || !r.paced
		}
		err := s.drainCache(&fw, len(reqs) > 0, urgent)
		// Nothing is sealed now, so no Put waits: a hurry left over (sent after
		// the flush it was meant for had stopped pacing) must not cut the next
		// paced flush short.
		select {
		case <-s.fl.hurry:
		default:
		}
		for _, r := range reqs {
			r.done <- err
		}
		clear(reqs)
		reqs = reqs[:0]
	}
}

// drainCache flushes the sealed generation if there is one, then seals and
// flushes the active one if all is set (once) or while it is full. The
// generations flushed for all are paced unless urgent.
func (s *Storage) drainCache(fw *flushWriter, all, urgent bool) error {
	c := &s.cache
	for {
		if p := s.failErr.Load(); p != nil {
			return *p
		}
		c.Lock()
		sealed := c.sealed
		requested := all && urgent
		if sealed == nil {
			full := c.active.bytes >= s.opts.WriteCacheSize
			if c.active.puts == 0 || !(all || full) {
				c.Unlock()
				return nil
			}
			sealed = s.sealLocked()
			all = false // everything cached before the call is now sealed
		}
		c.Unlock()
		fw.rw.pace = paceFor(sealed, requested)
		if err := s.flushSealed(fw, sealed); err != nil {
			s.becomeFailed(err)
			return *s.failErr.Load()
		}
	}
}

// flushedRecord is one record the flusher wrote, pending its index entry.
type flushedRecord struct {
	ledgerID, entryID int64
	loc               location
	mayBeIndexed      bool
}

// flushWriter is the flusher's reusable state.
type flushWriter struct {
	rw      recordWriter
	ledgers []int64
	ids     []int64
	recs    []flushedRecord
	perLog  map[uint64]counter
	chunks  [][]byte
	key     [17]byte
	val     [max(locationSize, counterSize)]byte
}

// flushSealed writes the sealed generation's records to the entry log in
// (ledger, entry) order, syncs them, commits their index entries and
// counters in one batch, and drops the generation. Runs on the flusher.
// An error leaves the generation in place (readable) and must fail the
// Storage.
func (s *Storage) flushSealed(fw *flushWriter, wc *writeCache) error {
	start := time.Now()
	s.hook(stageSealed)
	c := &s.cache
	// Ledgers deleted before we start need not be written. The sealed
	// generation's maps and arena are immutable: read them unlocked.
	c.RLock()
	fw.ledgers = fw.ledgers[:0]
	for l := range wc.ledgers {
		if _, dead := wc.deleted[l]; !dead {
			fw.ledgers = append(fw.ledgers, l)
		}
	}
	c.RUnlock()
	slices.Sort(fw.ledgers)

	// Write. Only the flusher and compaction take w: Puts never wait here.
	fw.recs = fw.recs[:0]
	s.w.Lock()
	fw.rw.begin(s)
	var err error
	for _, l := range fw.ledgers {
		cl := wc.ledgers[l]
		err = cl.entries.ascend(&fw.ids, func(e int64, sl slot) error {
			loc, err := fw.rw.add(l, e, wc.bytesOf(sl))
			if err != nil {
				return err
			}
			fw.recs = append(fw.recs, flushedRecord{l, e, loc, sl.mayBeIndexed})
			return nil
		})
		if err != nil {
			break
		}
	}
	if err == nil {
		err = fw.rw.flush()
	}
	last := fw.rw.log
	s.w.Unlock()
	defer fw.rw.done()
	if err != nil {
		return err
	}
	// Logs rolled meanwhile were synced by rollLocked; the last one now.
	if err := last.f.SyncData(); err != nil {
		return fmt.Errorf("sync entry log %d: %w", last.id, err)
	}
	s.hook(stageSynced)

	// Index: every location is on synced bytes, so the durable index can
	// only ever reference synced records.
	if err := s.commitFlushed(fw, wc); err != nil {
		return err
	}
	s.hook(stageCommitted)

	c.Lock()
	c.sealed = nil
	if c.drained != nil {
		close(c.drained)
		c.drained = nil
	}
	c.Unlock()
	s.hook(stageDropped)

	// Readers reach a generation only through the cache under its lock and
	// copy what they read, so wc is ours now: empty it for reuse.
	fw.chunks = fw.chunks[:0]
	wc.reset(func(b []byte) { fw.chunks = append(fw.chunks, b) })
	c.Lock()
	for i, b := range fw.chunks {
		c.chunks.Put(b)
		fw.chunks[i] = nil
	}
	c.spare = wc
	c.Unlock()

	s.fl.flushes.Add(1)
	s.fl.entries.Add(int64(len(fw.recs)))
	s.fl.nanos.Add(int64(time.Since(start)))
	return nil
}

// commitFlushed commits the index entries of fw.recs, minus those of
// ledgers deleted meanwhile, with the aggregated counter changes.
func (s *Storage) commitFlushed(fw *flushWriter, wc *writeCache) error {
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	if p := s.failErr.Load(); p != nil {
		return *p // stop writing once failed
	}
	if fw.perLog == nil {
		fw.perLog = make(map[uint64]counter)
	}
	clear(fw.perLog)
	b := s.db.NewBatchWithSize(len(fw.recs) * (1 + 2*len(fw.key) + locationSize))
	defer b.Close()
	for _, r := range fw.recs {
		// wc.deleted only changes under indexMu, which we hold.
		if _, dead := wc.deleted[r.ledgerID]; dead {
			continue
		}
		key := appendEntryKey(fw.key[:0], r.ledgerID, r.entryID)
		if r.mayBeIndexed {
			old, found, err := s.location(key)
			if err != nil {
				return err
			}
			if found {
				c := fw.perLog[old.log]
				c.bytes -= old.recordSize()
				c.entries--
				fw.perLog[old.log] = c
			}
		}
		_ = b.Set(key, r.loc.appendTo(fw.val[:0]), nil)
		c := fw.perLog[r.loc.log]
		c.bytes += r.loc.recordSize()
		c.entries++
		fw.perLog[r.loc.log] = c
	}
	for id, c := range fw.perLog {
		_ = b.Merge(counterKey(id), c.appendTo(fw.val[:0]), nil)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("storage: index commit of %d flushed entries: %w", len(fw.recs), err)
	}
	for id, c := range fw.perLog {
		s.addLive(id, c)
	}
	return nil
}

// flushReq asks the flusher to flush every generation holding a Put that
// returned before it; done gets the result. A paced request lets the flush
// keep its pace (FlushPaced).
type flushReq struct {
	done  chan error
	paced bool
}

// drain asks the flusher to flush every generation holding a Put that
// returned before the call, and waits; unless paced, it hurries a flush in
// progress. The flusher must be running (the caller holds the gate, so Close
// has not stopped it).
func (s *Storage) drain(paced bool) error {
	r := flushReq{done: make(chan error, 1), paced: paced}
	s.fl.reqs <- r
	if !paced {
		s.hurry()
	}
	return <-r.done
}

// hurry makes a paced flush write the rest of its generation at full speed.
func (s *Storage) hurry() {
	select {
	case s.fl.hurry <- struct{}{}:
	default:
	}
}

func (s *Storage) hook(st flushStage) {
	if s.opts.flushHook != nil {
		s.opts.flushHook(st)
	}
}

// writeBufferSize is the size of the flusher's and compaction's writes, and so of the
// write-backs they start: the journal's fdatasyncs on the same disk wait behind at most one
// of them. 1 MiB write-backs cost 3/2/2 ledgers at 10k adds/s (three bookies, one disk) a
// p99 add latency of 38–74 ms, 128 KiB ones 25–35 ms; 64 KiB was no better.
const writeBufferSize = 128 << 10

// recordWriter appends records to the current entry log through a buffer,
// in writeBufferSize writes, rolling logs at EntryLogSize. Use it with
// Storage.w held from begin to the last flush, and call done after the
// written records' index entries are committed (or abandoned).
//
// Every log it writes to has its pending count raised until done, so
// Compact leaves the log alone while records in it may still be indexed.
type recordWriter struct {
	s       *Storage
	pace    pacing
	buf     []byte
	log     *logFile // where buf goes: Storage.w.cur
	off     int64    // file offset of buf[0]
	touched []*logFile
}

// begin starts a run of adds. Requires Storage.w.
func (rw *recordWriter) begin(s *Storage) {
	rw.s = s
	rw.buf = rw.buf[:0]
	rw.use(s.w.cur)
}

func (rw *recordWriter) use(lf *logFile) {
	rw.log, rw.off = lf, lf.size.Load()
	lf.pending.Add(1)
	rw.touched = append(rw.touched, lf)
}

// add buffers one record and returns the location it will have. Requires
// Storage.w.
func (rw *recordWriter) add(ledgerID, entryID int64, payload []byte) (location, error) {
	recSize := int64(recordHeaderSize + len(payload))
	end := rw.off + int64(len(rw.buf))
	switch {
	case end > logHeaderSize && end+recSize > rw.s.opts.EntryLogSize:
		if err := rw.flush(); err != nil {
			return location{}, err
		}
		if err := rw.s.rollLocked(); err != nil {
			return location{}, err
		}
		rw.use(rw.s.w.cur)
		end = rw.off
	case len(rw.buf) > 0 && len(rw.buf)+int(recSize) > writeBufferSize:
		if err := rw.flush(); err != nil {
			return location{}, err
		}
		end = rw.off
	}
	rw.buf = appendRecord(rw.buf, ledgerID, entryID, payload)
	return location{log: rw.log.id, offset: end, length: uint32(len(payload))}, nil
}

// flush writes the buffered records. Requires Storage.w.
func (rw *recordWriter) flush() error {
	if len(rw.buf) == 0 {
		return nil
	}
	if _, err := rw.log.f.WriteAt(rw.buf, rw.off); err != nil {
		// The size is not advanced: later records overwrite what reached
		// the file.
		return fmt.Errorf("storage: write to entry log %d: %w", rw.log.id, err)
	}
	rw.off += int64(len(rw.buf))
	rw.log.size.Store(rw.off)
	// Start the write-back of what was just written (sync_file_range; no durability), so the
	// fdatasync that ends the flush finds little dirty data: one large fdatasync stalls the
	// journal's fdatasyncs on the same disk for tens of milliseconds, a steady stream of
	// small write-backs does not.
	if _, err := rw.log.f.SyncTo(rw.off); err != nil {
		return fmt.Errorf("storage: start write-back of entry log %d: %w", rw.log.id, err)
	}
	rw.pace.wait(rw.s, int64(len(rw.buf)))
	rw.buf = rw.buf[:0]
	if cap(rw.buf) > 2*writeBufferSize {
		rw.buf = nil // don't pin a large entry's buffer
	}
	return nil
}

// done ends the run: the logs written to may be compacted again.
func (rw *recordWriter) done() {
	for i, lf := range rw.touched {
		lf.pending.Add(-1)
		rw.touched[i] = nil
	}
	rw.touched = rw.touched[:0]
}

// maxPaceBudget bounds how long the flusher spreads one generation's writes.
const maxPaceBudget = 10 * time.Second

// pacing spreads a flush's writes over half the time its generation took to
// fill, instead of writing it at the disk's full speed: a burst of tens of
// MiB makes the journal's fdatasyncs on the same disk wait behind it (tens of
// milliseconds of add latency), a steady stream at twice the fill rate does
// not. A Put that waits for cache space or a Flush call ends the pacing
// (hurry). The zero pacing writes at full speed.
type pacing struct {
	start  time.Time
	budget time.Duration
	total  int64 // bytes of the generation
	done   int64 // bytes written so far
}

// paceFor returns the pacing for flushing wc: none for a flush somebody waits
// for (requested), else half its fill time, at most maxPaceBudget.
func paceFor(wc *writeCache, requested bool) pacing {
	if requested || wc.first.IsZero() || wc.sealed.IsZero() {
		return pacing{}
	}
	budget := min(wc.sealed.Sub(wc.first)/2, maxPaceBudget)
	if budget <= 0 {
		return pacing{}
	}
	return pacing{start: time.Now(), budget: budget, total: wc.bytes}
}

// wait accounts n more bytes written and, when ahead of schedule, waits until
// their share of the budget has passed, or until hurried or stopped.
func (p *pacing) wait(s *Storage, n int64) {
	if p.budget <= 0 || p.total <= 0 {
		return
	}
	p.done += n
	due := p.start.Add(time.Duration(float64(p.budget) * min(float64(p.done)/float64(p.total), 1)))
	d := time.Until(due)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.fl.hurry:
		p.budget = 0
	case <-s.fl.stop:
		p.budget = 0
	}
}
