package bk_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/magnetar-io/magnetar/proto/bk"
)

// Fuzz targets: decoding never panics, and whatever decodes re-encodes to the identical bytes
// (the encoding is canonical). Seeds live in testdata/fuzz/<FuzzName>/, written by
// `go test ./proto/bk -run TestWriteFuzzCorpus -gencorpus`.

func FuzzDecodeRequest(f *testing.F) {
	for _, b := range requestSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		r, err := bk.DecodeRequest(frame)
		if err != nil {
			if !errors.Is(err, bk.ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		if again := bk.AppendRequest(nil, &r); !bytes.Equal(again[4:], frame) {
			t.Fatalf("re-encoding differs:\n got % x\nwant % x", again[4:], frame)
		}
	})
}

func FuzzDecodeResponse(f *testing.F) {
	for _, b := range responseSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		r, err := bk.DecodeResponse(frame)
		if err != nil {
			if !errors.Is(err, bk.ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		if again := bk.AppendResponse(nil, &r); !bytes.Equal(again[4:], frame) {
			t.Fatalf("re-encoding differs:\n got % x\nwant % x", again[4:], frame)
		}
	})
}

// FuzzFrameReader splits arbitrary streams: the frames returned, re-prefixed, are exactly the
// consumed prefix of the input, and the final error is one the contract allows.
func FuzzFrameReader(f *testing.F) {
	for _, b := range streamSeeds() {
		f.Add(b, uint16(1024))
	}
	f.Fuzz(func(t *testing.T, in []byte, limit uint16) {
		fr := bk.NewFrameReader(bytes.NewReader(in), int(limit))
		var out []byte
		for {
			fb, err := fr.Next()
			if err != nil {
				switch {
				case err == io.EOF:
					if !bytes.Equal(out, in) {
						t.Fatal("io.EOF before the end of the input")
					}
				case err == io.ErrUnexpectedEOF, errors.Is(err, bk.ErrFrameTooLarge):
					if !bytes.HasPrefix(in, out) || len(out) == len(in) {
						t.Fatalf("%v after consuming %d of %d bytes", err, len(out), len(in))
					}
				default:
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			max := int(limit)
			if max == 0 {
				max = bk.MaxFrameLen
			}
			if len(fb) > max {
				t.Fatalf("frame of %d bytes exceeds max %d", len(fb), max)
			}
			_, _ = bk.DecodeRequest(fb)
			_, _ = bk.DecodeResponse(fb)
			out = binary.BigEndian.AppendUint32(out, uint32(len(fb)))
			out = append(out, fb...)
		}
	})
}

func FuzzDecodeEntry(f *testing.F) {
	for _, s := range entrySeeds() {
		f.Add(s.b, s.d)
	}
	f.Fuzz(func(t *testing.T, b []byte, d byte) {
		e, err := bk.DecodeEntry(b, bk.DigestType(d))
		if err != nil {
			if !errors.Is(err, bk.ErrMalformed) && !errors.Is(err, bk.ErrDigest) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		again := bk.AppendEntry(nil, e.LedgerID, e.EntryID, e.LAC, e.Length, bk.DigestType(d), e.Payload)
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n got % x\nwant % x", again, b)
		}
		if err := bk.VerifyEntry(b, bk.DigestType(d), e.LedgerID, e.EntryID); err != nil {
			t.Fatal(err)
		}
		// Also exercise the LAC body decoder on the same bytes.
		if l, lac, err := bk.DecodeLACBody(b, bk.DigestType(d)); err == nil {
			if !bytes.Equal(bk.AppendLACBody(nil, l, lac, bk.DigestType(d)), b) {
				t.Fatal("LAC body re-encoding differs")
			}
		}
	})
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func requestSeeds() [][]byte {
	var seeds [][]byte
	reqs := sampleRequests()
	for _, k := range sortedKeys(reqs) {
		r := reqs[k]
		seeds = append(seeds, bk.AppendRequest(nil, &r)[4:])
	}
	add := seeds[0]
	seeds = append(seeds,
		nil,                                  // empty
		add[:len(add)-3],                     // short
		append(slices.Clone(add), 0),         // trailing
		[]byte{9, 0, 0, 0, 0, 0, 0, 0, 0, 1}, // unknown op
		[]byte{4, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7}, // response bit
	)
	return seeds
}

func responseSeeds() [][]byte {
	var seeds [][]byte
	resps := sampleResponses()
	for _, k := range sortedKeys(resps) {
		r := resps[k]
		seeds = append(seeds, bk.AppendResponse(nil, &r)[4:])
	}
	lr := resps["listentries"]
	list := bk.AppendResponse(nil, &lr)[4:]
	seeds = append(seeds,
		nil,
		list[:len(list)-1],
		[]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 1}, // no response bit
		[]byte{7, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 1,
			0xff, 0xff, 0xff, 0xff}, // negative count
	)
	return seeds
}

func streamSeeds() [][]byte {
	var all []byte
	reqs := sampleRequests()
	for _, k := range sortedKeys(reqs) {
		r := reqs[k]
		all = bk.AppendRequest(all, &r)
	}
	return [][]byte{
		all,
		all[:len(all)-5],
		all[:2],
		{0, 0, 0, 0},
		{0xff, 0xff, 0xff, 0xff, 1, 2, 3},
		nil,
	}
}

type entrySeed struct {
	b []byte
	d byte
}

func entrySeeds() []entrySeed {
	e := bk.AppendEntry(nil, 1, 2, 1, 10, bk.DigestCRC32C, []byte("0123456789"))
	bad := slices.Clone(e)
	bad[40] ^= 1
	return []entrySeed{
		{e, byte(bk.DigestCRC32C)},
		{bk.AppendEntry(nil, 1, 0, -1, 0, bk.DigestNone, nil), byte(bk.DigestNone)},
		{bad, byte(bk.DigestCRC32C)},
		{e[:20], byte(bk.DigestCRC32C)},
		{e, 9},
		{bk.AppendLACBody(nil, 1, 5, bk.DigestCRC32C), byte(bk.DigestCRC32C)},
	}
}

var genCorpus = flag.Bool("gencorpus", false, "write the fuzz seed corpus to testdata/fuzz")

// TestWriteFuzzCorpus regenerates the committed seed corpus when run with -gencorpus.
func TestWriteFuzzCorpus(t *testing.T) {
	if !*genCorpus {
		t.Skip("run with -gencorpus to regenerate testdata/fuzz")
	}
	write := func(fuzz string, i int, vals ...string) {
		dir := filepath.Join("testdata", "fuzz", fuzz)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		content := "go test fuzz v1\n"
		for _, v := range vals {
			content += v + "\n"
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bs := func(b []byte) string { return fmt.Sprintf("[]byte(%q)", b) }
	for i, b := range requestSeeds() {
		write("FuzzDecodeRequest", i, bs(b))
	}
	for i, b := range responseSeeds() {
		write("FuzzDecodeResponse", i, bs(b))
	}
	for i, b := range streamSeeds() {
		write("FuzzFrameReader", i, bs(b), "uint16(64)")
	}
	for i, s := range entrySeeds() {
		write("FuzzDecodeEntry", i, bs(s.b), fmt.Sprintf("byte(%q)", s.d))
	}
}
