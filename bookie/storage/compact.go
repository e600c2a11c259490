package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/internal/fsutil"
)

// Compact reclaims space held by deleted or overwritten entries. Every entry
// log other than the current one whose live ratio (live bytes / file size)
// is below minLiveRatio has its live records copied to the current log and
// is then deleted; a log with no live bytes is always deleted without
// copying. The index is flushed before any log file is removed, so a crash
// never leaves the index pointing into a deleted log. A deleted log's file is
// renamed, and removed gradually once no Get reads from it any more (removeDropped):
// unlinking a whole log at once stalls every fdatasync on the disk.
//
// reclaimedBytes is the size of the deleted logs minus the bytes copied.
// Compact stops early, after finishing the logs already copied, when ctx is
// done or the Storage is closing; it then returns ctx.Err() or ErrClosed.
// Only one Compact runs at a time; it runs alongside Put and Get.
func (s *Storage) Compact(ctx context.Context, minLiveRatio float64) (reclaimedBytes int64, err error) {
	if err := s.enterWrite(); err != nil {
		return 0, err
	}
	defer s.leave()
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	reclaimedBytes, err = s.compactLocked(ctx, minLiveRatio)
	return reclaimedBytes, errors.Join(err, s.removeDropped(ctx))
}

// compactLocked drains and drops the candidate logs. Requires compactMu.
func (s *Storage) compactLocked(ctx context.Context, minLiveRatio float64) (int64, error) {
	cands := s.compactionCandidates(minLiveRatio)
	defer func() {
		for _, lf := range cands {
			lf.release()
		}
	}()

	var (
		deletable []*logFile
		copied    int64
		stopErr   error
	)
	for _, lf := range cands {
		if stopErr = s.stopped(ctx); stopErr != nil {
			break
		}
		if lf.liveEntries.Load() > 0 {
			n, err := s.relocateLog(ctx, lf)
			copied += n
			if err != nil {
				stopErr = err
				break
			}
		}
		// Every relocation decremented the counters, so zero means no index
		// entry references the log. Otherwise the scan stopped early (a
		// record failed to verify before the last live one): keep the log.
		if n := lf.liveEntries.Load(); n != 0 {
			s.opts.Logger.Warn("storage: compaction left live entries in log; keeping it",
				"log", lf.id, "entries", n, "bytes", lf.live.Load())
			continue
		}
		deletable = append(deletable, lf)
	}
	reclaimed, err := s.dropLogs(deletable)
	if err == nil {
		err = stopErr
	}
	if n := len(deletable); n > 0 || copied > 0 {
		s.opts.Logger.Info("storage: compacted entry logs", "deleted", n,
			"reclaimed", reclaimed, "copied", copied, "err", err)
	}
	return reclaimed - copied, err
}

// compactionCandidates returns, by ascending id and each with a reference
// to release, the logs Compact may drain: not the current one, none with
// pending writers, and those whose live ratio is below minLiveRatio.
func (s *Storage) compactionCandidates(minLiveRatio float64) []*logFile {
	cur := s.cur.Load()
	var cands []*logFile
	s.files.RLock()
	for id, lf := range s.files.m {
		if id >= cur.id {
			continue // never the current log (nor one rolled to later)
		}
		if lf.pending.Load() > 0 {
			continue // records written to it may still be indexed
		}
		if lf.live.Load() == 0 || liveRatio(lf) < minLiveRatio {
			lf.refs.Add(1)
			cands = append(cands, lf)
		}
	}
	s.files.RUnlock()
	slices.SortFunc(cands, func(a, b *logFile) int { return cmpUint64(a.id, b.id) })
	return cands
}

func (s *Storage) stopped(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return ErrClosed
	default:
		return nil
	}
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// liveRatio is live bytes over file size (0 for an empty file).
func liveRatio(lf *logFile) float64 {
	size := lf.size.Load()
	if size <= 0 {
		return 0
	}
	return float64(lf.live.Load()) / float64(size)
}

// relocateBatchSize is how many bytes of live records compaction copies
// before syncing them and re-pointing their index entries.
const relocateBatchSize = 4 << 20

// relocation is a live record being copied out of a log.
type relocation struct {
	h   recordHeader
	off int64 // offset in the old log
	pos int   // offset of the payload in relocBatch.buf
}

// relocBatch collects live records (payloads copied) to relocate together.
type relocBatch struct {
	recs []relocation
	buf  []byte
}

