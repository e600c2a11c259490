package pulsarclient

import (
	"bytes"
	"compress/zlib"
	"errors"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// TestDecompress: entries compressed by other clients (ZLIB, ZSTD, SNAPPY) come back
// intact; LZ4 is refused with ErrUnsupportedCompression.
func TestDecompress(t *testing.T) {
	plain := bytes.Repeat([]byte("magnetar "), 100)
	var zb bytes.Buffer
	zw := zlib.NewWriter(&zb)
	zw.Write(plain)
	zw.Close()
	enc, _ := zstd.NewWriter(nil)
	zs := enc.EncodeAll(plain, nil)
	enc.Close()
	for _, tc := range []struct {
		codec pb.CompressionType
		data  []byte
	}{
		{pb.CompressionType_NONE, plain},
		{pb.CompressionType_ZLIB, zb.Bytes()},
		{pb.CompressionType_ZSTD, zs},
		{pb.CompressionType_SNAPPY, snappy.Encode(nil, plain)},
	} {
		meta := &pb.MessageMetadata{Compression: tc.codec.Enum(), UncompressedSize: proto.Uint32(uint32(len(plain)))}
		got, err := decompress(meta, tc.data)
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%v: %d bytes, %v", tc.codec, len(got), err)
		}
	}
	meta := &pb.MessageMetadata{Compression: pb.CompressionType_LZ4.Enum()}
	if _, err := decompress(meta, []byte{1}); !errors.Is(err, ErrUnsupportedCompression) {
		t.Errorf("LZ4: %v", err)
	}
}
