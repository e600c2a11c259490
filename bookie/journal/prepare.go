package journal

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Journal file preparation.
//
// A journal file made with fallocate holds unwritten extents: every fdatasync after an
// append into one converts extents, which commits the filesystem journal (ext4's jbd2)
// and waits for whatever other files' data that commit orders (the entry logs, the index
// on the same disk). An append into blocks that were written before needs no metadata:
// its fdatasync writes the data and flushes the device cache, nothing else. Measured on
// the 2-core VM with a flusher-like writer beside it (1 KiB records, groups of 20):
// fdatasync p50 0.19 ms vs 0.34 ms, p99 0.7 ms vs 1.7 ms, max 5 ms vs 127 ms; through a
// bookie at 5k adds/s, add latency p50 1.3 ms vs 1.9 ms.
//
// So the writer has the next file written with zeros in the background, at a bounded
// rate (Options.PrepareRate) so that the zeros do not stall the fdatasyncs they are meant
// to speed up, under a temporary name, then synced and renamed to its prepared name. A
// roll adopts the prepared file (renames it to the journal file name; the roll syncs the
// directory before any record in it is acknowledged). If the preparation is not done when
// the roll comes (appends faster than PrepareRate), the roll stops it and falls back to
// fallocate. A journal whose active file was fallocated (every Open) rolls early, at the
// next append, once the next file is prepared: the unused rest of the old file stays
// zeros, which replay reads as its end.
//
// Preparing a file doubles the bytes the journal writes, so it is only worth it while the
// disk is otherwise quiet. The writer measures its write rate every second and starts the
// next file's preparation only if, at that rate, the zeros would be ready in half the time
// left until the active file is full (maybePrepare, shouldPrepare). Under a heavy load
// (files filling in seconds) nothing is prepared and rolls fallocate, as with preparation
// off; once the load turns light (where add latency is what matters) the next file is
// prepared, a stopped preparation going on from where its zeros end (once a measured
// light rate says so: not in an idle window), and the early roll moves to it. Without the
// resume, a light load after a heavy phase writes into a fallocated file until it is full
// (minutes at 5k msg/s): in SBS-1 such a repetition's p99 publish at 5k msg/s was 6.1–6.7 ms
// against 2.5–4.8 ms in the others.
//
// Why the rate rule: SBS-1 on standalone, same binary, one run each way, preparing at every
// roll against no preparation: async publish 72.6k vs 83.6k msg/s (1 producer), 80.9k vs
// 104.8k (4 producers); at 1k and 5k msg/s p99 publish 5.1 vs 8.4 ms and 7.6 vs 10.2 ms,
// p50 1.3 vs 2.3 ms.
//
// Preparation is off by default (Options.PrepareRate 0) for the package and for `magnetar
// bookie`, where three bookies sharing one disk at 10k adds/s each measured p50 9.4–9.8 ms
// and p99 142–168 ms with preparation vs 5.2–5.6 ms and 62–67 ms without (the zero-fill
// competes with the other journals; the rate rule would not have declined it: their files
// fill in 25 s). Turn it on for a journal on a disk of its own (`magnetar bookie
// --journal-prepare-rate`). `magnetar standalone`, one bookie, turns it on.
//
// Prepared and temporary files are not journal files (listFiles ignores them); Open
// deletes any left over by a crash.
//
// # Spare files
//
// Freeing a file's blocks (unlink, truncate) is the costly part of removing it: on a
// filesystem mounted with online discard, as this VM's root is, ext4 discards the freed
// blocks inside the journal commit that every fdatasync waits for. A probe (an fdatasync
// loop at 1 000/s beside the removal of a written 256 MiB file in 16 MiB steps, 20 ms
// apart) measured worst fdatasyncs of 8–9 ms on an ext4 mounted nodiscard and 20–223 ms on
// the same ext4 mounted discard; on the VM's root 17–149 ms. So while preparations are on,
// the journal does not free what it can reuse: a preparation that is stopped keeps its
// partly zeroed file, a prepared file a roll did not use is kept, and Release keeps
// released journal files instead of removing them. Each becomes a spare (named
// sparePrefix N preparingExt; at most maxSpares, beyond which files are renamed
// deletingExt for Release to remove gradually), and the next preparation zero-fills the
// spare with the most zeros in place, from where its zeros end, which overwrites blocks
// instead of allocating new ones. A released journal file's records are stale: its zeros
// start at 0, and it is not a journal file under its spare name (Open deletes spares, as
// every other leftover).

