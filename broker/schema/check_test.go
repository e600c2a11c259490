package schema

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

const (
	recA        = `{"type":"record","name":"rec","namespace":"test","fields":[{"name":"a","type":"int"}]}`
	recAB       = `{"type":"record","name":"rec","namespace":"test","fields":[{"name":"a","type":"int"},{"name":"b","type":"string"}]}`
	recABDef    = `{"type":"record","name":"rec","namespace":"test","fields":[{"name":"a","type":"int"},{"name":"b","type":"string","default":""}]}`
	recALong    = `{"type":"record","name":"rec","namespace":"test","fields":[{"name":"a","type":"long"}]}`
	recAString  = `{"type":"record","name":"rec","namespace":"test","fields":[{"name":"a","type":"string"}]}`
	recOnlyBDef = `{"type":"record","name":"rec","namespace":"test","fields":[{"name":"b","type":"string","default":""}]}`
)

func avroDef(s string) Definition { return Definition{Type: pb.Schema_Avro, Data: []byte(s)} }

func TestParseStrategy(t *testing.T) {
	for in, want := range map[string]Strategy{
		"": Undefined, "BACKWARD": Backward, "backward_transitive": BackwardTransitive,
		"FullTransitive": FullTransitive, "AlwaysCompatible": AlwaysCompatible, "ALWAYS_INCOMPATIBLE": AlwaysIncompatible,
		"Forward": Forward, "FULL": Full, "FORWARD_TRANSITIVE": ForwardTransitive,
	} {
		got, err := ParseStrategy(in)
		if err != nil || got != want {
			t.Errorf("ParseStrategy(%q) = %v, %v; want %v", in, got, err, want)
		}
		if want != Undefined {
			if back, _ := ParseStrategy(got.String()); back != want {
				t.Errorf("%v does not round-trip through its name", want)
			}
		}
	}
	if _, err := ParseStrategy("SIDEWAYS"); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown strategy: %v", err)
	}
}

func TestTypeNames(t *testing.T) {
	for ty := range typeNames {
		got, err := ParseType(TypeName(ty))
		if err != nil || got != ty {
			t.Errorf("type %v: ParseType(%q) = %v, %v", ty, TypeName(ty), got, err)
		}
	}
	if got, _ := ParseType("bytes"); got != pb.Schema_None {
		t.Errorf("BYTES = %v", got)
	}
	if _, err := ParseType("NOPE"); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown type: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		d  Definition
		ok bool
	}{
		{avroDef(recA), true},
		{avroDef(`{"type":"record","name":"r","fields":[{"name":"a","type":"nosuchtype"}]}`), false},
		{avroDef(`not json`), false},
		{Definition{Type: pb.Schema_Json, Data: []byte(recAB)}, true},
		{Definition{Type: pb.Schema_Json, Data: []byte(`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object"}`)}, true},
		{Definition{Type: pb.Schema_Json, Data: []byte(`{"type":"object","properties":{}}`)}, true},
		{Definition{Type: pb.Schema_Json, Data: []byte(`{"type":"record","name":"u"}`)}, false},
		{Definition{Type: pb.Schema_Json, Data: []byte(`[1,2]`)}, false},
		{Definition{Type: pb.Schema_Protobuf, Data: []byte(recA)}, true},
		{Definition{Type: pb.Schema_String}, true},
		{Definition{Type: pb.Schema_ProtobufNative, Data: []byte{1, 2, 3}}, true},
		{keyValue(Definition{Type: pb.Schema_String}, avroDef(recA)), true},
		{keyValue(Definition{Type: pb.Schema_String}, avroDef(`{`)), false},
		{Definition{Type: pb.Schema_KeyValue, Data: []byte{0, 0, 0, 9, 1}}, false},
	} {
		err := Validate(c.d)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("Validate(%v %q) = %v, want ok=%v", c.d.Type, c.d.Data, err, c.ok)
		}
	}
}

// keyValue encodes a KEY_VALUE definition as Pulsar clients do.
func keyValue(k, v Definition) Definition {
	var b []byte
	b = binary.BigEndian.AppendUint32(b, uint32(len(k.Data)))
	b = append(b, k.Data...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(v.Data)))
	b = append(b, v.Data...)
	return Definition{Type: pb.Schema_KeyValue, Data: b, Properties: map[string]string{
		"key.schema.type": TypeName(k.Type), "value.schema.type": TypeName(v.Type)}}
}

// TestCheckStrategies: the Avro resolution rules under each strategy. Adding a field
// without a default breaks BACKWARD (the new schema cannot fill it from old data) but not
// FORWARD; removing a field without a default breaks FORWARD; int → long is BACKWARD only.
func TestCheckStrategies(t *testing.T) {
	type row struct {
		existing []string
		next     string
		s        Strategy
		ok       bool
	}
	for i, r := range []row{
		{[]string{recA}, recAB, AlwaysCompatible, true},
		{[]string{recA}, recAB, Backward, false},
		{[]string{recA}, recAB, Forward, true},
		{[]string{recA}, recAB, Full, false},
		{[]string{recA}, recABDef, Full, true},
		{[]string{recAB}, recA, Backward, true},
		{[]string{recAB}, recA, Forward, false},
		{[]string{recA}, recALong, Backward, true},
		{[]string{recA}, recALong, Forward, false},
		{[]string{recA}, recAString, Backward, false},
		{[]string{recA}, recA, AlwaysIncompatible, false},
		{nil, recA, AlwaysIncompatible, true},
		{[]string{recA}, recAB, Undefined, false}, // Undefined is FULL
		// Transitive: recA → recABDef → recOnlyBDef. Against the latest only it is BACKWARD
		// compatible (b has a default and a is ignored); against recA too as well; FORWARD is
		// broken against recA (a has no default in recA) but not against recABDef.
		{[]string{recA, recABDef}, recOnlyBDef, Backward, true},
		{[]string{recA, recABDef}, recOnlyBDef, BackwardTransitive, true},
		{[]string{recAB, recABDef}, recOnlyBDef, Forward, false},
		{[]string{recAB, recA}, recALong, Backward, true},
		{[]string{recAString, recA}, recALong, Backward, true},
		{[]string{recAString, recA}, recALong, BackwardTransitive, false},
		{[]string{recAString, recA}, recALong, FullTransitive, false},
		{[]string{recALong, recA}, recA, ForwardTransitive, true},
	} {
		var ex []Definition
		for _, e := range r.existing {
			ex = append(ex, avroDef(e))
		}
		err := Check(ex, avroDef(r.next), r.s)
		if (err == nil) != r.ok || (err != nil && !errors.Is(err, ErrIncompatible)) {
			t.Errorf("row %d (%v): Check = %v, want ok=%v", i, r.s, err, r.ok)
		}
	}
}

