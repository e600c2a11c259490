package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

type key = [2]int64

// TestCrashReopenWithoutFlush copies a live store's directory — what a
// killed process leaves behind — and opens the copy: entries flushed before
// the copy are all there, later ones may be missing, none is corrupt.
func TestCrashReopenWithoutFlush(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{EntryLogSize: 32 << 10})
	defer closeT(t, s)
	for e := range int64(100) {
		mustPut(t, s, 1, e, payload(1, e, 500))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for e := range int64(100) {
		mustPut(t, s, 1, 100+e, payload(1, 100+e, 500))
		mustPut(t, s, 2, e, payload(2, e, 500))
	}
	if err := s.DeleteLedger(1); err != nil { // not flushed: may be undone
		t.Fatal(err)
	}
	crashed := filepath.Join(t.TempDir(), "crashed")
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}

	c := openT(t, crashed, Options{EntryLogSize: 32 << 10})
	defer closeT(t, c)
	for e := range int64(100) {
		mustGetEq(t, c, 1, e, payload(1, e, 500)) // flushed before the delete
	}
	for _, k := range []key{{1, 100}, {1, 199}, {2, 0}, {2, 99}} {
		got, err := c.Get(k[0], k[1])
		switch {
		case err == nil && !bytes.Equal(got, payload(k[0], k[1], 500)):
			t.Errorf("Get%v returned wrong bytes", k)
		case err != nil && !errors.Is(err, ErrNoSuchEntry) && !errors.Is(err, ErrNoSuchLedger):
			t.Errorf("Get%v = %v, want the entry or NoSuch*", k, err)
		}
	}
	// Journal replay re-puts; then everything reads back.
	for e := range int64(100) {
		mustPut(t, c, 2, e, payload(2, e, 500))
	}
	for e := range int64(100) {
		mustGetEq(t, c, 2, e, payload(2, e, 500))
	}
	checkCounters(t, c)
}

// TestCrashPowerLoss runs seeded random operations on a crashable in-memory
// filesystem, with a tiny memtable so Pebble flushes index entries on its
// own between Flush calls, then reopens a crash clone that keeps a random
// share of the unsynced writes. Checked: no Get ever returns wrong bytes or
// a corruption error; everything flushed (and not deleted since) is there;
// nothing deleted before a flush comes back; after the journal would replay
// the rest, the counters match the index and Compact works.
func TestCrashPowerLoss(t *testing.T) {
	seeds := uint64(10)
	if raceEnabled {
		seeds = 3
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { crashRun(t, seed) })
	}
}

func crashRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	fs := vfs.NewCrashableMem()
	// A small write cache (1–64 KiB) so generations are flushed in the
	// background between Flush calls too.
	opts := Options{FS: fs, EntryLogSize: 256 << 10, memTableSize: 16 << 10, Logger: quiet,
		WriteCacheSize: int64(1+rng.IntN(64)) << 10}
	s := openT(t, "/db", opts)

	var (
		ever        = map[key][]byte{} // every entry ever put (bytes never change per key)
		data        = map[key]bool{}   // what the live store holds
		durable     = map[key]bool{}   // what it held at the last Flush
		pendingGone = map[key]bool{}   // deleted since the last Flush
		mustAbsent  = map[key]bool{}   // deleted before a Flush
		next        = map[int64]int64{}
		ledgers     = []int64{1, 2, 3, 4, 5, 6}
		nextLedger  = int64(7)
		flushes     int
	)
	for range 2000 {
		switch op := rng.IntN(1000); {
		case op < 1000-15: // put (append, or a replayed re-put)
			l := ledgers[rng.IntN(len(ledgers))]
			e := next[l]
			if e > 0 && rng.IntN(10) == 0 {
				e = rng.Int64N(e)
			} else {
				next[l]++
			}
			k := key{l, e}
			b, ok := ever[k]
			if !ok {
				b = payload(l, e, rng.IntN(1500))
				ever[k] = b
			}
			mustPut(t, s, l, e, b)
			data[k] = true
		case op < 1000-10:
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			flushes++
			clear(durable)
			for k := range data {
				durable[k] = true
			}
			for k := range pendingGone {
				mustAbsent[k] = true
			}
			clear(pendingGone)
		case op < 1000-4: // delete a ledger; its ID is never reused
			i := rng.IntN(len(ledgers))
			l := ledgers[i]
			if err := s.DeleteLedger(l); err != nil {
				t.Fatal(err)
			}
			for k := range data {
				if k[0] == l {
					delete(data, k)
					pendingGone[k] = true
				}
			}
			ledgers[i] = nextLedger
			nextLedger++
		default:
			if _, err := s.Compact(context.Background(), rng.Float64()); err != nil {
				t.Fatal(err)
			}
		}
	}
	memFlushes, cacheFlushes := s.db.Metrics().Flush.Count, s.Stats().CacheFlushes
	pct := rng.IntN(101)
	t.Logf("%d entries, %d Flush calls, %d cache flushes, %d memtable flushes, clone keeps %d%% of unsynced data",
		len(ever), flushes, cacheFlushes, memFlushes, pct)
	c := crashReopen(t, fs, s, opts, pct, rng)
	defer closeT(t, c)
	var missing int
	for k, want := range ever {
		got, err := c.Get(k[0], k[1])
		switch {
		case err == nil:
			if !bytes.Equal(got, want) {
				t.Fatalf("Get%v returned wrong bytes", k)
			}
			if mustAbsent[k] {
				t.Fatalf("Get%v: entry deleted before a Flush came back", k)
			}
		case errors.Is(err, ErrNoSuchEntry) || errors.Is(err, ErrNoSuchLedger):
			if durable[k] && data[k] {
				t.Fatalf("Get%v = %v, but it was flushed", k, err)
			}
			missing++
		default:
			t.Fatalf("Get%v = %v", k, err)
		}
	}
	t.Logf("%d entries absent after the crash", missing)
	checkCounters(t, c)

	// The journal replays what the store held; then it is all there.
	for k := range data {
		mustPut(t, c, k[0], k[1], ever[k])
	}
	if _, err := c.Compact(context.Background(), 1.1); err != nil {
		t.Fatal(err)
	}
	for k := range data {
		mustGetEq(t, c, k[0], k[1], ever[k])
	}
	checkCounters(t, c)
}

// TestCrashAfterCompact loses power right after a Compact that relocated
// entries (with no cached entries for the flush to sync along): the
// relocated records must have been synced before the index pointed at them.
func TestCrashAfterCompact(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := Options{FS: fs, EntryLogSize: 32 << 10, WriteCacheSize: 4 << 10, Logger: quiet}
	s := openT(t, "/db", opts)
	putPair(t, s, 0, 100, 500)
	flushT(t, s)
	if err := s.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	flushT(t, s)
	if n, err := s.Compact(context.Background(), 0.9); err != nil || n <= 0 {
		t.Fatalf("Compact = %d, %v", n, err)
	}
	c := crashReopen(t, fs, s, opts, 0, rand.New(rand.NewPCG(1, 1)))
	defer closeT(t, c)
	for e := range int64(100) {
		mustGetEq(t, c, 2, e, payload(2, e, 500))
	}
	checkCounters(t, c)
}