const (
	preparedExt  = ".prepared"
	preparingExt = ".preparing"
	sparePrefix  = "spare-"
	// maxSpares bounds the spare files (at most maxSpares×FileSize of disk, 1 GiB by
	// default): enough to keep what a checkpoint after a heavy phase releases.
	maxSpares = 4
	// DefaultPrepareRate is a zero-fill rate for Options.PrepareRate.
	DefaultPrepareRate = 64 << 20
	prepareChunk       = 1 << 20
)

func preparedPath(dir string, seq uint64) string { return filePath(dir, seq) + preparedExt }

// preparer is implemented by filesystems that can prepare journal files (osFS).
type preparer interface {
	// Prepare makes tmp size bytes long and writes zeros over [from, size) at most rate
	// bytes/s (tmp's first from bytes are zeros already; tmp may not exist yet), syncs it
	// and renames it to name. When stop is closed it gives up, keeping tmp, and returns
	// errPrepareStopped; after any other error tmp is removed. zeroed is how many of
	// tmp's first bytes are zeros when it returns.
	Prepare(tmp, name string, size, from, rate int64, stop <-chan struct{}) (zeroed int64, err error)
	// Adopt renames the prepared file prepared to name and opens it for writing.
	Adopt(prepared, name string) (file, error)
}

var errPrepareStopped = errors.New("journal: preparation stopped")

// prepJob is one background preparation, owned by the writer goroutine.
type prepJob struct {
	seq     uint64
	stop    chan struct{}
	stopped bool // stop is closed
	done    chan struct{}
	err     error // valid after done
	zeroed  int64 // valid after done: the zeros at the start of its file
}

// requestStop asks the preparation to stop, once.
func (job *prepJob) requestStop() {
	if !job.stopped {
		job.stopped = true
		close(job.stop)
	}
}

// finished reports whether the preparation has returned (err and zeroed are valid).
func (job *prepJob) finished() bool {
	select {
	case <-job.done:
		return true
	default:
		return false
	}
}

// halt asks the preparation to stop and waits until it has.
func (job *prepJob) halt() {
	job.requestStop()
	<-job.done
}

// rateWindow is how long the writer measures its write rate over (see maybePrepare).
const rateWindow = time.Second

// shouldPrepare tells whether to prepare the next file: whether, at rate, its zeros take at
// most half of fillTime, the time left until the active file is full.
func shouldPrepare(fileSize, rate int64, fillTime time.Duration) bool {
	if rate <= 0 {
		return false
	}
	prepTime := time.Duration(float64(fileSize) / float64(rate) * float64(time.Second))
	return 2*prepTime <= fillTime
}

// maybePrepare starts preparing the file after the active one if none is being prepared
// and shouldPrepare says that, at the write rate of the last rateWindow, it would be ready
// in time, and stops a running preparation once it says the opposite. Called by the writer
// between writes (and at each roll), so that a preparation declined under a heavy load
// starts once the load turns light, and one started while the journal was quiet does not
// keep writing zeros into a heavy phase.
func (j *Journal) maybePrepare(now time.Time) {
	w := &j.w
	if j.opts.PrepareRate <= 0 {
		return
	}
	window := rateWindow
	if j.opts.rateWindow > 0 {
		window = j.opts.rateWindow
	}
	if d := now.Sub(w.rateMark); d >= window {
		w.rate = float64(w.written-w.rateMarkWritten) / d.Seconds()
		w.rateMark, w.rateMarkWritten = now, w.written
	}
	fillTime := time.Duration(math.MaxInt64) // idle, or not measured yet
	if w.rate > 0 && !j.opts.alwaysPrepare {
		fillTime = time.Duration(float64(j.opts.FileSize-w.filled) / w.rate * float64(time.Second))
	}
	if job := w.prep; job != nil {
		should := shouldPrepare(j.opts.FileSize, j.opts.PrepareRate, fillTime)
		switch {
		case !job.stopped && !j.preparedReady() && !should:
			// A preparation started while the journal was quiet stops once the load
			// makes it not worth its zeros; the roll then fallocates.
			job.requestStop()
			w.prepStopped++
			j.log.Debug("journal: stopped preparing the next file: the active one fills faster than it would be ready",
				"dir", j.dir, "file", job.seq, "bytesPerSecond", int64(w.rate))
		case job.stopped && should && w.rate > 0 && job.finished() && errors.Is(job.err, errPrepareStopped):
			// The load turned light again before the roll: go on from where the zeros
			// end, so that the early roll leaves the fallocated active file soon. Only
			// for a measured light load: an idle window (rate 0) may be a pause in a heavy
			// phase, and every start of a preparation writes its first chunk at once.
			j.startPrepare(job.seq, job.zeroed)
			w.prepResumed++
			j.log.Debug("journal: resumed preparing the next file", "dir", j.dir, "file", job.seq,
				"zeroed", job.zeroed, "bytesPerSecond", int64(w.rate))
		}
		return
	}
	if shouldPrepare(j.opts.FileSize, j.opts.PrepareRate, fillTime) {
		j.startPrepare(w.seq+1, -1)
		return
	}
	if w.prepSkippedFile != w.seq+1 {
		w.prepSkipped++
		w.prepSkippedFile = w.seq + 1
		j.log.Debug("journal: not preparing the next file yet: the active one fills faster than it would be ready",
			"dir", j.dir, "file", w.seq+1, "bytesPerSecond", int64(w.rate))
	}
}

