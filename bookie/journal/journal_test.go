package journal

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestReplayAcrossRolls(t *testing.T) {
	dir := t.TempDir()
	const fileSize = 8 << 10
	rng := rand.New(rand.NewPCG(1, 2))
	want := genRecords(rng, 300, 700, 7)
	// One record larger than a file gets a file of its own.
	want[150].Data = make([]byte, 3*fileSize)
	want[150].Data[5] = 9

	j, recs := openCollect(t, dir, testOptions(fileSize))
	if len(recs) != 0 {
		t.Fatalf("fresh dir replayed %d records", len(recs))
	}
	appendAll(t, j, want[:100])
	appendAll(t, j, want[100:])
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(journalFiles(t, dir)); n < 10 {
		t.Fatalf("only %d files; want the records spread over many", n)
	}
	checkRecords(t, replayAll(t, dir, testOptions(fileSize)), want)

	// Appends after a reopen go to a new file and replay after the old ones.
	j, recs = openCollect(t, dir, testOptions(fileSize))
	checkRecords(t, recs, want)
	more := genRecords(rng, 50, 500, 8)
	appendAll(t, j, more)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, replayAll(t, dir, testOptions(fileSize)), append(slices.Clone(want), more...))
}

func TestReplayErrorFailsOpen(t *testing.T) {
	dir := t.TempDir()
	j, _ := openCollect(t, dir, testOptions(1<<20))
	appendAll(t, j, genRecords(rand.New(rand.NewPCG(3, 4)), 10, 10, 1))
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	n := 0
	_, err := Open(dir, testOptions(1<<20), func(Record) error {
		if n++; n == 5 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Open = %v, want the replay error", err)
	}
}

func TestAppendRejectsInvalidRecord(t *testing.T) {
	j, _ := openCollect(t, t.TempDir(), testOptions(1<<20))
	defer j.Close()
	var got error
	calls := 0
	j.Append(Record{Type: 0}, func(err error) { got = err; calls++ })
	if calls != 1 || !errors.Is(got, ErrInvalidRecord) {
		t.Fatalf("done called %d times with %v, want once with ErrInvalidRecord", calls, got)
	}
	j.Append(Record{Type: 6}, func(err error) { got = err; calls++ })
	if calls != 2 || !errors.Is(got, ErrInvalidRecord) {
		t.Fatalf("done called %d times with %v, want ErrInvalidRecord", calls, got)
	}
}

// TestDoneOrder checks that callbacks run in append order, which is the replay order,
// also with concurrent appenders.
func TestDoneOrder(t *testing.T) {
	for _, wait := range []time.Duration{0, time.Millisecond} {
		t.Run("wait="+wait.String(), func(t *testing.T) {
			dir := t.TempDir()
			opts := testOptions(16 << 10)
			opts.MaxGroupWait = wait
			j, _ := openCollect(t, dir, opts)
			var mu sync.Mutex
			var order []int64
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					done := make(chan error, 100)
					outstanding := 0
					drain := func() bool {
						for ; outstanding > 0; outstanding-- {
							if err := <-done; err != nil {
								t.Error(err)
								return false
							}
						}
						return true
					}
					defer drain()
					for i := range 100 {
						id := int64(w*1000 + i)
						j.Append(Record{Type: RecAddEntry, LedgerID: 1, EntryID: id, Data: make([]byte, i)},
							func(err error) {
								mu.Lock()
								order = append(order, id)
								mu.Unlock()
								done <- err
							})
						outstanding++
						if i%10 != 0 && !drain() { // mostly closed loop, sometimes pipelined
							return
						}
					}
				})
			}
			wg.Wait()
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			recs := replayAll(t, dir, opts)
			if len(recs) != len(order) {
				t.Fatalf("replayed %d records, %d callbacks", len(recs), len(order))
			}
			for i, r := range recs {
				if r.EntryID != order[i] {
					t.Fatalf("callback %d was for entry %d, replay position %d holds %d", i, order[i], i, r.EntryID)
				}
			}
		})
	}
}

