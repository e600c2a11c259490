package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	iofs "io/fs"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

var (
	// ErrNoSuchLedger is returned for a ledger that has neither metadata nor
	// entries.
	ErrNoSuchLedger = errors.New("storage: no such ledger")
	// ErrNoSuchEntry is returned for an absent entry of a known ledger.
	ErrNoSuchEntry = errors.New("storage: no such entry")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("storage: closed")
	// ErrInvalidID is returned by Put for a negative ledger or entry ID.
	ErrInvalidID = errors.New("storage: negative ledger or entry id")
	// ErrEntryTooLarge is returned by Put for an entry over MaxEntrySize.
	ErrEntryTooLarge = errors.New("storage: entry too large")
	// ErrCorruption marks data that fails verification; test with errors.Is.
	// A CorruptionError carries the details.
	ErrCorruption = errors.New("storage: corruption")
	// ErrSyncFailed marks the Storage as failed after an fsync error: writes
	// and Flush return it until the process restarts and the journal replays.
	ErrSyncFailed = errors.New("storage: sync failed")
)

// CorruptionError reports a record or file that fails verification.
// errors.Is(err, ErrCorruption) is true for it.
type CorruptionError struct {
	Log    uint64 // entry log id
	Offset int64  // record offset in the log, or -1 for the whole file
	Err    error
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("storage: corruption in entry log %d at offset %d: %v", e.Log, e.Offset, e.Err)
}

// Unwrap returns the cause.
func (e *CorruptionError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorruption) true.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorruption }

// Options configures Open. The zero value is usable.
type Options struct {
	// EntryLogSize is the size at which the current entry log is rolled.
	// Default 512 MiB.
	EntryLogSize int64
	// Logger receives Pebble's and the storage's messages. Default slog.Default().
	Logger *slog.Logger
	// CacheSize is the Pebble block cache size for the index. Default 64 MiB.
	CacheSize int64
	// FS is the filesystem for entry logs and the index. Default vfs.Default;
	// tests use vfs.NewCrashableMem to simulate power loss.
	FS vfs.FS

	// memTableSize overrides Pebble's memtable size (tests force flushes).
	memTableSize uint64
}

const (
	defaultEntryLogSize = 512 << 20
	defaultCacheSize    = 64 << 20
	defaultMemTableSize = 64 << 20
	numStripes          = 256
)

