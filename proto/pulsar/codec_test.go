package pulsar_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

func TestTypeEnumAndBodiesMatch(t *testing.T) {
	types := allTypes()
	// 2..40 and 50..68: the protocol's full command list at v20; 70..78: the
	// scalable-topic commands.
	if len(types) != 39+19+9 {
		t.Fatalf("%d command types, want 67", len(types))
	}
	fields := (&pb.BaseCommand{}).ProtoReflect().Descriptor().Fields()
	if fields.Len() != len(types)+1 {
		t.Fatalf("%d BaseCommand fields, want one per type plus type", fields.Len())
	}
	for _, typ := range types {
		fd := fields.ByNumber(protoreflect.FieldNumber(typ))
		if fd == nil || fd.Kind() != protoreflect.MessageKind || fd.Cardinality() != protoreflect.Optional {
			t.Errorf("%v: no optional message field %d", typ, typ)
		}
	}
	if pulsar.ProtocolVersion != int32(pb.ProtocolVersion_v20) {
		t.Errorf("ProtocolVersion = %d", pulsar.ProtocolVersion)
	}
}

func TestRoundTripEveryType(t *testing.T) {
	payload := []byte("hello, pulsar")
	for _, typ := range allTypes() {
		for _, all := range []bool{false, true} {
			cmd := sampleCommand(typ, all)
			meta := sampleMeta(all)
			b := encode(t, cmd, meta, payload)
			if got := binary.BigEndian.Uint32(b); int(got) != len(b)-4 {
				t.Fatalf("%v: total %d for %d bytes", typ, got, len(b))
			}
			f, err := pulsar.DecodeFrame(b)
			if err != nil {
				t.Fatalf("%v (all=%v): %v", typ, all, err)
			}
			mustEqual(t, typ.String(), f.Cmd, cmd)
			if pulsar.IsPayloadType(typ) {
				mustEqual(t, "metadata", f.Metadata, meta)
				if !bytes.Equal(f.Payload, payload) {
					t.Fatalf("%v payload %q", typ, f.Payload)
				}
				if f.BrokerEntryMetadata != nil || !f.HasPayload() {
					t.Fatalf("%v: unexpected payload fields", typ)
				}
			} else if f.HasPayload() || f.Metadata != nil || f.Payload != nil {
				t.Fatalf("%v: simple frame has payload fields", typ)
			}
			if body := pulsar.Body(f.Cmd); body == nil {
				t.Fatalf("%v: Body is nil", typ)
			}
		}
	}
}

// TestGoldenConnected pins the exact bytes of a CONNECTED frame, computed by hand from the
// protocol's field numbers (BaseCommand.type=1, connected=3; server_version=1,
// protocol_version=2, max_message_size=3).
func TestGoldenConnected(t *testing.T) {
	cmd := pulsar.Wrap(&pb.CommandConnected{
		ServerVersion:   proto.String("m"),
		ProtocolVersion: proto.Int32(pulsar.ProtocolVersion),
		MaxMessageSize:  proto.Int32(pulsar.MaxMessageSizeDefault),
	})
	got, err := pulsar.AppendCommand(nil, cmd)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		0, 0, 0, 17, // total = 4 + 13
		0, 0, 0, 13, // cmdSize
		0x08, 3, // type = CONNECTED
		0x1a, 9, // field 3, length 9
		0x0a, 1, 'm', // server_version
		0x10, 20, // protocol_version
		0x18, 0x80, 0x80, 0x40, // max_message_size = 1<<20
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got  % x\nwant % x", got, want)
	}
}

// TestGoldenSend pins a SEND payload frame's layout and its checksum coverage.
func TestGoldenSend(t *testing.T) {
	cmd := pulsar.Wrap(&pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(2)})
	meta := &pb.MessageMetadata{
		ProducerName: proto.String("p"), SequenceId: proto.Uint64(2), PublishTime: proto.Uint64(3),
	}
	got, err := pulsar.AppendPayloadCommand(nil, cmd, meta, []byte("xy"))
	if err != nil {
		t.Fatal(err)
	}
	cmdBytes := []byte{0x08, 6, 0x32, 4, 0x08, 1, 0x10, 2}
	metaBytes := []byte{0x0a, 1, 'p', 0x10, 2, 0x18, 3}
	covered := append([]byte{0, 0, 0, byte(len(metaBytes))}, metaBytes...)
	covered = append(covered, 'x', 'y')
	var want []byte
	want = binary.BigEndian.AppendUint32(want, uint32(4+len(cmdBytes)+2+4+len(covered)))
	want = binary.BigEndian.AppendUint32(want, uint32(len(cmdBytes)))
	want = append(want, cmdBytes...)
	want = append(want, 0x0e, 0x01)
	want = binary.BigEndian.AppendUint32(want, pulsar.Checksum(covered))
	want = append(want, covered...)
	if !bytes.Equal(got, want) {
		t.Fatalf("got  % x\nwant % x", got, want)
	}
}

