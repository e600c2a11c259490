package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/internal/fsutil"
)

// Entry-log format constants. They are on disk: never change them, add a new
// magic instead (see doc.go for the diagram).
const (
	logMagic         = "MGTRLG" // first 6 bytes of every entry log
	logFormatVersion = 1        // uint16 after the magic
	logHeaderSize    = 16       // magic(6) | version(2) | logID(8)
	recordHeaderSize = 24       // crc(4) | length(4) | ledgerID(8) | entryID(8)

	// MaxEntrySize is the largest entry Put accepts (the length field is a
	// uint32; BookKeeper's default frame limit is 5 MiB).
	MaxEntrySize = 256 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// logFileName returns the file name of entry log id: 16 hex digits, so that a
// directory listing sorts by id.
func logFileName(id uint64) string { return fmt.Sprintf("%016x.log", id) }

// deletingExt marks a dropped log's file: renamed out of its live name, it waits for
// its last reader and is then removed gradually (see Storage.removeDropped).
const deletingExt = fsutil.DeletingExt

// parseLogFileName is the inverse of logFileName.
func parseLogFileName(name string) (uint64, bool) {
	if len(name) != 20 {
		return 0, false
	}
	id, err := strconv.ParseUint(name[:16], 16, 64)
	if err != nil || logFileName(id) != name {
		return 0, false
	}
	return id, true
}

// appendLogHeader appends the 16-byte entry-log file header.
func appendLogHeader(dst []byte, id uint64) []byte {
	dst = append(dst, logMagic...)
	dst = binary.BigEndian.AppendUint16(dst, logFormatVersion)
	return binary.BigEndian.AppendUint64(dst, id)
}

// checkLogHeader validates a file header read from entry log id.
func checkLogHeader(b []byte, id uint64) error {
	if len(b) < logHeaderSize || string(b[:6]) != logMagic {
		return errors.New("bad magic")
	}
	if v := binary.BigEndian.Uint16(b[6:8]); v != logFormatVersion {
		return fmt.Errorf("unknown format version %d", v)
	}
	if got := binary.BigEndian.Uint64(b[8:16]); got != id {
		return fmt.Errorf("header names log %d", got)
	}
	return nil
}

// appendRecord appends one entry-log record (header and payload) to dst.
func appendRecord(dst []byte, ledgerID, entryID int64, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0) // crc, filled below
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.BigEndian.AppendUint64(dst, uint64(ledgerID))
	dst = binary.BigEndian.AppendUint64(dst, uint64(entryID))
	dst = append(dst, payload...)
	crc := crc32.Update(0, crcTable, dst[start+4:])
	binary.BigEndian.PutUint32(dst[start:], crc)
	return dst
}

// recordHeader is a decoded record header.
type recordHeader struct {
	crc      uint32
	length   uint32
	ledgerID int64
	entryID  int64
}

func decodeRecordHeader(b []byte) recordHeader {
	return recordHeader{
		crc:      binary.BigEndian.Uint32(b[0:4]),
		length:   binary.BigEndian.Uint32(b[4:8]),
		ledgerID: int64(binary.BigEndian.Uint64(b[8:16])),
		entryID:  int64(binary.BigEndian.Uint64(b[16:24])),
	}
}

// verifyRecord checks a whole record (header and payload) and returns its
// decoded header. It never panics on arbitrary input.
func verifyRecord(rec []byte) (recordHeader, error) {
	if len(rec) < recordHeaderSize {
		return recordHeader{}, errors.New("short record")
	}
	h := decodeRecordHeader(rec)
	if int64(h.length) != int64(len(rec)-recordHeaderSize) {
		return h, fmt.Errorf("record length %d, have %d bytes", h.length, len(rec)-recordHeaderSize)
	}
	if crc := crc32.Update(0, crcTable, rec[4:]); crc != h.crc {
		return h, fmt.Errorf("crc mismatch: stored %08x computed %08x", h.crc, crc)
	}
	return h, nil
}

// logFile is one entry log, open for reading (and, for the current log, for
// writing). logFiles are shared by readers through a reference count so that
// compaction can drop a log while a Get still reads from it.
type logFile struct {
	id uint64
	f  vfs.File

	// size is the number of bytes written. It only grows, and only under
	// Storage.w (the current log); other logs never change size. Bytes
	// below size may be unsynced; the index references them only once
	// synced.
	size atomic.Int64
	// live and liveEntries count the bytes (record header included) and the
	// records that the index references. Invariant: they equal the 'c'
	// counter for this log in Pebble once every in-flight index batch has
	// been applied; they never count a record the index does not reference.
	live        atomic.Int64
	liveEntries atomic.Int64

	// pending counts the record writers (flusher, compaction) that wrote to
	// this log and have not yet committed those records' index entries.
	// Raised only while the log is current (under Storage.w), so once a
	// rolled log's count is zero no index entry will ever be added for it:
	// Compact skips logs with pending writers.
	pending atomic.Int32

	// refs counts the files map (1 while the log is in it) plus readers.
	// The file is closed when it drops to zero, and then closed is closed.
	refs   atomic.Int32
	closed chan struct{}
}

