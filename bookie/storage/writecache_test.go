package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

func TestWriteCacheCore(t *testing.T) {
	var allocs int
	alloc := func() []byte { allocs++; return make([]byte, 0, cacheChunkSize) }
	wc := newWriteCache()
	small, big := payload(1, 0, 100), payload(1, 1, cacheLargeEntry+1)
	wc.put(1, 0, small, false, alloc)
	wc.put(1, 1, big, false, alloc)
	wc.put(1, 2, small, false, alloc) // after the dedicated chunk: same small chunk
	if allocs != 1 || len(wc.chunks) != 2 {
		t.Errorf("%d chunk allocations, %d chunks; want 1, 2", allocs, len(wc.chunks))
	}
	for e, want := range [][]byte{small, big, small} {
		if got, ok := wc.get(1, int64(e)); !ok || !bytes.Equal(got, want) {
			t.Errorf("get(1,%d) = %d bytes, %v", e, len(got), ok)
		}
	}
	wc.put(1, 0, big[:50], true, alloc) // replace
	if got, _ := wc.get(1, 0); !bytes.Equal(got, big[:50]) {
		t.Error("replaced entry not returned")
	}
	wc.put(1, 0, small, false, alloc) // mayBeIndexed sticks
	if s, _ := wc.ledgers[1].entries.get(0); !s.mayBeIndexed {
		t.Error("replacement dropped mayBeIndexed")
	}
	if wc.ledgers[1].last != 2 || wc.puts != 5 {
		t.Errorf("last %d, puts %d", wc.ledgers[1].last, wc.puts)
	}
	wc.put(2, 7, small, false, alloc)
	wc.markDeleted(2)
	if _, ok := wc.get(2, 7); ok || wc.ledger(2) != nil || slices.Contains(wc.appendLedgers(nil), 2) {
		t.Error("entries of a ledger marked deleted are visible")
	}
	wc.deleteLedger(1)
	if _, ok := wc.get(1, 0); ok {
		t.Error("deleted ledger's entry visible")
	}
	var freed [][]byte
	wc.reset(func(b []byte) { freed = append(freed, b) })
	if len(freed) != 1 || len(freed[0]) != 0 || wc.bytes != 0 || len(wc.ledgers) != 0 || len(wc.freeLedgers) != 1 {
		t.Errorf("reset: %d chunks freed, %d bytes, %d ledgers, %d free ledgers",
			len(freed), wc.bytes, len(wc.ledgers), len(wc.freeLedgers))
	}
	wc.put(3, 0, small, false, func() []byte { return freed[0] })
	if got, _ := wc.get(3, 0); !bytes.Equal(got, small) || len(wc.freeLedgers) != 0 || wc.ledgers[3].last != 0 {
		t.Error("recycled generation does not work")
	}
}

// readBack checks every entry whose Put returned (written[l] entries of
// ledger l+1) through Get, LastEntryID, ListEntries and Ledgers.
func readBack(s *Storage, written []atomic.Int64, size int) error {
	var ledgers []int64
	for i := range written {
		l, n := int64(i+1), written[i].Load()
		if n == 0 {
			continue
		}
		ledgers = append(ledgers, l)
		for e := range n {
			got, err := s.Get(l, e)
			if err != nil || !bytes.Equal(got, payload(l, e, size)) {
				return fmt.Errorf("Get(%d,%d) = %d bytes, %v", l, e, len(got), err)
			}
		}
		if last, err := s.LastEntryID(l); err != nil || last < n-1 {
			return fmt.Errorf("LastEntryID(%d) = %d, %v; want ≥ %d", l, last, err, n-1)
		}
		rs, err := s.ListEntries(l)
		if err != nil || len(rs) != 1 || rs[0][0] != 0 || rs[0][1] < n-1 {
			return fmt.Errorf("ListEntries(%d) = %v, %v; want [[0 ≥%d]]", l, rs, err, n-1)
		}
	}
	got, err := s.Ledgers()
	if err != nil {
		return err
	}
	for _, l := range ledgers {
		if !slices.Contains(got, l) {
			return fmt.Errorf("Ledgers() = %v, misses %d", got, l)
		}
	}
	return nil
}

