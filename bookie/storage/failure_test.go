package storage

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// failingWrites is an errorfs injector that, once on, fails every write under dir with
// EIO, as a failing disk does.
type failingWrites struct {
	dir    string
	on     atomic.Bool
	mu     sync.Mutex
	failed int
}

func (f *failingWrites) String() string { return "EIO on writes under " + f.dir }

func (f *failingWrites) MaybeError(op errorfs.Op) error {
	if !f.on.Load() || op.Kind.ReadOrWrite() != errorfs.OpIsWrite || !strings.HasPrefix(op.Path, f.dir) {
		return nil
	}
	f.mu.Lock()
	f.failed++
	f.mu.Unlock()
	return syscall.EIO
}

// TestIndexWriteFailureFailsStorage: when the index's disk fails under a running Storage,
// Flush returns ErrSyncFailed instead of waiting for ever for the memtable flush Pebble
// retries; Pebble's retries back off (growing waits between attempts, not a hot loop);
// and Close returns promptly although a retry is waiting.
func TestIndexWriteFailureFailsStorage(t *testing.T) {
	inj := &failingWrites{dir: "/db/index"}
	delays := make(chan time.Duration, 64)
	opts := Options{FS: errorfs.Wrap(vfs.NewMem(), inj), Logger: quiet,
		indexRetryHook: func(d time.Duration) {
			select {
			case delays <- d:
			default:
			}
		}}
	s := openT(t, "/db", opts)
	for e := range int64(100) {
		mustPut(t, s, 1, e, payload(1, e, 100))
	}
	inj.on.Store(true)

	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush() }()
	select {
	case err := <-flushed:
		if !errors.Is(err, ErrSyncFailed) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("Flush = %v, want ErrSyncFailed wrapping EIO", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Flush did not return after the index's disk failed")
	}
	select {
	case <-s.Failed():
	default:
		t.Fatal("Failed() not closed")
	}
	if s.State() != StateFailed || !errors.Is(s.Err(), ErrSyncFailed) {
		t.Fatalf("State %s, Err %v", s.State(), s.Err())
	}
	if err := s.Put(1, 100, payload(1, 100, 100)); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("Put after failure = %v", err)
	}
	mustGetEq(t, s, 1, 5, payload(1, 5, 100)) // cached entries stay readable

	// Pebble retries its flush; each retry waits longer than the one before.
	var prev time.Duration
	for i := range 3 {
		select {
		case d := <-delays:
			if d <= prev || d < indexRetryBase {
				t.Fatalf("retry %d waits %v after %v: not backing off", i, d, prev)
			}
			prev = d
		case <-time.After(30 * time.Second):
			t.Fatalf("retry %d: Pebble did not retry through the backoff", i)
		}
	}
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v", d)
	}
	t.Logf("Close of the failed storage took %v; %d writes failed", time.Since(start), inj.count())
}

func TestBackoffFSDelays(t *testing.T) {
	fs := newBackoffFS(vfs.NewMem(), nil)
	if d := fs.delay(); d != 0 {
		t.Fatalf("initial delay %v", d)
	}
	for i, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		fs.note(syscall.EIO, false)
		if d := fs.delay(); d != want {
			t.Fatalf("after %d failures delay %v, want %v", i+1, d, want)
		}
	}
	for range 40 {
		fs.note(syscall.EIO, false)
	}
	if d := fs.delay(); d != indexRetryMax {
		t.Fatalf("delay %v, want the cap %v", d, indexRetryMax)
	}
	fs.note(nil, false) // a plain success does not end the backoff
	if d := fs.delay(); d != indexRetryMax {
		t.Fatalf("delay %v after a write, want %v", d, indexRetryMax)
	}
	fs.note(nil, true) // a sync does
	if d := fs.delay(); d != 0 {
		t.Fatalf("delay %v after a sync, want 0", d)
	}
}

func (f *failingWrites) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}
