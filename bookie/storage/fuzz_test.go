package storage

import (
	"bytes"
	"testing"
)

// FuzzDecodeMeta: decoding never panics, and whatever decodes re-encodes to
// the same bytes.
func FuzzDecodeMeta(f *testing.F) {
	m := LedgerMeta{Digest: 1, Fenced: true, ExplicitLAC: []byte("lac")}
	copy(m.MasterKey[:], "master-key-20-bytes!")
	f.Add(m.AppendTo(nil))
	f.Add(LedgerMeta{}.AppendTo(nil))
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		if got := m.AppendTo(nil); !bytes.Equal(got, b) {
			t.Fatalf("decode(%x) re-encodes as %x", b, got)
		}
	})
}

// FuzzVerifyRecord: verification never panics, and a record that verifies
// is exactly what appendRecord writes for its fields.
func FuzzVerifyRecord(f *testing.F) {
	f.Add(appendRecord(nil, 1, 2, []byte("hello")))
	f.Add(appendRecord(nil, 0, 0, nil))
	f.Add(make([]byte, recordHeaderSize))
	f.Fuzz(func(t *testing.T, rec []byte) {
		h, err := verifyRecord(rec)
		if err != nil {
			return
		}
		if got := appendRecord(nil, h.ledgerID, h.entryID, rec[recordHeaderSize:]); !bytes.Equal(got, rec) {
			t.Fatalf("record %x verifies but re-encodes as %x", rec, got)
		}
	})
}

func TestLogFileName(t *testing.T) {
	for _, id := range []uint64{0, 1, 0xabc, 1<<64 - 1} {
		got, ok := parseLogFileName(logFileName(id))
		if !ok || got != id {
			t.Errorf("round trip of %d: %d, %v", id, got, ok)
		}
	}
	for _, name := range []string{"index", "000000000000000g.log", "1.log", "0000000000000001.log.tmp"} {
		if _, ok := parseLogFileName(name); ok {
			t.Errorf("parseLogFileName(%q) accepted", name)
		}
	}
}