// relocateLog scans lf and copies each record the index still references to
// the current log. It returns the bytes copied.
func (s *Storage) relocateLog(ctx context.Context, lf *logFile) (int64, error) {
	sc := newScanner(lf)
	var (
		copied int64
		batch  relocBatch
	)
	for i := 0; ; i++ {
		if i%1024 == 0 {
			if err := s.stopped(ctx); err != nil {
				return copied, err // the uncommitted batch is simply not copied
			}
		}
		h, off, payload, ok := sc.next()
		if !ok {
			break
		}
		// A pre-check to skip dead records; relocateBatch checks again.
		old, found, err := s.location(entryKey(h.ledgerID, h.entryID))
		if err != nil {
			return copied, err
		}
		if !found || old.log != lf.id || old.offset != off {
			continue // deleted or overwritten: dead
		}
		batch.recs = append(batch.recs, relocation{h: h, off: off, pos: len(batch.buf)})
		batch.buf = append(batch.buf, payload...)
		if len(batch.buf) >= relocateBatchSize {
			n, err := s.relocateBatch(lf.id, &batch)
			copied += n
			if err != nil {
				return copied, err
			}
			if lf.liveEntries.Load() == 0 {
				break // the rest is dead
			}
		}
	}
	n, err := s.relocateBatch(lf.id, &batch)
	copied += n
	if err != nil {
		return copied, err
	}
	if sc.err != nil && lf.liveEntries.Load() != 0 {
		s.opts.Logger.Warn("storage: compaction scan stopped at a bad record",
			"log", lf.id, "offset", sc.off, "err", sc.err)
	}
	return copied, nil
}

// relocateBatch appends the batch's records to the current log, syncs them,
// then re-points the index entries that still reference the old copies
// (the others were deleted or overwritten meanwhile: their new copies are
// dead). It returns the bytes written and empties the batch.
func (s *Storage) relocateBatch(logID uint64, batch *relocBatch) (int64, error) {
	if len(batch.recs) == 0 {
		return 0, nil
	}
	defer func() {
		batch.recs, batch.buf = batch.recs[:0], batch.buf[:0]
	}()
	var (
		rw      recordWriter
		locs    = make([]location, len(batch.recs))
		written int64
		err     error
	)
	s.w.Lock()
	rw.begin(s)
	for i, r := range batch.recs {
		p := batch.buf[r.pos : r.pos+int(r.h.length)]
		if locs[i], err = rw.add(r.h.ledgerID, r.h.entryID, p); err != nil {
			break
		}
		written += locs[i].recordSize()
	}
	if err == nil {
		err = rw.flush()
	}
	last := rw.log
	s.w.Unlock()
	defer rw.done()
	if err != nil {
		return 0, err
	}
	// Logs rolled meanwhile were synced by rollLocked.
	if err := last.f.SyncData(); err != nil {
		err = fmt.Errorf("sync entry log %d: %w", last.id, err)
		s.becomeFailed(err)
		return written, err
	}

	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	if p := s.failErr.Load(); p != nil {
		return written, *p
	}
	b := s.db.NewBatch()
	defer b.Close()
	perLog := make(map[uint64]counter)
	var vbuf [locationSize]byte
	for i, r := range batch.recs {
		key := entryKey(r.h.ledgerID, r.h.entryID)
		old, found, err := s.location(key)
		if err != nil {
			return written, err
		}
		if !found || old.log != logID || old.offset != r.off {
			continue
		}
		_ = b.Set(key, locs[i].appendTo(vbuf[:0]), nil)
		c := perLog[locs[i].log]
		c.bytes, c.entries = c.bytes+locs[i].recordSize(), c.entries+1
		perLog[locs[i].log] = c
		c = perLog[old.log]
		c.bytes, c.entries = c.bytes-old.recordSize(), c.entries-1
		perLog[old.log] = c
	}
	for id, c := range perLog {
		_ = b.Merge(counterKey(id), c.appendTo(nil), nil)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return written, fmt.Errorf("storage: relocate: %w", err)
	}
	for id, c := range perLog {
		s.addLive(id, c)
	}
	return written, nil
}