// TestWriteCacheHandover checks, at every stage of every flush, that each
// entry put so far is found: sealed but unwritten, written and synced but
// not indexed, indexed but still cached, and dropped from the cache.
func TestWriteCacheHandover(t *testing.T) {
	const (
		ledgers = 3
		perL    = 60
		size    = 1000
	)
	var (
		s       *Storage
		written [ledgers]atomic.Int64
		stages  [stageDropped + 1]int
		failure atomic.Pointer[error]
	)
	opts := Options{WriteCacheSize: 8 << 10, EntryLogSize: 32 << 10}
	opts.flushHook = func(st flushStage) {
		stages[st]++
		if err := readBack(s, written[:], size); err != nil {
			err = fmt.Errorf("at stage %d: %w", st, err)
			failure.CompareAndSwap(nil, &err)
		}
	}
	s = openT(t, t.TempDir(), opts)
	for e := range int64(perL) {
		for i := range written {
			l := int64(i + 1)
			mustPut(t, s, l, e, payload(l, e, size))
			written[i].Store(e + 1)
		}
	}
	flushT(t, s)
	if p := failure.Load(); p != nil {
		t.Fatal(*p)
	}
	if err := readBack(s, written[:], size); err != nil {
		t.Fatal(err)
	}
	t.Logf("stages reached: %v; stats %+v", stages, s.Stats())
	for st, n := range stages {
		if n < 10 {
			t.Errorf("stage %d reached %d times", st, n)
		}
	}
	if st := s.Stats(); st.CacheBytes != 0 || st.LiveEntries != ledgers*perL || len(st.Logs) < 3 {
		t.Errorf("after Flush: %d cache bytes, %d live entries, %d logs", st.CacheBytes, st.LiveEntries, len(st.Logs))
	}
	checkCounters(t, s)
	closeT(t, s)
}

// TestWriteCacheConcurrentReaders runs writers that fill a tiny cache (a
// flush every few entries) against readers that must find every entry
// whose Put has returned, at every instant.
func TestWriteCacheConcurrentReaders(t *testing.T) {
	for _, flushes := range []bool{false, true} {
		t.Run(fmt.Sprintf("flush=%v", flushes), func(t *testing.T) {
			const (
				writers = 4
				perW    = 400
				size    = 700
			)
			s := openT(t, t.TempDir(), Options{WriteCacheSize: 4 << 10, EntryLogSize: 64 << 10})
			defer closeT(t, s)
			var (
				written [writers]atomic.Int64
				wg, rg  sync.WaitGroup
				errc    = make(chan error, 16)
				stop    = make(chan struct{})
			)
			for w := range writers {
				wg.Go(func() {
					l := int64(w + 1)
					for e := range int64(perW) {
						if err := s.Put(l, e, payload(l, e, size)); err != nil {
							errc <- err
							return
						}
						written[w].Store(e + 1)
					}
				})
			}
			for r := range 2 {
				rg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(r), 1))
					loopUntil(stop, errc, func() error {
						l, n := pickWritten(rng, written[:])
						if n == 0 {
							return nil
						}
						if err := getEq(s, l, n-1-rng.Int64N(min(n, 8)), size); err != nil { // mostly the newest
							return err
						}
						if last, err := s.LastEntryID(l); err != nil || last < n-1 {
							return fmt.Errorf("LastEntryID(%d) = %d, %v; want ≥ %d", l, last, err, n-1)
						}
						if rs, err := s.ListEntries(l); err != nil || len(rs) != 1 || rs[0][1] < n-1 {
							return fmt.Errorf("ListEntries(%d) = %v, %v; want [[0 ≥%d]]", l, rs, err, n-1)
						}
						return nil
					})
				})
			}
			if flushes {
				rg.Go(func() { loopUntil(stop, errc, s.Flush) })
			}
			stopReaders(t, &wg, &rg, stop, errc)
			if err := readBack(s, written[:], size); err != nil {
				t.Error(err)
			}
			st := s.Stats()
			t.Logf("%d flushes of %d entries, %d blocked puts", st.CacheFlushes, st.CacheFlushed, st.CacheBlockedPuts)
			if st.CacheFlushes < 100 {
				t.Errorf("only %d flushes", st.CacheFlushes)
			}
			flushT(t, s)
			checkCounters(t, s)
		})
	}
}

