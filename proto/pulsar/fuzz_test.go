package pulsar_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Fuzz targets: decoding never panics, errors are the documented kinds, and whatever
// decodes re-encodes to a frame that decodes to the same thing (protobuf encodings are not
// canonical, so the bytes may differ once; re-encoding is then a fixed point). Seeds live
// in testdata/fuzz/<FuzzName>/, written by
// `go test ./proto/pulsar -run TestWriteFuzzCorpus -gencorpus`.

func FuzzDecodeFrame(f *testing.F) {
	for _, b := range frameSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := pulsar.DecodeFrame(b)
		if err != nil {
			switch {
			case errors.Is(err, pulsar.ErrChecksum):
				if fr.Cmd == nil || fr.HeadersAndPayload == nil || fr.Metadata != nil {
					t.Fatalf("checksum error with frame %+v", fr)
				}
			case errors.Is(err, pulsar.ErrMalformed):
				if fr.Cmd != nil {
					t.Fatal("malformed frame returned a command")
				}
			default:
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		again := reencode(t, fr)
		fr2, err := pulsar.DecodeFrame(again)
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		mustEqual(t, "cmd", fr2.Cmd, fr.Cmd)
		if (fr.BrokerEntryMetadata == nil) != (fr2.BrokerEntryMetadata == nil) {
			t.Fatal("broker entry metadata presence changed")
		}
		if fr.BrokerEntryMetadata != nil {
			mustEqual(t, "bem", fr2.BrokerEntryMetadata, fr.BrokerEntryMetadata)
		}
		if !bytes.Equal(fr2.HeadersAndPayload, fr.HeadersAndPayload) || !bytes.Equal(fr2.Payload, fr.Payload) {
			t.Fatal("payload changed")
		}
		if fr.Metadata != nil || fr2.Metadata != nil {
			mustEqual(t, "metadata", fr2.Metadata, fr.Metadata)
		}
		if fixed := reencode(t, fr2); !bytes.Equal(fixed, again) {
			t.Fatalf("re-encoding is not a fixed point:\n% x\n% x", again, fixed)
		}
	})
}

func reencode(t *testing.T, fr pulsar.Frame) []byte {
	t.Helper()
	var b []byte
	var err error
	if fr.HasPayload() {
		b, err = pulsar.AppendRawPayloadCommand(nil, fr.Cmd, fr.BrokerEntryMetadata, fr.HeadersAndPayload)
	} else {
		b, err = pulsar.AppendCommand(nil, fr.Cmd)
	}
	if err != nil {
		t.Fatalf("decoded frame does not re-encode: %v", err)
	}
	return b
}

