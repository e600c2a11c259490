package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// vfs is the filesystem seam used for writing journal files. Production uses osFS;
// tests inject doubles that lose unsynced writes to emulate a crash. Reading,
// listing and truncation at Open go straight to the os package: the doubles keep
// real files underneath.
type vfs interface {
	// Create creates name exclusively and preallocates size bytes of zeros.
	Create(name string, size int64) (file, error)
	// SyncDir makes the directory entries of dir durable.
	SyncDir(dir string) error
}

// file is an open journal file. WriteAt and Sync may be called concurrently (the
// writer writes while the syncer syncs); Close is called once, after the last Sync.
type file interface {
	WriteAt(p []byte, off int64) (int, error)
	// Sync makes every completed WriteAt durable (fdatasync).
	Sync() error
	Close() error
}

type osFS struct{}

func (osFS) Create(name string, size int64) (file, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	if err := preallocate(f, size); err != nil {
		f.Close()
		os.Remove(name)
		return nil, fmt.Errorf("preallocate %s: %w", name, err)
	}
	return newOSFile(f), nil
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// fileExt is the journal file name suffix.
const fileExt = ".jnl"

// fileName returns the name of journal file seq: 16 decimal digits and ".jnl".
func fileName(seq uint64) string { return fmt.Sprintf("%016d%s", seq, fileExt) }

// parseFileName returns the sequence number of a journal file name.
func parseFileName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, fileExt)
	if !ok || len(digits) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || seq == 0 {
		return 0, false
	}
	return seq, true
}

// listFiles returns the sequence numbers of the journal files in dir, ascending.
func listFiles(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, e := range ents {
		if seq, ok := parseFileName(e.Name()); ok && e.Type().IsRegular() {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	return seqs, nil
}

func filePath(dir string, seq uint64) string { return filepath.Join(dir, fileName(seq)) }
