package schema

import (
	"fmt"
	"strings"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// typeNames are Pulsar's SchemaType names of the protocol's schema types, as the admin
// REST API shows them. The protocol's None (0) is what clients send for raw bytes.
var typeNames = map[pb.Schema_Type]string{
	pb.Schema_None:           "NONE",
	pb.Schema_String:         "STRING",
	pb.Schema_Json:           "JSON",
	pb.Schema_Protobuf:       "PROTOBUF",
	pb.Schema_Avro:           "AVRO",
	pb.Schema_Bool:           "BOOLEAN",
	pb.Schema_Int8:           "INT8",
	pb.Schema_Int16:          "INT16",
	pb.Schema_Int32:          "INT32",
	pb.Schema_Int64:          "INT64",
	pb.Schema_Float:          "FLOAT",
	pb.Schema_Double:         "DOUBLE",
	pb.Schema_Date:           "DATE",
	pb.Schema_Time:           "TIME",
	pb.Schema_Timestamp:      "TIMESTAMP",
	pb.Schema_KeyValue:       "KEY_VALUE",
	pb.Schema_Instant:        "INSTANT",
	pb.Schema_LocalDate:      "LOCAL_DATE",
	pb.Schema_LocalTime:      "LOCAL_TIME",
	pb.Schema_LocalDateTime:  "LOCAL_DATE_TIME",
	pb.Schema_ProtobufNative: "PROTOBUF_NATIVE",
}

// TypeName returns Pulsar's name of schema type t ("AVRO").
func TypeName(t pb.Schema_Type) string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("TYPE_%d", int32(t))
}

// ParseType reads a schema type by Pulsar's name, case-insensitive. BYTES is the
// protocol's None.
func ParseType(s string) (pb.Schema_Type, error) {
	u := strings.ToUpper(s)
	if u == "BYTES" {
		return pb.Schema_None, nil
	}
	for t, n := range typeNames {
		if n == u {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown schema type %q", ErrInvalid, s)
}

// usesAvro reports whether definitions of type t are Avro schemas (Pulsar checks them with
// Avro schema resolution).
func usesAvro(t pb.Schema_Type) bool {
	return t == pb.Schema_Avro || t == pb.Schema_Json || t == pb.Schema_Protobuf
}
