package storage

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	iofs "io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/internal/chunkpool"
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
	// ErrSyncFailed marks the Storage as failed after an fsync error (or a
	// failed background write of cached entries): writes and Flush return it
	// until the process restarts and the journal replays.
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
	// WriteCacheSize is the size at which the active write-cache generation
	// is sealed and flushed to the entry log and the index in the
	// background. The cache holds at most two generations, so it uses about
	// twice this much memory. Default 32 MiB.
	WriteCacheSize int64

	// memTableSize overrides Pebble's memtable size (tests force flushes).
	memTableSize uint64
	// flushHook, if set, runs on the flusher goroutine at each stage of a
	// generation's flush (tests observe the handover).
	flushHook func(flushStage)
	// blockedHook, if set, runs when a Put starts waiting for cache space.
	blockedHook func()
	// indexRetryHook, if set, is the index filesystem's backoffFS.waitHook.
	indexRetryHook func(time.Duration)
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
	if o.WriteCacheSize <= 0 {
		o.WriteCacheSize = defaultWriteCacheSize
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
	// StateFailed follows an fsync failure, or a write to the entry log or
	// the index by the flusher that failed: reads work (cached entries
	// included); Put, SetMeta, DeleteLedger, Flush and Compact return
	// ErrSyncFailed. Terminal until Close (the bookie restarts and replays
	// its journal).
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
	// failed is closed by becomeFailed (see Failed).
	failed chan struct{}

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
	// dropped are logs Compact deleted (renamed deletingExt) whose files are not yet
	// removed: removeDropped removes each once its last reader is gone. Guarded by
	// compactMu.
	dropped []*logFile
	// flushMu serialises flushes.
	flushMu sync.Mutex

	// stripes serialise the mutations of one ledger (Put, SetMeta,
	// DeleteLedger): the read-compare-write of a Put, its ordering with a
	// DeleteLedger of the ledger. Reads take no stripe.
	stripes [numStripes]stripe

	// indexMu serialises the index changes of entry keys, each with the
	// counter merges accounting for it: the flusher's commit, DeleteLedger,
	// and compaction's relocation commit. Each holds it from reading the
	// locations it replaces to its commit, so they are atomic with respect
	// to each other. Put and the readers never take it.
	indexMu sync.Mutex

	// cache is the write cache: Put copies entries into the active
	// generation; the flusher writes a sealed one to the entry log and the
	// index and then drops it. Readers look in active, then sealed, then the
	// index, so an entry is always found in one of them: a generation is
	// sealed atomically under the lock, and dropped only after its index
	// entries are committed.
	cache struct {
		sync.RWMutex
		// active takes Puts (mutated only under the lock). Never nil.
		active *writeCache
		// sealed is the generation being flushed, or nil. Its maps and
		// arena are immutable (the flusher reads them unlocked); only its
		// deleted set changes (see writeCache.deleted).
		sealed *writeCache
		// drained is closed when sealed is dropped, releasing Puts that
		// wait because active is full. Invariant: non-nil iff sealed is,
		// unless the Storage failed (then it is closed and nil, and sealed
		// stays, readable, until Close).
		drained chan struct{}
		// spare is the last dropped generation, emptied: the next active.
		spare *writeCache
		// chunks holds recycled arena chunks (at most a generation's worth, plus 2).
		chunks chunkpool.Pool
		// blocked counts Puts that waited for a flush (back-pressure).
		blocked uint64
	}

	// fl is the flusher goroutine's inbox (see flushLoop) and statistics.
	fl struct {
		kick    chan struct{} // cap 1: a generation was sealed
		hurry   chan struct{} // cap 1: a Put or Flush waits: stop pacing the running flush
		reqs    chan flushReq // drain requests (Flush, FlushPaced); answered when done
		stop    chan struct{} // closed by Close after its last flush
		exited  chan struct{} // closed when flushLoop returns
		flushes atomic.Uint64 // generations flushed
		entries atomic.Int64  // entries written by the flusher
		nanos   atomic.Int64  // time spent flushing generations
	}

	// cur is the current (writable) log, published for lock-free readers
	// (Compact, Stats). Written only under w.
	cur atomic.Pointer[logFile]

	// w guards appends to the current log and rolling it. Only the flusher
	// and compaction append: the add path never takes it.
	w struct {
		sync.Mutex
		cur    *logFile // == cur.Load()
		nextID uint64   // id of the next log to create; > every id ever used
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
		dir:    dir,
		opts:   opts,
		fs:     opts.FS,
		seed:   maphash.MakeSeed(),
		done:   make(chan struct{}),
		failed: make(chan struct{}),
	}
	s.files.m = make(map[uint64]*logFile)
	s.cache.active = newWriteCache()
	s.cache.chunks = chunkpool.Pool{Size: cacheChunkSize, Max: int(s.opts.WriteCacheSize/cacheChunkSize) + 2}
	s.fl.kick = make(chan struct{}, 1)
	s.fl.hurry = make(chan struct{}, 1)
	s.fl.reqs = make(chan flushReq)
	s.fl.stop = make(chan struct{})
	s.fl.exited = make(chan struct{})
	if err := mkdirAllDurable(s.fs, dir); err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", dir, err)
	}
	cache := pebble.NewCache(opts.CacheSize)
	defer cache.Unref()
	ifs := newBackoffFS(s.fs, s.done)
	ifs.waitHook = opts.indexRetryHook
	popts := &pebble.Options{
		FS:                 ifs,
		Cache:              cache,
		DisableWAL:         true, // the bookie journal replays anything lost
		Merger:             counterMerger,
		MemTableSize:       opts.memTableSize,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{opts.Logger},
		EventListener:      &pebble.EventListener{BackgroundError: s.onBackgroundError},
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
	go s.flushLoop()
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
		if base, ok := strings.CutSuffix(name, deletingExt); ok {
			// A log dropped by Compact before a crash: nothing references it.
			if id, ok := parseLogFileName(base); ok {
				maxID = max(maxID, id)
				if err := s.fs.Remove(s.fs.PathJoin(s.dir, name)); err != nil {
					return fmt.Errorf("storage: remove dropped log: %w", err)
				}
				s.opts.Logger.Info("storage: removed a log dropped before a restart", "log", id)
			}
			continue
		}
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
	lf := newLogFile(id, f, fi.Size())
	lf.live.Store(c.bytes)
	lf.liveEntries.Store(c.entries)
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
	return newLogFile(id, f, logHeaderSize), nil
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

// becomeFailed moves open → failed and releases Puts waiting for a flush.
// The first error is kept, even during Close (whose final flush may fail).
func (s *Storage) becomeFailed(err error) {
	err = fmt.Errorf("%w: %w", ErrSyncFailed, err)
	if !s.failErr.CompareAndSwap(nil, &err) {
		return
	}
	s.state.CompareAndSwap(uint32(StateOpen), uint32(StateFailed))
	s.opts.Logger.Error("storage failed; restart to replay the journal", "err", err)
	close(s.failed)
	s.wakeBlockedPuts()
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

// stripe serialises the mutations of the ledgers that hash to it.
type stripe struct {
	sync.Mutex
	// last caches, per ledger, an upper bound of the highest entry ID held
	// in the write cache or the index (-1: none). Put skips looking for an
	// entry above it — the common case, as entries arrive in order — and
	// the flusher skips looking up its old location. A cache: entries may
	// be dropped at will. Invariant: no key (ledger, e > last) is in the
	// cache or the index while the stripe is held.
	last map[int64]int64
}

// maxStripeCache bounds each stripe's last-entry cache.
const maxStripeCache = 4096

func (s *Storage) stripe(ledgerID int64) *stripe {
	return &s.stripes[maphash.Comparable(s.seed, ledgerID)%numStripes]
}

// lastLocked returns the highest entry ID of the ledger in the write cache
// or the index, or -1 (see stripe.last). Requires st locked.
func (s *Storage) lastLocked(st *stripe, ledgerID int64) (int64, error) {
	if last, ok := st.last[ledgerID]; ok {
		return last, nil
	}
	// The cache before the index: an entry the flusher moves meanwhile is
	// indexed before it leaves the cache.
	cached := s.cacheLast(ledgerID)
	last, err := s.lastIndexed(ledgerID)
	if err != nil {
		return 0, err
	}
	last = max(last, cached)
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
//
// Put copies the entry into the write cache: no I/O, unless the key may
// already be held (an entry ID not above the ledger's highest), when it is
// compared with the stored version. It blocks while the cache is full and
// its previous generation is still being flushed.
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

	last, err := s.lastLocked(st, ledgerID)
	if err != nil {
		return err
	}
	mayBeHeld := entryID <= last
	if mayBeHeld {
		equal, cached := s.cachedEqual(ledgerID, entryID, entry)
		if equal {
			return nil // journal replay of an entry we already hold
		}
		if !cached {
			// Only the flusher changes the index under us (from the sealed
			// generation, which we just looked at), and relocation, which
			// keeps the bytes.
			old, found, err := s.location(entryKey(ledgerID, entryID))
			if err != nil {
				return err
			}
			if found {
				if lf := s.acquire(old.log); lf != nil {
					p, err := lf.readRecord(old.offset, old.length, ledgerID, entryID)
					lf.release()
					if err == nil && bytes.Equal(p, entry) {
						return nil
					}
				}
			}
		}
	}
	if err := s.cachePut(ledgerID, entryID, entry, mayBeHeld); err != nil {
		return err
	}
	if entryID > last {
		st.last[ledgerID] = entryID
	}
	return nil
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
	// The cache before the index: the flusher indexes a generation's
	// entries before it drops the generation.
	if p, ok := s.cacheGet(ledgerID, entryID); ok {
		return p, nil
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
	if s.cacheLast(ledgerID) >= 0 {
		return true, nil
	}
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
	cached := s.cacheLast(ledgerID) // before the index, as in Get
	last, err := s.lastIndexed(ledgerID)
	if err != nil {
		return 0, err
	}
	if last = max(last, cached); last >= 0 {
		return last, nil
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
	cached := s.cacheEntryIDs(ledgerID) // before the index, as in Get
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
	out = mergeRanges(out, cached)
	if len(out) == 0 {
		if _, ok, err := s.meta(ledgerID); err != nil || !ok {
			return nil, cmpErr(err, ErrNoSuchLedger)
		}
	}
	return out, nil
}

// mergeRanges returns the union of sorted, disjoint, inclusive ranges and
// unordered ids, as sorted, disjoint, inclusive ranges.
func mergeRanges(ranges [][2]int64, ids []int64) [][2]int64 {
	if len(ids) == 0 {
		return ranges
	}
	for _, e := range ids {
		ranges = append(ranges, [2]int64{e, e})
	}
	slices.SortFunc(ranges, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	out := ranges[:1]
	for _, r := range ranges[1:] {
		if last := &out[len(out)-1]; r[0] <= last[1]+1 {
			last[1] = max(last[1], r[1])
		} else {
			out = append(out, r)
		}
	}
	return out
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
	out := s.cacheLedgers() // before the index, as in Get
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

// DeleteLedger removes the ledger's cached entries, index entries and
// metadata. Its bytes stay in the entry logs until Compact rewrites or
// deletes them; cached entries are never written. Deleting an unknown ledger
// is a no-op. Durable after the next Flush.
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

	// Under indexMu the flusher is not between reading a sealed generation's
	// deleted set and committing: it either committed the ledger's entries
	// already (they are deleted below) or will skip them.
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	s.cacheDeleteLedger(ledgerID)
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
// call durable: it has the flusher write, sync and index every cached entry
// (the generation being flushed, then the active one), then flushes Pebble's
// memtable to a synced sstable. After it returns the journal may be trimmed
// up to the point noted before the call.
func (s *Storage) Flush() error {
	if err := s.enterWrite(); err != nil {
		return err
	}
	defer s.leave()
	return s.flush(false)
}

// FlushPaced is Flush for a caller in no hurry (the bookie's periodic checkpoint): the
// cache is written at the pace of a generation that filled up (half its fill time, at
// most maxPaceBudget) instead of at the disk's full speed, unless a Put waiting for
// cache space, a Flush, or ctx ending hurries it. Either way it returns once everything
// is flushed, as Flush does.
func (s *Storage) FlushPaced(ctx context.Context) error {
	if err := s.enterWrite(); err != nil {
		return err
	}
	defer s.leave()
	stop := context.AfterFunc(ctx, s.hurry)
	defer stop()
	return s.flush(true)
}

func (s *Storage) flush(paced bool) error {
	if !paced {
		s.hurry() // a FlushPaced holding flushMu
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if p := s.failErr.Load(); p != nil {
		return *p
	}
	if err := s.drain(paced); err != nil {
		return err
	}
	return s.flushIndex()
}

// flushIndex flushes the index's memtable to a synced sstable. It returns when the flush
// is done or the Storage failed (a failed flush fails it: see onBackgroundError), whichever
// comes first; Pebble retries a failed flush for ever.
func (s *Storage) flushIndex() error {
	done, err := s.db.AsyncFlush()
	if err != nil {
		return fmt.Errorf("storage: flush index: %w", err)
	}
	select {
	case <-done:
		if p := s.failErr.Load(); p != nil {
			return *p
		}
		return nil
	case <-s.failed:
		return *s.failErr.Load()
	}
}

// Close flushes (unless the Storage failed; cached entries are then lost,
// for the journal to replay), stops the flusher, closes the index and the
// logs. It waits for running calls; a running Compact and Puts waiting for
// cache space are cancelled with ErrClosed. Idempotent.
func (s *Storage) Close() error {
	s.closeOnce.Do(func() {
		failed := s.State() == StateFailed
		s.becomeClosed()
		close(s.done)
		s.gate.Lock()
		defer s.gate.Unlock()
		var errs []error
		if !failed {
			errs = append(errs, s.flush(false))
		}
		close(s.fl.stop)
		<-s.fl.exited
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
