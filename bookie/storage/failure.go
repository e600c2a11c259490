package storage

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Failed returns a channel closed when the Storage fails (State Failed): an fsync, an
// entry-log write or one of the index's background writes failed. Err tells why. The
// channel stays open after a Close of a Storage that did not fail.
func (s *Storage) Failed() <-chan struct{} { return s.failed }

// Err returns the error that failed the Storage (errors.Is ErrSyncFailed), or nil.
func (s *Storage) Err() error {
	if p := s.failErr.Load(); p != nil {
		return *p
	}
	return nil
}

// onBackgroundError is the index's background-error listener: a failed Pebble flush or
// compaction (a missing directory, EIO, a full disk) fails the Storage, so a Flush waiting
// for the index returns instead of waiting for a flush Pebble retries for ever. It runs on
// Pebble's goroutines with the DB's mutex held: it must not call into the DB.
func (s *Storage) onBackgroundError(err error) {
	if errors.Is(err, pebble.ErrCancelledCompaction) {
		return
	}
	if s.failErr.Load() == nil {
		s.becomeFailed(fmt.Errorf("index: %w", err))
		return
	}
	// Pebble retries the failed flush; backoffFS spaces the retries out, the logger's
	// rate limit (see package internal/ratelog) the lines.
	// err.Error(): Pebble's errors format with stack traces otherwise.
	s.opts.Logger.Warn("storage: index background write failed again", "err", err.Error())
}

// Backoff of the index's file creations after a failed one (see backoffFS).
const (
	indexRetryBase = 100 * time.Millisecond
	indexRetryMax  = 10 * time.Second
)

// backoffFS is the filesystem the index (Pebble) writes through. Pebble retries a failed
// memtable flush or compaction at once and for ever (its "TODO: count consecutive flush
// errors and backoff"): with the directory gone or the disk failing that is a hot loop.
// After a failed write, the next file creation waits indexRetryBase, doubling up to
// indexRetryMax; a successful file sync ends the backoff, and so does stop (closed by
// Storage.Close, so that closing the DB never waits a backoff out). Safe for concurrent
// use.
type backoffFS struct {
	vfs.FS
	stop <-chan struct{}
	// waitHook, if set, is called with the delay before a backed-off creation waits
	// (tests).
	waitHook func(time.Duration)

	mu       sync.Mutex
	failures int // consecutive failed writes; guarded by mu
}

func newBackoffFS(fs vfs.FS, stop <-chan struct{}) *backoffFS {
	return &backoffFS{FS: fs, stop: stop}
}

// note records the outcome of a write: a failure lengthens the backoff, a success (a
// file sync) ends it. It returns err.
func (fs *backoffFS) note(err error, success bool) error {
	if err == nil && !success {
		return nil
	}
	fs.mu.Lock()
	if err != nil {
		fs.failures++
	} else {
		fs.failures = 0
	}
	fs.mu.Unlock()
	return err
}

// delay is the wait before the next file creation.
func (fs *backoffFS) delay() time.Duration {
	fs.mu.Lock()
	n := fs.failures
	fs.mu.Unlock()
	if n == 0 {
		return 0
	}
	d := indexRetryBase << min(n-1, 16)
	return min(d, indexRetryMax)
}

// wait sleeps out the backoff, or until stop.
func (fs *backoffFS) wait() {
	d := fs.delay()
	if d == 0 {
		return
	}
	if fs.waitHook != nil {
		fs.waitHook(d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-fs.stop:
	}
}

func (fs *backoffFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	fs.wait()
	f, err := fs.FS.Create(name, category)
	if err != nil {
		return nil, fs.note(err, false)
	}
	return &backoffFile{File: f, fs: fs}, nil
}

func (fs *backoffFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	fs.wait()
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	if err != nil {
		return nil, fs.note(err, false)
	}
	return &backoffFile{File: f, fs: fs}, nil
}

func (fs *backoffFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	if err != nil {
		return nil, fs.note(err, false)
	}
	return &backoffFile{File: f, fs: fs}, nil
}

func (fs *backoffFS) Link(oldname, newname string) error {
	return fs.note(fs.FS.Link(oldname, newname), false)
}

func (fs *backoffFS) Rename(oldname, newname string) error {
	return fs.note(fs.FS.Rename(oldname, newname), false)
}

// backoffFile reports its writes' outcomes to its backoffFS.
type backoffFile struct {
	vfs.File
	fs *backoffFS
}

func (f *backoffFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.fs.note(err, false)
}

func (f *backoffFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.fs.note(err, false)
}

func (f *backoffFile) Preallocate(off, length int64) error {
	return f.fs.note(f.File.Preallocate(off, length), false)
}

func (f *backoffFile) Sync() error {
	err := f.File.Sync()
	return f.fs.note(err, err == nil)
}

func (f *backoffFile) SyncData() error {
	err := f.File.SyncData()
	return f.fs.note(err, err == nil)
}