func TestChecksumIsCRC32C(t *testing.T) {
	if got := pulsar.Checksum([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("CRC32C check value = %#x", got)
	}
}

func TestRawPayloadAndBrokerEntryMetadata(t *testing.T) {
	meta := sampleMeta(false)
	meta.NumMessagesInBatch = proto.Int32(3)
	hp, err := pulsar.AppendHeadersAndPayload(nil, meta, []byte("entry-bytes"))
	if err != nil {
		t.Fatal(err)
	}
	msg := pulsar.Wrap(&pb.CommandMessage{
		ConsumerId: proto.Uint64(9),
		MessageId:  &pb.MessageIdData{LedgerId: proto.Uint64(4), EntryId: proto.Uint64(5)},
	})
	for _, bem := range []*pb.BrokerEntryMetadata{
		nil,
		{},
		{BrokerTimestamp: proto.Uint64(1700000000000), Index: proto.Uint64(42)},
	} {
		b, err := pulsar.AppendRawPayloadCommand([]byte("prefix"), msg, bem, hp)
		if err != nil {
			t.Fatal(err)
		}
		f, err := pulsar.DecodeFrame(b[len("prefix"):])
		if err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "cmd", f.Cmd, msg)
		if bem == nil {
			if f.BrokerEntryMetadata != nil {
				t.Fatal("unexpected broker entry metadata")
			}
		} else {
			mustEqual(t, "broker entry metadata", f.BrokerEntryMetadata, bem)
		}
		if !bytes.Equal(f.HeadersAndPayload, hp) {
			t.Fatal("HeadersAndPayload is not the forwarded bytes")
		}
		mustEqual(t, "metadata", f.Metadata, meta)
		if string(f.Payload) != "entry-bytes" || pulsar.NumMessages(f.Metadata) != 3 {
			t.Fatalf("payload %q, %d messages", f.Payload, pulsar.NumMessages(f.Metadata))
		}
		// Re-forwarding the decoded bytes reproduces the frame.
		again, err := pulsar.AppendRawPayloadCommand(nil, f.Cmd, f.BrokerEntryMetadata, f.HeadersAndPayload)
		if err != nil || !bytes.Equal(again, b[len("prefix"):]) {
			t.Fatalf("re-encoding differs (%v)", err)
		}
	}
}

func TestChecksumMismatchIsReported(t *testing.T) {
	cmd := sampleCommand(pb.BaseCommand_SEND, false)
	good := encode(t, cmd, sampleMeta(false), []byte("payload"))
	hpStart := len(good) - len("payload") - proto.Size(sampleMeta(false)) - 10
	for name, off := range map[string]int{
		"crc":      hpStart + 3,
		"metaSize": hpStart + 9,
		"metadata": hpStart + 12,
		"payload":  len(good) - 1,
	} {
		t.Run(name, func(t *testing.T) {
			bad := slices.Clone(good)
			bad[off] ^= 0x01
			f, err := pulsar.DecodeFrame(bad)
			if name == "metaSize" && errors.Is(err, pulsar.ErrMalformed) {
				return // a larger metaSize can be caught as out of range first
			}
			if !errors.Is(err, pulsar.ErrChecksum) || errors.Is(err, pulsar.ErrMalformed) {
				t.Fatalf("err = %v, want ErrChecksum", err)
			}
			mustEqual(t, "cmd", f.Cmd, cmd)
			if f.Metadata != nil || f.Payload != nil || len(f.HeadersAndPayload) != len(good)-hpStart {
				t.Fatal("frame with a bad checksum exposes metadata or payload")
			}
			if _, _, err := pulsar.ParseHeadersAndPayload(f.HeadersAndPayload); !errors.Is(err, pulsar.ErrChecksum) {
				t.Fatalf("ParseHeadersAndPayload: %v", err)
			}
		})
	}
}

