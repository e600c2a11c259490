package journal

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/internal/chunkpool"
	"github.com/magnetar-io/magnetar/internal/fsutil"
)

// ErrClosed is passed to done for appends made after Close and returned by calls on a
// closed Journal.
var ErrClosed = errors.New("journal: closed")

// Options configures a Journal. The zero Options is valid: it flushes as soon as the
// queue is empty (MaxGroupWait 0) and uses the default sizes. DefaultOptions returns
// the recommended settings.
type Options struct {
	// MaxGroupWait bounds how long a record waits for company before its group is
	// synced (see "Group commit" in doc.go). 0 syncs as soon as the syncer is free and
	// the queue is empty. DefaultOptions sets 1ms.
	MaxGroupWait time.Duration
	// MinSyncInterval paces the fdatasyncs of an open-loop load: a group does not end
	// sooner than this after the previous fdatasync started, and records arriving
	// meanwhile join it (see "Group commit" in doc.go). A closed loop whose company is
	// back is not paced. 0 does not pace; DefaultOptions sets 750µs. It applies only
	// with MaxGroupWait > 0.
	MinSyncInterval time.Duration
	// MaxGroupBytes syncs a group as soon as this many bytes are written and unsynced
	// (default 1 MiB). Appends block while 8×MaxGroupBytes are queued but not yet
	// written.
	MaxGroupBytes int
	// FileSize is the size each journal file is preallocated to; a file is rolled when
	// the next record does not fit (default 256 MiB). A record larger than FileSize gets
	// a file of its own.
	FileSize int64
	// NoSync skips every fdatasync. Tests and benchmarks only: records are acknowledged
	// without being durable.
	NoSync bool
	// Logger receives rolls, truncations and failures (default slog.Default()).
	Logger *slog.Logger
	// PrepareRate, if positive, has the next journal file written with zeros in the
	// background at this many bytes/s while the journal's own write rate leaves time for
	// it (see prepare.go; DefaultPrepareRate is a good value). 0 (the default): every file
	// is fallocated.
	PrepareRate int64
	// alwaysPrepare prepares every next file whatever the write rate (tests of the
	// preparation itself); rateWindow replaces the rate measurement's window (tests; 0:
	// the default). See maybePrepare.
	alwaysPrepare bool
	rateWindow    time.Duration
	// OnRoll, if set, is called by the writer goroutine when appends move to file seq;
	// prepared tells whether that file was prepared (zero-filled) or fallocated.
	OnRoll func(seq uint64, prepared bool)
	// OnGroupSynced, if set, is called after each synced group with its record count,
	// its byte count and the fdatasync duration. It runs on the syncer goroutine and
	// must not block.
	OnGroupSynced func(records, bytes int, fsync time.Duration)

	// fs replaces the filesystem used for writing (tests).
	fs vfs
	// sleep replaces the writer's pacing sleep (tests in a synctest bubble, whose fake
	// clock a nanosleep does not advance). Default sleepPrecise.
	sleep func(time.Duration)
}

// maxWriteChunk bounds how many bytes the writer leaves queued while the syncer is busy
// (see nextWrite).
const maxWriteChunk = 64 << 10

// Defaults.
const (
	DefaultMaxGroupWait  = time.Millisecond
	DefaultMaxGroupBytes = 1 << 20
	DefaultFileSize      = 256 << 20
	// DefaultMinSyncInterval keeps an open-loop load near 1 300 fdatasyncs/s at most:
	// on the 2-vCPU VM every fdatasync takes CPU from the whole machine, and at
	// 5k msg/s unpaced (≈ 3 000 fdatasyncs/s) the standalone's p99 publish latency was
	// 6.2–9.0 ms against 3.6–4.5 ms paced (A/B on fresh standalones, alternated).
	DefaultMinSyncInterval = 750 * time.Microsecond
)

// DefaultOptions returns the recommended Options.
func DefaultOptions() Options {
	return Options{
		MaxGroupWait:    DefaultMaxGroupWait,
		MinSyncInterval: DefaultMinSyncInterval,
		MaxGroupBytes:   DefaultMaxGroupBytes,
		FileSize:        DefaultFileSize,
	}
}