func TestCheckTypes(t *testing.T) {
	str := Definition{Type: pb.Schema_String}
	if err := Check([]Definition{avroDef(recA)}, str, Backward); !errors.Is(err, ErrIncompatible) {
		t.Errorf("AVRO → STRING under BACKWARD: %v", err)
	}
	if err := Check([]Definition{avroDef(recA)}, str, AlwaysCompatible); err != nil {
		t.Errorf("AVRO → STRING under ALWAYS_COMPATIBLE: %v", err)
	}
	if err := Check([]Definition{str}, Definition{Type: pb.Schema_String, Properties: map[string]string{"x": "y"}}, Full); err != nil {
		t.Errorf("STRING → STRING: %v", err)
	}
	kv1 := keyValue(str, avroDef(recA))
	if err := Check([]Definition{kv1}, keyValue(str, avroDef(recABDef)), Full); err != nil {
		t.Errorf("KEY_VALUE with a compatible value: %v", err)
	}
	if err := Check([]Definition{kv1}, keyValue(str, avroDef(recAB)), Backward); !errors.Is(err, ErrIncompatible) {
		t.Errorf("KEY_VALUE with an incompatible value: %v", err)
	}
	if err := Check([]Definition{kv1}, keyValue(Definition{Type: pb.Schema_Int32}, avroDef(recA)), Backward); !errors.Is(err, ErrIncompatible) {
		t.Errorf("KEY_VALUE with another key type: %v", err)
	}
	// A consumer's schema is checked BACKWARD under FORWARD, as Pulsar does.
	if err := CheckConsumer([]Definition{avroDef(recA)}, avroDef(recAB), Forward); !errors.Is(err, ErrIncompatible) {
		t.Errorf("consumer under FORWARD: %v", err)
	}
	if err := CheckConsumer([]Definition{avroDef(recAB)}, avroDef(recA), Forward); err != nil {
		t.Errorf("consumer reading fewer fields under FORWARD: %v", err)
	}
}

// FuzzValidate: Validate and Check never panic on any definition bytes of the parsed types,
// and a definition that validates is compatible with itself under every strategy but
// ALWAYS_INCOMPATIBLE.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{recA, recAB, recABDef, `{"type":"array","items":"long"}`,
		`{"type":"enum","name":"e","symbols":["A","B"]}`, `["null","string"]`, `{`, `"int"`,
		`{"type":"record","name":"n","fields":[{"name":"next","type":["null","n"]}]}`} {
		f.Add(uint8(pb.Schema_Avro), []byte(s))
		f.Add(uint8(pb.Schema_Json), []byte(s))
	}
	f.Add(uint8(pb.Schema_KeyValue), keyValue(Definition{Type: pb.Schema_String}, avroDef(recA)).Data)
	f.Fuzz(func(t *testing.T, ty uint8, data []byte) {
		d := Definition{Type: pb.Schema_Type(ty % 21), Data: data}
		if d.Type == pb.Schema_KeyValue {
			d.Properties = map[string]string{"key.schema.type": "STRING", "value.schema.type": "AVRO"}
		}
		if Validate(d) != nil {
			return
		}
		for s := AlwaysCompatible; s <= FullTransitive; s++ {
			if err := Check([]Definition{d}, d, s); err != nil {
				t.Fatalf("valid %v definition %q incompatible with itself under %v: %v", d.Type, data, s, err)
			}
		}
	})
}

// FuzzSplitKeyValue: the KEY_VALUE decoder never panics and never returns parts longer than
// its input.
func FuzzSplitKeyValue(f *testing.F) {
	f.Add(keyValue(Definition{Type: pb.Schema_String}, avroDef(recA)).Data)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		k, v, err := splitKeyValue(Definition{Type: pb.Schema_KeyValue, Data: data})
		if err == nil && len(k.Data)+len(v.Data)+8 > len(data) {
			t.Fatalf("parts of %d+%d bytes from %d", len(k.Data), len(v.Data), len(data))
		}
	})
}

func TestSame(t *testing.T) {
	rewritten := `{"name":"test.rec","type":"record","fields":[{"name":"a","type":"int"}]}`
	if !Same(avroDef(recA), avroDef(rewritten)) {
		t.Error("a rewritten Avro definition is not the same schema")
	}
	if Same(avroDef(recAB), avroDef(recABDef)) {
		t.Error("definitions that differ in a default are the same schema")
	}
	if Same(avroDef(recA), Definition{Type: pb.Schema_Json, Data: []byte(recA)}) {
		t.Error("AVRO and JSON definitions are the same schema")
	}
	if !Same(Definition{Type: pb.Schema_String, Properties: map[string]string{"a": "b"}}, Definition{Type: pb.Schema_String}) {
		t.Error("properties make a STRING schema another schema")
	}
}
