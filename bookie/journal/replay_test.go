package journal

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// writeJournal appends recs to a fresh journal in dir (small files, so they span
// several) and closes it. It returns the options used.
func writeJournal(t *testing.T, dir string, recs []Record) Options {
	t.Helper()
	opts := testOptions(4 << 10)
	j, _ := openCollect(t, dir, opts)
	appendAll(t, j, recs)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return opts
}

func TestTornTail(t *testing.T) {
	// Each case damages the last record of the last file (at off, size bytes, with
	// data of dataLen bytes) and says how many records survive: all but the last, or
	// all of them.
	cases := []struct {
		name    string
		damage  func(t *testing.T, path string, off, size int64)
		keepAll bool
	}{
		{name: "partial length", damage: func(t *testing.T, path string, off, size int64) {
			// Only 2 bytes of the length made it, and they are not the right ones.
			zeroRange(t, path, off, size)
			patchFile(t, path, off, []byte{0x11, 0x22})
		}},
		{name: "file ends inside length", damage: func(t *testing.T, path string, off, size int64) {
			truncate(t, path, off+3)
		}},
		{name: "file ends inside header", damage: func(t *testing.T, path string, off, size int64) {
			truncate(t, path, off+HeaderSize-2)
		}},
		{name: "file ends inside data", damage: func(t *testing.T, path string, off, size int64) {
			truncate(t, path, off+size-1)
		}},
		{name: "data tail zeroed", damage: func(t *testing.T, path string, off, size int64) {
			zeroRange(t, path, off+HeaderSize+(size-HeaderSize)/2, (size-HeaderSize)/2+1)
		}},
		{name: "whole record zeroed", damage: func(t *testing.T, path string, off, size int64) {
			zeroRange(t, path, off, size)
		}},
		{name: "header zeroed but length", damage: func(t *testing.T, path string, off, size int64) {
			zeroRange(t, path, off+4, size-4)
		}},
		{name: "crc flipped", damage: func(t *testing.T, path string, off, size int64) {
			flipByte(t, path, off+5)
		}},
		{name: "data flipped", damage: func(t *testing.T, path string, off, size int64) {
			flipByte(t, path, off+size-1)
		}},
		{name: "length too large", damage: func(t *testing.T, path string, off, size int64) {
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], 0xfffffff0)
			patchFile(t, path, off, b[:])
		}},
		{name: "length too small", damage: func(t *testing.T, path string, off, size int64) {
			patchFile(t, path, off, []byte{5, 0, 0, 0})
		}},
		{name: "garbage after last record", keepAll: true, damage: func(t *testing.T, path string, off, size int64) {
			rng := rand.New(rand.NewPCG(11, 12))
			g := make([]byte, 300)
			for i := range g {
				g[i] = byte(rng.Uint32())
			}
			patchFile(t, path, off+size, g)
		}},
		{name: "file ends at record boundary", keepAll: true, damage: func(t *testing.T, path string, off, size int64) {
			truncate(t, path, off+size)
		}},
		{name: "preallocated zeros only", keepAll: true, damage: func(t *testing.T, path string, off, size int64) {}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			rng := rand.New(rand.NewPCG(21, 22))
			recs := genRecords(rng, 80, 600, 1)
			recs[len(recs)-1].Data = make([]byte, 200) // room to damage the data
			for i := range recs[len(recs)-1].Data {
				recs[len(recs)-1].Data[i] = byte(i + 1)
			}
			opts := writeJournal(t, dir, recs)
			files := journalFiles(t, dir)
			if len(files) < 3 {
				t.Fatalf("want several files, got %d", len(files))
			}
			last := files[len(files)-1]
			offs := recordOffsets(t, last)
			off := offs[len(offs)-1]
			size := int64(HeaderSize + len(recs[len(recs)-1].Data))
			tc.damage(t, last, off, size)

			want := recs[:len(recs)-1]
			if tc.keepAll {
				want = recs
			}
			j, got := openCollect(t, dir, opts)
			checkRecords(t, got, want)
			// The tail is cut just after the last complete record: the torn bytes are
			// gone for good.
			end := off
			if tc.keepAll {
				end = off + size
			}
			if sz := fileSize(t, last); sz != end {
				t.Fatalf("last file is %d bytes after Open, want %d", sz, end)
			}
			more := genRecords(rng, 30, 300, 2)
			appendAll(t, j, more)
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			all := append(slices.Clone(want), more...)
			checkRecords(t, replayAll(t, dir, opts), all)
			checkRecords(t, replayAll(t, dir, opts), all) // stable across reopens
		})
	}
}

