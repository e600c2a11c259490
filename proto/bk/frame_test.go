package bk_test

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/magnetar-io/magnetar/proto/bk"
)

// stream encodes a sequence of requests, including one larger than the FrameReader's internal
// buffer so that both the zero-copy and the copying paths run.
func stream(t *testing.T) ([]bk.Request, []byte) {
	t.Helper()
	big := bk.AppendEntry(nil, 1, 2, 1, 200<<10, bk.DigestCRC32C, bytes.Repeat([]byte("z"), 200<<10))
	reqs := []bk.Request{
		{Op: bk.OpReadLAC, RequestID: 1, LedgerID: 1},
		{Op: bk.OpAddEntry, RequestID: 2, LedgerID: 1, EntryID: 2, Digest: bk.DigestCRC32C, Body: big},
		{Op: bk.OpLongPoll, RequestID: 3, LedgerID: 1, PreviousLAC: 1, TimeoutMs: 10},
		{Op: bk.OpAddEntry, RequestID: 4, LedgerID: 1, EntryID: 3, Digest: bk.DigestCRC32C, Body: big},
		{Op: bk.OpForce, RequestID: 5, LedgerID: 1},
	}
	var b []byte
	for i := range reqs {
		b = bk.AppendRequest(b, &reqs[i])
	}
	return reqs, b
}

func TestFrameReader(t *testing.T) {
	reqs, b := stream(t)
	for name, r := range map[string]io.Reader{
		"whole":      bytes.NewReader(b),
		"one byte":   iotest.OneByteReader(bytes.NewReader(b)),
		"half reads": iotest.HalfReader(bytes.NewReader(b)),
		"data+EOF":   iotest.DataErrReader(bytes.NewReader(b)),
	} {
		t.Run(name, func(t *testing.T) {
			fr := bk.NewFrameReader(r, 0)
			for i := range reqs {
				f, err := fr.Next()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				got, err := bk.DecodeRequest(f)
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if got.RequestID != reqs[i].RequestID || !bytes.Equal(got.Body, reqs[i].Body) {
					t.Fatalf("frame %d: got request %d", i, got.RequestID)
				}
			}
			for range 2 { // io.EOF at the boundary, and sticky
				if _, err := fr.Next(); err != io.EOF {
					t.Fatalf("at end: err = %v, want io.EOF", err)
				}
			}
		})
	}
}

func TestFrameReaderTruncated(t *testing.T) {
	_, b := stream(t)
	first := 4 + 10 + 8 // the ReadLAC frame
	for _, cut := range []int{1, 3, first + 2, first + 4 + 100, first + 4 + 100<<10, len(b) - 1} {
		fr := bk.NewFrameReader(iotest.OneByteReader(bytes.NewReader(b[:cut])), 0)
		var err error
		for err == nil {
			_, err = fr.Next()
		}
		if err != io.ErrUnexpectedEOF {
			t.Errorf("cut at %d: err = %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
}

func TestFrameReaderTooLarge(t *testing.T) {
	req := bk.Request{Op: bk.OpAddEntry, Body: make([]byte, 1000)}
	b := bk.AppendRequest(nil, &req)
	fr := bk.NewFrameReader(bytes.NewReader(b), 999)
	if _, err := fr.Next(); !errors.Is(err, bk.ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
	if _, err := fr.Next(); !errors.Is(err, bk.ErrFrameTooLarge) {
		t.Fatalf("error not sticky: %v", err)
	}
	// The default limit is MaxFrameLen; a length of 2^32-1 never allocates.
	fr = bk.NewFrameReader(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff}), 0)
	if _, err := fr.Next(); !errors.Is(err, bk.ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
	// Exactly max is accepted.
	fr = bk.NewFrameReader(bytes.NewReader(b), len(b)-4)
	if _, err := fr.Next(); err != nil {
		t.Fatal(err)
	}
}

func TestFrameReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	fr := bk.NewFrameReader(io.MultiReader(bytes.NewReader([]byte{0, 0, 0, 9, 1}), iotest.ErrReader(boom)), 0)
	if _, err := fr.Next(); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}
