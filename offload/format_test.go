package offload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/google/uuid"
)

// buildBlock encodes entries first.. into one block of blockLen bytes (0: no padding).
func buildBlock(first int64, payloads [][]byte, blockLen int) []byte {
	var bb blockBuilder
	bb.reset(first, 1<<20, 0)
	for i, p := range payloads {
		bb.add(first+int64(i), p)
	}
	if blockLen == 0 {
		blockLen = bb.size()
	}
	return append([]byte(nil), bb.finish(blockLen)...)
}

func TestBlockRoundTrip(t *testing.T) {
	payloads := [][]byte{[]byte("a"), {}, bytes.Repeat([]byte{0xFE}, 300), []byte("last")}
	for _, pad := range []int{0, 1, 3, 4, 11, 12, 13, 100} {
		size := len(buildBlock(7, payloads, 0))
		b := buildBlock(7, payloads, size+pad)
		if len(b) != size+pad {
			t.Fatalf("pad %d: block of %d bytes, want %d", pad, len(b), size+pad)
		}
		blk, err := DecodeBlock(b)
		if err != nil {
			t.Fatalf("pad %d: %v", pad, err)
		}
		if blk.FirstEntryID != 7 || !blk.Checksummed || len(blk.Entries) != len(payloads) {
			t.Fatalf("pad %d: decoded %+v", pad, blk)
		}
		for i := range payloads {
			if !bytes.Equal(blk.Entries[i], payloads[i]) {
				t.Fatalf("pad %d: entry %d = %q, want %q", pad, i, blk.Entries[i], payloads[i])
			}
		}
	}
}

// A block as Pulsar writes it (zero header padding, no checksum) decodes.
func TestBlockWithoutExtension(t *testing.T) {
	b := buildBlock(0, [][]byte{[]byte("x"), []byte("yz")}, 200)
	clear(b[28:36])
	blk, err := DecodeBlock(b)
	if err != nil || blk.Checksummed || len(blk.Entries) != 2 || string(blk.Entries[1]) != "yz" {
		t.Fatalf("got %+v, %v", blk, err)
	}
}

func TestBlockCorruption(t *testing.T) {
	good := buildBlock(5, [][]byte{[]byte("hello"), []byte("world")}, 180)
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	setU64 := func(off int, v uint64) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint64(b[off:], v); return b }
	}
	cases := map[string][]byte{
		"empty":            nil,
		"short header":     good[:100],
		"magic":            mutate(func(b []byte) []byte { b[0] ^= 1; return b }),
		"header length":    mutate(setU64(4, 64)),
		"block length":     mutate(setU64(12, 181)),
		"truncated":        good[:170],
		"negative first":   mutate(setU64(20, 1<<63)),
		"payload bit flip": mutate(func(b []byte) []byte { b[BlockHeaderLen+EntryHeaderLen] ^= 0x20; return b }),
		"checksum":         mutate(func(b []byte) []byte { b[33] ^= 1; return b }),
	}
	// Without the checksum, the structural checks still catch these.
	noExt := func(f func([]byte) []byte) []byte {
		return mutate(func(b []byte) []byte { b = f(b); clear(b[28:36]); return b })
	}
	cases["entry id out of sequence"] = noExt(func(b []byte) []byte {
		binary.BigEndian.PutUint64(b[BlockHeaderLen+4:], 9)
		return b
	})
	cases["entry length past the end"] = noExt(func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[BlockHeaderLen:], 1000)
		return b
	})
	cases["negative entry length"] = noExt(func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[BlockHeaderLen:], 0x80000000)
		return b
	})
	cases["bad padding"] = noExt(func(b []byte) []byte { b[len(b)-1] ^= 1; return b })
	cases["no entries"] = noExt(func(b []byte) []byte {
		copy(b[BlockHeaderLen:], bytes.Repeat(blockPadding[:], 20))
		return b
	})
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeBlock(b)
			var ce *CorruptionError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
				t.Fatalf("DecodeBlock: %v, want a CorruptionError", err)
			}
		})
	}
}

func testMetadata() LedgerMetadata {
	return LedgerMetadata{
		LastEntryID: 41, Length: 12345, EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, Digest: 3,
		CTime:     1700000000000,
		Ensembles: []Ensemble{{0, []string{"b1:3181", "b2:3181", "b3:3181"}}, {20, []string{"b1:3181", "b4:3181", "b3:3181"}}},
		Custom:    map[string][]byte{"component": []byte("managed-ledger"), "topic": []byte("persistent://t/n/x")},
	}
}