// TestWriteCacheBackPressure: with the sealed generation stuck in its
// flush, Puts fill the active one and then wait; they go on once the flush
// completes, and memory stays bounded.
func TestWriteCacheBackPressure(t *testing.T) {
	release := make(chan struct{})
	blocked := make(chan struct{}, 1)
	var once sync.Once
	opts := Options{WriteCacheSize: 8 << 10}
	opts.flushHook = func(st flushStage) {
		if st == stageSynced {
			once.Do(func() { <-release })
		}
	}
	opts.blockedHook = func() {
		select {
		case blocked <- struct{}{}:
		default:
		}
	}
	s := openT(t, t.TempDir(), opts)
	defer closeT(t, s)
	done := make(chan error, 1)
	go func() {
		for e := range int64(40) {
			if err := s.Put(1, e, payload(1, e, 1000)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	<-blocked
	if st := s.Stats(); st.CacheBytes > 2*(opts.WriteCacheSize+recordHeaderSize+1000) || st.CacheBlockedPuts == 0 {
		t.Errorf("blocked with %d cache bytes, %d blocked puts", st.CacheBytes, st.CacheBlockedPuts)
	}
	for e := range int64(8) { // readable while stuck
		mustGetEq(t, s, 1, e, payload(1, e, 1000))
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for e := range int64(40) {
		mustGetEq(t, s, 1, e, payload(1, e, 1000))
	}
	flushT(t, s)
	checkCounters(t, s)
}

// TestWriteCacheLargeEntry: entries larger than the whole cache work, as do
// ones larger than an arena chunk.
func TestWriteCacheLargeEntry(t *testing.T) {
	dir := t.TempDir()
	opts := Options{WriteCacheSize: 64 << 10, EntryLogSize: 1 << 20}
	s := openT(t, dir, opts)
	sizes := []int{10, 100 << 10, 3 << 20, 10, cacheChunkSize + 1, 5}
	for e, n := range sizes {
		mustPut(t, s, 1, int64(e), payload(1, int64(e), n))
	}
	for e, n := range sizes {
		mustGetEq(t, s, 1, int64(e), payload(1, int64(e), n))
	}
	closeT(t, s)
	s = openT(t, dir, opts)
	defer closeT(t, s)
	for e, n := range sizes {
		mustGetEq(t, s, 1, int64(e), payload(1, int64(e), n))
	}
	checkCounters(t, s)
}

// TestWriteCacheDeleteDuringFlush deletes a ledger at each stage of the
// flush of a generation holding its entries: they must not come back, in
// the running store or after a reopen, and the counters must match.
func TestWriteCacheDeleteDuringFlush(t *testing.T) {
	for _, stage := range []flushStage{stageSealed, stageSynced, stageCommitted, stageDropped} {
		t.Run(fmt.Sprintf("stage=%d", stage), func(t *testing.T) {
			dir := t.TempDir()
			var (
				s     *Storage
				armed atomic.Bool
				err   error
			)
			opts := Options{}
			opts.flushHook = func(st flushStage) {
				if st == stage && armed.CompareAndSwap(true, false) {
					err = s.DeleteLedger(1)
				}
			}
			s = openT(t, dir, opts)
			putPair(t, s, 0, 10, 100)
			armed.Store(true)
			flushT(t, s)
			if err != nil || armed.Load() {
				t.Fatalf("DeleteLedger in the hook: %v (ran: %v)", err, !armed.Load())
			}
			check := func(s *Storage) {
				t.Helper()
				if _, err := s.Get(1, 3); !errors.Is(err, ErrNoSuchLedger) {
					t.Errorf("Get(deleted) = %v", err)
				}
				if ls, err := s.Ledgers(); err != nil || !slices.Equal(ls, []int64{2}) {
					t.Errorf("Ledgers() = %v, %v", ls, err)
				}
				for e := range int64(10) {
					mustGetEq(t, s, 2, e, payload(2, e, 100))
				}
				checkCounters(t, s)
			}
			check(s)
			flushT(t, s)
			check(s)
			// A Put after the delete makes the ledger exist again.
			mustPut(t, s, 1, 0, payload(1, 0, 100))
			mustGetEq(t, s, 1, 0, payload(1, 0, 100))
			if err := s.DeleteLedger(1); err != nil {
				t.Fatal(err)
			}
			closeT(t, s)
			s = openT(t, dir, Options{})
			defer closeT(t, s)
			check(s)
		})
	}
}

var errInjected = errors.New("injected sync error")

// TestWriteCacheSyncFailure: a failed entry-log sync in the flusher fails
// the Storage; later writes and Flush get ErrSyncFailed, a Put waiting for
// cache space is released with it, and cached entries stay readable.
func TestWriteCacheSyncFailure(t *testing.T) {
	fail := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if _, ok := parseLogFileName(path.Base(op.Path)); ok && op.Kind == errorfs.OpFileSyncData {
			return errInjected
		}
		return nil
	})}
	release := make(chan struct{})
	blocked := make(chan struct{}, 1)
	var stuck atomic.Bool
	opts := Options{FS: errorfs.Wrap(vfs.NewMem(), fail), WriteCacheSize: 8 << 10}
	opts.flushHook = func(st flushStage) {
		if st == stageSealed && stuck.Load() {
			<-release
		}
	}
	opts.blockedHook = func() {
		select {
		case blocked <- struct{}{}:
		default:
		}
	}
	s := openT(t, "/db", opts)
	for e := range int64(20) {
		mustPut(t, s, 1, e, payload(1, e, 1000))
	}
	flushT(t, s)

	stuck.Store(true)
	done := make(chan error, 1)
	go func() {
		for e := int64(20); e < 60; e++ {
			if err := s.Put(1, e, payload(1, e, 1000)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	<-blocked
	fail.On()
	close(release)
	if err := <-done; !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("blocked Put = %v, want ErrSyncFailed", err)
	}
	if st := s.State(); st != StateFailed {
		t.Fatalf("state %v", st)
	}
	n := int64(20)
	for ; n < 60; n++ { // the entries put before the failure: all readable
		got, err := s.Get(1, n)
		if errors.Is(err, ErrNoSuchEntry) {
			break
		}
		if err != nil || !bytes.Equal(got, payload(1, n, 1000)) {
			t.Fatalf("Get(1,%d) after failure: %v", n, err)
		}
	}
	if n < 28 {
		t.Errorf("only %d entries readable", n)
	}
	if err := s.Put(1, 100, []byte("x")); !errors.Is(err, ErrSyncFailed) {
		t.Errorf("Put after failure = %v", err)
	}
	if err := s.Flush(); !errors.Is(err, ErrSyncFailed) {
		t.Errorf("Flush after failure = %v", err)
	}
	if err := s.DeleteLedger(1); !errors.Is(err, ErrSyncFailed) {
		t.Errorf("DeleteLedger after failure = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close after failure = %v", err)
	}
}

// TestCrashDropsCache: entries still in the write cache at a crash are
// gone after reopen (the journal replays them); flushed ones survive.
func TestCrashDropsCache(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := Options{FS: fs, WriteCacheSize: 1 << 20, Logger: quiet}
	s := openT(t, "/db", opts)
	for e := range int64(100) {
		mustPut(t, s, 1, e, payload(1, e, 1000))
	}
	flushT(t, s)
	putPair(t, s, 100, 200, 1000)
	// Keep every unsynced byte: what is lost was never written at all.
	c := crashReopen(t, fs, s, opts, 100, rand.New(rand.NewPCG(1, 2)))
	defer closeT(t, c)
	for e := range int64(100) {
		mustGetEq(t, c, 1, e, payload(1, e, 1000))
	}
	if _, err := c.Get(1, 100); !errors.Is(err, ErrNoSuchEntry) {
		t.Errorf("Get(cached only) = %v, want ErrNoSuchEntry", err)
	}
	if _, err := c.Get(2, 100); !errors.Is(err, ErrNoSuchLedger) {
		t.Errorf("Get(ledger only cached) = %v, want ErrNoSuchLedger", err)
	}
	if last, err := c.LastEntryID(1); err != nil || last != 99 {
		t.Errorf("LastEntryID = %d, %v; want 99", last, err)
	}
	checkCounters(t, c)
}

// TestCompactSkipsLogsBeingFlushed: a log the flusher wrote to (and rolled
// past) is not a compaction candidate until its records are indexed — its
// live counters don't count them yet, so it would look empty.
func TestCompactSkipsLogsBeingFlushed(t *testing.T) {
	var (
		s       *Storage
		first   uint64 // the current log when the flush began
		checked int
		bad     atomic.Pointer[string]
	)
	opts := Options{EntryLogSize: 8 << 10, WriteCacheSize: 32 << 10}
	opts.flushHook = func(st flushStage) {
		switch st {
		case stageSealed:
			first = s.cur.Load().id
		case stageSynced:
			for _, lf := range s.compactionCandidates(1.1) {
				if lf.id >= first {
					msg := fmt.Sprintf("log %d, written by the running flush, is a candidate", lf.id)
					bad.CompareAndSwap(nil, &msg)
				}
				lf.release()
			}
			checked++
		}
	}
	s = openT(t, t.TempDir(), opts)
	defer closeT(t, s)
	for e := range int64(100) {
		mustPut(t, s, 1, e, payload(1, e, 1000))
	}
	flushT(t, s)
	if p := bad.Load(); p != nil {
		t.Fatal(*p)
	}
	if checked == 0 || len(s.Stats().Logs) < 10 {
		t.Fatalf("%d flushes checked, %d logs", checked, len(s.Stats().Logs))
	}
	if _, err := s.Compact(context.Background(), 1.1); err != nil {
		t.Fatal(err)
	}
	for e := range int64(100) {
		mustGetEq(t, s, 1, e, payload(1, e, 1000))
	}
	checkCounters(t, s)
}

// TestFlushPacing: a generation sealed for size is written over half its fill time (at
// most maxPaceBudget); a flush somebody waits for is not paced, and hurry ends a pacing.
func TestFlushPacing(t *testing.T) {
	now := time.Now()
	wc := &writeCache{first: now.Add(-400 * time.Millisecond), sealed: now, bytes: 4 << 20}
	if p := paceFor(wc, true); p.budget != 0 {
		t.Fatalf("requested flush paced over %v", p.budget)
	}
	if p := paceFor(&writeCache{first: now.Add(-time.Hour), sealed: now, bytes: 1}, false); p.budget != maxPaceBudget {
		t.Fatalf("budget %v, want the cap %v", p.budget, maxPaceBudget)
	}
	p := paceFor(wc, false)
	if p.budget != 200*time.Millisecond {
		t.Fatalf("budget %v, want half the 400ms fill time", p.budget)
	}
	s := &Storage{}
	s.fl.hurry = make(chan struct{}, 1)
	s.fl.stop = make(chan struct{})
	p.wait(s, 2<<20) // half the bytes: not before half the budget
	if el := time.Since(p.start); el < 100*time.Millisecond {
		t.Fatalf("half the generation written after %v, want ≥ 100ms", el)
	}
	s.hurry()
	p.wait(s, 1<<20) // due at 150ms, but hurried: returns and stops pacing
	if p.budget != 0 {
		t.Fatal("hurry did not end the pacing")
	}
	p.wait(s, 1<<20)
}

// TestFlushPaced: FlushPaced writes the cache at the pace of a generation that filled up
// (half its fill time), and a Flush meanwhile hurries it.
func TestFlushPaced(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	defer closeT(t, s)
	fill := func(ledger int64, filledFor time.Duration) {
		for e := range int64(64) {
			mustPut(t, s, ledger, e, payload(ledger, e, 16<<10))
		}
		s.cache.Lock()
		s.cache.active.first = time.Now().Add(-filledFor)
		s.cache.Unlock()
	}

	// Filled over 2 s: written over 1 s, the last bytes not before it is over.
	fill(1, 2*time.Second)
	start := time.Now()
	if err := s.FlushPaced(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Fatalf("FlushPaced of a generation filled over 2s took %v: want it paced over about 1s", took)
	}
	for e := range int64(64) {
		mustGetEq(t, s, 1, e, payload(1, e, 16<<10))
	}

	// Filled over 1 h: paced over maxPaceBudget (10 s), until a Flush hurries it, or
	// its context ending (the bookie closing).
	hurried := func(ctx context.Context, ledger int64, hurry func() error) {
		fill(ledger, time.Hour)
		paced := make(chan error, 1)
		start := time.Now()
		go func() { paced <- s.FlushPaced(ctx) }()
		waitFor(t, func() bool {
			s.cache.RLock()
			defer s.cache.RUnlock()
			return s.cache.sealed != nil // the paced flush has begun
		})
		if err := hurry(); err != nil {
			t.Fatal(err)
		}
		if err := <-paced; err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > maxPaceBudget/2 {
			t.Fatalf("ledger %d: hurried FlushPaced took %v: want well under the %v budget", ledger, took, maxPaceBudget)
		}
		for e := range int64(64) {
			mustGetEq(t, s, ledger, e, payload(ledger, e, 16<<10))
		}
	}
	hurried(context.Background(), 2, s.Flush)
	ctx, cancel := context.WithCancel(context.Background())
	hurried(ctx, 3, func() error { cancel(); return nil })
}