// frameOf assembles a frame from a raw command and raw bytes after it.
func frameOf(cmd []byte, rest ...[]byte) []byte {
	body := slices.Concat(rest...)
	b := binary.BigEndian.AppendUint32(nil, uint32(4+len(cmd)+len(body)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(cmd)))
	return slices.Concat(b, cmd, body)
}

func partial(m proto.Message) []byte {
	b, err := proto.MarshalOptions{AllowPartial: true}.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// hpOf builds headersAndPayload with a correct checksum from raw metadata bytes.
func hpOf(metaBytes, payload []byte) []byte {
	covered := slices.Concat(binary.BigEndian.AppendUint32(nil, uint32(len(metaBytes))), metaBytes, payload)
	b := binary.BigEndian.AppendUint16(nil, pulsar.MagicCRC32C)
	b = binary.BigEndian.AppendUint32(b, pulsar.Checksum(covered))
	return append(b, covered...)
}

// malformedFrames are frames DecodeFrame must reject with ErrMalformed.
func malformedFrames() map[string][]byte {
	ping := partial(pulsar.Wrap(&pb.CommandPing{}))
	send := partial(sampleCommand(pb.BaseCommand_SEND, false))
	meta := partial(sampleMeta(false))
	hp := hpOf(meta, []byte("p"))
	bem := func(size uint32, body []byte) []byte {
		b := binary.BigEndian.AppendUint16(nil, pulsar.MagicBrokerEntryMetadata)
		return append(binary.BigEndian.AppendUint32(b, size), body...)
	}
	withTotal := func(b []byte, total uint32) []byte {
		b = slices.Clone(b)
		binary.BigEndian.PutUint32(b, total)
		return b
	}
	pingFrame := frameOf(ping)
	return map[string][]byte{
		"empty":                   nil,
		"3 bytes":                 {0, 0, 0},
		"short header":            {0, 0, 0, 4, 0, 0, 0},
		"total too large":         withTotal(pingFrame, uint32(len(pingFrame))),
		"total too small":         withTotal(pingFrame, uint32(len(pingFrame)-5)),
		"cmdSize > total":         {0, 0, 0, 6, 0, 0, 0, 3, 0x08, 18},
		"cmdSize huge":            {0, 0, 0, 6, 0xff, 0xff, 0xff, 0xff, 0x08, 18},
		"garbage protobuf":        frameOf([]byte{0xff, 0xff, 0xff, 0xff, 0xff}),
		"truncated protobuf":      frameOf(ping[:len(ping)-1]),
		"empty command":           frameOf(nil),
		"unknown type":            frameOf([]byte{0x08, 99}),
		"type 41 (unassigned)":    frameOf([]byte{0x08, 41}),
		"body missing":            frameOf(partial(&pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum()})),
		"required field missing":  frameOf(partial(pulsar.Wrap(&pb.CommandConnected{ProtocolVersion: proto.Int32(20)}))),
		"nested required missing": frameOf(partial(pulsar.Wrap(&pb.CommandSendReceipt{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1), MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1)}}))),
		"error without message":   frameOf(partial(pulsar.Wrap(&pb.CommandError{RequestId: proto.Uint64(1), Error: pb.ServerError_UnknownError.Enum()}))),
		"payload after PING":      frameOf(ping, hp),
		"SEND without payload":    frameOf(send),
		"bad magic":               frameOf(send, []byte{0x0e, 0x03}, hp[2:]),
		"payload cut short":       frameOf(send, hp[:9]),
		"one payload byte":        frameOf(send, []byte{0x0e}),
		"metaSize too large": frameOf(send, func() []byte {
			b := slices.Clone(hp)
			binary.BigEndian.PutUint32(b[6:], uint32(len(b)))
			return b
		}()),
		"garbage metadata":          frameOf(send, hpOf([]byte{0xff, 0xff, 0xff}, nil)),
		"metadata missing required": frameOf(send, hpOf(partial(&pb.MessageMetadata{ProducerName: proto.String("p")}), nil)),
		"bem cut short":             frameOf(send, []byte{0x0e, 0x02, 0, 0}),
		"bem size too large":        frameOf(send, bem(100, nil), hp),
		"bem garbage":               frameOf(send, bem(2, []byte{0xff, 0xff}), hp),
		"bem without payload":       frameOf(send, bem(0, nil)),
		"two bem prefixes":          frameOf(send, bem(0, nil), bem(0, nil), hp),
	}
}