// newLogFile returns the logFile of id open as f, with the files map's reference.
func newLogFile(id uint64, f vfs.File, size int64) *logFile {
	lf := &logFile{id: id, f: f, closed: make(chan struct{})}
	lf.size.Store(size)
	lf.refs.Store(1)
	return lf
}

// release drops one reference and closes the file on the last one.
func (lf *logFile) release() {
	if n := lf.refs.Add(-1); n == 0 {
		_ = lf.f.Close()
		close(lf.closed)
	} else if n < 0 {
		panic(fmt.Sprintf("storage: log %d released too often", lf.id))
	}
}

// readRecord reads and verifies the record at off whose payload is length
// bytes, and checks it belongs to (ledgerID, entryID). It returns the payload.
func (lf *logFile) readRecord(off int64, length uint32, ledgerID, entryID int64) ([]byte, error) {
	buf := make([]byte, recordHeaderSize+int(length))
	if _, err := lf.f.ReadAt(buf, off); err != nil {
		return nil, &CorruptionError{Log: lf.id, Offset: off, Err: fmt.Errorf("read: %w", err)}
	}
	h, err := verifyRecord(buf)
	if err != nil {
		return nil, &CorruptionError{Log: lf.id, Offset: off, Err: err}
	}
	if h.ledgerID != ledgerID || h.entryID != entryID {
		return nil, &CorruptionError{Log: lf.id, Offset: off,
			Err: fmt.Errorf("record is (%d,%d), index says (%d,%d)", h.ledgerID, h.entryID, ledgerID, entryID)}
	}
	return buf[recordHeaderSize:], nil
}

// scanner reads the records of a log sequentially through a large buffer. It
// stops at the first record that does not verify (a torn tail).
type scanner struct {
	lf   *logFile
	size int64
	off  int64 // offset of the next record
	buf  []byte
	bufO int64 // file offset of buf[0]
	err  error // why scanning stopped early; nil at a clean end
}

func newScanner(lf *logFile) *scanner {
	return &scanner{lf: lf, size: lf.size.Load(), off: logHeaderSize}
}

// window returns n bytes at file offset off, refilling the buffer if needed.
func (sc *scanner) window(off int64, n int) ([]byte, error) {
	if off >= sc.bufO && off+int64(n) <= sc.bufO+int64(len(sc.buf)) {
		return sc.buf[off-sc.bufO : off-sc.bufO+int64(n)], nil
	}
	want := max(n, 1<<20)
	if rem := sc.size - off; int64(want) > rem {
		want = int(rem)
	}
	if want < n {
		return nil, errors.New("record runs past end of log")
	}
	if cap(sc.buf) < want {
		sc.buf = make([]byte, want)
	}
	sc.buf = sc.buf[:want]
	if _, err := sc.lf.f.ReadAt(sc.buf, off); err != nil {
		sc.buf = sc.buf[:0]
		return nil, err
	}
	sc.bufO = off
	return sc.buf[:n], nil
}

// next returns the next record's header, its offset and its payload (valid
// until the following call). ok is false at the end or at a bad record.
func (sc *scanner) next() (h recordHeader, off int64, payload []byte, ok bool) {
	if sc.off+recordHeaderSize > sc.size {
		if sc.off != sc.size {
			sc.err = fmt.Errorf("%d trailing bytes", sc.size-sc.off)
		}
		return h, 0, nil, false
	}
	hb, err := sc.window(sc.off, recordHeaderSize)
	if err != nil {
		sc.err = err
		return h, 0, nil, false
	}
	h = decodeRecordHeader(hb)
	if h.length > MaxEntrySize {
		sc.err = fmt.Errorf("record length %d too large", h.length)
		return h, 0, nil, false
	}
	rec, err := sc.window(sc.off, recordHeaderSize+int(h.length))
	if err != nil {
		sc.err = err
		return h, 0, nil, false
	}
	if _, err := verifyRecord(rec); err != nil {
		sc.err = err
		return h, 0, nil, false
	}
	off = sc.off
	sc.off += int64(len(rec))
	return h, off, rec[recordHeaderSize:], true
}
