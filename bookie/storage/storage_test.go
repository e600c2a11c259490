package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

func openT(t testing.TB, dir string, opts Options) *Storage {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func closeT(t testing.TB, s *Storage) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// payload returns deterministic bytes for (ledger, entry) of length n.
func payload(ledgerID, entryID int64, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(ledgerID), uint64(entryID)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func mustPut(t testing.TB, s *Storage, l, e int64, b []byte) {
	t.Helper()
	if err := s.Put(l, e, b); err != nil {
		t.Fatalf("Put(%d,%d): %v", l, e, err)
	}
}

func flushT(t testing.TB, s *Storage) {
	t.Helper()
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// putPair puts entries [from, to) of ledgers 1 and 2, interleaved, size bytes each.
func putPair(t testing.TB, s *Storage, from, to int64, size int) {
	t.Helper()
	for e := from; e < to; e++ {
		mustPut(t, s, 1, e, payload(1, e, size))
		mustPut(t, s, 2, e, payload(2, e, size))
	}
}

// crashReopen crashes fs (keeping pct% of unsynced data), closes s and opens the crashed copy
// of "/db" with opts.
func crashReopen(t testing.TB, fs *vfs.MemFS, s *Storage, opts Options, pct int, rng *rand.Rand) *Storage {
	t.Helper()
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rng})
	closeT(t, s)
	opts.FS = crashed
	return openT(t, "/db", opts)
}

// loopUntil runs step until stop is closed or step fails; the failure goes to errc.
func loopUntil(stop <-chan struct{}, errc chan<- error, step func() error) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		if err := step(); err != nil {
			errc <- err
			return
		}
	}
}

// pickWritten picks a writer at random and returns its ledger (writer w writes ledger w+1)
// and how many entries it has written; n is 0 when it has written none yet.
func pickWritten(rng *rand.Rand, written []atomic.Int64) (l, n int64) {
	w := rng.IntN(len(written))
	return int64(w + 1), written[w].Load()
}