func TestDecodeMalformed(t *testing.T) {
	cases := malformedFrames()
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			f, err := pulsar.DecodeFrame(b)
			if !errors.Is(err, pulsar.ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if errors.Is(err, pulsar.ErrChecksum) || f.Cmd != nil {
				t.Fatalf("malformed frame returned %v, %v", f.Cmd, err)
			}
			if !strings.HasPrefix(err.Error(), "pulsar: malformed frame: ") {
				t.Fatalf("error text %q", err)
			}
		})
	}
}

// TestMissingRequiredEveryField clears each required field of each command body in turn:
// the encoder refuses it and the decoder rejects its bytes, as the Go client would.
func TestMissingRequiredEveryField(t *testing.T) {
	n := 0
	for _, typ := range allTypes() {
		cmd := sampleCommand(typ, true)
		body := cmd.ProtoReflect().Get(cmd.ProtoReflect().Descriptor().Fields().ByNumber(protoreflect.FieldNumber(typ))).Message()
		fields := body.Descriptor().Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			if fd.Cardinality() != protoreflect.Required {
				continue
			}
			n++
			broken := proto.Clone(cmd).(*pb.BaseCommand)
			bb := broken.ProtoReflect().Get(broken.ProtoReflect().Descriptor().Fields().ByNumber(protoreflect.FieldNumber(typ))).Message()
			bb.Clear(fd)
			if _, err := pulsar.AppendCommand(nil, broken); err == nil {
				t.Errorf("%v without %s: encoded", typ, fd.Name())
			}
			if _, err := pulsar.AppendPayloadCommand(nil, broken, sampleMeta(false), nil); err == nil {
				t.Errorf("%v without %s: encoded as payload frame", typ, fd.Name())
			}
			rest := [][]byte{}
			if pulsar.IsPayloadType(typ) {
				rest = append(rest, hpOf(partial(sampleMeta(false)), nil))
			}
			if _, err := pulsar.DecodeFrame(frameOf(partial(broken), rest...)); !errors.Is(err, pulsar.ErrMalformed) {
				t.Errorf("%v without %s: decode err = %v", typ, fd.Name(), err)
			}
		}
	}
	if n < 90 {
		t.Fatalf("only %d required fields checked", n)
	}
}

func TestEncodeRejects(t *testing.T) {
	meta := sampleMeta(false)
	hp, _ := pulsar.AppendHeadersAndPayload(nil, meta, nil)
	dst := []byte("keep")
	send := sampleCommand(pb.BaseCommand_SEND, false)
	ping := pulsar.Wrap(&pb.CommandPing{})
	noMeta := &pb.MessageMetadata{SequenceId: proto.Uint64(1)}
	for name, fn := range map[string]func() ([]byte, error){
		"SEND as simple":    func() ([]byte, error) { return pulsar.AppendCommand(dst, send) },
		"PING with payload": func() ([]byte, error) { return pulsar.AppendPayloadCommand(dst, ping, meta, nil) },
		"PING raw payload":  func() ([]byte, error) { return pulsar.AppendRawPayloadCommand(dst, ping, nil, hp) },
		"no type":           func() ([]byte, error) { return pulsar.AppendCommand(dst, &pb.BaseCommand{}) },
		"body missing": func() ([]byte, error) {
			return pulsar.AppendCommand(dst, &pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum()})
		},
		"metadata missing req": func() ([]byte, error) { return pulsar.AppendPayloadCommand(dst, send, noMeta, nil) },
		"raw without magic":    func() ([]byte, error) { return pulsar.AppendRawPayloadCommand(dst, send, nil, hp[2:]) },
		"raw too short":        func() ([]byte, error) { return pulsar.AppendRawPayloadCommand(dst, send, nil, hp[:9]) },
		"headers missing req":  func() ([]byte, error) { return pulsar.AppendHeadersAndPayload(dst, noMeta, nil) },
		"batch message missing": func() ([]byte, error) {
			return pulsar.AppendBatchMessage(dst, &pb.SingleMessageMetadata{Properties: []*pb.KeyValue{{}}}, nil)
		},
	} {
		out, err := fn()
		if err == nil {
			t.Errorf("%s: no error", name)
		}
		if string(out) != "keep" {
			t.Errorf("%s: dst changed to %q", name, out)
		}
	}
}

