package interop

import (
	"fmt"
	"strings"
	"testing"

	_ "github.com/apache/pulsar-client-go/pulsar" // registers the client's PulsarApi.proto
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// describe flattens a proto file into one line per message field and enum value, keyed by
// its name relative to the package, so two files with different packages compare.
func describe(fd protoreflect.FileDescriptor) map[string]string {
	pkg := string(fd.Package()) + "."
	rel := func(n protoreflect.FullName) string { return strings.TrimPrefix(string(n), pkg) }
	out := map[string]string{}
	var enums func(protoreflect.EnumDescriptors)
	enums = func(es protoreflect.EnumDescriptors) {
		for i := range es.Len() {
			e := es.Get(i)
			out["enum "+rel(e.FullName())] = "closed=" + fmt.Sprint(e.IsClosed())
			for j := range e.Values().Len() {
				v := e.Values().Get(j)
				out["value "+rel(e.FullName())+"."+string(v.Name())] = fmt.Sprint(v.Number())
			}
		}
	}
	var msgs func(protoreflect.MessageDescriptors)
	msgs = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			m := ms.Get(i)
			out["message "+rel(m.FullName())] = ""
			for j := range m.Fields().Len() {
				f := m.Fields().Get(j)
				typ := f.Kind().String()
				switch {
				case f.Message() != nil:
					typ = rel(f.Message().FullName())
				case f.Enum() != nil:
					typ = rel(f.Enum().FullName())
				}
				def := "-"
				if f.HasDefault() {
					def = fmt.Sprint(f.Default().Interface())
					if f.Enum() != nil {
						def = string(f.DefaultEnumValue().Name())
					}
				}
				out["field "+rel(m.FullName())+"."+string(f.Name())] = fmt.Sprintf(
					"number=%d %v %s default=%s packed=%v", f.Number(), f.Cardinality(), typ, def, f.IsPacked())
			}
			enums(m.Enums())
			msgs(m.Messages())
		}
	}
	enums(fd.Enums())
	msgs(fd.Messages())
	return out
}

// TestDescriptorsMatchClient proves that our pulsar.proto and the client's PulsarApi.proto
// agree on every message, field number, name, type, label, default and enum value.
func TestDescriptorsMatchClient(t *testing.T) {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName("pulsar.proto.BaseCommand")
	if err != nil {
		t.Fatalf("client descriptors not registered: %v", err)
	}
	theirs := describe(d.ParentFile())
	ours := describe((&pb.BaseCommand{}).ProtoReflect().Descriptor().ParentFile())
	if len(theirs) < 500 {
		t.Fatalf("only %d client descriptor entries", len(theirs))
	}
	// Guard the comparison itself against an empty or mis-keyed description.
	for k, want := range map[string]string{
		"field MessageIdData.batch_index":             "number=4 optional int32 default=-1 packed=false",
		"field BaseCommand.type":                      "number=1 required BaseCommand.Type default=- packed=false",
		"value BaseCommand.Type.TOPIC_MIGRATED":       "68",
		"field CommandProducerSuccess.producer_ready": "number=6 optional bool default=true packed=false",
	} {
		if theirs[k] != want {
			t.Errorf("client %s = %q, want %q", k, theirs[k], want)
		}
	}
	for k, v := range theirs {
		if o, ok := ours[k]; !ok {
			t.Errorf("missing in ours: %s (%s)", k, v)
		} else if o != v {
			t.Errorf("%s: ours %q, client %q", k, o, v)
		}
	}
	for k, v := range ours {
		if _, ok := theirs[k]; !ok {
			t.Errorf("not in the client: %s (%s)", k, v)
		}
	}
	t.Logf("%d entries compared", len(theirs))
}
