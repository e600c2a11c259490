package journal

import (
	"fmt"
	"time"
)

// writerState is owned by the writer goroutine.
type writerState struct {
	active file   // the file being appended to; synced by the writer when rolled away from
	seq    uint64 // active's sequence number
	err    error  // sticky: once set, batches are failed without being written
	// activePrepared: active was prepared (zero-filled), not fallocated.
	activePrepared bool
	prep           *prepJob // the preparation of file seq+1, if any (see prepare.go)
	// filled is how far into active the writer has written; written counts every byte
	// written. rate is the bytes per second written over the last whole rateWindow (0:
	// not known yet), measured from rateMark on. See maybePrepare.
	filled, written int64
	rateMark        time.Time
	rateMarkWritten int64
	rate            float64
	// prepSkipped counts the files maybePrepare decided not to prepare, prepStopped the
	// preparations it stopped, prepResumed the stopped ones it went on with, prepKept the
	// unfinished or unused preparations a roll kept as the spare (for tests).
	prepSkipped     int
	prepStopped     int
	prepResumed     int
	prepKept        int
	prepSkippedFile uint64
}

// runWriter is the writer goroutine. It decides where groups end (the group commit
// policy, see nextWrite), takes the filled batch from the queue, writes it into the
// preallocated file(s) at the positions Append assigned, rolling files as needed, and
// hands it to the syncer. It waits for an fdatasync only when rolling: the old file is
// synced before the first byte goes to the new one, so only the last file can have a
// torn tail.
func (j *Journal) runWriter() {
	defer close(j.writerDone)
	defer close(j.written)
	defer j.stopPrepare()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	j.w.rateMark = time.Now()
	for {
		j.maybePrepare(time.Now())
		j.maybeRollEarly()
		b, wait, paced, exit := j.nextWrite(time.Now())
		if exit {
			return
		}
		if paced {
			// Nothing to do until the interval is over: records arriving meanwhile
			// queue, and the writer takes them all when it wakes.
			j.opts.sleep(wait)
			continue
		}
		if b == nil {
			var tc <-chan time.Time
			if wait > 0 {
				timer.Reset(wait)
				tc = timer.C
			}
			select {
			case <-j.wakeWriter:
			case <-j.closing:
			case <-tc:
			}
			if wait > 0 {
				timer.Stop()
			}
			continue
		}
		j.writeBatch(b)
		j.written <- b
	}
}

// unmetWaitBackoff is how many groups sync at once after a wait for company went unmet;
// each further unmet wait doubles it, up to maxUnmetWaitBackoff, and a wait that is met
// resets it. Under an open-loop load every unmet wait delays one group by a Go timer's
// wake-up (1–3 ms), and a fixed 16 could delay up to one group in 17; growing stretches
// make that rare while a closed loop is still found after its first met wait (at 1k–5k
// adds/s the difference was not measurable: a group waits only after a larger one).
const (
	unmetWaitBackoff    = 16
	maxUnmetWaitBackoff = 1024
)

