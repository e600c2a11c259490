package compression

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

var (
	// ErrTooLarge is wrapped when an entry claims an uncompressed size above the caller's
	// limit.
	ErrTooLarge = errors.New("compression: uncompressed size above the limit")
	// ErrCorrupt is wrapped when a payload does not decompress to exactly its
	// uncompressed_size bytes with its codec.
	ErrCorrupt = errors.New("compression: corrupt payload")
	// ErrUnsupported is wrapped for a compression type this package does not know.
	ErrUnsupported = errors.New("compression: unsupported compression type")
)

// zstdDecoder is shared by all calls: DecodeAll is safe for concurrent use. With
// concurrency 1 it starts no goroutines; WithDecodeAllCapLimit stops DecodeAll at the
// capacity of its destination, i.e. at uncompressed_size.
var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecodeAllCapLimit(true))
})

// Decompress returns payload, compressed with meta.compression, uncompressed: a new slice
// of exactly meta.uncompressed_size bytes, or payload itself if the compression is NONE.
// A claimed size above limit fails with ErrTooLarge before anything is allocated; a
// payload that does not decompress to exactly the claimed size fails with ErrCorrupt; an
// unknown codec with ErrUnsupported. Safe for concurrent use.
func Decompress(meta *pb.MessageMetadata, payload []byte, limit int) ([]byte, error) {
	codec := meta.GetCompression()
	if codec == pb.CompressionType_NONE {
		return payload, nil
	}
	size := int64(meta.GetUncompressedSize())
	if size > int64(limit) {
		return nil, fmt.Errorf("%w: %v payload of %d bytes claims %d, limit %d", ErrTooLarge, codec, len(payload), size, limit)
	}
	var out []byte
	var err error
	switch codec {
	case pb.CompressionType_LZ4:
		out, err = unLZ4(payload, int(size))
	case pb.CompressionType_ZLIB:
		out, err = unZlib(payload, int(size))
	case pb.CompressionType_ZSTD:
		out, err = unZstd(payload, int(size))
	case pb.CompressionType_SNAPPY:
		out, err = unSnappy(payload, int(size))
	default:
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, codec)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v payload of %d bytes (uncompressed size %d): %v", ErrCorrupt, codec, len(payload), size, err)
	}
	return out, nil
}

// errSize: a payload decompressed to another size than the claimed one.
var errSize = errors.New("decompressed size differs")

func unLZ4(src []byte, size int) ([]byte, error) {
	out := make([]byte, size)
	n, err := lz4.UncompressBlock(src, out)
	if err != nil {
		return nil, err
	}
	if n != size {
		return nil, fmt.Errorf("%w: %d bytes", errSize, n)
	}
	return out, nil
}

func unZlib(src []byte, size int) ([]byte, error) {
	r, err := zlib.NewReader(bytes.NewReader(src))
	if err != nil {
		return nil, err
	}
	out := make([]byte, size)
	if _, err := io.ReadFull(r, out); err != nil {
		return nil, err
	}
	// One more read meets the end of the stream, where zlib checks the Adler-32.
	var extra [1]byte
	if n, err := r.Read(extra[:]); n > 0 {
		return nil, fmt.Errorf("%w: more than %d bytes", errSize, size)
	} else if err != io.EOF {
		if err == nil {
			err = io.ErrNoProgress
		}
		return nil, err
	}
	return out, nil
}

func unZstd(src []byte, size int) ([]byte, error) {
	d, err := zstdDecoder()
	if err != nil {
		return nil, err
	}
	out, err := d.DecodeAll(src, make([]byte, 0, size))
	if err != nil {
		return nil, err
	}
	if len(out) != size {
		return nil, fmt.Errorf("%w: %d bytes", errSize, len(out))
	}
	return out, nil
}

func unSnappy(src []byte, size int) ([]byte, error) {
	n, err := snappy.DecodedLen(src)
	if err != nil {
		return nil, err
	}
	if n != size {
		return nil, fmt.Errorf("%w: the payload says %d bytes", errSize, n)
	}
	return snappy.Decode(make([]byte, size), src)
}