func (o Options) withDefaults() Options {
	if o.MaxGroupWait < 0 {
		o.MaxGroupWait = 0
	}
	if o.MinSyncInterval < 0 {
		o.MinSyncInterval = 0
	}
	if o.MaxGroupBytes <= 0 {
		o.MaxGroupBytes = DefaultMaxGroupBytes
	}
	if o.FileSize <= 0 {
		o.FileSize = DefaultFileSize
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.fs == nil {
		o.fs = osFS{}
	}
	if o.sleep == nil {
		o.sleep = sleepPrecise
	}
	return o
}

// Mark is a position in the journal: a file sequence number and a byte offset in that
// file. Marks are totally ordered by (File, Offset). A caller may persist one (for
// example with a checkpoint) and later pass it to Release.
type Mark struct {
	File   uint64
	Offset int64
}

// Less reports whether m is before o.
func (m Mark) Less(o Mark) bool {
	return m.File < o.File || (m.File == o.File && m.Offset < o.Offset)
}

// String formats m as file:offset.
func (m Mark) String() string { return fmt.Sprintf("%d:%d", m.File, m.Offset) }

// state is the lifecycle state of a Journal.
type state uint8

const (
	// stateOpen accepts appends.
	stateOpen state = iota
	// stateFailed: a write or fdatasync failed. Appends fail with the sticky error; the
	// journal never retries an fdatasync (its outcome for earlier writes is unknown).
	stateFailed
	// stateClosed: Close was called. Appends fail with ErrClosed.
	stateClosed
)

func (s state) String() string {
	switch s {
	case stateOpen:
		return "open"
	case stateFailed:
		return "failed"
	case stateClosed:
		return "closed"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// batch is a run of consecutive records: their encoded bytes, their callbacks and where
// the bytes go on disk. A batch is filled by Append, written by the writer, synced and
// completed by the syncer, then recycled.
type batch struct {
	buf   chunkedBuf
	dones []func(error) // one per record, in append order
	// segs place buf on disk; more than one only when the batch crosses a roll.
	// Invariant: segs[i].end == segs[i+1].start, segs[0].start == 0,
	// segs[len-1].end == len(buf).
	segs  []segment
	first time.Time // when dones[0] was appended
	// final marks the end of a group: the syncer fdatasyncs when it has one. Batches
	// written early while the syncer is busy are not final.
	final bool
	err   error // set by the writer when the batch could not be written
}

type segment struct {
	seq        uint64 // journal file
	off        int64  // offset of buf[start] in that file
	start, end int    // range in batch.buf
	f          file   // set by the writer
}

// reset empties b, returning its buffer's chunks to pool.
func (b *batch) reset(pool *chunkpool.Pool) {
	b.buf.reset(pool)
	clear(b.dones)
	b.dones = b.dones[:0]
	clear(b.segs)
	b.segs = b.segs[:0]
	b.first = time.Time{}
	b.final = false
	b.err = nil
}

// queue is the Append side: records appended and not yet taken by the writer, the
// position of the next record, and what the writer needs to decide when to write a
// group. It is a leaf structure shared by Append callers (which fill it), the writer
// (which swaps out the filled batch) and the syncer (which publishes its progress);
// nobody does I/O or takes another lock while holding mu.
type queue struct {
	mu sync.Mutex
	// mu guards all fields below.
	state  state
	err    error          // the sticky failure (stateFailed, and kept through stateClosed)
	failed chan struct{}  // closed on the move to stateFailed (see Journal.Failed)
	cur    *batch         // never nil
	free   []*batch       // recycled batches (their chunks are in chunks)
	chunks chunkpool.Pool // free buffer chunks, at most 2×maxQueue bytes
	// seq, off: where the next record goes. Invariant: off <= FileSize unless one
	// record larger than FileSize was placed at offset 0 of file seq.
	seq     uint64
	off     int64
	waiters int       // appends blocked on notFull
	notFull sync.Cond // signalled when the writer takes cur or the state leaves open
	// want, set by the writer while it waits for company: Append wakes the writer when
	// cur reaches want records (0: no such wake-up).
	want int
	// The open group, kept by the writer: records taken and written early (not final)
	// since the last final batch.
	groupRecords int
	groupBytes   int
	groupFirst   time.Time // when the open group's first record was appended
	// waited: the open group has waited for company (its timer was armed). noWait: groups
	// left that sync at once because such a wait went unmet; backoff: noWait after the
	// next unmet wait (see nextWrite).
	waited  bool
	noWait  int
	backoff int
	// Published by the syncer when it goes idle, read by the writer's group policy.
	// Invariant: inflight >= 0.
	inflight  int           // groups handed to the syncer and not yet completed
	target    int           // records the next group waits for (see publishIdle)
	idleSince time.Time     // when the syncer last went idle
	lastSync  time.Duration // the last fdatasync's duration
	syncStart time.Time     // when the last fdatasync started (MinSyncInterval)
}

func (q *queue) getFreeLocked() *batch {
	if n := len(q.free); n > 0 {
		b := q.free[n-1]
		q.free[n-1] = nil
		q.free = q.free[:n-1]
		return b
	}
	return &batch{}
}

// fail moves the queue to stateFailed (or records err when already closed).
func (q *queue) fail(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.becomeFailedLocked(err)
}

func (q *queue) becomeFailedLocked(err error) {
	if q.err == nil {
		q.err = err
	}
	switch q.state {
	case stateOpen:
		q.state = stateFailed
		close(q.failed)
		q.notFull.Broadcast()
	case stateFailed, stateClosed:
		// Already not accepting appends; the first error is kept.
	}
}

func (q *queue) becomeClosedLocked() error {
	switch q.state {
	case stateOpen, stateFailed:
		q.state = stateClosed
		q.notFull.Broadcast()
		return nil
	}
	return assertionFailedf("journal: invalid transition %s -> %s", q.state, stateClosed)
}

// Journal is the bookie's write-ahead journal. Append, Mark, Release and Close are safe
// for concurrent use. See the package documentation.
type Journal struct {
	// Immutable after Open.
	dir      string
	opts     Options
	log      *slog.Logger
	maxQueue int // Append blocks while this many bytes are queued
	// writeChunk: while the syncer is busy, the writer writes queued records early once
	// this many bytes are queued.
	writeChunk int

	q queue

	wakeWriter chan struct{} // cap 1: Append → writer when the queue turns non-empty
	closing    chan struct{} // closed by Close
	written    chan *batch   // writer → syncer, in file order; closed when the writer exits
	writerDone chan struct{}
	syncerDone chan struct{}

	w writerState // owned by the writer goroutine; by Close after writerDone
	s syncerState // owned by the syncer goroutine; by Close after syncerDone

	releaseMu sync.Mutex // serializes Release
	// spare holds files kept for later preparations instead of being removed (see "Spare
	// files" in prepare.go): Release and the writer's rolls add them, the writer's
	// preparations take them. Invariant: len(files) <= maxSpares.
	spare struct {
		sync.Mutex
		files []spareFile
		next  int // number in the next spare's name
	}

	closeOnce sync.Once
	closeErr  error
}

// Open replays the journal in dir, then opens it for appends.
//
// Every journal file is replayed in order: replay is called once per complete record.
// r.Data is only valid until replay returns. A torn tail at the end of the last file
// (a partial record, a CRC mismatch, nothing valid after it) is truncated; damage
// anywhere else fails Open with a *CorruptionError. Appends then go to a new file.
// dir is created if missing. replay may be nil.
func Open(dir string, opts Options, replay func(Record) error) (*Journal, error) {
	opts = opts.withDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	next, err := recoverDir(dir, opts.Logger, replay)
	if err != nil {
		return nil, err
	}
	if err := removeLeftovers(dir); err != nil {
		return nil, fmt.Errorf("journal: remove leftover prepared files: %w", err)
	}
	f, err := opts.fs.Create(filePath(dir, next), opts.FileSize)
	if err != nil {
		return nil, fmt.Errorf("journal: create file %d: %w", next, err)
	}
	if err := opts.fs.SyncDir(dir); err != nil {
		f.Close()
		return nil, fmt.Errorf("journal: sync dir: %w", err)
	}
	j := &Journal{
		dir:        dir,
		opts:       opts,
		log:        opts.Logger,
		maxQueue:   8 * opts.MaxGroupBytes,
		writeChunk: min(opts.MaxGroupBytes, maxWriteChunk),
		wakeWriter: make(chan struct{}, 1),
		closing:    make(chan struct{}),
		written:    make(chan *batch, 64),
		writerDone: make(chan struct{}),
		syncerDone: make(chan struct{}),
	}
	j.q.chunks = chunkpool.Pool{Size: chunkSize, Max: 2 * j.maxQueue / chunkSize}
	j.q.cur = j.q.getFreeLocked()
	j.q.backoff = unmetWaitBackoff
	j.q.seq = next
	j.q.notFull.L = &j.q.mu
	j.q.failed = make(chan struct{})
	j.w.active, j.w.seq = f, next
	go j.runWriter()
	go j.runSyncer()
	return j, nil
}

// Append queues r and calls done exactly once: with nil after r is durable, or with an
// error (ErrClosed, ErrInvalidRecord, ErrRecordTooLarge, or the I/O error that failed the
// journal). Calls to done happen in append order, on the syncer goroutine, except that
// an append rejected up front calls done before Append returns. done must not block.
// r.Data is copied before Append returns. Append blocks only while 8×MaxGroupBytes are
// queued and not yet written.
func (j *Journal) Append(r Record, done func(error)) {
	if !r.Type.valid() {
		done(fmt.Errorf("%w: type %d", ErrInvalidRecord, r.Type))
		return
	}
	if uint64(len(r.Data)) > MaxDataSize {
		done(ErrRecordTooLarge)
		return
	}
	var hdr [HeaderSize]byte
	encodeHeader(&hdr, r.Type, r.LedgerID, r.EntryID, r.Data)
	n := int64(HeaderSize + len(r.Data))

	q := &j.q
	q.mu.Lock()
	for q.state == stateOpen && q.cur.buf.Len() >= j.maxQueue {
		q.waiters++
		q.notFull.Wait()
		q.waiters--
	}
	if q.state != stateOpen {
		err := q.err
		if q.state == stateClosed {
			err = ErrClosed
		}
		q.mu.Unlock()
		done(err)
		return
	}
	if q.off > 0 && q.off+n > j.opts.FileSize {
		q.seq++
		q.off = 0
	}
	b := q.cur
	wasEmpty := len(b.dones) == 0
	if wasEmpty {
		b.first = time.Now()
	}
	if k := len(b.segs); k == 0 || b.segs[k-1].seq != q.seq {
		b.segs = append(b.segs, segment{seq: q.seq, off: q.off, start: b.buf.Len()})
	}
	b.buf.append(hdr[:], &q.chunks)
	b.buf.append(r.Data, &q.chunks)
	b.segs[len(b.segs)-1].end = b.buf.Len()
	b.dones = append(b.dones, done)
	q.off += n
	// Wake the writer when it may act: the first record while the syncer is idle (a
	// busy syncer wakes the writer itself when it finishes), the record the writer
	// waits for, or every writeChunk bytes (to write early, or to end a group at
	// MaxGroupBytes).
	wake := (wasEmpty && (q.inflight == 0 || j.opts.MaxGroupWait <= 0)) || len(b.dones) == q.want ||
		b.buf.Len()/j.writeChunk != (b.buf.Len()-int(n))/j.writeChunk
	q.mu.Unlock()

	if wake {
		select {
		case j.wakeWriter <- struct{}{}:
		default:
		}
	}
}

// Mark returns the position just after every record appended so far.
func (j *Journal) Mark() Mark {
	j.q.mu.Lock()
	defer j.q.mu.Unlock()
	return Mark{File: j.q.seq, Offset: j.q.off}
}

// Release deletes the journal files that lie wholly before m (files numbered below
// m.File). The caller guarantees that ledger storage has durably flushed every record
// before m, including records replayed by Open. Release is safe for concurrent use.
func (j *Journal) Release(m Mark) error {
	j.releaseMu.Lock()
	defer j.releaseMu.Unlock()
	j.q.mu.Lock()
	cur, st := Mark{File: j.q.seq, Offset: j.q.off}, j.q.state
	j.q.mu.Unlock()
	if st == stateClosed {
		return ErrClosed
	}
	if cur.Less(m) {
		return fmt.Errorf("journal: release mark %s is past the end %s", m, cur)
	}
	seqs, err := listFiles(j.dir)
	if err != nil {
		return fmt.Errorf("journal: release: %w", err)
	}
	renamed := false
	for _, seq := range seqs {
		if seq >= m.File {
			break
		}
		// Renamed first, so that a crash in the middle of the gradual removal leaves a
		// file Open deletes, not a truncated journal file that replays as corruption.
		// Up to maxSpares files are kept as spares instead, when preparations can use them.
		path := filePath(j.dir, seq)
		renamed = true
		if j.prepares() {
			if kept, err := j.keepSpare(path, 0); err != nil {
				return fmt.Errorf("journal: release: %w", err)
			} else if kept {
				continue
			}
		}
		if err := os.Rename(path, path+deletingExt); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("journal: release: %w", err)
		}
	}
	// The files just renamed, and any an earlier Release (or roll) renamed but did not
	// remove.
	doomed, err := filepath.Glob(filepath.Join(j.dir, "*"+deletingExt))
	if err != nil {
		return fmt.Errorf("journal: release: %w", err)
	}
	if len(doomed) == 0 && !renamed {
		return nil
	}
	j.log.Debug("journal: releasing files", "dir", j.dir, "before", m.File, "count", len(doomed))
	if !j.opts.NoSync {
		if err := j.opts.fs.SyncDir(j.dir); err != nil {
			return fmt.Errorf("journal: release: sync dir: %w", err)
		}
	}
	for _, path := range doomed {
		if err := fsutil.RemoveGradually(path, nil); err != nil {
			return fmt.Errorf("journal: release: %w", err)
		}
	}
	return nil
}

// Failed returns a channel closed when a write or fdatasync fails the journal: from then
// on every append fails with Err. It is not closed by Close.
func (j *Journal) Failed() <-chan struct{} { return j.q.failed }

// Err returns the error that failed the journal, or nil.
func (j *Journal) Err() error {
	j.q.mu.Lock()
	defer j.q.mu.Unlock()
	return j.q.err
}

// Close stops accepting appends, writes and syncs every record already appended,
// completes their callbacks, waits for the journal goroutines and closes the files.
// It returns the error that failed the journal, if any. Close is idempotent; later
// calls return the first call's result.
func (j *Journal) Close() error {
	j.closeOnce.Do(func() {
		j.q.mu.Lock()
		err := j.q.becomeClosedLocked()
		j.q.mu.Unlock()
		if err != nil {
			j.closeErr = err
			return
		}
		close(j.closing)
		<-j.writerDone
		<-j.syncerDone
		// Both goroutines are gone: Close owns their files now.
		var errs []error
		j.q.mu.Lock()
		errs = append(errs, j.q.err)
		j.q.mu.Unlock()
		files := j.s.open
		if a := j.w.active; a != nil && (len(files) == 0 || files[len(files)-1] != a) {
			files = append(files, a)
		}
		for _, f := range files {
			errs = append(errs, f.Close())
		}
		j.s.open = nil
		j.w.active = nil
		for _, e := range errs {
			if e != nil {
				j.closeErr = e
				break
			}
		}
	})
	return j.closeErr
}
