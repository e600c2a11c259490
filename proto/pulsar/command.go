package pulsar

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// bodyField maps each command body message (CommandSend, ...) to its BaseCommand field;
// the field number is also the Type value.
var bodyField = func() map[protoreflect.FullName]protoreflect.FieldDescriptor {
	m := make(map[protoreflect.FullName]protoreflect.FieldDescriptor, baseFields.Len())
	for i := range baseFields.Len() {
		fd := baseFields.Get(i)
		if fd.Kind() == protoreflect.MessageKind {
			m[fd.Message().FullName()] = fd
		}
	}
	return m
}()

// Wrap returns a BaseCommand carrying body with the matching type, e.g.
// Wrap(&pb.CommandPong{}) or Wrap(&pb.CommandSendReceipt{...}). It panics if body is not
// a command body message (a programming error).
func Wrap(body proto.Message) *pb.BaseCommand {
	fd, ok := bodyField[body.ProtoReflect().Descriptor().FullName()]
	if !ok {
		panic(fmt.Sprintf("pulsar.Wrap: %T is not a command body", body))
	}
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_Type(fd.Number()).Enum()}
	cmd.ProtoReflect().Set(fd, protoreflect.ValueOfMessage(body.ProtoReflect()))
	return cmd
}

// Body returns the command body matching cmd's type (nil if absent), e.g. a
// *pb.CommandSend for a SEND, for logging and generic handling.
func Body(cmd *pb.BaseCommand) proto.Message {
	fd := baseFields.ByNumber(protoreflect.FieldNumber(cmd.GetType()))
	if fd == nil || !cmd.ProtoReflect().Has(fd) {
		return nil
	}
	return cmd.ProtoReflect().Get(fd).Message().Interface()
}
