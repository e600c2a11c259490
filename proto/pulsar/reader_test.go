package pulsar_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// sampleStream is every command type, then a payload frame larger than the reader's
// initial buffer, then a PONG.
func sampleStream(t testing.TB) (stream []byte, frames [][]byte) {
	add := func(b []byte) {
		frames = append(frames, b)
		stream = append(stream, b...)
	}
	for _, typ := range allTypes() {
		add(encode(t, sampleCommand(typ, true), sampleMeta(true), []byte("p")))
	}
	add(encode(t, sampleCommand(pb.BaseCommand_MESSAGE, false), sampleMeta(false), bytes.Repeat([]byte{7}, 200<<10)))
	add(encode(t, pulsar.Wrap(&pb.CommandPong{}), nil, nil))
	return stream, frames
}

func TestFrameReaderSplitsStream(t *testing.T) {
	stream, frames := sampleStream(t)
	for name, r := range map[string]func() io.Reader{
		"whole":     func() io.Reader { return bytes.NewReader(stream) },
		"one byte":  func() io.Reader { return iotest.OneByteReader(bytes.NewReader(stream)) },
		"half":      func() io.Reader { return iotest.HalfReader(bytes.NewReader(stream)) },
		"data+EOF":  func() io.Reader { return iotest.DataErrReader(bytes.NewReader(stream)) },
		"dribbling": func() io.Reader { return &chunkReader{b: stream, n: 4093} },
	} {
		t.Run(name, func(t *testing.T) {
			fr := pulsar.NewFrameReader(r(), 0)
			for i, want := range frames {
				got, err := fr.Next()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("frame %d differs", i)
				}
				if _, err := pulsar.DecodeFrame(got); err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
			}
			for range 2 { // sticky
				if _, err := fr.Next(); err != io.EOF {
					t.Fatalf("at end: %v, want io.EOF", err)
				}
			}
		})
	}
}

type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), c.n, len(c.b))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

func TestFrameReaderOversize(t *testing.T) {
	ok := encode(t, pulsar.Wrap(&pb.CommandPing{}), nil, nil)
	big := binary.BigEndian.AppendUint32(nil, pulsar.MaxFrameSizeDefault+1)
	fr := pulsar.NewFrameReader(bytes.NewReader(append(ok, big...)), 0)
	if _, err := fr.Next(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := fr.Next()
		var fse *pulsar.FrameSizeError
		if !errors.As(err, &fse) || !errors.Is(err, pulsar.ErrFrameTooLarge) {
			t.Fatalf("err = %v, want *FrameSizeError", err)
		}
		if fse.Size != pulsar.MaxFrameSizeDefault+1 || fse.Max != pulsar.MaxFrameSizeDefault ||
			!strings.Contains(err.Error(), "limit 1058816") {
			t.Fatalf("error %+v: %v", fse, err)
		}
	}

	// A frame of exactly the limit passes; one byte more does not. A 1 MiB message fits
	// the default limit.
	payload := bytes.Repeat([]byte{1}, pulsar.MaxMessageSizeDefault-200)
	frame := encode(t, sampleCommand(pb.BaseCommand_SEND, true), sampleMeta(true), payload)
	limit := len(frame) - 4
	for _, tc := range []struct {
		max  int
		fail bool
	}{{limit, false}, {limit - 1, true}, {0, false}} {
		fr := pulsar.NewFrameReader(bytes.NewReader(frame), tc.max)
		_, err := fr.ReadFrame()
		if tc.fail != errors.Is(err, pulsar.ErrFrameTooLarge) || (!tc.fail && err != nil) {
			t.Fatalf("max %d: %v", tc.max, err)
		}
	}
}

func TestFrameReaderUnexpectedEOF(t *testing.T) {
	frame := encode(t, pulsar.Wrap(&pb.CommandPing{}), nil, nil)
	for _, n := range []int{1, 3, 4, len(frame) - 1} {
		fr := pulsar.NewFrameReader(bytes.NewReader(frame[:n]), 0)
		if _, err := fr.Next(); err != io.ErrUnexpectedEOF {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if _, err := fr.Next(); err != io.ErrUnexpectedEOF {
			t.Fatalf("%d bytes, again: %v", n, err)
		}
	}
	if _, err := pulsar.NewFrameReader(bytes.NewReader(nil), 0).Next(); err != io.EOF {
		t.Fatalf("empty stream: %v", err)
	}
}

// TestFrameReaderResumes: a transient reader error mid-frame (a read deadline) is returned,
// and the next call carries on without losing bytes.
func TestFrameReaderResumes(t *testing.T) {
	stream, frames := sampleStream(t)
	fr := pulsar.NewFrameReader(&flakyReader{r: &chunkReader{b: stream, n: 997}}, 0)
	timeouts := 0
	for i := 0; i < len(frames); {
		got, err := fr.Next()
		if errors.Is(err, errTimeout) {
			timeouts++
			continue
		}
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got, frames[i]) {
			t.Fatalf("frame %d differs", i)
		}
		i++
	}
	if timeouts < 10 {
		t.Fatalf("only %d timeouts injected", timeouts)
	}
	_, err := fr.Next()
	for errors.Is(err, errTimeout) { // the end, also after an injected timeout
		_, err = fr.Next()
	}
	if err != io.EOF {
		t.Fatal(err)
	}
}

var errTimeout = errors.New("i/o timeout")

// flakyReader fails every third read without consuming anything.
type flakyReader struct {
	r io.Reader
	n int
}

func (f *flakyReader) Read(p []byte) (int, error) {
	if f.n++; f.n%3 == 0 {
		return 0, errTimeout
	}
	return f.r.Read(p)
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func TestFrameReaderNoProgress(t *testing.T) {
	if _, err := pulsar.NewFrameReader(zeroReader{}, 0).Next(); err != io.ErrNoProgress {
		t.Fatal(err)
	}
}

func BenchmarkFrameReaderSend1KiB(b *testing.B) {
	cmd, meta, payload := benchSend()
	frame, _ := pulsar.AppendPayloadCommand(nil, cmd, meta, payload)
	stream := bytes.Repeat(frame, 1000)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	r := bytes.NewReader(stream)
	fr := pulsar.NewFrameReader(r, 0)
	for b.Loop() {
		f, err := fr.ReadFrame()
		if err == io.EOF {
			r.Reset(stream)
			fr = pulsar.NewFrameReader(r, 0)
			continue
		}
		if err != nil || len(f.Payload) != len(payload) {
			b.Fatal(err)
		}
	}
}
