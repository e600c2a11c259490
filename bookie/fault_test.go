package bookie_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/internal/disktest"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// syncBuffer is a log sink for a test to read.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// count returns how many logged lines contain s.
func (b *syncBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}

func errorLogger(w *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelError}))
}

// waitStopped waits until the bookie stopped itself.
func waitStopped(t *testing.T, b *bookie.Bookie, within time.Duration) {
	t.Helper()
	select {
	case <-b.Done():
	case <-time.After(within):
		t.Fatalf("bookie still running %v after its disk failed (state %s)", within, b.State())
	}
	if b.State() != bookie.StateStopped {
		t.Fatalf("state %s after Done", b.State())
	}
}

// TestDataDirRemovedStopsBookie: the data directory removed under a running bookie (a failed
// or unmounted disk) stops it within a few disk checks with one error naming the cause; the
// registration goes, so ledger writers replace the bookie.
func TestDataDirRemovedStopsBookie(t *testing.T) {
	e := newEnv(t)
	var logs syncBuffer
	dir := t.TempDir()
	b := e.start(dir, func(c *bookie.Config) {
		c.DiskCheckInterval = 50 * time.Millisecond
		c.Logger = errorLogger(&logs)
	})
	c := dial(t, b.Addr())
	wantStatus(t, do(t, c, addReq(1, 0, -1, "a")), bk.StatusOK)
	waitRegistered(t, e.store, b.ID(), "writable")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitStopped(t, b, 10*time.Second)
	t.Logf("stopped %v after the data dir was removed", time.Since(start))
	if err := b.Err(); !errors.Is(err, bookie.ErrDiskFailed) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Err = %v, want ErrDiskFailed for a missing directory", err)
	}
	if n := logs.count("bookie disk failed; stopping"); n != 1 {
		t.Fatalf("%d 'disk failed' lines, want 1:\n%s", n, logs.buf.String())
	}
	infos, err := bookie.ListBookies(t.Context(), e.store, false)
	if err != nil || len(infos) != 0 {
		t.Fatalf("registrations after the stop: %+v, %v", infos, err)
	}
}

// eioAfter is an errorfs injector failing every write under dir with EIO once on.
type eioAfter struct {
	dir string
	on  atomic.Bool
}

func (f *eioAfter) String() string { return "EIO under " + f.dir }

func (f *eioAfter) MaybeError(op errorfs.Op) error {
	if f.on.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && strings.HasPrefix(op.Path, f.dir) {
		return syscall.EIO
	}
	return nil
}

// TestStorageEIOStopsBookie: the storage's disk returns EIO (entry logs and index) under a
// running bookie: the next checkpoint fails the storage and the bookie stops with one error,
// instead of the index retrying its flush in a hot loop with Close never finishing.
func TestStorageEIOStopsBookie(t *testing.T) {
	e := newEnv(t)
	var logs syncBuffer
	dir := t.TempDir()
	inj := &eioAfter{dir: dir}
	b := e.start(dir, func(c *bookie.Config) {
		c.CheckpointInterval = 50 * time.Millisecond
		c.Logger = errorLogger(&logs)
		bookie.SetStorageFS(c, errorfs.Wrap(vfs.Default, inj))
	})
	c := dial(t, b.Addr())
	wantStatus(t, do(t, c, addReq(1, 0, -1, "a")), bk.StatusOK)
	inj.on.Store(true)
	wantStatus(t, do(t, c, addReq(1, 1, 0, "b")), bk.StatusOK) // journaled; the checkpoint fails
	start := time.Now()
	waitStopped(t, b, 10*time.Second)
	t.Logf("stopped %v after the first failing checkpoint could run", time.Since(start))
	if err := b.Err(); !errors.Is(err, bookie.ErrDiskFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Err = %v, want ErrDiskFailed wrapping EIO", err)
	}
	if n := logs.count("bookie disk failed; stopping"); n != 1 {
		t.Fatalf("%d 'disk failed' lines, want 1:\n%s", n, logs.buf.String())
	}
}

// TestDiskFullGoesReadOnly: a bookie on a small file system that fills up (writes fail with
// ENOSPC before a usage check sees it) turns read-only for good, keeps serving reads, and
// still stops promptly.
func TestDiskFullGoesReadOnly(t *testing.T) {
	mnt := disktest.MountTmpfs(t, 16<<20)
	e := newEnv(t)
	var logs syncBuffer
	b := e.start(filepath.Join(mnt, "bookie"), func(c *bookie.Config) {
		c.CheckpointInterval = 50 * time.Millisecond
		c.DiskCheckInterval = 50 * time.Millisecond
		c.DiskUsage = func(string) (float64, error) { return 0, nil } // only ENOSPC tells
		c.Journal.FileSize = 1 << 20
		c.Logger = errorLogger(&logs)
	})
	c := dial(t, b.Addr())
	wantStatus(t, do(t, c, addReq(1, 0, -1, "a")), bk.StatusOK)
	waitRegistered(t, e.store, b.ID(), "writable")
	disktest.Fill(t, mnt)
	// Entries go to the journal's preallocated file; the storage's checkpoint write fails.
	payload := strings.Repeat("x", 64<<10)
	for i := int64(1); i <= 16 && b.State() == bookie.StateWritable; i++ {
		do(t, c, addReq(1, i, i-1, payload))
	}
	waitRegistered(t, e.store, b.ID(), "read-only")
	wantStatus(t, do(t, c, addReq(2, 0, -1, "b")), bk.StatusReadOnly)
	wantStatus(t, do(t, c, readReq(1, 0)), bk.StatusOK) // reads still served
	if err := b.Err(); err != nil {
		t.Fatalf("Err = %v on a full disk, want the bookie running", err)
	}
	if n := logs.count("read-only until restarted"); n != 1 {
		t.Fatalf("%d 'read-only until restarted' lines, want 1:\n%s", n, logs.buf.String())
	}
	start := time.Now()
	b.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close on a full disk took %v", d)
	}
	t.Logf("Close on the full disk took %v", time.Since(start))
}
