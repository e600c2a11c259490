package journal

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func init() {
	// Assertion failures panic in this package's tests.
	panicOnAssert = true
}

var discardLogger = slog.New(slog.DiscardHandler)

// testOptions returns small-file options for tests.
func testOptions(fileSize int64) Options {
	o := DefaultOptions()
	o.FileSize = fileSize
	o.Logger = discardLogger
	o.sleep = time.Sleep // advances a synctest bubble's fake clock; a nanosleep would not
	return o
}

// openCollect opens dir and returns the journal and a copy of every replayed record.
func openCollect(t testing.TB, dir string, opts Options) (*Journal, []Record) {
	t.Helper()
	j, recs, err := tryOpen(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return j, recs
}

func tryOpen(dir string, opts Options) (*Journal, []Record, error) {
	var recs []Record
	j, err := Open(dir, opts, func(r Record) error {
		r.Data = bytes.Clone(r.Data)
		recs = append(recs, r)
		return nil
	})
	return j, recs, err
}

// replayAll opens dir, collects the replayed records and closes the journal again.
func replayAll(t testing.TB, dir string, opts Options) []Record {
	t.Helper()
	j, recs := openCollect(t, dir, opts)
	if err := j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return recs
}

// genRecords returns n records with unique (LedgerID, EntryID), random types and data
// sizes in [0, maxData].
func genRecords(rng *rand.Rand, n, maxData int, ledger int64) []Record {
	recs := make([]Record, n)
	for i := range recs {
		data := make([]byte, rng.IntN(maxData+1))
		for k := range data {
			data[k] = byte(rng.Uint32())
		}
		recs[i] = Record{
			Type:     RecordType(1 + rng.IntN(5)),
			LedgerID: ledger,
			EntryID:  int64(i),
			Data:     data,
		}
	}
	return recs
}

// appendAll appends recs in order and waits until every done was called, failing the
// test on an error.
func appendAll(t testing.TB, j *Journal, recs []Record) {
	t.Helper()
	errs := make(chan error, len(recs))
	for _, r := range recs {
		j.Append(r, func(err error) { errs <- err })
	}
	for range recs {
		if err := <-errs; err != nil {
			t.Fatalf("append: %v", err)
		}
	}
}

func recordsEqual(a, b Record) bool {
	return a.Type == b.Type && a.LedgerID == b.LedgerID && a.EntryID == b.EntryID &&
		bytes.Equal(a.Data, b.Data)
}

// checkRecords fails unless got equals want record by record.
func checkRecords(t testing.TB, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !recordsEqual(got[i], want[i]) {
			t.Fatalf("record %d: got %s, want %s", i, fmtRecord(got[i]), fmtRecord(want[i]))
		}
	}
}

func fmtRecord(r Record) string {
	return fmt.Sprintf("{%s l=%d e=%d len=%d}", r.Type, r.LedgerID, r.EntryID, len(r.Data))
}

// journalFiles returns the journal file paths in dir, in order.
func journalFiles(t testing.TB, dir string) []string {
	t.Helper()
	seqs, err := listFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	paths := make([]string, len(seqs))
	for i, s := range seqs {
		paths[i] = filepath.Join(dir, fileName(s))
	}
	return paths
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// recordOffsets returns the offset of every complete record in the file at path.
func recordOffsets(t testing.TB, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for off := 0; ; {
		_, n, st := parseRecord(b[off:])
		if st != parseOK {
			return offs
		}
		offs = append(offs, int64(off))
		off += n
	}
}

// patchFile overwrites the file at path with p at off.
func patchFile(t testing.TB, path string, off int64, p []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(p, off); err != nil {
		t.Fatal(err)
	}
}

func readAt(t testing.TB, path string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := make([]byte, n)
	if _, err := f.ReadAt(p, off); err != nil {
		t.Fatal(err)
	}
	return p
}

// crashFS is a vfs double that keeps every write in memory until Sync applies it to
// the real file underneath, so Crash can drop everything not yet synced, like a power
// failure. It can also block or fail Sync.
type crashFS struct {
	mu      sync.Mutex
	crashed bool
	files   []*crashFile
	// syncGate, when non-nil, makes Sync wait until it is closed or the FS crashes.
	syncGate chan struct{}
	// writeGate, when non-nil, makes WriteAt wait until it is closed.
	writeGate chan struct{}
	crashc    chan struct{} // closed by Crash
	syncErr   error         // returned by Sync when set
	writeErr  error         // returned by WriteAt when set
	syncs     int           // completed Syncs
}

var errCrashed = errors.New("crashfs: crashed")

func newCrashFS() *crashFS { return &crashFS{crashc: make(chan struct{})} }

type crashFile struct {
	fs      *crashFS
	f       *os.File
	pending []pendingWrite // unsynced writes, in order
}

type pendingWrite struct {
	off  int64
	data []byte
}

func (c *crashFS) Create(name string, size int64) (file, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return nil, errCrashed
	}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	if err := preallocate(f, size); err != nil {
		f.Close()
		return nil, err
	}
	cf := &crashFile{fs: c, f: f}
	c.files = append(c.files, cf)
	return cf, nil
}

func (c *crashFS) SyncDir(string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return errCrashed
	}
	return nil
}

// Crash drops every unsynced write; later writes and syncs fail. keep, if non-nil, is
// called for each file's pending writes and returns how many bytes of them (in order)
// still reach the disk, emulating a torn tail.
func (c *crashFS) Crash(keep func(total int) int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashLocked(keep)
}

func (c *crashFS) crashLocked(keep func(total int) int) {
	if c.crashed {
		return
	}
	c.crashed = true
	close(c.crashc)
	for _, f := range c.files {
		if keep != nil {
			total := 0
			for _, w := range f.pending {
				total += len(w.data)
			}
			n := keep(total)
			for _, w := range f.pending {
				if n <= 0 {
					break
				}
				k := min(n, len(w.data))
				if _, err := f.f.WriteAt(w.data[:k], w.off); err != nil {
					panic(err)
				}
				n -= k
			}
		}
		f.pending = nil
	}
}

func (f *crashFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	gate := f.fs.writeGate
	f.fs.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.fs.crashed {
		return 0, errCrashed
	}
	if f.fs.writeErr != nil {
		return 0, f.fs.writeErr
	}
	f.pending = append(f.pending, pendingWrite{off: off, data: bytes.Clone(p)})
	return len(p), nil
}

func (f *crashFile) Sync() error {
	f.fs.mu.Lock()
	gate := f.fs.syncGate
	f.fs.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-f.fs.crashc:
		}
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.fs.crashed {
		return errCrashed
	}
	if f.fs.syncErr != nil {
		return f.fs.syncErr
	}
	for _, w := range f.pending {
		if _, err := f.f.WriteAt(w.data, w.off); err != nil {
			return err
		}
	}
	f.pending = nil
	f.fs.syncs++
	return nil
}

func (f *crashFile) Close() error { return f.f.Close() }

// waitFor waits for ch with a generous timeout so that a bug fails the test rather than
// hanging it.
func waitFor(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}
