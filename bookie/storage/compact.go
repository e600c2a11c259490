package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Compact reclaims space held by deleted or overwritten entries. Every entry
// log other than the current one whose live ratio (live bytes / file size)
// is below minLiveRatio has its live records copied to the current log and
// is then deleted; a log with no live bytes is always deleted without
// copying. The index is flushed before any log file is removed, so a crash
// never leaves the index pointing into a deleted log.
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

	cur := s.cur.Load()
	var cands []*logFile
	s.files.RLock()
	for id, lf := range s.files.m {
		if id >= cur.id {
			continue // never the current log (nor one rolled to later)
		}
		if lf.live.Load() == 0 || liveRatio(lf) < minLiveRatio {
			lf.refs.Add(1)
			cands = append(cands, lf)
		}
	}
	s.files.RUnlock()
	defer func() {
		for _, lf := range cands {
			lf.release()
		}
	}()
	slices.SortFunc(cands, func(a, b *logFile) int { return cmpUint64(a.id, b.id) })

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

// relocateLog scans lf and copies each record the index still references to
// the current log. It returns the bytes copied.
func (s *Storage) relocateLog(ctx context.Context, lf *logFile) (int64, error) {
	sc := newScanner(lf)
	var copied int64
	for i := 0; ; i++ {
		if i%1024 == 0 {
			if err := s.stopped(ctx); err != nil {
				return copied, err
			}
		}
		h, off, payload, ok := sc.next()
		if !ok {
			break
		}
		n, err := s.relocate(lf.id, off, h, payload)
		copied += n
		if err != nil {
			return copied, err
		}
		if lf.liveEntries.Load() == 0 {
			break // the rest is dead
		}
	}
	if sc.err != nil && lf.liveEntries.Load() != 0 {
		s.opts.Logger.Warn("storage: compaction scan stopped at a bad record",
			"log", lf.id, "offset", sc.off, "err", sc.err)
	}
	return copied, nil
}

// relocate moves one record if the index still references it at (logID,
// off), and returns the bytes written.
func (s *Storage) relocate(logID uint64, off int64, h recordHeader, payload []byte) (int64, error) {
	st := s.stripe(h.ledgerID)
	st.Lock()
	defer st.Unlock()
	key := entryKey(h.ledgerID, h.entryID)
	old, found, err := s.location(key)
	if err != nil {
		return 0, err
	}
	if !found || old.log != logID || old.offset != off {
		return 0, nil // deleted or overwritten: dead
	}
	lf, loc, err := s.append(h.ledgerID, h.entryID, payload)
	if err != nil {
		return 0, err
	}
	b := s.db.NewBatch()
	defer b.Close()
	add := counter{loc.recordSize(), 1}
	sub := counter{-old.recordSize(), -1}
	_ = b.Set(key, loc.appendTo(nil), nil)
	_ = b.Merge(counterKey(loc.log), add.appendTo(nil), nil)
	_ = b.Merge(counterKey(old.log), sub.appendTo(nil), nil)
	if err := b.Commit(pebble.NoSync); err != nil {
		return loc.recordSize(), fmt.Errorf("storage: relocate: %w", err)
	}
	lf.live.Add(add.bytes)
	lf.liveEntries.Add(add.entries)
	s.addLive(old.log, sub)
	return loc.recordSize(), nil
}

// dropLogs deletes logs that no index entry references: counter keys first,
// then a flush (making the relocated index entries and the deletions
// durable), then the files. It returns the bytes freed.
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
	if err := s.flush(); err != nil {
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
		if err := s.fs.Remove(s.fs.PathJoin(s.dir, logFileName(lf.id))); err != nil {
			errs = append(errs, fmt.Errorf("storage: remove log %d: %w", lf.id, err))
			continue
		}
		freed += lf.size.Load()
	}
	if err := s.syncDir(); err != nil {
		errs = append(errs, err)
	}
	return freed, errors.Join(errs...)
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
	LiveBytes   int64
	LiveEntries int64
}

// Stats returns the current statistics (only State after Close).
func (s *Storage) Stats() Stats {
	if err := s.enter(); err != nil {
		return Stats{State: s.State()}
	}
	defer s.leave()
	st := Stats{State: s.State()}
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
