package journal

import (
	"fmt"
	"time"
)

// syncerState is owned by the syncer goroutine.
type syncerState struct {
	pending []*batch // written, not yet synced; in file order
	finals  int      // final batches in pending
	records int      // records in pending
	bytes   int      // bytes in pending
	err     error    // sticky: once set, every later batch fails with it
	// open holds the files seen in batches and not yet closed, ascending. All but the
	// last were synced by the writer when it rolled away from them.
	open []file
}

// runSyncer is the syncer goroutine. It collects written batches and, once it holds
// the end of a group (a final batch), fdatasyncs the newest file once for everything
// pending, completes the callbacks in order, publishes its progress to the queue and
// wakes the writer.
func (j *Journal) runSyncer() {
	defer close(j.syncerDone)
	s := &j.s
	for more := true; more; {
		b, ok := <-j.written
		if ok {
			j.addPending(b)
		} else {
			more = false
		}
	drain:
		for more {
			select {
			case b, ok := <-j.written:
				if !ok {
					more = false
					break drain
				}
				j.addPending(b)
			default:
				break drain
			}
		}
		if len(s.pending) > 0 && (s.finals > 0 || !more) {
			j.syncPending()
		}
	}
}

func (j *Journal) addPending(b *batch) {
	s := &j.s
	s.pending = append(s.pending, b)
	if b.final {
		s.finals++
	}
	s.records += len(b.dones)
	s.bytes += b.buf.Len()
	for i := range b.segs {
		f := b.segs[i].f
		if f != nil && (len(s.open) == 0 || s.open[len(s.open)-1] != f) {
			s.open = append(s.open, f)
		}
	}
}

// syncPending syncs the pending batches and completes their callbacks.
func (j *Journal) syncPending() {
	s := &j.s
	err := s.err
	if err == nil {
		for _, b := range s.pending {
			if b.err != nil {
				// Fail every pending batch, also the ones before b: their durability may
				// have depended on the roll sync that failed.
				err = b.err
				break
			}
		}
	}
	var dur time.Duration
	var start time.Time
	var newest file
	if n := len(s.open); n > 0 {
		newest = s.open[n-1]
	}
	if err == nil && !j.opts.NoSync && newest != nil && s.records > 0 {
		start = time.Now()
		if serr := newest.Sync(); serr != nil {
			err = fmt.Errorf("journal: fdatasync: %w", serr)
			j.q.fail(err)
			j.log.Error("journal: sync failed", "dir", j.dir, "err", serr)
		}
		dur = time.Since(start)
	}
	if err != nil {
		s.err = err
	}
	// Tell the writer the syncer is free before running the callbacks, so that the next
	// group is written while they run.
	j.publishIdle(start, dur)
	for _, b := range s.pending {
		for _, done := range b.dones {
			done(err)
		}
	}
	if err == nil && j.opts.OnGroupSynced != nil && s.records > 0 {
		j.opts.OnGroupSynced(s.records, s.bytes, dur)
	}
	// Files before the newest were synced when the writer rolled away from them and no
	// batch will reference them again.
	if n := len(s.open); n > 1 {
		for _, f := range s.open[:n-1] {
			if cerr := f.Close(); cerr != nil {
				j.log.Warn("journal: close file", "dir", j.dir, "err", cerr)
			}
		}
		s.open[0] = newest
		clear(s.open[1:])
		s.open = s.open[:1]
	}
	j.recycle()
	clear(s.pending)
	s.pending = s.pending[:0]
	s.finals, s.records, s.bytes = 0, 0, 0
}

// publishIdle tells the writer's group policy that the syncer has finished the pending
// groups, and wakes the writer. It runs before the callbacks, so the records pending
// now (written early or queued) came from other callers than the ones about to be
// released. The next group's target is all of them plus one record per released
// caller, who in a closed loop append again at once. If at least as many records as
// were just completed arrived during the fdatasync, the load does not look like a
// closed loop, and the target is 0: sync them at once.
func (j *Journal) publishIdle(start time.Time, dur time.Duration) {
	s := &j.s
	q := &j.q
	q.mu.Lock()
	q.inflight -= s.finals
	if q.inflight < 0 {
		q.inflight = 0
		_ = assertionFailedf("inflight below zero")
	}
	q.target = 0
	if q.noWait > 0 {
		q.noWait--
	} else if pending := q.groupRecords + len(q.cur.dones); pending < s.records {
		q.target = pending + s.records
	}
	q.lastSync = dur
	if !start.IsZero() {
		q.syncStart = start
	}
	q.idleSince = time.Now()
	q.mu.Unlock()
	select {
	case j.wakeWriter <- struct{}{}:
	default:
	}
}

// recycle returns the completed batches to the queue's free list and their chunks to its
// pool.
func (j *Journal) recycle() {
	q := &j.q
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, b := range j.s.pending {
		b.reset(&q.chunks)
		q.free = append(q.free, b)
	}
}
