package journal

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// TestRecordFormat freezes the on-disk layout (see doc.go).
func TestRecordFormat(t *testing.T) {
	r := Record{Type: RecAddEntry, LedgerID: 0x0102030405060708, EntryID: -2, Data: []byte("hi")}
	got := AppendRecord(nil, &r)
	const want = "13000000" + // length: 17 + 2, little-endian
		"2f8253bc" + // crc32c (Castagnoli) over type..data
		"01" + // type
		"0807060504030201" + // ledgerID
		"feffffffffffffff" + // entryID
		"6869" // data
	if h := hex.EncodeToString(got); h != want {
		t.Fatalf("encoded %s\nwant    %s", h, want)
	}
	back, n, st := parseRecord(append(got, 0, 0, 0))
	if st != parseOK || n != len(got) || !recordsEqual(back, r) {
		t.Fatalf("parse = %s, %d, %d", fmtRecord(back), n, st)
	}
}

func TestParseRecordEnd(t *testing.T) {
	for _, b := range [][]byte{nil, {0}, {0, 0, 0}, make([]byte, 100)} {
		if _, _, st := parseRecord(b); st != parseEnd {
			t.Errorf("parseRecord(%x) = %d, want end", b, st)
		}
	}
	for _, b := range [][]byte{{1}, {0, 0, 1}, {1, 0, 0, 0, 0}, {20, 0, 0, 0, 1, 2, 3, 4}} {
		if _, _, st := parseRecord(b); st != parseBad {
			t.Errorf("parseRecord(%x) = %d, want bad", b, st)
		}
	}
}

func TestFindRecordAfter(t *testing.T) {
	rec := AppendRecord(nil, &Record{Type: RecFence, LedgerID: 5})
	for _, gap := range []int{0, 1, 3, 4, 5, 4095, 4096, 4097, 10000} {
		b := make([]byte, 7+gap)
		b[0], b[6] = 9, 9 // garbage before the zeros
		b = append(b, rec...)
		b = append(b, make([]byte, 50)...)
		if p, ok := findRecordAfter(b, 1, len(b)); !ok || p != 7+gap {
			t.Errorf("gap %d: findRecordAfter = %d, %v; want %d", gap, p, ok, 7+gap)
		}
		if _, ok := findRecordAfter(b, 8+gap, len(b)); ok {
			t.Errorf("gap %d: found a record after the only one", gap)
		}
	}
}

func FuzzParseRecord(f *testing.F) {
	f.Add(AppendRecord(nil, &Record{Type: RecAddEntry, LedgerID: 1, EntryID: 2, Data: []byte("x")}))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, st := parseRecord(b)
		switch st {
		case parseOK, parseUnknownType:
			if n < HeaderSize || n > len(b) {
				t.Fatalf("size %d of %d bytes", n, len(b))
			}
			if st == parseOK && !bytes.Equal(AppendRecord(nil, &r), b[:n]) {
				t.Fatal("re-encoding differs")
			}
		case parseEnd, parseBad:
			if n != 0 {
				t.Fatalf("size %d for status %d", n, st)
			}
		}
		findRecordAfter(b, 0, len(b))
	})
}