func (o Options) withDefaults() Options {
	if o.EntryLogSize <= 0 {
		o.EntryLogSize = defaultEntryLogSize
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.CacheSize <= 0 {
		o.CacheSize = defaultCacheSize
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.memTableSize == 0 {
		o.memTableSize = defaultMemTableSize
	}
	return o
}

// State is the lifecycle state of a Storage.
type State uint32

const (
	// StateOpen serves reads and writes.
	StateOpen State = iota
	// StateFailed follows an fsync failure: reads work; Put, SetMeta,
	// DeleteLedger, Flush and Compact return ErrSyncFailed. Terminal until
	// Close (the bookie restarts and replays its journal).
	StateFailed
	// StateClosed follows Close; every method returns ErrClosed.
	StateClosed
)

func (st State) String() string {
	switch st {
	case StateOpen:
		return "open"
	case StateFailed:
		return "failed"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", uint32(st))
}

// Storage is durable entry storage: entry logs plus a Pebble index. All
// methods are safe for concurrent use. See the package doc for the formats,
// the durability contract and the lock order.
type Storage struct {
	// Immutable after Open.
	dir  string
	opts Options
	fs   vfs.FS
	db   *pebble.DB
	seed maphash.Seed
	done chan struct{} // closed by Close; stops Compact

	// state is a State; changed only by becomeFailed and becomeClosed.
	state   atomic.Uint32
	failErr atomic.Pointer[error] // set once by becomeFailed

	// gate is held shared by every method for its duration and exclusively
	// by Close, so Close never tears down under a running call. Methods
	// must not re-acquire it (a pending Close would deadlock them).
	gate      sync.RWMutex
	closeOnce sync.Once
	closeErr  error

	// compactMu serialises Compact calls.
	compactMu sync.Mutex
	// flushMu serialises flushes.
	flushMu sync.Mutex

	// stripes serialise index mutations of one ledger (Put, SetMeta,
	// DeleteLedger, compaction relocation), making read-modify-write of a
	// ledger's index keys and their counters atomic. Reads take no stripe.
	stripes [numStripes]stripe

	// cur is the current (writable) log, published for lock-free readers
	// (onFlushBegin, Flush, Stats). Written only under w.
	cur atomic.Pointer[logFile]

	// w guards appends to the current log and rolling it.
	w struct {
		sync.Mutex
		cur    *logFile // == cur.Load()
		nextID uint64   // id of the next log to create; > every id ever used
		buf    []byte   // scratch record buffer
	}

	// files guards the set of open logs (every log on disk, including the
	// current one). A leaf lock: nothing else is acquired under it.
	files struct {
		sync.RWMutex
		m map[uint64]*logFile
	}
}

// Open opens or creates the storage in dir: entry logs in dir, the index in
// dir/index. Each Open starts a new entry log; older logs are read-only.
func Open(dir string, opts Options) (*Storage, error) {
	opts = opts.withDefaults()
	s := &Storage{
		dir:  dir,
		opts: opts,
		fs:   opts.FS,
		seed: maphash.MakeSeed(),
		done: make(chan struct{}),
	}
	s.files.m = make(map[uint64]*logFile)
	if err := mkdirAllDurable(s.fs, dir); err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", dir, err)
	}
	cache := pebble.NewCache(opts.CacheSize)
	defer cache.Unref()
	popts := &pebble.Options{
		FS:                 s.fs,
		Cache:              cache,
		DisableWAL:         true, // the bookie journal replays anything lost
		Merger:             counterMerger,
		MemTableSize:       opts.memTableSize,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{opts.Logger},
		EventListener:      &pebble.EventListener{FlushBegin: s.onFlushBegin},
	}
	db, err := pebble.Open(s.fs.PathJoin(dir, "index"), popts)
	if err != nil {
		return nil, fmt.Errorf("storage: open index: %w", err)
	}
	s.db = db
	if err := s.load(); err != nil {
		_ = db.Close()
		s.releaseAll()
		return nil, err
	}
	return s, nil
}

// load checks the format, opens existing logs, reconciles them with the
// persisted counters and creates the current log.
func (s *Storage) load() error {
	v, closer, err := s.db.Get([]byte(keyFormat))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if err := s.db.Set([]byte(keyFormat), []byte(formatValue), pebble.NoSync); err != nil {
			return fmt.Errorf("storage: write format: %w", err)
		}
	case err != nil:
		return fmt.Errorf("storage: read format: %w", err)
	default:
		ok := string(v) == formatValue
		_ = closer.Close()
		if !ok {
			return fmt.Errorf("storage: unknown index format %q", v)
		}
	}

	counters, err := s.readCounters()
	if err != nil {
		return err
	}
	names, err := s.fs.List(s.dir)
	if err != nil {
		return fmt.Errorf("storage: list %s: %w", s.dir, err)
	}
	var maxID uint64
	for _, name := range names {
		id, ok := parseLogFileName(name)
		if !ok {
			continue
		}
		maxID = max(maxID, id)
		lf, err := s.openLog(id, counters[id])
		if err != nil {
			return err
		}
		s.files.m[id] = lf
	}
	for id, c := range counters {
		maxID = max(maxID, id)
		if _, ok := s.files.m[id]; !ok && (c.bytes != 0 || c.entries != 0) {
			return &CorruptionError{Log: id, Offset: -1,
				Err: fmt.Errorf("missing, but the index references %d entries", c.entries)}
		}
	}
	lf, err := s.createLog(maxID + 1)
	if err != nil {
		return err
	}
	s.files.m[lf.id] = lf
	s.w.cur = lf
	s.w.nextID = lf.id + 1
	s.cur.Store(lf)
	return nil
}

func (s *Storage) readCounters() (map[uint64]counter, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{prefixCounter},
		UpperBound: []byte{prefixCounter + 1},
	})
	if err != nil {
		return nil, fmt.Errorf("storage: read counters: %w", err)
	}
	defer it.Close()
	out := make(map[uint64]counter)
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		c, err := decodeCounter(it.Value())
		if err != nil || len(k) != 9 || c.bytes < 0 || c.entries < 0 {
			return nil, fmt.Errorf("storage: bad counter %x=%x: %v", k, it.Value(), err)
		}
		out[uint64FromKey(k[1:])] = c
	}
	return out, it.Error()
}