// TestTornTailOnlyRecord checks that a last file whose only record is torn is removed.
func TestTornTailOnlyRecord(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(1 << 20)
	j, _ := openCollect(t, dir, opts)
	appendAll(t, j, []Record{{Type: RecFence, LedgerID: 9}})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	files := journalFiles(t, dir)
	flipByte(t, files[len(files)-1], 10)
	if got := replayAll(t, dir, opts); len(got) != 0 {
		t.Fatalf("replayed %d records", len(got))
	}
	if _, err := os.Stat(files[len(files)-1]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("torn-only file still there: %v", err)
	}
}

func TestCorruption(t *testing.T) {
	// Each case damages a record that is not a torn tail; Open must refuse with a
	// CorruptionError naming the file and the record's offset, and change nothing.
	cases := []struct {
		name string
		// pick returns the file index (into the file list) and record index (into that
		// file's records) to damage.
		pick   func(nfiles, nrecs int) (fileIdx, recIdx int)
		damage func(t *testing.T, path string, off int64)
	}{
		{
			name:   "crc mismatch in a non-last file",
			pick:   func(nf, nr int) (int, int) { return 1, 1 },
			damage: func(t *testing.T, path string, off int64) { flipByte(t, path, off+HeaderSize) },
		},
		{
			name:   "torn tail of a non-last file",
			pick:   func(nf, nr int) (int, int) { return nf - 2, nr - 1 },
			damage: func(t *testing.T, path string, off int64) { flipByte(t, path, off+HeaderSize) },
		},
		{
			name:   "first record of the last file",
			pick:   func(nf, nr int) (int, int) { return nf - 1, 0 },
			damage: func(t *testing.T, path string, off int64) { flipByte(t, path, off+6) },
		},
		{
			name:   "bad record followed by valid ones in the last file",
			pick:   func(nf, nr int) (int, int) { return nf - 1, nr / 2 },
			damage: func(t *testing.T, path string, off int64) { flipByte(t, path, off+HeaderSize+1) },
		},
		{
			name: "zeroed record followed by valid ones",
			pick: func(nf, nr int) (int, int) { return 0, 1 },
			damage: func(t *testing.T, path string, off int64) {
				zeroRange(t, path, off, HeaderSize)
			},
		},
		{
			name: "unknown type with a valid crc",
			pick: func(nf, nr int) (int, int) { return nf - 1, nr - 1 },
			damage: func(t *testing.T, path string, off int64) {
				hdr := readAt(t, path, off, HeaderSize)
				n := binary.LittleEndian.Uint32(hdr)
				body := readAt(t, path, off+8, int(n))
				body[0] = 42
				var b [4]byte
				binary.LittleEndian.PutUint32(b[:], crc32.Checksum(body, castagnoli))
				patchFile(t, path, off+4, b[:])
				patchFile(t, path, off+8, body[:1])
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			recs := genRecords(rand.New(rand.NewPCG(31, 32)), 100, 500, 1)
			opts := writeJournal(t, dir, recs)
			files := journalFiles(t, dir)
			if len(files) < 3 {
				t.Fatalf("want several files, got %d", len(files))
			}
			fi, _ := tc.pick(len(files), 0)
			offs := recordOffsets(t, files[fi])
			_, ri := tc.pick(len(files), len(offs))
			path, off := files[fi], offs[ri]
			tc.damage(t, path, off)
			sizes := make([]int64, len(files))
			for i, p := range files {
				sizes[i] = fileSize(t, p)
			}

			_, _, err := tryOpen(dir, opts)
			var ce *CorruptionError
			if !errors.As(err, &ce) {
				t.Fatalf("Open = %v, want a *CorruptionError", err)
			}
			if !errors.Is(err, ErrCorruption) {
				t.Fatalf("errors.Is(%v, ErrCorruption) = false", err)
			}
			if ce.File != path || ce.Offset != off {
				t.Fatalf("corruption reported at %s:%d, want %s:%d (%v)", ce.File, ce.Offset, path, off, err)
			}
			if ce.Unwrap() == nil {
				t.Fatal("CorruptionError without a reason")
			}
			// Open repaired nothing and created no file.
			if now := journalFiles(t, dir); !slices.Equal(now, files) {
				t.Fatalf("files changed: %v -> %v", files, now)
			}
			for i, p := range files {
				if sz := fileSize(t, p); sz != sizes[i] {
					t.Fatalf("%s changed size: %d -> %d", p, sizes[i], sz)
				}
			}
		})
	}
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func zeroRange(t *testing.T, path string, off, n int64) {
	t.Helper()
	patchFile(t, path, off, make([]byte, n))
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	b := readAt(t, path, off, 1)
	b[0] ^= 0x5a
	patchFile(t, path, off, b)
}
