package journal

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
)

// ErrCorruption is the category of every *CorruptionError: errors.Is(err,
// ErrCorruption) reports whether Open found damage it must not repair.
var ErrCorruption = errors.New("journal: corruption")

// CorruptionError reports a damaged journal that Open refuses to repair, because
// repairing it could drop acknowledged records: a bad record that is not a torn tail
// of the last file. Test for it with errors.As.
type CorruptionError struct {
	File   string // path of the journal file
	Offset int64  // offset of the first bad byte position (a record start)
	Err    error  // what is wrong
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("journal: corruption in %s at offset %d: %v", e.File, e.Offset, e.Err)
}

// Unwrap returns the underlying reason.
func (e *CorruptionError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorruption) true.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorruption }

// scanResult describes one replayed file.
type scanResult struct {
	records int
	end     int64 // offset just after the last complete record
	size    int64 // file size
	torn    bool  // a torn record starts at end
}

// scanFile replays the records of the file at path. In the last file a bad record
// with nothing valid after it is a torn tail; everywhere else it is corruption, and
// so is a valid record after the end of the written data in any file.
func scanFile(path string, last bool, replay func(Record) error) (scanResult, error) {
	m, err := mapFile(path)
	if err != nil {
		return scanResult{}, fmt.Errorf("journal: read %s: %w", path, err)
	}
	defer m.close()
	b := m.b
	res := scanResult{size: int64(len(b))}
	corrupt := func(off int, err error) (scanResult, error) {
		return res, &CorruptionError{File: path, Offset: int64(off), Err: err}
	}
	off := 0
	for {
		r, n, st := parseRecord(b[off:])
		switch st {
		case parseOK:
			if replay != nil {
				if err := replay(r); err != nil {
					return res, fmt.Errorf("journal: replay %s at offset %d: %w", path, off, err)
				}
			}
			res.records++
			off += n
			continue
		case parseUnknownType:
			return corrupt(off, fmt.Errorf("unknown record type %d", r.Type))
		case parseEnd:
			if p, ok := validRecordAfter(m, off+1); ok {
				return corrupt(off, fmt.Errorf("zeros where a record should be, valid record at offset %d after them", p))
			}
			res.end = int64(off)
			return res, nil
		case parseBad:
			if !last {
				return corrupt(off, errors.New("bad record (CRC mismatch or truncated) in a file that is not the last"))
			}
			if p, ok := validRecordAfter(m, off+1); ok {
				return corrupt(off, fmt.Errorf("bad record (CRC mismatch or truncated) followed by a valid record at offset %d", p))
			}
			res.end = int64(off)
			res.torn = true
			return res, nil
		}
	}
}

// validRecordAfter reports the first position at or after from where a record with a
// valid CRC starts, looking only at ranges of the file that may hold data.
func validRecordAfter(m *mappedFile, from int) (int, bool) {
	m.stopReadahead(from)
	for off := int64(from); ; {
		start, end, ok := m.nextData(off)
		if !ok {
			return 0, false
		}
		// A record whose first nonzero byte is at start may begin up to 3 bytes earlier.
		lo := max(int(start)-3, from)
		if p, ok := findRecordAfter(m.b, lo, int(end)); ok {
			return p, true
		}
		off = end
	}
}

// recoverDir replays every journal file in dir, repairs the tail of the last one and
// returns the sequence number for the next file. Repair means: truncate the last file
// just after its last complete record (dropping a torn tail and the unused
// preallocation), or remove it when it holds no record at all.
func recoverDir(dir string, log *slog.Logger, replay func(Record) error) (uint64, error) {
	seqs, err := listFiles(dir)
	if err != nil {
		return 0, fmt.Errorf("journal: %w", err)
	}
	var scratch []byte
	copyReplay := func(r Record) error {
		// r.Data points into the mapped file, which is unmapped after the scan: hand
		// out a heap copy so a caller that keeps it by mistake reads stale bytes rather
		// than faulting.
		scratch = append(scratch[:0], r.Data...)
		r.Data = scratch
		return replay(r)
	}
	if replay == nil {
		copyReplay = nil
	}
	for i, seq := range seqs {
		path := filePath(dir, seq)
		last := i == len(seqs)-1
		res, err := scanFile(path, last, copyReplay)
		if err != nil {
			return 0, err
		}
		if !last {
			continue
		}
		if res.torn {
			log.Warn("journal: truncating torn tail", "file", path, "offset", res.end, "records", res.records)
		}
		if res.records == 0 {
			if err := os.Remove(path); err != nil {
				return 0, fmt.Errorf("journal: remove empty %s: %w", path, err)
			}
			if err := osFS.SyncDir(osFS{}, dir); err != nil {
				return 0, fmt.Errorf("journal: sync dir: %w", err)
			}
		} else if res.size > res.end {
			if err := truncateFile(path, res.end); err != nil {
				return 0, fmt.Errorf("journal: truncate %s at %d: %w", path, res.end, err)
			}
		}
	}
	next := uint64(1)
	if len(seqs) > 0 {
		next = seqs[len(seqs)-1] + 1
	}
	return next, nil
}

func truncateFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