func uint64FromKey(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// openLog opens an existing log read-only. A log the index references must
// have a valid header; others are garbage for Compact to delete.
func (s *Storage) openLog(id uint64, c counter) (*logFile, error) {
	path := s.fs.PathJoin(s.dir, logFileName(id))
	f, err := s.fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("storage: stat %s: %w", path, err)
	}
	lf := &logFile{id: id, f: f}
	lf.size.Store(fi.Size())
	lf.live.Store(c.bytes)
	lf.liveEntries.Store(c.entries)
	lf.refs.Store(1)
	if c.entries > 0 {
		hdr := make([]byte, logHeaderSize)
		var herr error
		if _, err := f.ReadAt(hdr, 0); err != nil {
			herr = fmt.Errorf("read header: %w", err)
		} else {
			herr = checkLogHeader(hdr, id)
		}
		if herr != nil {
			_ = f.Close()
			return nil, &CorruptionError{Log: id, Offset: -1, Err: herr}
		}
	}
	return lf, nil
}

// createLog creates log id with its header and makes its directory entry
// durable (so no index entry can outlive the file).
func (s *Storage) createLog(id uint64) (*logFile, error) {
	path := s.fs.PathJoin(s.dir, logFileName(id))
	f, err := s.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", path, err)
	}
	if _, err := f.WriteAt(appendLogHeader(nil, id), 0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("storage: write %s: %w", path, err)
	}
	if err := s.syncDir(); err != nil {
		_ = f.Close()
		return nil, err
	}
	lf := &logFile{id: id, f: f}
	lf.size.Store(logHeaderSize)
	lf.refs.Store(1)
	return lf, nil
}