// startPrepare begins preparing file seq in the background, if the filesystem can:
// into a spare file (zeroed < 0), or on from a stopped preparation of seq whose
// temporary file's first zeroed bytes are zeros.
func (j *Journal) startPrepare(seq uint64, zeroed int64) {
	if !j.prepares() {
		return
	}
	p := j.opts.fs.(preparer)
	job := &prepJob{seq: seq, stop: make(chan struct{}), done: make(chan struct{})}
	j.w.prep = job
	tmp := filePath(j.dir, seq) + preparingExt
	from := zeroed
	if zeroed < 0 {
		from = j.takeSpare(tmp)
	}
	go func() {
		defer close(job.done)
		final := preparedPath(j.dir, seq)
		job.zeroed, job.err = p.Prepare(tmp, final, j.opts.FileSize, from, j.opts.PrepareRate, job.stop)
	}()
}

// prepares reports whether preparations run (and so whether spare files are of use).
func (j *Journal) prepares() bool {
	_, ok := j.opts.fs.(preparer)
	return ok && j.opts.PrepareRate > 0
}

// spareFile is a kept file: its first zeroed bytes are zeros, the rest is stale.
type spareFile struct {
	path   string
	zeroed int64
}

// keepSpare renames the file at path to a new spare, whose first zeroed bytes are zeros,
// unless maxSpares are kept already (kept false; the file is left as it is).
func (j *Journal) keepSpare(path string, zeroed int64) (kept bool, err error) {
	j.spare.Lock()
	defer j.spare.Unlock()
	if len(j.spare.files) >= maxSpares {
		return false, nil
	}
	j.spare.next++
	name := filepath.Join(j.dir, fmt.Sprintf("%s%d%s", sparePrefix, j.spare.next, preparingExt))
	if err := os.Rename(path, name); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return true, nil // already gone: nothing to keep or remove
		}
		return false, err
	}
	j.spare.files = append(j.spare.files, spareFile{path: name, zeroed: zeroed})
	return true, nil
}

// takeSpare renames the spare with the most zeros, if any, to tmp and returns how many of
// its first bytes are zeros (0 without a spare).
func (j *Journal) takeSpare(tmp string) int64 {
	j.spare.Lock()
	defer j.spare.Unlock()
	files := j.spare.files
	if len(files) == 0 {
		return 0
	}
	best := 0
	for i, f := range files {
		if f.zeroed > files[best].zeroed {
			best = i
		}
	}
	f := files[best]
	j.spare.files = append(files[:best], files[best+1:]...)
	if err := os.Rename(f.path, tmp); err != nil {
		j.log.Warn("journal: could not reuse a spare file; preparing a new one", "dir", j.dir, "err", err)
		return 0
	}
	return f.zeroed
}

// keepOrDrop keeps the file at path as the spare, or else renames it for Release to
// remove gradually: the writer does not free blocks itself.
func (j *Journal) keepOrDrop(path string, zeroed int64) {
	kept, err := j.keepSpare(path, zeroed)
	if err == nil && !kept {
		err = os.Rename(path, path+deletingExt)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		j.log.Warn("journal: could not keep an unused prepared file; removing it", "path", path, "err", err)
		_ = os.Remove(path)
	}
}

// preparedReady reports whether the running preparation finished successfully.
func (j *Journal) preparedReady() bool {
	job := j.w.prep
	return job != nil && job.finished() && job.err == nil
}

