package compaction

import (
	"context"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// compressedBatch builds a batch entry whose payload is compressed with codec (as
// pulsar-client-go does), claiming claim bytes uncompressed (0: the true size).
func compressedBatch(t *testing.T, codec pb.CompressionType, claim int, ms ...msg) []byte {
	t.Helper()
	md, payload, err := pulsar.ParseHeadersAndPayload(batch(t, ms...))
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	switch codec {
	case pb.CompressionType_LZ4:
		data = make([]byte, lz4.CompressBlockBound(len(payload)))
		n, err := lz4.CompressBlock(payload, data, nil)
		if err != nil || n == 0 {
			t.Fatalf("lz4: %d, %v", n, err)
		}
		data = data[:n]
	case pb.CompressionType_ZSTD:
		enc, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		data = enc.EncodeAll(payload, nil)
		enc.Close()
	default:
		t.Fatalf("codec %v", codec)
	}
	if claim == 0 {
		claim = len(payload)
	}
	md.Compression, md.UncompressedSize = codec.Enum(), proto.Uint32(uint32(claim))
	b, err := pulsar.AppendHeadersAndPayload(nil, md, data)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCompactionCompressedBatches: the messages of LZ4 and ZSTD batches are compacted by
// key like those of plain batches, and the kept ones are stored uncompressed; a compressed
// batch that does not decompress (a corrupt payload, or a claimed size above the max
// message size) is kept whole.
func TestCompactionCompressedBatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := topictest.NewStore()
	log := store.Open("t")
	rep := func(s string) string { return s + s + s + s + s + s + s + s } // compressible
	appendAll(t, log,
		compressedBatch(t, pb.CompressionType_LZ4, 0, msg{"a", rep("a1")}, msg{"b", rep("b1")}, msg{"c", rep("c1")}),
		compressedBatch(t, pb.CompressionType_ZSTD, 0, msg{"a", rep("a2")}, msg{"c", ""}, msg{"", "keyless"}),
		compressedBatch(t, pb.CompressionType_LZ4, 1000, msg{"x", rep("x1")}),   // claims more than it holds
		compressedBatch(t, pb.CompressionType_ZSTD, 2<<20, msg{"y", rep("y1")}), // claims more than the max
	)
	m := newTestManager(t, store, log)
	if st, e := run(t, m); st != Success {
		t.Fatalf("compaction: %v %s", st, e)
	}
	v, err := m.View(ctx)
	if err != nil {
		t.Fatal(err)
	}
	es := v.Entries()
	if len(es) != 4 {
		t.Fatalf("%d compacted entries, want 4 (one per input entry)", len(es))
	}
	if got, want := values(t, es[:2]), map[string]string{"a": rep("a2"), "b": rep("b1")}; !equal(got, want) {
		t.Fatalf("compacted %v, want %v", got, want)
	}
	for i, e := range es {
		md, _, err := pulsar.ParseHeadersAndPayload(e.Data)
		if err != nil {
			t.Fatal(err)
		}
		wantCodec := pb.CompressionType_NONE
		if i >= 2 {
			wantCodec = []pb.CompressionType{pb.CompressionType_LZ4, pb.CompressionType_ZSTD}[i-2]
		}
		if md.GetCompression() != wantCodec || (i < 2 && md.UncompressedSize != nil) {
			t.Fatalf("entry %d: compression %v (uncompressed size %d), want %v", i, md.GetCompression(), md.GetUncompressedSize(), wantCodec)
		}
	}
	if v.State().Messages != 2+1+1 {
		t.Fatalf("state %+v: want 4 messages (2 kept, 2 whole batches of 1)", v.State())
	}
}