func TestIndexRoundTrip(t *testing.T) {
	x := &Index{DataObjectLen: 1000, Metadata: testMetadata(), Blocks: []IndexEntry{
		{0, 1, 0}, {10, 2, 400}, {30, 3, 800},
	}}
	b := x.AppendTo(nil)
	got, err := DecodeIndex(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Checksummed {
		t.Fatal("checksum trailer not seen")
	}
	got.Checksummed = false
	if !reflect.DeepEqual(got, x) {
		t.Fatalf("decoded %+v\nwant %+v", got, x)
	}
	// Without the trailer (Pulsar's layout) it decodes too, unchecksummed.
	nb := append([]byte(nil), b[:len(b)-extTrailerLen]...)
	binary.BigEndian.PutUint32(nb[4:], uint32(len(nb)))
	got, err = DecodeIndex(nb)
	if err != nil || got.Checksummed || len(got.Blocks) != 3 {
		t.Fatalf("without trailer: %+v, %v", got, err)
	}
	for id, want := range map[int64]int{0: 0, 9: 0, 10: 1, 29: 1, 30: 2, 41: 2} {
		if i := got.blockOf(id); i != want {
			t.Errorf("blockOf(%d) = %d, want %d", id, i, want)
		}
	}
}

func TestIndexCorruption(t *testing.T) {
	x := &Index{DataObjectLen: 1000, Metadata: testMetadata(), Blocks: []IndexEntry{{0, 1, 0}, {10, 2, 400}}}
	good := x.AppendTo(nil)
	enc := func(f func(x *Index)) []byte {
		y := *x
		y.Blocks = append([]IndexEntry(nil), x.Blocks...)
		f(&y)
		return y.AppendTo(nil)
	}
	cases := map[string][]byte{
		"empty":              nil,
		"magic":              append([]byte{0}, good[1:]...),
		"bit flip":           func() []byte { b := append([]byte(nil), good...); b[40] ^= 4; return b }(),
		"truncated":          good[:len(good)-1],
		"part id":            enc(func(x *Index) { x.Blocks[1].PartID = 5 }),
		"first block entry":  enc(func(x *Index) { x.Blocks[0].FirstEntryID = 1 }),
		"entries not sorted": enc(func(x *Index) { x.Blocks[1].FirstEntryID = 0 }),
		"overlapping blocks": enc(func(x *Index) { x.Blocks[1].Offset = 100 }),
		"block past the end": enc(func(x *Index) { x.DataObjectLen = 450 }),
		"block past last":    enc(func(x *Index) { x.Blocks[1].FirstEntryID = 42 }),
		"empty with data":    enc(func(x *Index) { x.Blocks = nil }),
		"bad metadata":       enc(func(x *Index) { x.Metadata.LastEntryID = -5 }),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeIndex(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeIndex: %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestMetadataProto(t *testing.T) {
	md := testMetadata()
	got, err := decodeMetadata(md.appendProto(nil))
	if err != nil || !reflect.DeepEqual(got, md) {
		t.Fatalf("got %+v, %v\nwant %+v", got, err, md)
	}
	// An open ledger's metadata (state OPEN) is refused.
	b := (&LedgerMetadata{LastEntryID: -1}).appendProto(nil)
	i := bytes.Index(b, []byte{pbState << 3, pbStateClosed})
	b[i+1] = 1
	if _, err := decodeMetadata(b); err == nil {
		t.Fatal("OPEN ledger metadata accepted")
	}
}

func TestKeys(t *testing.T) {
	id := uuid.MustParse("3f0d9a4e-9a55-4a4c-a8f0-4d2b8f2f7a10")
	if k := DataKey(id, 42); k != "3f0d9a4e-9a55-4a4c-a8f0-4d2b8f2f7a10-ledger-42" {
		t.Fatalf("DataKey = %q", k)
	}
	if k := IndexKey(id, 42); k != "3f0d9a4e-9a55-4a4c-a8f0-4d2b8f2f7a10-ledger-42-index" {
		t.Fatalf("IndexKey = %q", k)
	}
	for _, tc := range []struct {
		key   string
		ok    bool
		index bool
	}{
		{DataKey(id, 42), true, false},
		{IndexKey(id, 0), true, true},
		{"3f0d9a4e-9a55-4a4c-a8f0-4d2b8f2f7a10-ledger-", false, false},
		{"3f0d9a4e-9a55-4a4c-a8f0-4d2b8f2f7a10-ledger-042", false, false},
		{"3f0d9a4e-9a55-4a4c-a8f0-4d2b8f2f7a10-ledger--1", false, false},
		{"3F0D9A4E-9A55-4A4C-A8F0-4D2B8F2F7A10-ledger-1", false, false},
		{"3f0d9a4e-9a55-4a4c-a8f0-4d2b8f2f7a10", false, false},
		{"other", false, false},
	} {
		gotID, l, index, ok := ParseKey(tc.key)
		if ok != tc.ok || (ok && (gotID != id || index != tc.index || (l != 42 && l != 0))) {
			t.Errorf("ParseKey(%q) = %v %d %v %v", tc.key, gotID, l, index, ok)
		}
	}
}
