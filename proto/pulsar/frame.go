package pulsar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Frozen protocol constants. See doc.go for the layouts they describe.
const (
	// ProtocolVersion is the highest protocol version Magnetar speaks (pb.ProtocolVersion_v20).
	// A broker answers CONNECT with min(client's protocol_version, ProtocolVersion).
	ProtocolVersion int32 = 20

	// MaxMessageSizeDefault is the max_message_size a broker advertises in CONNECTED by
	// default: the largest MessageMetadata+payload a producer may send.
	MaxMessageSizeDefault = 1 << 20

	// FramePadding is the room a frame needs beyond max_message_size for the length words,
	// the BaseCommand and the checksum block. Clients use the same 10 KiB.
	FramePadding = 10 << 10

	// MaxFrameSizeDefault is the default FrameReader limit on a frame's total size (the
	// first u32): MaxMessageSizeDefault + FramePadding.
	MaxFrameSizeDefault = MaxMessageSizeDefault + FramePadding

	// MagicCRC32C starts the checksum block of a payload frame: [u16 magic][u32 CRC32C].
	MagicCRC32C uint16 = 0x0e01

	// MagicBrokerEntryMetadata starts the optional broker-entry-metadata prefix that a
	// broker may put before the checksum block of a MESSAGE: [u16 magic][u32 size][proto].
	MagicBrokerEntryMetadata uint16 = 0x0e02

	// headerLen is [u32 total][u32 cmdSize].
	headerLen = 8
	// checksumBlockLen is [u16 magic][u32 crc][u32 metaSize], the fixed part of
	// headersAndPayload before the MessageMetadata.
	checksumBlockLen = 10
)

var (
	// ErrMalformed is wrapped by every structural decoding error: bad lengths, bad magic,
	// garbage or incomplete protobuf (including missing proto2 required fields), a command
	// whose body is missing, a payload where none belongs. The connection must be closed.
	ErrMalformed = errors.New("pulsar: malformed frame")

	// ErrChecksum is wrapped when the CRC32C of a payload frame does not match. The frame is
	// otherwise well formed and the stream is still in sync: DecodeFrame still returns the
	// command (so a broker can answer SEND_ERROR with ChecksumError), but no metadata or
	// payload.
	ErrChecksum = errors.New("pulsar: checksum mismatch")

	// ErrFrameTooLarge is wrapped by *FrameSizeError.
	ErrFrameTooLarge = errors.New("pulsar: frame too large")
)

// FrameSizeError reports a frame whose declared total size exceeds the reader's limit. The
// stream cannot be resynchronised: close the connection and log Error().
type FrameSizeError struct {
	Size uint64 // declared total size (the first u32 of the frame)
	Max  int    // the limit in force
}

func (e *FrameSizeError) Error() string {
	return fmt.Sprintf("pulsar: frame too large: %d bytes, limit %d", e.Size, e.Max)
}

// Unwrap makes errors.Is(err, ErrFrameTooLarge) true.
func (e *FrameSizeError) Unwrap() error { return ErrFrameTooLarge }

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC32C (Castagnoli) the protocol uses.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, crcTable) }

// Frame is a decoded frame. Byte slices alias the buffer given to DecodeFrame (for a
// FrameReader: valid until its next call); Cmd, Metadata and BrokerEntryMetadata are
// independent copies.
type Frame struct {
	Cmd *pb.BaseCommand

	// The fields below are set only for payload frames (SEND and MESSAGE).

	// BrokerEntryMetadata is the decoded 0x0e02 prefix, nil when absent.
	BrokerEntryMetadata *pb.BrokerEntryMetadata
	// HeadersAndPayload is everything from the 0x0e01 magic to the end of the frame:
	// [magic][crc][metaSize][MessageMetadata][payload]. This is what a broker stores as an
	// entry and forwards verbatim in MESSAGE (AppendRawPayloadCommand).
	HeadersAndPayload []byte
	// Metadata is the decoded MessageMetadata (nil if the checksum did not match).
	Metadata *pb.MessageMetadata
	// Payload is the message payload after the metadata (possibly compressed, possibly a
	// batch; see ParseBatch).
	Payload []byte
}

// HasPayload reports whether f is a payload frame.
func (f *Frame) HasPayload() bool { return f.HeadersAndPayload != nil }

var (
	marshalOpts   = proto.MarshalOptions{}   // required fields are checked
	unmarshalOpts = proto.UnmarshalOptions{} // required fields are checked, as the Go client does
)

// IsPayloadType reports whether commands of type t carry a payload (SEND and MESSAGE).
func IsPayloadType(t pb.BaseCommand_Type) bool {
	return t == pb.BaseCommand_SEND || t == pb.BaseCommand_MESSAGE
}

// bodyOptional lists the command types whose (field-less) body may be absent.
func bodyOptional(t pb.BaseCommand_Type) bool {
	return t == pb.BaseCommand_PING || t == pb.BaseCommand_PONG
}

var baseFields = (&pb.BaseCommand{}).ProtoReflect().Descriptor().Fields()