// stopReaders waits for the writers (wg), then stops the readers (rg) and reports every
// error they sent.
func stopReaders(t testing.TB, wg, rg *sync.WaitGroup, stop chan struct{}, errc chan error) {
	t.Helper()
	wg.Wait()
	close(stop)
	rg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// getEq reads (l, e) and compares it with its payload of size bytes.
func getEq(s *Storage, l, e int64, size int) error {
	got, err := s.Get(l, e)
	if err != nil || !bytes.Equal(got, payload(l, e, size)) {
		return fmt.Errorf("Get(%d,%d): %v (%d bytes)", l, e, err, len(got))
	}
	return nil
}

func mustGetEq(t testing.TB, s *Storage, l, e int64, want []byte) {
	t.Helper()
	got, err := s.Get(l, e)
	if err != nil {
		t.Fatalf("Get(%d,%d): %v", l, e, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%d,%d): %d bytes differ from the %d put", l, e, len(got), len(want))
	}
}

// checkCounters recomputes every log's live counters from the index and
// compares them with the in-memory and the persisted ones.
func checkCounters(t testing.TB, s *Storage) {
	t.Helper()
	want := map[uint64]counter{}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEntry}, UpperBound: []byte{prefixEntry + 1}})
	if err != nil {
		t.Fatal(err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		loc, err := decodeLocation(it.Value())
		if err != nil {
			t.Fatal(err)
		}
		c := want[loc.log]
		c.bytes += loc.recordSize()
		c.entries++
		want[loc.log] = c
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	persisted, err := s.readCounters()
	if err != nil {
		t.Fatal(err)
	}
	for id, c := range persisted {
		if c != want[id] {
			t.Errorf("log %d: persisted counter %+v, index says %+v", id, c, want[id])
		}
	}
	for _, ls := range s.Stats().Logs {
		if got := (counter{ls.LiveBytes, ls.LiveEntries}); got != want[ls.ID] {
			t.Errorf("log %d: in-memory counter %+v, index says %+v", ls.ID, got, want[ls.ID])
		}
		delete(want, ls.ID)
	}
	for id, c := range want {
		t.Errorf("index references log %d (%+v) that is not open", id, c)
	}
}

func TestPutGet(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	defer closeT(t, s)
	for l := range int64(3) {
		for e := range int64(10) {
			mustPut(t, s, l, e, payload(l, e, int(100*e)))
		}
	}
	for l := range int64(3) {
		for e := range int64(10) {
			mustGetEq(t, s, l, e, payload(l, e, int(100*e)))
		}
	}
	// Get returns a private copy.
	got, _ := s.Get(1, 5)
	got[0] ^= 0xff
	mustGetEq(t, s, 1, 5, payload(1, 5, 500))

	if err := s.Put(-1, 0, nil); !errors.Is(err, ErrInvalidID) {
		t.Errorf("Put(-1,0) = %v, want ErrInvalidID", err)
	}
	if err := s.Put(1, -1, nil); !errors.Is(err, ErrInvalidID) {
		t.Errorf("Put(1,-1) = %v, want ErrInvalidID", err)
	}
	checkCounters(t, s)
}

func TestGetLast(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	defer closeT(t, s)
	for _, e := range []int64{0, 1, 2, 9, 4} {
		mustPut(t, s, 7, e, payload(7, e, 64))
	}
	mustGetEq(t, s, 7, -1, payload(7, 9, 64))
	if last, err := s.LastEntryID(7); err != nil || last != 9 {
		t.Errorf("LastEntryID(7) = %d, %v; want 9", last, err)
	}
	// Neighbouring ledgers don't leak into the seek.
	mustPut(t, s, 8, 100, payload(8, 100, 1))
	mustPut(t, s, 6, 200, payload(6, 200, 1))
	if last, err := s.LastEntryID(7); err != nil || last != 9 {
		t.Errorf("LastEntryID(7) = %d, %v; want 9", last, err)
	}

	if err := s.SetMeta(3, LedgerMeta{}); err != nil {
		t.Fatal(err)
	}
	if last, err := s.LastEntryID(3); err != nil || last != -1 {
		t.Errorf("LastEntryID(meta only) = %d, %v; want -1", last, err)
	}
	if _, err := s.Get(3, -1); !errors.Is(err, ErrNoSuchEntry) {
		t.Errorf("Get(meta only, -1) = %v, want ErrNoSuchEntry", err)
	}
	if _, err := s.Get(4, -1); !errors.Is(err, ErrNoSuchLedger) {
		t.Errorf("Get(unknown, -1) = %v, want ErrNoSuchLedger", err)
	}
}

func TestNoSuchLedgerVsEntry(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	defer closeT(t, s)
	mustPut(t, s, 1, 0, []byte("x"))
	if err := s.SetMeta(2, LedgerMeta{Digest: 1}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		l, e int64
		want error
	}{
		{"unknown ledger", 5, 0, ErrNoSuchLedger},
		{"negative ledger", -3, 0, ErrNoSuchLedger},
		{"entries, missing entry", 1, 1, ErrNoSuchEntry},
		{"meta only", 2, 0, ErrNoSuchEntry},
		{"negative entry", 1, -5, ErrNoSuchEntry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Get(tc.l, tc.e); !errors.Is(err, tc.want) {
				t.Errorf("Get(%d,%d) = %v, want %v", tc.l, tc.e, err, tc.want)
			}
		})
	}
	if _, err := s.LastEntryID(5); !errors.Is(err, ErrNoSuchLedger) {
		t.Errorf("LastEntryID(unknown) = %v", err)
	}
	if _, err := s.ListEntries(5); !errors.Is(err, ErrNoSuchLedger) {
		t.Errorf("ListEntries(unknown) = %v", err)
	}
	if r, err := s.ListEntries(2); err != nil || len(r) != 0 {
		t.Errorf("ListEntries(meta only) = %v, %v", r, err)
	}
	if ls, err := s.Ledgers(); err != nil || !slices.Equal(ls, []int64{1, 2}) {
		t.Errorf("Ledgers() = %v, %v; want [1 2]", ls, err)
	}
}

