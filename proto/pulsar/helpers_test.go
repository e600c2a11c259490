package pulsar_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// fill sets fields of m to deterministic non-default values: every field when all is true,
// otherwise only the required ones (recursively). Nested messages of the same type as an
// ancestor (MessageIdData.first_chunk_message_id) stop at depth 2.
func fill(m protoreflect.Message, all bool, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !all && fd.Cardinality() != protoreflect.Required {
			continue
		}
		if fd.Kind() == protoreflect.MessageKind && depth >= 2 && fd.Cardinality() != protoreflect.Required {
			continue
		}
		if fd.IsList() {
			l := m.Mutable(fd).List()
			for j := range 2 {
				if fd.Kind() == protoreflect.MessageKind {
					e := l.NewElement()
					fill(e.Message(), all, depth+1)
					l.Append(e)
				} else {
					l.Append(scalar(fd, j))
				}
			}
			continue
		}
		if fd.Kind() == protoreflect.MessageKind {
			fill(m.Mutable(fd).Message(), all, depth+1)
			continue
		}
		m.Set(fd, scalar(fd, 0))
	}
}

// scalar returns a value for fd that differs from its default and encodes non-trivially.
func scalar(fd protoreflect.FieldDescriptor, j int) protoreflect.Value {
	n := int64(fd.Number())*1000 + int64(j) + 7
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(!fd.Default().Bool())
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(vals.Len() - 1 - j%vals.Len()).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(-n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(-n << 20)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(n) << 33)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(n) + 0.5)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(n) + 0.5)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("%s-%d", fd.Name(), j))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(fmt.Sprintf("\x00%s\xff%d", fd.Name(), j)))
	}
	panic(fmt.Sprintf("kind %v", fd.Kind()))
}

// allTypes is every BaseCommand type in the enum.
func allTypes() []pb.BaseCommand_Type {
	vals := pb.BaseCommand_CONNECT.Descriptor().Values()
	ts := make([]pb.BaseCommand_Type, vals.Len())
	for i := range vals.Len() {
		ts[i] = pb.BaseCommand_Type(vals.Get(i).Number())
	}
	return ts
}

// sampleCommand builds a command of type t with its body filled (all fields or required
// ones only).
func sampleCommand(t pb.BaseCommand_Type, all bool) *pb.BaseCommand {
	cmd := &pb.BaseCommand{Type: t.Enum()}
	fd := cmd.ProtoReflect().Descriptor().Fields().ByNumber(protoreflect.FieldNumber(t))
	fill(cmd.ProtoReflect().Mutable(fd).Message(), all, 0)
	return cmd
}

func sampleMeta(all bool) *pb.MessageMetadata {
	m := &pb.MessageMetadata{}
	fill(m.ProtoReflect(), all, 0)
	return m
}

// encode (t may be nil: then it panics on error) appends cmd as a simple or payload frame, whichever its type needs.
func encode(t testing.TB, cmd *pb.BaseCommand, meta *pb.MessageMetadata, payload []byte) []byte {
	if t != nil {
		t.Helper()
	}
	var b []byte
	var err error
	if pulsar.IsPayloadType(cmd.GetType()) {
		b, err = pulsar.AppendPayloadCommand(nil, cmd, meta, payload)
	} else {
		b, err = pulsar.AppendCommand(nil, cmd)
	}
	if err != nil {
		if t == nil {
			panic(err)
		}
		t.Fatalf("encode %v: %v", cmd.GetType(), err)
	}
	return b
}

func mustEqual(t testing.TB, what string, got, want proto.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Fatalf("%s differs:\n got %v\nwant %v", what, got, want)
	}
}