// checkBody returns an error unless the body field matching cmd's type is set (the field
// number of each body equals its Type value).
func checkBody(cmd *pb.BaseCommand) error {
	if cmd.Type == nil {
		return errors.New("type not set")
	}
	t := cmd.GetType()
	if bodyOptional(t) {
		return nil
	}
	fd := baseFields.ByNumber(protoreflect.FieldNumber(t))
	if fd == nil {
		return fmt.Errorf("type %v has no body field", t)
	}
	if !cmd.ProtoReflect().Has(fd) {
		return fmt.Errorf("%v without its %s body", t, fd.Name())
	}
	return nil
}

// AppendCommand appends a simple frame [u32 total][u32 cmdSize][BaseCommand] to dst.
// It fails, leaving dst unchanged, if cmd's body for its type is missing, a proto2
// required field is unset anywhere in cmd, or cmd is a SEND or MESSAGE (use
// AppendPayloadCommand).
func AppendCommand(dst []byte, cmd *pb.BaseCommand) ([]byte, error) {
	if err := checkBody(cmd); err != nil {
		return dst, encodeErr(cmd, err)
	}
	if IsPayloadType(cmd.GetType()) {
		return dst, encodeErr(cmd, errors.New("payload command needs AppendPayloadCommand"))
	}
	start := len(dst)
	out, err := appendCmd(dst, cmd)
	if err != nil {
		return dst[:start], err
	}
	binary.BigEndian.PutUint32(out[start:], uint32(len(out)-start-4))
	return out, nil
}

// appendCmd appends [u32 total placeholder][u32 cmdSize][BaseCommand].
func appendCmd(dst []byte, cmd *pb.BaseCommand) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	out, err := marshalOpts.MarshalAppend(dst, cmd)
	if err != nil {
		return dst[:start], encodeErr(cmd, err)
	}
	binary.BigEndian.PutUint32(out[start+4:], uint32(len(out)-start-headerLen))
	return out, nil
}

func encodeErr(cmd *pb.BaseCommand, err error) error {
	return fmt.Errorf("pulsar: encode %v: %w", cmd.GetType(), err)
}

func checkPayloadCmd(cmd *pb.BaseCommand) error {
	if err := checkBody(cmd); err != nil {
		return encodeErr(cmd, err)
	}
	if !IsPayloadType(cmd.GetType()) {
		return encodeErr(cmd, errors.New("only SEND and MESSAGE carry a payload"))
	}
	return nil
}

// AppendPayloadCommand appends a payload frame (SEND or MESSAGE) to dst:
// [u32 total][u32 cmdSize][BaseCommand][u16 0x0e01][u32 CRC32C][u32 metaSize][meta][payload].
// It fails, leaving dst unchanged, as AppendCommand does, or if meta lacks a required field.
func AppendPayloadCommand(dst []byte, cmd *pb.BaseCommand, meta *pb.MessageMetadata, payload []byte) ([]byte, error) {
	if err := checkPayloadCmd(cmd); err != nil {
		return dst, err
	}
	start := len(dst)
	out, err := appendCmd(dst, cmd)
	if err != nil {
		return dst[:start], err
	}
	out, err = AppendHeadersAndPayload(out, meta, payload)
	if err != nil {
		return dst[:start], err
	}
	binary.BigEndian.PutUint32(out[start:], uint32(len(out)-start-4))
	return out, nil
}

// AppendRawPayloadCommand appends a payload frame whose headersAndPayload (from the 0x0e01
// magic to the end, as in Frame.HeadersAndPayload) is already serialized: a broker
// forwards stored entries with it. If bem is not nil, the 0x0e02 broker-entry-metadata
// prefix is written before headersAndPayload. headersAndPayload is copied verbatim; only
// its magic and minimum length are checked.
func AppendRawPayloadCommand(dst []byte, cmd *pb.BaseCommand, bem *pb.BrokerEntryMetadata, headersAndPayload []byte) ([]byte, error) {
	if err := checkPayloadCmd(cmd); err != nil {
		return dst, err
	}
	if len(headersAndPayload) < checksumBlockLen ||
		binary.BigEndian.Uint16(headersAndPayload) != MagicCRC32C {
		return dst, encodeErr(cmd, errors.New("headersAndPayload does not start with a checksum block"))
	}
	start := len(dst)
	out, err := appendCmd(dst, cmd)
	if err != nil {
		return dst[:start], err
	}
	if bem != nil {
		out = binary.BigEndian.AppendUint16(out, MagicBrokerEntryMetadata)
		sizeAt := len(out)
		out = append(out, 0, 0, 0, 0)
		if out, err = marshalOpts.MarshalAppend(out, bem); err != nil {
			return dst[:start], encodeErr(cmd, err)
		}
		binary.BigEndian.PutUint32(out[sizeAt:], uint32(len(out)-sizeAt-4))
	}
	out = append(out, headersAndPayload...)
	binary.BigEndian.PutUint32(out[start:], uint32(len(out)-start-4))
	return out, nil
}

