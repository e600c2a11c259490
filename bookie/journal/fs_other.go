//go:build !linux

package journal

import (
	"os"
	"time"
)

// osFile is a journal file on the local filesystem. Sync is fsync: fdatasync is
// Linux-only here.
type osFile struct{ f *os.File }

func newOSFile(f *os.File) *osFile { return &osFile{f: f} }

func (f *osFile) WriteAt(p []byte, off int64) (int, error) { return f.f.WriteAt(p, off) }
func (f *osFile) Sync() error                              { return f.f.Sync() }
func (f *osFile) Close() error                             { return f.f.Close() }

// preallocate extends f to size bytes (sparse) where fallocate is unavailable.
func preallocate(f *os.File, size int64) error { return f.Truncate(size) }

// mappedFile is a journal file read into memory for replay.
type mappedFile struct{ b []byte }

// mapFile reads the file at path into memory.
func mapFile(path string) (*mappedFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return &mappedFile{b: b}, nil
}

func (m *mappedFile) close() error { return nil }

func (m *mappedFile) stopReadahead(int) {}

// nextData returns [off, size): without SEEK_DATA everything may hold data.
func (m *mappedFile) nextData(off int64) (start, end int64, ok bool) {
	return off, int64(len(m.b)), off < int64(len(m.b))
}

// startWriteBack is a no-op where sync_file_range is unavailable.
func startWriteBack(*os.File, int64) error { return nil }

// sleepPrecise blocks for d (a plain Go sleep where nanosleep is not used).
func sleepPrecise(d time.Duration) { time.Sleep(d) }
