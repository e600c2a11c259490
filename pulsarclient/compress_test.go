package pulsarclient

import (
	"bytes"
	"compress/zlib"
	"errors"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// TestDecompress: entries compressed by other clients (LZ4, ZLIB, ZSTD, SNAPPY) come back
// intact, an uncompressed one as a copy; an unknown codec is refused with
// ErrUnsupportedCompression.
func TestDecompress(t *testing.T) {
	plain := bytes.Repeat([]byte("magnetar "), 100)
	var zb bytes.Buffer
	zw := zlib.NewWriter(&zb)
	zw.Write(plain)
	zw.Close()
	enc, _ := zstd.NewWriter(nil)
	zs := enc.EncodeAll(plain, nil)
	enc.Close()
	lz := make([]byte, lz4.CompressBlockBound(len(plain)))
	n, err := lz4.CompressBlock(plain, lz, nil)
	if err != nil || n == 0 {
		t.Fatalf("lz4: %d, %v", n, err)
	}
	for _, tc := range []struct {
		codec pb.CompressionType
		data  []byte
	}{
		{pb.CompressionType_NONE, plain},
		{pb.CompressionType_LZ4, lz[:n]},
		{pb.CompressionType_ZLIB, zb.Bytes()},
		{pb.CompressionType_ZSTD, zs},
		{pb.CompressionType_SNAPPY, snappy.Encode(nil, plain)},
	} {
		meta := &pb.MessageMetadata{Compression: tc.codec.Enum(), UncompressedSize: proto.Uint32(uint32(len(plain)))}
		got, err := decompress(meta, tc.data, 1<<20)
		if err != nil || !bytes.Equal(got, plain) || &got[0] == &tc.data[0] {
			t.Errorf("%v: %d bytes, %v", tc.codec, len(got), err)
		}
	}
	meta := &pb.MessageMetadata{Compression: pb.CompressionType(99).Enum(), UncompressedSize: proto.Uint32(1)}
	if _, err := decompress(meta, []byte{1}, 1<<20); !errors.Is(err, ErrUnsupportedCompression) {
		t.Errorf("codec 99: %v", err)
	}
}