// dropLogs deletes logs that no index entry references: counter keys first,
// then a flush (making the relocated index entries and the deletions
// durable), then the files, renamed deletingExt for removeDropped. It returns
// the bytes freed (once removeDropped has removed them). Requires compactMu.
func (s *Storage) dropLogs(logs []*logFile) (int64, error) {
	if len(logs) == 0 {
		return 0, nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, lf := range logs {
		_ = b.Delete(counterKey(lf.id), nil)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return 0, fmt.Errorf("storage: drop counters: %w", err)
	}
	if err := s.flush(false); err != nil {
		return 0, err
	}
	var freed int64
	var errs []error
	for _, lf := range logs {
		s.files.Lock()
		if s.files.m[lf.id] == lf {
			delete(s.files.m, lf.id)
			lf.release() // the map's reference; readers keep theirs
		}
		s.files.Unlock()
		path := s.fs.PathJoin(s.dir, logFileName(lf.id))
		if err := s.fs.Rename(path, path+deletingExt); err != nil {
			errs = append(errs, fmt.Errorf("storage: remove log %d: %w", lf.id, err))
			continue
		}
		s.dropped = append(s.dropped, lf)
		freed += lf.size.Load()
	}
	if err := s.syncDir(); err != nil {
		errs = append(errs, err)
	}
	return freed, errors.Join(errs...)
}

// removeDropped removes the files of dropped logs, each once its last reader has
// released it (a Get holds a log only while it reads one record), shrinking it step by
// step on an OS filesystem (fsutil.RemoveGradually). When ctx ends or the Storage
// closes first, the logs still read stay for the next Compact, or for Open. Requires
// compactMu.
func (s *Storage) removeDropped(ctx context.Context) error {
	var errs []error
	for len(s.dropped) > 0 {
		lf := s.dropped[0]
		select {
		case <-lf.closed:
		case <-ctx.Done():
			return errors.Join(append(errs, ctx.Err())...)
		case <-s.done:
			return errors.Join(append(errs, ErrClosed)...)
		}
		path := s.fs.PathJoin(s.dir, logFileName(lf.id)+deletingExt)
		var err error
		if s.fs == vfs.Default {
			err = fsutil.RemoveGradually(path, s.done)
		} else {
			err = s.fs.Remove(path)
		}
		if err != nil {
			// Left for Open, which removes every dropped log's file.
			errs = append(errs, fmt.Errorf("storage: remove log %d: %w", lf.id, err))
		}
		s.dropped[0] = nil
		s.dropped = s.dropped[1:]
	}
	return errors.Join(errs...)
}

// LogStats describes one entry log.
type LogStats struct {
	ID          uint64
	Size        int64   // file bytes, header and dead records included
	LiveBytes   int64   // bytes of records the index references (headers included)
	LiveEntries int64   // records the index references
	LiveRatio   float64 // LiveBytes / Size
	Current     bool    // the log being appended to
}

// Stats is a point-in-time summary for metrics. Counters are read without a
// global lock, so they may be mutually skewed by in-flight calls.
type Stats struct {
	State       State
	Logs        []LogStats // ascending ID
	TotalBytes  int64      // sum of log sizes
	LiveBytes   int64      // of indexed entries (cached ones are not counted)
	LiveEntries int64

	// CacheBytes is the size of the write cache's generations (active and
	// sealed; entries plus a record header each, replaced entries included).
	CacheBytes int64
	// CacheFlushes counts the generations flushed since Open, CacheFlushed
	// the entries they wrote, and CacheFlushTime the time spent (writing,
	// syncing and indexing; the flusher is otherwise idle).
	CacheFlushes   uint64
	CacheFlushed   int64
	CacheFlushTime time.Duration
	// CacheBlockedPuts counts Puts that waited for a flush because the
	// cache was full.
	CacheBlockedPuts uint64
}

// Stats returns the current statistics (only State after Close).
func (s *Storage) Stats() Stats {
	if err := s.enter(); err != nil {
		return Stats{State: s.State()}
	}
	defer s.leave()
	st := Stats{
		State:          s.State(),
		CacheFlushes:   s.fl.flushes.Load(),
		CacheFlushed:   s.fl.entries.Load(),
		CacheFlushTime: time.Duration(s.fl.nanos.Load()),
	}
	s.cache.RLock()
	st.CacheBytes = s.cache.active.bytes
	if s.cache.sealed != nil {
		st.CacheBytes += s.cache.sealed.bytes
	}
	st.CacheBlockedPuts = s.cache.blocked
	s.cache.RUnlock()
	cur := s.cur.Load()
	s.files.RLock()
	for _, lf := range s.files.m {
		ls := LogStats{
			ID:          lf.id,
			Size:        lf.size.Load(),
			LiveBytes:   lf.live.Load(),
			LiveEntries: lf.liveEntries.Load(),
			LiveRatio:   liveRatio(lf),
			Current:     lf == cur,
		}
		st.Logs = append(st.Logs, ls)
		st.TotalBytes += ls.Size
		st.LiveBytes += ls.LiveBytes
		st.LiveEntries += ls.LiveEntries
	}
	s.files.RUnlock()
	slices.SortFunc(st.Logs, func(a, b LogStats) int { return cmpUint64(a.ID, b.ID) })
	return st
}