// AppendHeadersAndPayload appends [u16 0x0e01][u32 CRC32C][u32 metaSize][meta][payload],
// the CRC covering metaSize to the end of payload. It fails, leaving dst unchanged, if meta
// lacks a required field.
func AppendHeadersAndPayload(dst []byte, meta *pb.MessageMetadata, payload []byte) ([]byte, error) {
	start := len(dst)
	dst = binary.BigEndian.AppendUint16(dst, MagicCRC32C)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0) // crc, metaSize
	out, err := marshalOpts.MarshalAppend(dst, meta)
	if err != nil {
		return dst[:start], fmt.Errorf("pulsar: encode MessageMetadata: %w", err)
	}
	binary.BigEndian.PutUint32(out[start+6:], uint32(len(out)-start-checksumBlockLen))
	out = append(out, payload...)
	binary.BigEndian.PutUint32(out[start+2:], Checksum(out[start+6:]))
	return out, nil
}

// ParseHeadersAndPayload verifies and decodes a headersAndPayload block (as stored by a
// broker, or Frame.HeadersAndPayload). payload aliases b. Errors wrap ErrMalformed or
// ErrChecksum.
func ParseHeadersAndPayload(b []byte) (meta *pb.MessageMetadata, payload []byte, err error) {
	if len(b) < checksumBlockLen {
		return nil, nil, malformed("payload of %d bytes is shorter than the checksum block", len(b))
	}
	if m := binary.BigEndian.Uint16(b); m != MagicCRC32C {
		return nil, nil, malformed("payload magic %#04x, want %#04x", m, MagicCRC32C)
	}
	metaSize := uint64(binary.BigEndian.Uint32(b[6:]))
	if metaSize > uint64(len(b)-checksumBlockLen) {
		return nil, nil, malformed("metadata size %d exceeds the %d bytes left", metaSize, len(b)-checksumBlockLen)
	}
	if want, got := binary.BigEndian.Uint32(b[2:]), Checksum(b[6:]); want != got {
		return nil, nil, fmt.Errorf("%w: frame says %#08x, computed %#08x", ErrChecksum, want, got)
	}
	end := checksumBlockLen + int(metaSize)
	meta = &pb.MessageMetadata{}
	if err := unmarshalOpts.Unmarshal(b[checksumBlockLen:end], meta); err != nil {
		return nil, nil, malformed("MessageMetadata: %v", err)
	}
	return meta, b[end:], nil
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// DecodeFrame decodes one whole frame, b starting at its u32 total size (as returned by
// FrameReader.Next). Errors wrap ErrMalformed, or ErrChecksum, in which case the returned
// Frame still carries Cmd, BrokerEntryMetadata and HeadersAndPayload. See doc.go for what
// is rejected.
func DecodeFrame(b []byte) (Frame, error) {
	if len(b) < headerLen {
		return Frame{}, malformed("frame of %d bytes is shorter than its %d-byte header", len(b), headerLen)
	}
	total := uint64(binary.BigEndian.Uint32(b))
	if total != uint64(len(b)-4) {
		return Frame{}, malformed("total size %d, but %d bytes follow it", total, len(b)-4)
	}
	cmdSize := uint64(binary.BigEndian.Uint32(b[4:]))
	if cmdSize > total-4 {
		return Frame{}, malformed("command size %d exceeds total size %d - 4", cmdSize, total)
	}
	cmdEnd := headerLen + int(cmdSize)
	cmd := &pb.BaseCommand{}
	if err := unmarshalOpts.Unmarshal(b[headerLen:cmdEnd], cmd); err != nil {
		return Frame{}, malformed("BaseCommand: %v", err)
	}
	if err := checkBody(cmd); err != nil {
		return Frame{}, malformed("%v", err)
	}
	f := Frame{Cmd: cmd}
	rest := b[cmdEnd:]
	if !IsPayloadType(cmd.GetType()) {
		if len(rest) != 0 {
			return Frame{}, malformed("%v followed by %d payload bytes", cmd.GetType(), len(rest))
		}
		return f, nil
	}
	if len(rest) == 0 {
		return Frame{}, malformed("%v without a payload", cmd.GetType())
	}
	if len(rest) >= 2 && binary.BigEndian.Uint16(rest) == MagicBrokerEntryMetadata {
		if len(rest) < 6 {
			return Frame{}, malformed("broker entry metadata prefix cut short")
		}
		size := uint64(binary.BigEndian.Uint32(rest[2:]))
		if size > uint64(len(rest)-6) {
			return Frame{}, malformed("broker entry metadata size %d exceeds the %d bytes left", size, len(rest)-6)
		}
		f.BrokerEntryMetadata = &pb.BrokerEntryMetadata{}
		if err := unmarshalOpts.Unmarshal(rest[6:6+size], f.BrokerEntryMetadata); err != nil {
			return Frame{}, malformed("BrokerEntryMetadata: %v", err)
		}
		rest = rest[6+size:]
	}
	meta, payload, err := ParseHeadersAndPayload(rest)
	if err != nil {
		if errors.Is(err, ErrChecksum) {
			f.HeadersAndPayload = rest
			return f, err
		}
		return Frame{}, err
	}
	f.HeadersAndPayload, f.Metadata, f.Payload = rest, meta, payload
	return f, nil
}