func TestPingPongBodyOptional(t *testing.T) {
	for _, typ := range []pb.BaseCommand_Type{pb.BaseCommand_PING, pb.BaseCommand_PONG} {
		b, err := pulsar.AppendCommand(nil, &pb.BaseCommand{Type: typ.Enum()})
		if err != nil {
			t.Fatal(err)
		}
		f, err := pulsar.DecodeFrame(b)
		if err != nil || f.Cmd.GetType() != typ {
			t.Fatalf("%v: %v", typ, err)
		}
	}
}

func TestWrapAndBody(t *testing.T) {
	for _, typ := range allTypes() {
		cmd := sampleCommand(typ, false)
		body := pulsar.Body(cmd)
		w := pulsar.Wrap(body)
		mustEqual(t, typ.String(), w, cmd)
	}
	if pulsar.Body(&pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum()}) != nil {
		t.Fatal("Body of a command without body")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Wrap of a non-command did not panic")
		}
	}()
	pulsar.Wrap(&pb.MessageIdData{})
}

func TestAppendKeepsPrefix(t *testing.T) {
	prefix := []byte("abc")
	b, err := pulsar.AppendCommand(prefix, pulsar.Wrap(&pb.CommandPong{}))
	if err != nil || string(b[:3]) != "abc" {
		t.Fatal(err)
	}
	b, err = pulsar.AppendPayloadCommand(b, sampleCommand(pb.BaseCommand_SEND, false), sampleMeta(false), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	fr := pulsar.NewFrameReader(bytes.NewReader(b[3:]), 0)
	for _, want := range []pb.BaseCommand_Type{pb.BaseCommand_PONG, pb.BaseCommand_SEND} {
		f, err := fr.ReadFrame()
		if err != nil || f.Cmd.GetType() != want {
			t.Fatalf("got %v, %v; want %v", f.Cmd.GetType(), err, want)
		}
		// Buffered tells a connection whether more input is already waiting (flush
		// replies only when it is 0).
		if more := fr.Buffered() > 0; more != (want == pb.BaseCommand_PONG) {
			t.Fatalf("after %v: %d bytes buffered", want, fr.Buffered())
		}
	}
}

func benchSend() (*pb.BaseCommand, *pb.MessageMetadata, []byte) {
	cmd := pulsar.Wrap(&pb.CommandSend{
		ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(12345), NumMessages: proto.Int32(1),
	})
	meta := &pb.MessageMetadata{
		ProducerName:       proto.String("standalone-0-17"),
		SequenceId:         proto.Uint64(12345),
		PublishTime:        proto.Uint64(1764500000000),
		NumMessagesInBatch: proto.Int32(1),
		UncompressedSize:   proto.Uint32(1024),
	}
	return cmd, meta, bytes.Repeat([]byte{'m'}, 1024)
}

func BenchmarkEncodeSend1KiB(b *testing.B) {
	cmd, meta, payload := benchSend()
	var buf []byte
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = pulsar.AppendPayloadCommand(buf[:0], cmd, meta, payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeSend1KiB(b *testing.B) {
	cmd, meta, payload := benchSend()
	frame, err := pulsar.AppendPayloadCommand(nil, cmd, meta, payload)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pulsar.DecodeFrame(frame); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeMessage1KiB is the broker's dispatch path: a MESSAGE around stored bytes.
func BenchmarkEncodeMessage1KiB(b *testing.B) {
	_, meta, payload := benchSend()
	hp, _ := pulsar.AppendHeadersAndPayload(nil, meta, payload)
	cmd := pulsar.Wrap(&pb.CommandMessage{
		ConsumerId: proto.Uint64(3),
		MessageId:  &pb.MessageIdData{LedgerId: proto.Uint64(77), EntryId: proto.Uint64(12345)},
	})
	var buf []byte
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = pulsar.AppendRawPayloadCommand(buf[:0], cmd, nil, hp); err != nil {
			b.Fatal(err)
		}
	}
}
