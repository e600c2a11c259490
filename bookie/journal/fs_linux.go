//go:build linux

package journal

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// osFile is a journal file on the local filesystem. Sync is fdatasync.
type osFile struct {
	f  *os.File
	fd int // cached: f.Fd() per call would be wasteful; f outlives every use of fd
}

func newOSFile(f *os.File) *osFile { return &osFile{f: f, fd: int(f.Fd())} }

func (f *osFile) WriteAt(p []byte, off int64) (int, error) { return f.f.WriteAt(p, off) }

func (f *osFile) Sync() error {
	for {
		err := unix.Fdatasync(f.fd)
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.f.Name(), Err: err}
			}
			return nil
		}
	}
}

func (f *osFile) Close() error { return f.f.Close() }

// preallocate reserves size bytes for f with fallocate, extending its size, and falls
// back to ftruncate (a sparse file) where fallocate is unsupported.
func preallocate(f *os.File, size int64) error {
	if size <= 0 {
		return nil
	}
	for {
		err := unix.Fallocate(int(f.Fd()), 0, 0, size)
		switch {
		case err == nil:
			return nil
		case err == unix.EINTR:
			continue
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS):
			return f.Truncate(size)
		default:
			return err
		}
	}
}

// mappedFile is a journal file mapped read-only for replay.
type mappedFile struct {
	b []byte
	f *os.File
}

// mapFile maps the file at path read-only. Call close when done with b.
func mapFile(path string) (*mappedFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	m := &mappedFile{f: f}
	if st.Size() > 0 {
		m.b, err = unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			f.Close()
			return nil, &os.PathError{Op: "mmap", Path: path, Err: err}
		}
		_ = unix.Madvise(m.b, unix.MADV_SEQUENTIAL)
	}
	return m, nil
}

func (m *mappedFile) close() error {
	var err error
	if m.b != nil {
		err = unix.Munmap(m.b)
	}
	if cerr := m.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// stopReadahead turns readahead off from off on. Readahead would pull the zeros of
// the preallocated tail into the page cache, and cached pages of unwritten extents
// count as data for SEEK_DATA.
func (m *mappedFile) stopReadahead(off int) {
	if page := off &^ (os.Getpagesize() - 1); page < len(m.b) {
		_ = unix.Madvise(m.b[page:], unix.MADV_RANDOM)
	}
}

// nextData returns the first range [start, end) at or after off that may hold data,
// skipping holes and unwritten (preallocated, never written) extents, so that the
// unused tail of a preallocated file is not read. ok is false when nothing follows.
func (m *mappedFile) nextData(off int64) (start, end int64, ok bool) {
	size := int64(len(m.b))
	if off >= size {
		return 0, 0, false
	}
	fd := int(m.f.Fd())
	start, err := unix.Seek(fd, off, unix.SEEK_DATA)
	if err == unix.ENXIO {
		return 0, 0, false
	}
	if err != nil {
		return off, size, true // no SEEK_DATA: read everything
	}
	end, err = unix.Seek(fd, start, unix.SEEK_HOLE)
	if err != nil || end > size {
		end = size
	}
	return start, end, start < size
}

// startWriteBack starts writing back f's dirty pages below off (sync_file_range; no
// durability), waiting for the write-back started by the previous call.
func startWriteBack(f *os.File, off int64) error {
	const waitBefore, write = 0x1, 0x2
	err := unix.SyncFileRange(int(f.Fd()), 0, off, waitBefore|write)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		return nil
	}
	return err
}

// sleepPrecise blocks the calling goroutine's thread for d. A Go timer shorter than a
// millisecond fires no sooner than about 1.1 ms here (the netpoller waits in whole
// milliseconds), while nanosleep wakes within tens of microseconds.
func sleepPrecise(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}