// nextWrite applies the group commit policy. It returns the batch to write now (taken
// from the queue; final if it ends a group), or nil and how long to wait for company
// (0: until woken) or, if paced, how long to sleep before looking again (MinSyncInterval),
// or exit once the journal is closed and everything is handed over.
//
// A group ends (final batch) when:
//
//  1. the journal is closing or failed: flush everything;
//  2. the group holds MaxGroupBytes;
//  3. MaxGroupWait is 0 (every batch ends a group; the syncer merges the groups that
//     queue up while it is busy);
//  4. the syncer is idle and the group holds target records (see publishIdle: in a
//     closed loop of N writers, all N are back), or the wait for company is over.
//     That wait starts when the syncer could have taken the oldest record (the later
//     of its append and the syncer going idle) and lasts MaxGroupWait, but never
//     beyond the syncer's idle time plus the previous fsync's duration: waiting
//     longer than an fsync gains little, as records arriving meanwhile form the next
//     group. After a wait that ended without its company (an
//     open-loop load, or a closed loop winding down), the next unmetWaitBackoff groups
//     do not wait at all, twice as many after the next unmet wait (up to
//     maxUnmetWaitBackoff), until a wait is met. Pacing: unless a closed loop's
//     company is back (a target above 0, reached), a group does not end sooner than
//     MinSyncInterval after the previous fdatasync started.
//
// While the syncer is busy, queued records are written early (not final) once
// writeChunk bytes are queued, so that their pwrite overlaps the running fsync.
func (j *Journal) nextWrite(now time.Time) (b *batch, wait time.Duration, paced, exit bool) {
	q := &j.q
	q.mu.Lock()
	defer q.mu.Unlock()
	q.want = 0
	cur := q.cur
	queued := len(cur.dones)
	if queued == 0 && q.groupRecords == 0 {
		return nil, 0, false, q.state == stateClosed
	}
	records := q.groupRecords + queued
	bytes := q.groupBytes + cur.buf.Len()
	first := q.groupFirst
	if q.groupRecords == 0 {
		first = cur.first
	}
	final := false
	switch {
	case q.state != stateOpen, bytes >= j.opts.MaxGroupBytes, j.opts.MaxGroupWait <= 0:
		final = true
	case q.inflight > 0:
		if cur.buf.Len() < j.writeChunk {
			return nil, 0, false, false
		}
	case q.target > 0 && records >= q.target:
		final = true // a closed loop's company is back: not paced
		if q.waited {
			q.backoff = unmetWaitBackoff
		}
	case j.opts.MinSyncInterval > 0 && now.Before(q.syncStart.Add(j.opts.MinSyncInterval)):
		// Paced: the group collects what arrives until the interval is over.
		return nil, q.syncStart.Add(j.opts.MinSyncInterval).Sub(now), true, false
	case records >= q.target:
		final = true
		if q.waited {
			q.backoff = unmetWaitBackoff // the company came: a closed loop
		}
	default:
		// Waiting for company starts when the syncer could have taken the record.
		start := first
		if start.Before(q.idleSince) {
			start = q.idleSince
		}
		deadline := start.Add(j.opts.MaxGroupWait)
		if d := q.idleSince.Add(q.lastSync); d.Before(deadline) {
			deadline = d
		}
		if wait = deadline.Sub(now); wait > 0 {
			// Not written early: on few cores the pwrites would compete with the
			// appends being waited for.
			q.want = q.target - q.groupRecords
			q.waited = true
			return nil, wait, false, false
		}
		if q.waited {
			// The company waited for did not come: the load is not a closed loop of
			// callers that append again as soon as they are released, and a Go timer
			// here fires no sooner than about 1 ms (2–3 ms at p99), whatever the wait
			// asked for. The next groups sync at once (publishIdle), more of them
			// after each such wait.
			q.noWait = q.backoff
			q.backoff = min(2*q.noWait, maxUnmetWaitBackoff)
		}
		final = true
	}
	if queued > 0 {
		b = cur
		q.cur = q.getFreeLocked()
		if q.waiters > 0 {
			q.notFull.Broadcast()
		}
	} else {
		b = q.getFreeLocked() // an empty batch that only ends the open group
	}
	if final {
		b.final = true
		q.inflight++
		q.groupRecords, q.groupBytes, q.groupFirst, q.waited = 0, 0, time.Time{}, false
	} else {
		if q.groupRecords == 0 {
			q.groupFirst = b.first
		}
		q.groupRecords += len(b.dones)
		q.groupBytes += b.buf.Len()
	}
	return b, 0, false, false
}

func (j *Journal) writeBatch(b *batch) {
	w := &j.w
	if w.err != nil {
		b.err = w.err
		return
	}
	for i := range b.segs {
		s := &b.segs[i]
		if s.seq != w.seq {
			if err := j.roll(s.seq); err != nil {
				j.failWriter(b, err)
				return
			}
		}
		s.f = w.active
		if err := b.buf.writeAt(s.f, s.start, s.end, s.off); err != nil {
			j.failWriter(b, fmt.Errorf("journal: write file %d at %d: %w", s.seq, s.off, err))
			return
		}
		w.filled = max(w.filled, s.off+int64(s.end-s.start))
		w.written += int64(s.end - s.start)
	}
}

func (j *Journal) failWriter(b *batch, err error) {
	j.w.err = err
	b.err = err
	j.q.fail(err)
	j.log.Error("journal: writer failed", "dir", j.dir, "err", err)
}

// roll syncs the active file and makes file seq the active one.
func (j *Journal) roll(seq uint64) error {
	w := &j.w
	if seq != w.seq+1 {
		return assertionFailedf("roll from file %d to %d", w.seq, seq)
	}
	if !j.opts.NoSync {
		if err := w.active.Sync(); err != nil {
			return fmt.Errorf("journal: sync file %d before roll: %w", w.seq, err)
		}
	}
	f, err := j.takePrepared(seq)
	if err != nil {
		return fmt.Errorf("journal: adopt prepared file %d: %w", seq, err)
	}
	prepared := f != nil
	if f == nil {
		if f, err = j.opts.fs.Create(filePath(j.dir, seq), j.opts.FileSize); err != nil {
			return fmt.Errorf("journal: create file %d: %w", seq, err)
		}
	}
	if !j.opts.NoSync {
		if err := j.opts.fs.SyncDir(j.dir); err != nil {
			f.Close()
			return fmt.Errorf("journal: sync dir for file %d: %w", seq, err)
		}
	}
	// The syncer closes the old file once it has seen a batch in the new one.
	w.active, w.seq, w.activePrepared, w.filled = f, seq, prepared, 0
	j.log.Debug("journal: rolled", "dir", j.dir, "file", seq, "prepared", prepared)
	if j.opts.OnRoll != nil {
		j.opts.OnRoll(seq, prepared)
	}
	j.maybePrepare(time.Now())
	return nil
}