// mkdirAllDurable creates dir and any missing parents, and syncs every
// parent up to the closest one that existed, so the new entries survive a
// crash.
func mkdirAllDurable(fs vfs.FS, dir string) error {
	var parents []string
	for p := fs.PathDir(dir); ; p = fs.PathDir(p) {
		parents = append(parents, p)
		if fs.PathDir(p) == p {
			break
		}
		if _, err := fs.Stat(p); err == nil {
			break
		} else if !errors.Is(err, iofs.ErrNotExist) {
			return err
		}
	}
	if _, err := fs.Stat(dir); err == nil {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range parents {
		d, err := fs.OpenDir(p)
		if err != nil {
			return err
		}
		err = d.Sync()
		if cerr := d.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Storage) syncDir() error {
	d, err := s.fs.OpenDir(s.dir)
	if err != nil {
		return fmt.Errorf("storage: open dir: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("storage: sync dir: %w", err)
	}
	return nil
}

// onFlushBegin runs on a Pebble goroutine, under Pebble's DB mutex, before a
// memtable flush writes anything. Syncing the current log here keeps the
// invariant that a durable index entry only ever references synced bytes
// (rolled logs were synced when rolled). It must not call into the DB or
// take any Storage lock.
func (s *Storage) onFlushBegin(pebble.FlushInfo) {
	lf := s.cur.Load()
	if lf == nil {
		return // Open has not created this incarnation's log: nothing unsynced.
	}
	if err := lf.f.SyncData(); err != nil {
		s.becomeFailed(fmt.Errorf("sync entry log %d: %w", lf.id, err))
	}
}

// becomeFailed moves open → failed. A failed or closed Storage stays so.
func (s *Storage) becomeFailed(err error) {
	err = fmt.Errorf("%w: %w", ErrSyncFailed, err)
	if s.state.CompareAndSwap(uint32(StateOpen), uint32(StateFailed)) {
		s.failErr.Store(&err)
		s.opts.Logger.Error("storage failed; restart to replay the journal", "err", err)
	}
}

// becomeClosed moves open or failed → closed; false if already closed.
func (s *Storage) becomeClosed() bool {
	for {
		st := s.state.Load()
		if State(st) == StateClosed {
			return false
		}
		if s.state.CompareAndSwap(st, uint32(StateClosed)) {
			return true
		}
	}
}

// State returns the lifecycle state.
func (s *Storage) State() State { return State(s.state.Load()) }

// enter admits a method; pair with leave.
func (s *Storage) enter() error {
	if State(s.state.Load()) == StateClosed {
		return ErrClosed
	}
	s.gate.RLock()
	if State(s.state.Load()) == StateClosed {
		s.gate.RUnlock()
		return ErrClosed
	}
	return nil
}

// enterWrite admits a mutating method; it also refuses a failed Storage.
func (s *Storage) enterWrite() error {
	if err := s.enter(); err != nil {
		return err
	}
	if p := s.failErr.Load(); p != nil {
		s.gate.RUnlock()
		return *p
	}
	return nil
}

func (s *Storage) leave() { s.gate.RUnlock() }

// stripe serialises the index mutations of the ledgers that hash to it.
type stripe struct {
	sync.Mutex
	// last caches, per ledger, the highest entry ID in the index (-1: none).
	// Put skips the index lookup for an entry above it — the common case,
	// as entries arrive in order. A cache: entries may be dropped at will.
	last map[int64]int64
}

// maxStripeCache bounds each stripe's last-entry cache.
const maxStripeCache = 4096

func (s *Storage) stripe(ledgerID int64) *stripe {
	return &s.stripes[maphash.Comparable(s.seed, ledgerID)%numStripes]
}

// lastLocked returns the highest entry ID in the index for the ledger, or
// -1. Requires st locked.
func (s *Storage) lastLocked(st *stripe, ledgerID int64) (int64, error) {
	if last, ok := st.last[ledgerID]; ok {
		return last, nil
	}
	last, err := s.lastIndexed(ledgerID)
	if err != nil {
		return 0, err
	}
	if st.last == nil || len(st.last) >= maxStripeCache {
		st.last = make(map[int64]int64)
	}
	st.last[ledgerID] = last
	return last, nil
}

// acquire returns log id with a reference the caller must release, or nil if
// the log does not exist (any more).
func (s *Storage) acquire(id uint64) *logFile {
	s.files.RLock()
	defer s.files.RUnlock()
	lf := s.files.m[id]
	if lf != nil {
		lf.refs.Add(1)
	}
	return lf
}

// addLive adjusts the in-memory counters of log id after a committed batch.
func (s *Storage) addLive(id uint64, c counter) {
	if lf := s.acquire(id); lf != nil {
		lf.live.Add(c.bytes)
		lf.liveEntries.Add(c.entries)
		lf.release()
	}
}

// Put stores entry (ledgerID, entryID). It is visible to Get on return and
// durable after the next Flush. Re-putting identical bytes is a no-op;
// different bytes replace the entry.
func (s *Storage) Put(ledgerID, entryID int64, entry []byte) error {
	if ledgerID < 0 || entryID < 0 {
		return ErrInvalidID
	}
	if len(entry) > MaxEntrySize {
		return ErrEntryTooLarge
	}
	if err := s.enterWrite(); err != nil {
		return err
	}
	defer s.leave()
	st := s.stripe(ledgerID)
	st.Lock()
	defer st.Unlock()

	key := entryKey(ledgerID, entryID)
	last, err := s.lastLocked(st, ledgerID)
	if err != nil {
		return err
	}
	var (
		old   location
		found bool
	)
	if entryID <= last {
		if old, found, err = s.location(key); err != nil {
			return err
		}
	}
	if found {
		if lf := s.acquire(old.log); lf != nil {
			p, err := lf.readRecord(old.offset, old.length, ledgerID, entryID)
			lf.release()
			if err == nil && bytes.Equal(p, entry) {
				return nil // journal replay of an entry we already hold
			}
		}
	}
	lf, loc, err := s.append(ledgerID, entryID, entry)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	var vbuf [locationSize + counterSize]byte
	add := counter{loc.recordSize(), 1}
	_ = b.Set(key, loc.appendTo(vbuf[:0]), nil)
	_ = b.Merge(counterKey(loc.log), add.appendTo(vbuf[:0]), nil)
	sub := counter{-old.recordSize(), -1}
	if found {
		_ = b.Merge(counterKey(old.log), sub.appendTo(vbuf[:0]), nil)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("storage: index put: %w", err)
	}
	lf.live.Add(add.bytes)
	lf.liveEntries.Add(add.entries)
	if found {
		s.addLive(old.log, sub)
	}
	if entryID > last {
		st.last[ledgerID] = entryID
	}
	return nil
}

// append writes one record at the end of the current log, rolling it first
// if the record would take it past EntryLogSize. The bytes are readable on
// return (not synced).
func (s *Storage) append(ledgerID, entryID int64, payload []byte) (*logFile, location, error) {
	s.w.Lock()
	defer s.w.Unlock()
	recSize := int64(recordHeaderSize + len(payload))
	cur := s.w.cur
	size := cur.size.Load()
	if size > logHeaderSize && size+recSize > s.opts.EntryLogSize {
		if err := s.rollLocked(); err != nil {
			return nil, location{}, err
		}
		cur = s.w.cur
		size = cur.size.Load()
	}
	s.w.buf = appendRecord(s.w.buf[:0], ledgerID, entryID, payload)
	_, err := cur.f.WriteAt(s.w.buf, size)
	if cap(s.w.buf) > 1<<20 {
		s.w.buf = nil // don't pin a large entry's buffer
	}
	if err != nil {
		// The size is not advanced: the next record overwrites whatever
		// part of this one reached the file.
		return nil, location{}, fmt.Errorf("storage: append to log %d: %w", cur.id, err)
	}
	cur.size.Store(size + recSize)
	return cur, location{log: cur.id, offset: size, length: uint32(len(payload))}, nil
}

// rollLocked creates the next log, syncs the current one and makes the new
// one current. Requires s.w.
func (s *Storage) rollLocked() error {
	next, err := s.createLog(s.w.nextID)
	if err != nil {
		return err
	}
	s.w.nextID++
	old := s.w.cur
	if err := old.f.SyncData(); err != nil {
		_ = next.f.Close()
		_ = s.fs.Remove(s.fs.PathJoin(s.dir, logFileName(next.id)))
		err = fmt.Errorf("sync entry log %d: %w", old.id, err)
		s.becomeFailed(err)
		return err
	}
	s.files.Lock()
	s.files.m[next.id] = next
	s.files.Unlock()
	s.w.cur = next
	s.cur.Store(next)
	s.opts.Logger.Debug("storage: rolled entry log", "old", old.id, "new", next.id, "size", old.size.Load())
	return nil
}

// location looks up an index key.
func (s *Storage) location(key []byte) (location, bool, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return location{}, false, nil
	}
	if err != nil {
		return location{}, false, fmt.Errorf("storage: index get: %w", err)
	}
	loc, err := decodeLocation(v)
	_ = closer.Close()
	if err != nil {
		return location{}, false, fmt.Errorf("storage: index value for %x: %w", key, err)
	}
	return loc, true, nil
}

// Get returns a copy of entry (ledgerID, entryID); entryID -1 means the
// last entry. It returns ErrNoSuchLedger for an unknown ledger and
// ErrNoSuchEntry for an absent entry of a known one; an entry whose record
// fails verification is a *CorruptionError, never wrong bytes.
func (s *Storage) Get(ledgerID, entryID int64) ([]byte, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if ledgerID < 0 {
		return nil, ErrNoSuchLedger
	}
	if entryID == -1 {
		last, err := s.lastEntryID(ledgerID)
		if err != nil {
			return nil, err
		}
		if last < 0 {
			return nil, ErrNoSuchEntry
		}
		entryID = last
	}
	if entryID < 0 {
		return nil, ErrNoSuchEntry
	}
	key := entryKey(ledgerID, entryID)
	// A concurrent Compact may move the entry and delete its old log
	// between our index read and our file lookup; the index then already
	// names the new log, so look again. Compaction of one log cannot finish
	// twice within a retry unless something is badly wrong.
	for attempt := 0; ; attempt++ {
		loc, found, err := s.location(key)
		if err != nil {
			return nil, err
		}
		if !found {
			known, err := s.known(ledgerID)
			if err != nil {
				return nil, err
			}
			if !known {
				return nil, ErrNoSuchLedger
			}
			return nil, ErrNoSuchEntry
		}
		lf := s.acquire(loc.log)
		if lf == nil {
			if attempt < 3 {
				continue
			}
			return nil, &CorruptionError{Log: loc.log, Offset: loc.offset, Err: errors.New("entry log missing")}
		}
		p, err := lf.readRecord(loc.offset, loc.length, ledgerID, entryID)
		lf.release()
		return p, err
	}
}

// known reports whether the ledger has metadata or at least one entry.
func (s *Storage) known(ledgerID int64) (bool, error) {
	_, ok, err := s.meta(ledgerID)
	if err != nil || ok {
		return ok, err
	}
	last, err := s.lastIndexed(ledgerID)
	return last >= 0, err
}

// LastEntryID returns the highest entry ID stored for the ledger, -1 if it
// has metadata but no entries, or ErrNoSuchLedger.
func (s *Storage) LastEntryID(ledgerID int64) (int64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.leave()
	return s.lastEntryID(ledgerID)
}

func (s *Storage) lastEntryID(ledgerID int64) (int64, error) {
	if ledgerID < 0 {
		return 0, ErrNoSuchLedger
	}
	last, err := s.lastIndexed(ledgerID)
	if err != nil || last >= 0 {
		return last, err
	}
	_, ok, err := s.meta(ledgerID)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, ErrNoSuchLedger
	}
	return -1, nil
}

// lastIndexed returns the ledger's highest entry ID in the index, or -1.
func (s *Storage) lastIndexed(ledgerID int64) (int64, error) {
	lower, upper := ledgerEntryBounds(ledgerID)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, fmt.Errorf("storage: index iter: %w", err)
	}
	last := int64(-1)
	if it.Last() {
		_, last, _ = decodeEntryKey(it.Key())
	}
	err = it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("storage: index iter: %w", err)
	}
	return last, nil
}