// takePrepared returns the prepared file for seq, or nil: a preparation still running
// is stopped and its files removed, as is a finished one for another file.
func (j *Journal) takePrepared(seq uint64) (file, error) {
	job := j.w.prep
	j.w.prep = nil
	if job == nil {
		return nil, nil
	}
	job.halt()
	final := preparedPath(j.dir, job.seq)
	switch {
	case job.err == nil && job.seq == seq:
		return j.opts.fs.(preparer).Adopt(final, filePath(j.dir, seq))
	case job.err == nil:
		j.w.prepKept++
		j.keepOrDrop(final, j.opts.FileSize) // prepared for another file
	case errors.Is(job.err, errPrepareStopped):
		j.w.prepKept++
		j.keepOrDrop(filePath(j.dir, job.seq)+preparingExt, job.zeroed)
	default:
		j.log.Warn("journal: preparing the next file failed; falling back to fallocate", "file", job.seq, "err", job.err)
	}
	return nil, nil
}

// stopPrepare stops a running preparation and removes what it made, the spare and the
// unused prepared files awaiting removal (Close).
func (j *Journal) stopPrepare() {
	if job := j.w.prep; job != nil {
		j.w.prep = nil
		job.halt()
		_ = os.Remove(preparedPath(j.dir, job.seq))
		_ = os.Remove(filePath(j.dir, job.seq) + preparingExt)
	}
	j.spare.Lock()
	for _, f := range j.spare.files {
		_ = os.Remove(f.path)
	}
	j.spare.files = nil
	j.spare.Unlock()
	// Unused prepared files the writer renamed for removal (keepOrDrop).
	for _, ext := range []string{preparedExt, preparingExt} {
		doomed, _ := filepath.Glob(filepath.Join(j.dir, "*"+ext+deletingExt))
		for _, path := range doomed {
			_ = os.Remove(path)
		}
	}
}

// removeLeftovers deletes prepared and half-prepared files, and released files being
// removed, that a crash left behind.
func removeLeftovers(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if n := e.Name(); strings.HasSuffix(n, preparedExt) || strings.HasSuffix(n, preparingExt) ||
			strings.HasSuffix(n, deletingExt) {
			if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// maybeRollEarly moves appends to the next file once it is prepared, while the active
// file was fallocated: called by the writer between writes.
func (j *Journal) maybeRollEarly() {
	if j.w.activePrepared || !j.preparedReady() {
		return
	}
	q := &j.q
	q.mu.Lock()
	if q.state == stateOpen && q.seq == j.w.prep.seq-1 && q.off > 0 {
		q.seq++
		q.off = 0
	}
	q.mu.Unlock()
}

func (osFS) Prepare(tmp, name string, size, from, rate int64, stop <-chan struct{}) (zeroed int64, err error) {
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil && !errors.Is(err, errPrepareStopped) {
			os.Remove(tmp)
			zeroed = 0
		}
	}()
	// A reused file longer than a journal file would keep stale bytes past its end.
	if fi, err := f.Stat(); err != nil {
		return 0, err
	} else if fi.Size() > size {
		if err := f.Truncate(size); err != nil {
			return 0, err
		}
	}
	zeroed = min(from, size)
	zeros := make([]byte, prepareChunk)
	start, startOff := time.Now(), zeroed
	for zeroed < size {
		n := min(int64(len(zeros)), size-zeroed)
		if _, err := f.WriteAt(zeros[:n], zeroed); err != nil {
			return zeroed, err
		}
		zeroed += n
		if err := startWriteBack(f, zeroed); err != nil {
			return zeroed, err
		}
		if rate > 0 {
			due := start.Add(time.Duration(float64(zeroed-startOff) / float64(rate) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-stop:
					t.Stop()
					return zeroed, errPrepareStopped
				}
			}
		}
		select {
		case <-stop:
			return zeroed, errPrepareStopped
		default:
		}
	}
	if err := newOSFile(f).Sync(); err != nil {
		return zeroed, err
	}
	if err := os.Rename(tmp, name); err != nil {
		return zeroed, fmt.Errorf("rename prepared file: %w", err)
	}
	return zeroed, nil
}

func (osFS) Adopt(prepared, name string) (file, error) {
	if _, err := os.Stat(name); err == nil {
		return nil, fmt.Errorf("adopt %s: %w", name, os.ErrExist)
	}
	if err := os.Rename(prepared, name); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return newOSFile(f), nil
}