func TestReopenAfterFlush(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{EntryLogSize: 16 << 10})
	for e := range int64(100) {
		for l := int64(1); l <= 3; l++ {
			mustPut(t, s, l, e, payload(l, e, 700))
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	closeT(t, s)
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Get(1, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close = %v, want ErrClosed", err)
	}

	s = openT(t, dir, Options{EntryLogSize: 16 << 10})
	defer closeT(t, s)
	for e := range int64(100) {
		for l := int64(1); l <= 3; l++ {
			mustGetEq(t, s, l, e, payload(l, e, 700))
		}
	}
	after := s.Stats()
	if after.LiveEntries != 300 || after.LiveBytes != before.LiveBytes {
		t.Errorf("after reopen: %d entries / %d live bytes; before %d / %d",
			after.LiveEntries, after.LiveBytes, before.LiveEntries, before.LiveBytes)
	}
	if n := len(after.Logs); n != len(before.Logs)+1 || !after.Logs[n-1].Current || after.Logs[n-1].LiveEntries != 0 {
		t.Errorf("reopen should start one new, empty current log: %+v", after.Logs)
	}
	if ls, err := s.Ledgers(); err != nil || !slices.Equal(ls, []int64{1, 2, 3}) {
		t.Errorf("Ledgers() = %v, %v", ls, err)
	}
	checkCounters(t, s)
}

func TestMetaPersistence(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	m1 := LedgerMeta{Digest: 2, Fenced: true, ExplicitLAC: []byte("lac-body-16bytes")}
	copy(m1.MasterKey[:], "0123456789abcdefghij")
	m2 := LedgerMeta{Digest: 1}
	if err := s.SetMeta(10, m1); err != nil {
		t.Fatal(err)
	}
	if err := s.SetMeta(11, m2); err != nil {
		t.Fatal(err)
	}
	if err := s.SetMeta(11, LedgerMeta{Digest: 1, Fenced: true}); err != nil { // replaces
		t.Fatal(err)
	}
	if _, ok, err := s.Meta(12); ok || err != nil {
		t.Errorf("Meta(12) = %v, %v; want absent", ok, err)
	}
	closeT(t, s) // Close flushes

	s = openT(t, dir, Options{})
	defer closeT(t, s)
	got, ok, err := s.Meta(10)
	if err != nil || !ok {
		t.Fatalf("Meta(10) = %v, %v", ok, err)
	}
	if got.MasterKey != m1.MasterKey || got.Digest != 2 || !got.Fenced || !bytes.Equal(got.ExplicitLAC, m1.ExplicitLAC) {
		t.Errorf("Meta(10) = %+v, want %+v", got, m1)
	}
	got, _, _ = s.Meta(11)
	if !got.Fenced || got.ExplicitLAC != nil {
		t.Errorf("Meta(11) = %+v, want fenced, no LAC", got)
	}
}

func TestListEntriesGaps(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	defer closeT(t, s)
	for _, e := range []int64{9, 0, 1, 2, 5, 7, 8} {
		mustPut(t, s, 4, e, []byte{byte(e)})
	}
	mustPut(t, s, 5, 3, []byte{1})
	got, err := s.ListEntries(4)
	want := [][2]int64{{0, 2}, {5, 5}, {7, 9}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("ListEntries(4) = %v, %v; want %v", got, err, want)
	}
}

func TestPutIdempotent(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	defer closeT(t, s)
	a, b := payload(1, 1, 300), payload(2, 2, 200)
	mustPut(t, s, 1, 1, a)
	cached := s.Stats().CacheBytes
	mustPut(t, s, 1, 1, a) // replay of a cached entry: nothing cached
	if st := s.Stats(); st.CacheBytes != cached {
		t.Errorf("re-put of a cached entry: cache %d bytes, want %d", st.CacheBytes, cached)
	}
	flushT(t, s)
	size := s.Stats().TotalBytes
	mustPut(t, s, 1, 1, a) // replay of an indexed entry: nothing written
	flushT(t, s)
	if st := s.Stats(); st.TotalBytes != size || st.LiveEntries != 1 {
		t.Errorf("re-put: %d bytes, %d entries; want %d, 1", st.TotalBytes, st.LiveEntries, size)
	}
	mustPut(t, s, 1, 1, b) // different bytes replace
	mustGetEq(t, s, 1, 1, b)
	flushT(t, s)
	mustGetEq(t, s, 1, 1, b)
	if st := s.Stats(); st.LiveEntries != 1 || st.LiveBytes != recordHeaderSize+200 {
		t.Errorf("replace: %d entries, %d live bytes", st.LiveEntries, st.LiveBytes)
	}
	mustPut(t, s, 1, 1, a) // and back, replacing a cached entry twice
	mustPut(t, s, 1, 1, b)
	mustPut(t, s, 1, 1, a)
	mustGetEq(t, s, 1, 1, a)
	flushT(t, s)
	mustGetEq(t, s, 1, 1, a)
	if st := s.Stats(); st.LiveEntries != 1 || st.LiveBytes != recordHeaderSize+300 {
		t.Errorf("replace: %d entries, %d live bytes", st.LiveEntries, st.LiveBytes)
	}
	checkCounters(t, s)
}

func TestDeleteLedgerCompact(t *testing.T) {
	dir := t.TempDir()
	opts := Options{EntryLogSize: 64 << 10, WriteCacheSize: 16 << 10}
	s := openT(t, dir, opts)
	const size = 1000
	// Ledger 1 alone fills the first logs; then 1 and 2 interleave.
	for e := range int64(150) {
		mustPut(t, s, 1, e, payload(1, e, size))
	}
	for e := range int64(200) {
		mustPut(t, s, 1, 150+e, payload(1, 150+e, size))
		mustPut(t, s, 2, e, payload(2, e, size))
	}
	if err := s.SetMeta(1, LedgerMeta{Fenced: true}); err != nil {
		t.Fatal(err)
	}
	flushT(t, s)
	before := s.Stats()
	if err := s.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteLedger(99); err != nil {
		t.Errorf("DeleteLedger(unknown) = %v", err)
	}
	if _, err := s.Get(1, 0); !errors.Is(err, ErrNoSuchLedger) {
		t.Errorf("Get(deleted) = %v, want ErrNoSuchLedger", err)
	}
	checkCounters(t, s)

	reclaimed, err := s.Compact(context.Background(), 0.6)
	if err != nil {
		t.Fatal(err)
	}
	after := s.Stats()
	t.Logf("logs %d → %d, bytes %d → %d, reclaimed %d", len(before.Logs), len(after.Logs),
		before.TotalBytes, after.TotalBytes, reclaimed)
	// Logs created while copying add their headers, which count as neither.
	if reclaimed <= 0 || after.TotalBytes >= before.TotalBytes || reclaimed < before.TotalBytes-after.TotalBytes {
		t.Errorf("reclaimed %d; total bytes %d → %d", reclaimed, before.TotalBytes, after.TotalBytes)
	}
	for _, ls := range after.Logs {
		if !ls.Current && ls.LiveRatio < 0.6 && ls.ID < before.Logs[len(before.Logs)-1].ID {
			t.Errorf("log %d kept with ratio %.2f", ls.ID, ls.LiveRatio)
		}
	}
	for e := range int64(200) {
		mustGetEq(t, s, 2, e, payload(2, e, size))
	}
	checkCounters(t, s)
	if ls, _ := s.Ledgers(); !slices.Equal(ls, []int64{2}) {
		t.Errorf("Ledgers() = %v, want [2]", ls)
	}

	// Nothing left to do.
	if n, err := s.Compact(context.Background(), 0.6); err != nil || n != 0 {
		t.Errorf("second Compact = %d, %v", n, err)
	}
	closeT(t, s)

	s = openT(t, dir, opts)
	defer closeT(t, s)
	for e := range int64(200) {
		mustGetEq(t, s, 2, e, payload(2, e, size))
	}
	if _, err := s.Get(1, 160); !errors.Is(err, ErrNoSuchLedger) {
		t.Errorf("Get(deleted) after reopen = %v", err)
	}
	checkCounters(t, s)
}

func TestCompactCancelled(t *testing.T) {
	s := openT(t, t.TempDir(), Options{EntryLogSize: 8 << 10})
	defer closeT(t, s)
	putPair(t, s, 0, 100, 500)
	flushT(t, s)
	if err := s.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Compact(ctx, 0.9); !errors.Is(err, context.Canceled) {
		t.Errorf("Compact(cancelled) = %v", err)
	}
	for e := range int64(100) {
		mustGetEq(t, s, 2, e, payload(2, e, 500))
	}
	checkCounters(t, s)
}

// TestConcurrent runs writers, readers, deletes, flushes and compactions at
// once; run it under -race.
func TestConcurrent(t *testing.T) {
	s := openT(t, t.TempDir(), Options{EntryLogSize: 32 << 10, WriteCacheSize: 8 << 10})
	defer closeT(t, s)
	const (
		writers = 6
		perW    = 150
		size    = 300
	)
	var (
		written [writers]atomic.Int64 // entries [0, written) of ledger w+1 are in
		wg      sync.WaitGroup
		errc    = make(chan error, 32)
		stop    = make(chan struct{})
	)
	for w := range writers {
		wg.Go(func() {
			l := int64(w + 1)
			junk := l + 100 // deleted later: makes compaction relocate
			for e := range int64(perW) {
				if err := s.Put(l, e, payload(l, e, size)); err != nil {
					errc <- err
					return
				}
				if err := s.Put(junk, e, payload(junk, e, size)); err != nil {
					errc <- err
					return
				}
				written[w].Store(e + 1)
				if e == perW/2 {
					if err := s.DeleteLedger(junk); err != nil {
						errc <- err
						return
					}
				}
			}
		})
	}
	var rg sync.WaitGroup
	for r := range 3 {
		rg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 0))
			loopUntil(stop, errc, func() error {
				if l, n := pickWritten(rng, written[:]); n > 0 {
					return getEq(s, l, rng.Int64N(n), size)
				}
				return nil
			})
		})
	}
	rg.Go(func() {
		loopUntil(stop, errc, func() error {
			if err := s.Flush(); err != nil {
				return err
			}
			_, err := s.Compact(context.Background(), 0.7)
			return err
		})
	})
	stopReaders(t, &wg, &rg, stop, errc)
	for w := range writers {
		l := int64(w + 1)
		for e := range int64(perW) {
			mustGetEq(t, s, l, e, payload(l, e, size))
		}
	}
	checkCounters(t, s)
}