// ListEntries returns the ledger's entry IDs as sorted, inclusive, disjoint
// ranges [first, last]. It returns ErrNoSuchLedger for an unknown ledger and
// no ranges for a ledger with metadata only.
func (s *Storage) ListEntries(ledgerID int64) ([][2]int64, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if ledgerID < 0 {
		return nil, ErrNoSuchLedger
	}
	lower, upper := ledgerEntryBounds(ledgerID)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("storage: index iter: %w", err)
	}
	var out [][2]int64
	for valid := it.First(); valid; valid = it.Next() {
		_, e, _ := decodeEntryKey(it.Key())
		if n := len(out); n > 0 && out[n-1][1]+1 == e {
			out[n-1][1] = e
		} else {
			out = append(out, [2]int64{e, e})
		}
	}
	err = it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("storage: index iter: %w", err)
	}
	if len(out) == 0 {
		if _, ok, err := s.meta(ledgerID); err != nil || !ok {
			return nil, cmpErr(err, ErrNoSuchLedger)
		}
	}
	return out, nil
}

// cmpErr returns err if non-nil, otherwise fallback.
func cmpErr(err, fallback error) error {
	if err != nil {
		return err
	}
	return fallback
}

// SetMeta replaces the ledger's metadata (which makes the ledger known).
// Durable after the next Flush.
func (s *Storage) SetMeta(ledgerID int64, m LedgerMeta) error {
	if ledgerID < 0 {
		return ErrInvalidID
	}
	if err := s.enterWrite(); err != nil {
		return err
	}
	defer s.leave()
	st := s.stripe(ledgerID)
	st.Lock()
	defer st.Unlock()
	if err := s.db.Set(metaKey(ledgerID), m.AppendTo(nil), pebble.NoSync); err != nil {
		return fmt.Errorf("storage: set meta: %w", err)
	}
	return nil
}

