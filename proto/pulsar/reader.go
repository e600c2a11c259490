package pulsar

import (
	"encoding/binary"
	"errors"
	"io"
)

// frameReaderBufSize is the initial read buffer of a FrameReader. It grows to hold the
// largest frame seen (at most the limit + 4) and is kept for the reader's lifetime.
const frameReaderBufSize = 64 << 10

// FrameReader splits a byte stream into frames. It reads in large chunks, so one read
// usually yields several small frames, and it is resumable: its state survives an error
// from the underlying reader (for example a read deadline), and the next call carries on
// with the bytes already buffered. It is owned by one goroutine (a connection's reader).
//
// Errors of the stream itself are sticky: io.EOF, io.ErrUnexpectedEOF and *FrameSizeError
// are returned again by every later call.
type FrameReader struct {
	r     io.Reader
	max   int
	buf   []byte
	start int // buf[start:end] is buffered, not yet returned
	end   int
	err   error // sticky
}

// NewFrameReader returns a FrameReader over r that rejects frames whose total size (the
// first u32) exceeds maxFrameSize. maxFrameSize <= 0 means MaxFrameSizeDefault. A broker
// uses its max_message_size + FramePadding.
func NewFrameReader(r io.Reader, maxFrameSize int) *FrameReader {
	if maxFrameSize <= 0 {
		maxFrameSize = MaxFrameSizeDefault
	}
	return &FrameReader{r: r, max: maxFrameSize}
}

// Next returns the next whole frame, starting at its u32 total size, ready for
// DecodeFrame. The slice is owned by the FrameReader and valid only until the next call.
//
// Next returns io.EOF if the stream ends at a frame boundary, io.ErrUnexpectedEOF if it
// ends inside a frame, a *FrameSizeError (wrapping ErrFrameTooLarge) if the declared size
// exceeds the limit (close the connection: the stream cannot be resynchronised), and
// otherwise the underlying reader's error, after which Next may be called again.
func (f *FrameReader) Next() ([]byte, error) {
	if f.err != nil {
		return nil, f.err
	}
	if err := f.fill(4); err != nil {
		return nil, err
	}
	total := uint64(binary.BigEndian.Uint32(f.buf[f.start:]))
	if total > uint64(f.max) {
		f.err = &FrameSizeError{Size: total, Max: f.max}
		return nil, f.err
	}
	n := 4 + int(total)
	if err := f.fill(n); err != nil {
		return nil, err
	}
	frame := f.buf[f.start : f.start+n : f.start+n]
	f.start += n
	return frame, nil
}

// ReadFrame is Next followed by DecodeFrame.
func (f *FrameReader) ReadFrame() (Frame, error) {
	b, err := f.Next()
	if err != nil {
		return Frame{}, err
	}
	return DecodeFrame(b)
}

// Buffered returns the number of bytes read from the stream but not yet returned.
func (f *FrameReader) Buffered() int { return f.end - f.start }

// fill makes at least n bytes available at buf[start:], reading as much as fits.
func (f *FrameReader) fill(n int) error {
	if f.end-f.start >= n {
		return nil
	}
	if f.start+n > len(f.buf) {
		// Make room: move the partial frame to the front, growing the buffer if needed.
		// The previously returned frame is invalidated here, as documented.
		size := len(f.buf)
		if size < frameReaderBufSize {
			size = frameReaderBufSize
		}
		for size < n {
			size *= 2
		}
		if size > len(f.buf) {
			if limit := f.max + 4; size > limit && n <= limit {
				size = limit
			}
			nb := make([]byte, size)
			copy(nb, f.buf[f.start:f.end])
			f.buf = nb
		} else {
			copy(f.buf, f.buf[f.start:f.end])
		}
		f.end -= f.start
		f.start = 0
	}
	for empty := 0; f.end-f.start < n; {
		m, err := f.r.Read(f.buf[f.end:])
		f.end += m
		if f.end-f.start >= n {
			return nil // enough: a concurrent error shows up on a later read
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if f.end == f.start {
					f.err = io.EOF
				} else {
					f.err = io.ErrUnexpectedEOF
				}
				return f.err
			}
			return err
		}
		if m > 0 {
			empty = 0
		} else if empty++; empty >= maxEmptyReads {
			return io.ErrNoProgress
		}
	}
	return nil
}

// maxEmptyReads bounds consecutive (0, nil) reads, as bufio does.
const maxEmptyReads = 100