func TestRelease(t *testing.T) {
	dir := t.TempDir()
	const fileSize = 4 << 10
	opts := testOptions(fileSize)
	rng := rand.New(rand.NewPCG(5, 6))
	recs := genRecords(rng, 60, 900, 1)
	j, _ := openCollect(t, dir, opts)
	appendAll(t, j, recs[:30])
	m := j.Mark()
	appendAll(t, j, recs[30:])
	before := journalFiles(t, dir)

	// A file an earlier Release renamed but did not remove goes with this one.
	stale := filepath.Join(dir, fileName(m.File)+deletingExt+".x"+deletingExt)
	if err := os.WriteFile(stale, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A mark past the end is a caller bug.
	if err := j.Release(Mark{File: m.File + 1000}); err == nil {
		t.Fatal("Release past the end succeeded")
	}
	if err := j.Release(m); err != nil {
		t.Fatal(err)
	}
	after := journalFiles(t, dir)
	for _, p := range before {
		seq, _ := parseFileName(p[len(dir)+1:])
		_, statErr := os.Stat(p)
		if gone := errors.Is(statErr, os.ErrNotExist); gone != (seq < m.File) {
			t.Errorf("file %d (mark %s): removed=%v", seq, m, gone)
		}
	}
	if len(after) >= len(before) {
		t.Fatalf("Release removed nothing: %d files before, %d after", len(before), len(after))
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*"+deletingExt)); len(left) > 0 {
		t.Fatalf("Release left files being removed behind: %v", left)
	}
	// Releasing again, or an older mark, is a no-op.
	if err := j.Release(m); err != nil {
		t.Fatal(err)
	}
	if err := j.Release(Mark{}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Release(m); !errors.Is(err, ErrClosed) {
		t.Fatalf("Release after Close = %v, want ErrClosed", err)
	}
	// What is left replays as a suffix of the records, starting at or before the mark.
	got := replayAll(t, dir, opts)
	if len(got) < 30 || len(got) > 60 {
		t.Fatalf("replayed %d records after release", len(got))
	}
	checkRecords(t, got, recs[60-len(got):])
}

// TestCloseCompletesPending checks that Close writes, syncs and completes every
// pending append exactly once, and that later appends fail with ErrClosed.
func TestCloseCompletesPending(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64 << 10)
	j, _ := openCollect(t, dir, opts)
	const n = 2000
	var calls [n]atomic.Int32
	var failed atomic.Int32
	for i := range n {
		j.Append(Record{Type: RecAddEntry, LedgerID: 3, EntryID: int64(i), Data: make([]byte, 100)},
			func(err error) {
				calls[i].Add(1)
				if err != nil {
					failed.Add(1)
				}
			})
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for k := range errs {
		wg.Go(func() { errs[k] = j.Close() })
	}
	wg.Wait()
	for k, err := range errs {
		if err != nil {
			t.Fatalf("Close %d: %v", k, err)
		}
	}
	for i := range n {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("record %d: done called %d times", i, c)
		}
	}
	if f := failed.Load(); f != 0 {
		t.Fatalf("%d pending appends failed; Close should complete them", f)
	}
	var late []error
	j.Append(Record{Type: RecFence, LedgerID: 3}, func(err error) { late = append(late, err) })
	if len(late) != 1 || !errors.Is(late[0], ErrClosed) {
		t.Fatalf("append after Close: done got %v, want one ErrClosed", late)
	}
	if err := j.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got := replayAll(t, dir, opts); len(got) != n {
		t.Fatalf("replayed %d records, want %d", len(got), n)
	}
}

// TestSyncFailure checks that a failed fdatasync fails the pending appends and every
// later one with the same error, exactly once each, and that Close reports it.
func TestSyncFailure(t *testing.T) {
	dir := t.TempDir()
	fs := newCrashFS()
	opts := testOptions(64 << 10)
	opts.fs = fs
	j, _ := openCollect(t, dir, opts)
	appendAll(t, j, genRecords(rand.New(rand.NewPCG(7, 8)), 20, 100, 1))
	select {
	case <-j.Failed():
		t.Fatal("Failed() closed before any failure")
	default:
	}

	boom := errors.New("injected EIO")
	fs.mu.Lock()
	fs.syncErr = boom
	fs.mu.Unlock()
	const n = 50
	var calls [n]atomic.Int32
	errs := make([]error, n)
	all := make(chan struct{})
	var left atomic.Int32
	left.Store(n)
	for i := range n {
		j.Append(Record{Type: RecAddEntry, LedgerID: 2, EntryID: int64(i)}, func(err error) {
			calls[i].Add(1)
			errs[i] = err
			if left.Add(-1) == 0 {
				close(all)
			}
		})
	}
	waitFor(t, all, "callbacks after the sync failure")
	waitFor(t, j.Failed(), "Failed() after the sync failure")
	if err := j.Err(); !errors.Is(err, boom) {
		t.Fatalf("Err = %v, want the sync error", err)
	}
	for i := range n {
		if calls[i].Load() != 1 || !errors.Is(errs[i], boom) {
			t.Fatalf("record %d: %d calls, err %v; want one call with the sync error", i, calls[i].Load(), errs[i])
		}
	}
	var late error
	j.Append(Record{Type: RecFence, LedgerID: 2}, func(err error) { late = err })
	if !errors.Is(late, boom) {
		t.Fatalf("append after failure: %v, want the sync error", late)
	}
	if err := j.Close(); !errors.Is(err, boom) {
		t.Fatalf("Close = %v, want the sync error", err)
	}
}

// TestWriteFailureUnblocksAppends checks that appends blocked on a full queue are
// released with the error when the writer fails.
func TestWriteFailureUnblocksAppends(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		fs := newCrashFS()
		fs.writeGate = make(chan struct{}) // the writer blocks in its first write
		opts := testOptions(1 << 20)
		opts.MaxGroupBytes = 4 << 10 // Append blocks at 32 KiB queued
		opts.fs = fs
		j, _ := openCollect(t, dir, opts)
		var wg sync.WaitGroup
		var calls, failed atomic.Int32
		const n = 100 // 100 KiB, far past the queue limit
		for i := range n {
			wg.Go(func() {
				j.Append(Record{Type: RecAddEntry, LedgerID: 1, EntryID: int64(i), Data: make([]byte, 1024)},
					func(err error) {
						calls.Add(1)
						if err != nil {
							failed.Add(1)
						}
					})
			})
		}
		synctest.Wait()
		j.q.mu.Lock()
		waiters := j.q.waiters
		j.q.mu.Unlock()
		if waiters == 0 {
			t.Fatal("no Append is blocked on the full queue")
		}
		boom := errors.New("injected write error")
		fs.mu.Lock()
		fs.writeErr = boom
		fs.mu.Unlock()
		close(fs.writeGate)
		wg.Wait() // every Append returned: none is stuck on the full queue
		if err := j.Close(); !errors.Is(err, boom) {
			t.Fatalf("Close = %v, want the write error", err)
		}
		if c, f := calls.Load(), failed.Load(); c != n || f != n {
			t.Fatalf("%d callbacks, %d failed; want %d failed", c, f, n)
		}
	})
}