// Meta returns the ledger's metadata and whether it has any.
func (s *Storage) Meta(ledgerID int64) (LedgerMeta, bool, error) {
	if err := s.enter(); err != nil {
		return LedgerMeta{}, false, err
	}
	defer s.leave()
	return s.meta(ledgerID)
}

func (s *Storage) meta(ledgerID int64) (LedgerMeta, bool, error) {
	if ledgerID < 0 {
		return LedgerMeta{}, false, nil
	}
	v, closer, err := s.db.Get(metaKey(ledgerID))
	if errors.Is(err, pebble.ErrNotFound) {
		return LedgerMeta{}, false, nil
	}
	if err != nil {
		return LedgerMeta{}, false, fmt.Errorf("storage: get meta: %w", err)
	}
	m, err := decodeMeta(v)
	_ = closer.Close()
	if err != nil {
		return LedgerMeta{}, false, fmt.Errorf("storage: ledger %d meta: %w", ledgerID, err)
	}
	return m, true, nil
}

// Ledgers returns, ascending, every ledger with metadata or entries.
func (s *Storage) Ledgers() ([]int64, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	var out []int64
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixMeta}, UpperBound: []byte{prefixMeta + 1}})
	if err != nil {
		return nil, fmt.Errorf("storage: index iter: %w", err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		if k := it.Key(); len(k) == 9 {
			out = append(out, int64(uint64FromKey(k[1:])))
		}
	}
	err = it.Error()
	_ = it.Close()
	if err != nil {
		return nil, fmt.Errorf("storage: index iter: %w", err)
	}
	it, err = s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEntry}, UpperBound: []byte{prefixEntry + 1}})
	if err != nil {
		return nil, fmt.Errorf("storage: index iter: %w", err)
	}
	// Skip from ledger to ledger instead of visiting every entry.
	for valid := it.First(); valid; {
		l, _, ok := decodeEntryKey(it.Key())
		if !ok {
			break
		}
		out = append(out, l)
		_, next := ledgerEntryBounds(l)
		valid = it.SeekGE(next)
	}
	err = it.Error()
	_ = it.Close()
	if err != nil {
		return nil, fmt.Errorf("storage: index iter: %w", err)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// DeleteLedger removes the ledger's index entries and metadata. Its bytes
// stay in the entry logs until Compact rewrites or deletes them. Deleting an
// unknown ledger is a no-op. Durable after the next Flush.
func (s *Storage) DeleteLedger(ledgerID int64) error {
	if ledgerID < 0 {
		return ErrInvalidID
	}
	if err := s.enterWrite(); err != nil {
		return err
	}
	defer s.leave()
	st := s.stripe(ledgerID)
	st.Lock()
	defer st.Unlock()
	delete(st.last, ledgerID)

	lower, upper := ledgerEntryBounds(ledgerID)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("storage: index iter: %w", err)
	}
	perLog := make(map[uint64]counter)
	for valid := it.First(); valid; valid = it.Next() {
		loc, err := decodeLocation(it.Value())
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("storage: index value for %x: %w", it.Key(), err)
		}
		c := perLog[loc.log]
		c.bytes -= loc.recordSize()
		c.entries--
		perLog[loc.log] = c
	}
	err = it.Error()
	_ = it.Close()
	if err != nil {
		return fmt.Errorf("storage: index iter: %w", err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(lower, upper, nil)
	_ = b.Delete(metaKey(ledgerID), nil)
	for id, c := range perLog {
		_ = b.Merge(counterKey(id), c.appendTo(nil), nil)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("storage: delete ledger: %w", err)
	}
	for id, c := range perLog {
		s.addLive(id, c)
	}
	return nil
}

// Flush makes every Put, SetMeta and DeleteLedger that returned before the
// call durable: it syncs the current entry log, then flushes Pebble's
// memtable to a synced sstable. After it returns the journal may be trimmed
// up to the point noted before the call.
func (s *Storage) Flush() error {
	if err := s.enterWrite(); err != nil {
		return err
	}
	defer s.leave()
	return s.flush()
}

func (s *Storage) flush() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if p := s.failErr.Load(); p != nil {
		return *p // never make index entries durable over unsynced logs
	}
	// Logs before the current one were synced when rolled.
	if lf := s.cur.Load(); lf != nil {
		if err := lf.f.SyncData(); err != nil {
			s.becomeFailed(fmt.Errorf("sync entry log %d: %w", lf.id, err))
			return *s.failErr.Load()
		}
	}
	if err := s.db.Flush(); err != nil {
		return fmt.Errorf("storage: flush index: %w", err)
	}
	if p := s.failErr.Load(); p != nil {
		return *p // onFlushBegin failed to sync
	}
	return nil
}

// Close flushes (unless the Storage failed), closes the index and the logs.
// It waits for running calls; a running Compact is cancelled. Idempotent.
func (s *Storage) Close() error {
	s.closeOnce.Do(func() {
		failed := s.State() == StateFailed
		s.becomeClosed()
		close(s.done)
		s.gate.Lock()
		defer s.gate.Unlock()
		var errs []error
		if !failed {
			errs = append(errs, s.flush())
		}
		errs = append(errs, s.db.Close())
		s.releaseAll()
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// releaseAll drops the files map's reference to every log.
func (s *Storage) releaseAll() {
	s.files.Lock()
	defer s.files.Unlock()
	for id, lf := range s.files.m {
		delete(s.files.m, id)
		lf.release()
	}
}

// pebbleLogger routes Pebble's messages to slog. Pebble's Info lines are
// chatty, so they go to Debug.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic(msg)
}
