package pulsarclient

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
})

// decompress returns an entry's payload uncompressed, always in a new slice (the frame's
// bytes are reused by the connection).
func decompress(meta *pb.MessageMetadata, payload []byte) ([]byte, error) {
	size := int(meta.GetUncompressedSize())
	switch meta.GetCompression() {
	case pb.CompressionType_NONE:
		return slices.Clone(payload), nil
	case pb.CompressionType_ZLIB:
		r, err := zlib.NewReader(bytes.NewReader(payload))
		if err != nil {
			return nil, fmt.Errorf("zlib: %w", err)
		}
		out := make([]byte, 0, size)
		out, err = readAll(r, out)
		if err != nil {
			return nil, fmt.Errorf("zlib: %w", err)
		}
		return out, nil
	case pb.CompressionType_ZSTD:
		d, err := zstdDecoder()
		if err != nil {
			return nil, err
		}
		return d.DecodeAll(payload, make([]byte, 0, size))
	case pb.CompressionType_SNAPPY:
		return snappy.Decode(make([]byte, size), payload)
	default:
		return nil, fmt.Errorf("%w: %v", ErrUnsupportedCompression, meta.GetCompression())
	}
}

func readAll(r io.Reader, out []byte) ([]byte, error) {
	buf := bytes.NewBuffer(out)
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}