// TestDroppedLogWaitsForReaders: Compact renames a dropped log's file and removes it only
// once the last reader has released the log; a renamed file left by a crash (or by a
// Compact stopped while a reader held it) is removed at Open, and its id is not reused.
func TestDroppedLogWaitsForReaders(t *testing.T) {
	dir := t.TempDir()
	opts := Options{EntryLogSize: 8 << 10}
	s := openT(t, dir, opts)
	for e := range int64(40) {
		mustPut(t, s, 1, e, payload(1, e, 500))
	}
	flushT(t, s)
	if err := s.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	first := s.Stats().Logs[0].ID
	held := s.acquire(first) // a Get reading from the log
	if held == nil {
		t.Fatalf("log %d not open", first)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Compact(context.Background(), 0.5)
		done <- err
	}()
	dropped := filepath.Join(dir, logFileName(first)+deletingExt)
	waitFor(t, func() bool { _, err := os.Stat(dropped); return err == nil })
	if _, err := os.Stat(filepath.Join(dir, logFileName(first))); !os.IsNotExist(err) {
		t.Fatalf("live name of dropped log %d: %v, want gone", first, err)
	}
	select {
	case err := <-done:
		t.Fatalf("Compact returned (%v) while a reader held a dropped log", err)
	default:
	}
	held.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dropped); !os.IsNotExist(err) {
		t.Fatalf("dropped log %d after Compact: %v, want removed", first, err)
	}

	// A leftover from before a restart, with the highest id of the directory.
	leftover := s.Stats().Logs[len(s.Stats().Logs)-1].ID + 5
	closeT(t, s)
	path := filepath.Join(dir, logFileName(leftover)+deletingExt)
	if err := os.WriteFile(path, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, opts)
	defer closeT(t, s)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("leftover after Open: %v, want removed", err)
	}
	if cur := s.cur.Load().id; cur <= leftover {
		t.Fatalf("current log %d after Open, want above the leftover's id %d", cur, leftover)
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline, not synchronising
	}
}