// FuzzFrameReader splits arbitrary streams: the frames returned are exactly the consumed
// prefix of the input, and the final error is one the contract allows.
func FuzzFrameReader(f *testing.F) {
	for _, b := range streamSeeds() {
		f.Add(b, uint16(1024))
	}
	f.Fuzz(func(t *testing.T, in []byte, limit uint16) {
		fr := pulsar.NewFrameReader(&chunkReader{b: in, n: 1 + int(limit)%61}, int(limit))
		max := int(limit)
		if max == 0 {
			max = pulsar.MaxFrameSizeDefault
		}
		var out []byte
		for {
			fb, err := fr.Next()
			if err != nil {
				switch {
				case err == io.EOF:
					if !bytes.Equal(out, in) {
						t.Fatal("io.EOF before the end of the input")
					}
				case err == io.ErrUnexpectedEOF, errors.Is(err, pulsar.ErrFrameTooLarge):
					if !bytes.HasPrefix(in, out) || len(out) == len(in) {
						t.Fatalf("%v after consuming %d of %d bytes", err, len(out), len(in))
					}
				default:
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(fb) < 4 || int(binary.BigEndian.Uint32(fb)) != len(fb)-4 || len(fb)-4 > max {
				t.Fatalf("bad frame of %d bytes (limit %d)", len(fb), max)
			}
			_, _ = pulsar.DecodeFrame(fb)
			out = append(out, fb...)
		}
	})
}

// FuzzParseBatch: batch parsing never panics and what parses rebuilds to the same messages.
func FuzzParseBatch(f *testing.F) {
	for _, s := range batchSeeds() {
		f.Add(s.b, s.n)
	}
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		msgs, err := pulsar.ParseBatch(b, int(n))
		if err != nil {
			if !errors.Is(err, pulsar.ErrMalformed) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		var again []byte
		for _, m := range msgs {
			if again, err = pulsar.AppendBatchMessage(again, proto.Clone(m.Metadata).(*pb.SingleMessageMetadata), m.Payload); err != nil {
				t.Fatal(err)
			}
		}
		msgs2, err := pulsar.ParseBatch(again, int(n))
		if err != nil || len(msgs2) != len(msgs) {
			t.Fatalf("rebuilt batch: %v", err)
		}
		for i := range msgs {
			mustEqual(t, "single metadata", msgs2[i].Metadata, msgs[i].Metadata)
			if !bytes.Equal(msgs2[i].Payload, msgs[i].Payload) {
				t.Fatal("payload changed")
			}
		}
	})
}

func frameSeeds() [][]byte {
	var seeds [][]byte
	for _, typ := range allTypes() {
		seeds = append(seeds, encode(nil, sampleCommand(typ, true), sampleMeta(true), []byte("payload")))
	}
	hp, _ := pulsar.AppendHeadersAndPayload(nil, sampleMeta(false), []byte("stored"))
	msg := sampleCommand(pb.BaseCommand_MESSAGE, false)
	withBEM, _ := pulsar.AppendRawPayloadCommand(nil, msg, &pb.BrokerEntryMetadata{
		BrokerTimestamp: proto.Uint64(1), Index: proto.Uint64(2)}, hp)
	badCRC := slices.Clone(withBEM)
	badCRC[len(badCRC)-1] ^= 0x80
	seeds = append(seeds, withBEM, badCRC)
	m := malformedFrames()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		seeds = append(seeds, m[k])
	}
	return seeds
}

func streamSeeds() [][]byte {
	var all []byte
	for _, typ := range []pb.BaseCommand_Type{pb.BaseCommand_CONNECT, pb.BaseCommand_PING, pb.BaseCommand_SEND, pb.BaseCommand_FLOW} {
		all = append(all, encode(nil, sampleCommand(typ, false), sampleMeta(false), []byte("p"))...)
	}
	return [][]byte{
		all,
		all[:len(all)-5],
		all[:2],
		{0, 0, 0, 0},
		{0xff, 0xff, 0xff, 0xff, 1, 2, 3},
		nil,
	}
}

type batchSeed struct {
	b []byte
	n uint8
}

func batchSeeds() []batchSeed {
	batch, msgs := sampleBatch()
	return []batchSeed{
		{batch, uint8(len(msgs))},
		{batch, 1},
		{batch[:len(batch)-2], uint8(len(msgs))},
		{nil, 1},
	}
}

var genCorpus = flag.Bool("gencorpus", false, "write the fuzz seed corpus to testdata/fuzz")

// TestWriteFuzzCorpus regenerates the committed seed corpus when run with -gencorpus.
func TestWriteFuzzCorpus(t *testing.T) {
	if !*genCorpus {
		t.Skip("run with -gencorpus to regenerate testdata/fuzz")
	}
	write := func(fuzz string, i int, vals ...string) {
		dir := filepath.Join("testdata", "fuzz", fuzz)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		content := "go test fuzz v1\n"
		for _, v := range vals {
			content += v + "\n"
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%03d", i)), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bs := func(b []byte) string { return fmt.Sprintf("[]byte(%q)", b) }
	for i, b := range frameSeeds() {
		write("FuzzDecodeFrame", i, bs(b))
	}
	for i, b := range streamSeeds() {
		write("FuzzFrameReader", i, bs(b), "uint16(64)")
	}
	for i, s := range batchSeeds() {
		write("FuzzParseBatch", i, bs(s.b), fmt.Sprintf("uint8(%d)", s.n))
	}
}
