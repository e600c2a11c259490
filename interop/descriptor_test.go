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

// scalableAdditions are the only entries ours may have beyond pulsar-client-go v0.19: the
// scalable-topic protocol (proto/pulsar/doc.go), which the client does not know.
var scalableAdditions = map[string]bool{
	"field FeatureFlags.supports_scalable_topics": true,
	"field MessageMetadata.entry_hash_min":        true,
	"field MessageMetadata.entry_hash_max":        true,
}

// scalableAddition reports whether k is part of the scalable-topic protocol: a listed
// field, a BaseCommand type or field numbered 70..78, or a message or enum (with its
// fields and values) the client does not have at all.
func scalableAddition(k string) bool {
	if scalableAdditions[k] {
		return true
	}
	for _, typ := range []string{"SCALABLE_TOPIC_LOOKUP", "SCALABLE_TOPIC_UPDATE", "SCALABLE_TOPIC_CLOSE",
		"SCALABLE_TOPIC_SUBSCRIBE", "SCALABLE_TOPIC_SUBSCRIBE_RESPONSE", "SCALABLE_TOPIC_ASSIGNMENT_UPDATE",
		"WATCH_SCALABLE_TOPICS", "WATCH_SCALABLE_TOPICS_UPDATE", "WATCH_SCALABLE_TOPICS_CLOSE"} {
		if k == "value BaseCommand.Type."+typ {
			return true
		}
	}
	for _, f := range []string{"scalableTopicLookup", "scalableTopicUpdate", "scalableTopicClose",
		"scalableTopicSubscribe", "scalableTopicSubscribeResponse", "scalableTopicAssignmentUpdate",
		"watchScalableTopics", "watchScalableTopicsUpdate", "watchScalableTopicsClose"} {
		if k == "field BaseCommand."+f {
			return true
		}
	}
	for _, m := range []string{"SegmentState", "SegmentInfoProto", "SegmentBrokerAddress", "ScalableTopicDAG",
		"CommandScalableTopicLookup", "CommandScalableTopicUpdate", "CommandScalableTopicClose",
		"ScalableConsumerType", "CommandScalableTopicSubscribe", "ScalableAssignedSegment",
		"ScalableConsumerAssignment", "CommandScalableTopicSubscribeResponse",
		"CommandScalableTopicAssignmentUpdate", "CommandWatchScalableTopics", "ScalableTopicsSnapshot",
		"ScalableTopicsDiff", "CommandWatchScalableTopicsUpdate", "CommandWatchScalableTopicsClose"} {
		for _, kind := range []string{"message ", "enum "} {
			if k == kind+m {
				return true
			}
		}
		for _, kind := range []string{"field ", "value "} {
			if strings.HasPrefix(k, kind+m+".") {
				return true
			}
		}
	}
	return false
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
	extra := 0
	for k, v := range ours {
		if _, ok := theirs[k]; !ok {
			if !scalableAddition(k) {
				t.Errorf("not in the client: %s (%s)", k, v)
			}
			extra++
		}
	}
	// The scalable-topic additions are all there: 9 types, 9 BaseCommand fields, the flag,
	// 2 metadata fields, 18 messages or enums and their fields (counted, not listed).
	if extra < 9+9+1+2+18 {
		t.Errorf("only %d scalable-topic additions", extra)
	}
	t.Logf("%d entries compared", len(theirs))
}
