package compression

import (
	"bytes"
	"compress/zlib"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

const testLimit = 1 << 20

// lz4Block compresses src as pulsar-client-go does: lz4.CompressBlock with a hash table,
// and for data it cannot compress (CompressBlock returns 0) one block of literals.
func lz4Block(t testing.TB, src []byte) []byte {
	dst := make([]byte, lz4.CompressBlockBound(len(src)))
	n, err := lz4.CompressBlock(src, dst, make([]int, 1<<16))
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		return dst[:n]
	}
	return literalBlock(src)
}

// literalBlock is an LZ4 block holding src as literals only: a token whose high nibble is
// the literal length (15: more length bytes follow, 255 meaning "add 255 and go on").
func literalBlock(src []byte) []byte {
	l := len(src)
	if l < 15 {
		return append([]byte{byte(l << 4)}, src...)
	}
	out := []byte{0xF0}
	for l -= 15; l >= 255; l -= 255 {
		out = append(out, 255)
	}
	return append(append(out, byte(l)), src...)
}

func zlibOf(t testing.TB, src []byte) []byte {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	if _, err := w.Write(src); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func zstdOf(t testing.TB, src []byte) []byte {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(src, nil)
}

func compress(t testing.TB, codec pb.CompressionType, src []byte) []byte {
	switch codec {
	case pb.CompressionType_NONE:
		return src
	case pb.CompressionType_LZ4:
		return lz4Block(t, src)
	case pb.CompressionType_ZLIB:
		return zlibOf(t, src)
	case pb.CompressionType_ZSTD:
		return zstdOf(t, src)
	case pb.CompressionType_SNAPPY:
		return snappy.Encode(nil, src)
	}
	t.Fatalf("no compressor for %v", codec)
	return nil
}

func meta(codec pb.CompressionType, size int) *pb.MessageMetadata {
	return &pb.MessageMetadata{Compression: codec.Enum(), UncompressedSize: proto.Uint32(uint32(size))}
}

var codecs = []pb.CompressionType{pb.CompressionType_LZ4, pb.CompressionType_ZLIB,
	pb.CompressionType_ZSTD, pb.CompressionType_SNAPPY}

func samples() map[string][]byte {
	random := make([]byte, 3000)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	return map[string][]byte{
		"empty":        {},
		"short":        []byte("k"),
		"repetitive":   bytes.Repeat([]byte("magnetar "), 1000),
		"random":       random,
		"random-short": random[:20],
	}
}

// TestDecompress: every codec, compressed by the library pulsar-client-go uses for it,
// decompresses to the original bytes, compressible or not.
func TestDecompress(t *testing.T) {
	for _, codec := range codecs {
		for name, plain := range samples() {
			t.Run(codec.String()+"/"+name, func(t *testing.T) {
				got, err := Decompress(meta(codec, len(plain)), compress(t, codec, plain), testLimit)
				if err != nil || !bytes.Equal(got, plain) {
					t.Fatalf("%d bytes, %v; want %d bytes", len(got), err, len(plain))
				}
			})
		}
	}
}

// TestDecompressNone: an uncompressed payload comes back as itself, whatever its metadata
// says about sizes.
func TestDecompressNone(t *testing.T) {
	p := []byte("plain")
	for _, m := range []*pb.MessageMetadata{{}, meta(pb.CompressionType_NONE, 1<<30)} {
		got, err := Decompress(m, p, 10)
		if err != nil || &got[0] != &p[0] || len(got) != len(p) {
			t.Fatalf("%v: %q, %v", m, got, err)
		}
	}
}

// TestDecompressBomb: a claimed size above the limit is refused before decompressing; a
// payload that expands beyond its claim is refused without writing past it.
func TestDecompressBomb(t *testing.T) {
	big := make([]byte, 4<<20) // zeros: every codec compresses them to a few KB or less
	for _, codec := range codecs {
		data := compress(t, codec, big)
		if _, err := Decompress(meta(codec, len(big)), data, testLimit); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%v: claim of %d bytes above the limit %d: %v, want ErrTooLarge", codec, len(big), testLimit, err)
		}
		if _, err := Decompress(meta(codec, 1000), data, testLimit); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%v: %d bytes claiming 1000: %v, want ErrCorrupt", codec, len(big), err)
		}
	}
}

// TestDecompressCorrupt: a wrong claimed size, a truncated payload or garbage fail with
// ErrCorrupt; an unknown codec with ErrUnsupported.
func TestDecompressCorrupt(t *testing.T) {
	plain := bytes.Repeat([]byte("0123456789abcdef"), 64)
	for _, codec := range codecs {
		data := compress(t, codec, plain)
		for name, tc := range map[string]struct {
			data []byte
			size int
		}{
			"short claim": {data, len(plain) - 1},
			"long claim":  {data, len(plain) + 1},
			"truncated":   {data[:len(data)/2], len(plain)},
			"garbage":     {[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, len(plain)},
		} {
			if got, err := Decompress(meta(codec, tc.size), tc.data, testLimit); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%v %s: %d bytes, %v; want ErrCorrupt", codec, name, len(got), err)
			}
		}
	}
	if _, err := Decompress(meta(pb.CompressionType(99), 3), []byte{1}, testLimit); !errors.Is(err, ErrUnsupported) {
		t.Errorf("codec 99: %v, want ErrUnsupported", err)
	}
}

// FuzzDecompress: no input panics or returns other than exactly the claimed size, within
// the limit. The seed corpus (testdata/fuzz) holds a valid payload of each codec.
func FuzzDecompress(f *testing.F) {
	plain := []byte("key=value key=value key=value")
	for _, codec := range codecs {
		f.Add(uint8(codec), uint32(len(plain)), compress(f, codec, plain))
	}
	f.Fuzz(func(t *testing.T, codec uint8, size uint32, data []byte) {
		const limit = 1 << 16
		m := meta(pb.CompressionType(codec), int(size))
		out, err := Decompress(m, data, limit)
		if err != nil {
			if !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		if pb.CompressionType(codec) == pb.CompressionType_NONE {
			if !bytes.Equal(out, data) {
				t.Fatal("NONE changed the payload")
			}
			return
		}
		if len(out) != int(size) || size > limit {
			t.Fatalf("%d bytes out for a claim of %d (limit %d)", len(out), size, limit)
		}
	})
}
