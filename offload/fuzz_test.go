package offload

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzBlock feeds arbitrary bytes to the block decoder: it must never panic, must fail only
// with ErrCorrupt, and a block it accepts must re-encode to the same bytes when it carries
// the checksum (the encoding is canonical), and decode to entries that fit in it.
// The seed corpus is testdata/fuzz/FuzzBlock plus the blocks below.
func FuzzBlock(f *testing.F) {
	f.Add(buildBlock(0, [][]byte{[]byte("a")}, 0))
	f.Add(buildBlock(3, [][]byte{{}, []byte("bc"), bytes.Repeat([]byte{0xFE, 0xDC}, 8)}, 200))
	f.Add(buildBlock(1<<40, [][]byte{bytes.Repeat([]byte("z"), 500)}, 700))
	noExt := buildBlock(0, [][]byte{[]byte("x"), []byte("y")}, 170)
	clear(noExt[28:36])
	f.Add(noExt)
	f.Fuzz(func(t *testing.T, b []byte) {
		blk, err := DecodeBlock(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if len(blk.Entries) == 0 {
			t.Fatal("accepted a block with no entry")
		}
		var n int
		for _, p := range blk.Entries {
			n += EntryHeaderLen + len(p)
		}
		if BlockHeaderLen+n > len(b) {
			t.Fatalf("entries of %d bytes in a block of %d", n, len(b))
		}
		if blk.Checksummed {
			re := buildBlock(blk.FirstEntryID, blk.Entries, len(b))
			if !bytes.Equal(re[:36], b[:36]) || !bytes.Equal(re[BlockHeaderLen:], b[BlockHeaderLen:]) {
				t.Fatalf("re-encoding differs")
			}
		}
	})
}

// FuzzIndex does the same for the index decoder.
func FuzzIndex(f *testing.F) {
	f.Add((&Index{DataObjectLen: 1000, Metadata: testMetadata(), Blocks: []IndexEntry{{0, 1, 0}, {10, 2, 400}}}).AppendTo(nil))
	f.Add((&Index{Metadata: LedgerMetadata{LastEntryID: -1}}).AppendTo(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := DecodeIndex(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		for i := range x.Blocks {
			if off, n := x.blockSpan(i); off < 0 || n < MinBlockSize || off+n > x.DataObjectLen {
				t.Fatalf("block %d spans %d+%d of %d", i, off, n, x.DataObjectLen)
			}
			if first, last := x.blockEntries(i); first > last {
				t.Fatalf("block %d holds entries %d..%d", i, first, last)
			}
		}
	})
}

// The seed corpus was written by an encoder independent of this package's, from the
// layout in the package doc: the files named valid-* must decode, the others must not.
func TestCorpusLayout(t *testing.T) {
	for _, fuzz := range []string{"FuzzBlock", "FuzzIndex"} {
		dir := filepath.Join("testdata", "fuzz", fuzz)
		files, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			text, err := os.ReadFile(filepath.Join(dir, f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(text)), "\n")
			if len(lines) != 2 || !strings.HasPrefix(lines[1], "[]byte(") {
				t.Fatalf("%s: not a corpus file", f.Name())
			}
			s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
			if err != nil {
				t.Fatalf("%s: %v", f.Name(), err)
			}
			if fuzz == "FuzzBlock" {
				_, err = DecodeBlock([]byte(s))
			} else {
				_, err = DecodeIndex([]byte(s))
			}
			if valid := strings.HasPrefix(f.Name(), "valid-"); valid != (err == nil) {
				t.Errorf("%s/%s: decode error %v", fuzz, f.Name(), err)
			}
		}
	}
}
