package bk

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// frameReaderBufSize is the bufio buffer of a FrameReader. Frames that fit in it are returned
// without a copy.
const frameReaderBufSize = 64 << 10

// FrameReader splits a byte stream into frames. It is a thread-unsafe reader owned by one
// goroutine (a connection's reader).
//
// Errors are sticky: after Next returns an error, every later call returns it again.
type FrameReader struct {
	br  *bufio.Reader
	max int
	buf []byte // holds frames larger than the bufio buffer; reused
	err error
}

// NewFrameReader returns a FrameReader over r that rejects frames longer than max bytes
// (after the length prefix). max <= 0 means MaxFrameLen.
func NewFrameReader(r io.Reader, max int) *FrameReader {
	if max <= 0 {
		max = MaxFrameLen
	}
	return &FrameReader{br: bufio.NewReaderSize(r, frameReaderBufSize), max: max}
}

// Next returns the next frame: the bytes after its length prefix, ready for DecodeRequest or
// DecodeResponse. The slice is owned by the FrameReader and valid only until the next call.
//
// Next returns io.EOF if the stream ends cleanly at a frame boundary, io.ErrUnexpectedEOF if
// it ends inside a frame, an error wrapping ErrFrameTooLarge if the length exceeds max (the
// caller closes the connection: the stream cannot be resynchronised), and otherwise the
// underlying reader's error.
func (f *FrameReader) Next() ([]byte, error) {
	if f.err != nil {
		return nil, f.err
	}
	frame, err := f.next()
	if err != nil {
		f.err = err
		return nil, err
	}
	return frame, nil
}

func (f *FrameReader) next() ([]byte, error) {
	// Peek, not io.ReadFull into a local array: that array would escape to the heap, one
	// allocation per frame.
	hdr, err := f.br.Peek(LengthPrefixLen)
	if err != nil {
		if len(hdr) > 0 {
			return nil, eofIsUnexpected(err) // the stream ended inside the prefix
		}
		return nil, err // io.EOF only when no byte of the prefix arrived
	}
	n := binary.BigEndian.Uint32(hdr)
	_, _ = f.br.Discard(LengthPrefixLen) // cannot fail: Peek returned the prefix
	if uint64(n) > uint64(f.max) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, f.max)
	}
	if int(n) <= f.br.Size() {
		// Zero copy: the bytes stay valid in the bufio buffer until its next read.
		b, err := f.br.Peek(int(n))
		if err != nil {
			return nil, eofIsUnexpected(err)
		}
		_, _ = f.br.Discard(int(n)) // cannot fail: Peek returned n bytes
		return b[:n:n], nil
	}
	if cap(f.buf) < int(n) {
		f.buf = make([]byte, n)
	}
	f.buf = f.buf[:n]
	if _, err := io.ReadFull(f.br, f.buf); err != nil {
		return nil, eofIsUnexpected(err)
	}
	return f.buf, nil
}

func eofIsUnexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
