package schema

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/hamba/avro/v2"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

var (
	// ErrInvalid: a schema definition (or a strategy or type name) that is not valid.
	ErrInvalid = api.ErrInvalidSchema
	// ErrIncompatible: a schema that the topic's compatibility strategy refuses.
	ErrIncompatible = api.ErrIncompatibleSchema
)

// Definition is one schema: its type, its definition bytes and its properties.
type Definition struct {
	Type       pb.Schema_Type
	Data       []byte
	Properties map[string]string
}

// maxDepth bounds the nesting of KEY_VALUE definitions (a key or value may itself be a
// KEY_VALUE).
const maxDepth = 8

// Validate checks that d is a well-formed definition of its type (see the package doc).
func Validate(d Definition) error {
	return validate(d, 0)
}

func validate(d Definition, depth int) error {
	switch {
	case usesAvro(d.Type):
		if _, err := parseAvro(d.Data); err != nil {
			if d.Type == pb.Schema_Json && isJSONSchema(d.Data) {
				return nil
			}
			return fmt.Errorf("%w: %s definition: %v", ErrInvalid, TypeName(d.Type), err)
		}
	case d.Type == pb.Schema_KeyValue:
		if depth >= maxDepth {
			return fmt.Errorf("%w: KEY_VALUE definitions nested too deep", ErrInvalid)
		}
		k, v, err := splitKeyValue(d)
		if err != nil {
			return err
		}
		if err := validate(k, depth+1); err != nil {
			return fmt.Errorf("key schema: %w", err)
		}
		if err := validate(v, depth+1); err != nil {
			return fmt.Errorf("value schema: %w", err)
		}
	}
	return nil
}

// parseAvro parses an Avro schema with a name cache of its own.
func parseAvro(b []byte) (avro.Schema, error) {
	return avro.ParseBytesWithCache(b, "", &avro.SchemaCache{})
}

// isJSONSchema reports whether b is a JSON-Schema document (an object with a "$schema"
// member or of "type": "object"), the JSON definition old Java clients registered.
func isJSONSchema(b []byte) bool {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	_, s := m["$schema"]
	return s || m["type"] == "object"
}

// splitKeyValue decodes a KEY_VALUE definition: the key and value definitions as
// [4-byte big-endian length][bytes] twice (length -1: empty), their types named by the
// properties key.schema.type and value.schema.type, their properties JSON-encoded in
// key.schema.properties and value.schema.properties.
func splitKeyValue(d Definition) (Definition, Definition, error) {
	b := d.Data
	part := func(what string) ([]byte, error) {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: KEY_VALUE %s schema length missing", ErrInvalid, what)
		}
		n := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		if n < 0 {
			return nil, nil
		}
		if int(n) > len(b) {
			return nil, fmt.Errorf("%w: KEY_VALUE %s schema of %d bytes, %d left", ErrInvalid, what, n, len(b))
		}
		p := b[:n]
		b = b[n:]
		return p, nil
	}
	var k, v Definition
	var err error
	if k.Data, err = part("key"); err != nil {
		return k, v, err
	}
	if v.Data, err = part("value"); err != nil {
		return k, v, err
	}
	for _, x := range []struct {
		def    *Definition
		prefix string
	}{{&k, "key"}, {&v, "value"}} {
		if name, ok := d.Properties[x.prefix+".schema.type"]; ok {
			if x.def.Type, err = ParseType(name); err != nil {
				return k, v, fmt.Errorf("%s schema: %w", x.prefix, err)
			}
		} else {
			x.def.Type = pb.Schema_None
		}
		if p := d.Properties[x.prefix+".schema.properties"]; p != "" {
			if err := json.Unmarshal([]byte(p), &x.def.Properties); err != nil {
				return k, v, fmt.Errorf("%w: %s schema properties: %v", ErrInvalid, x.prefix, err)
			}
		}
	}
	return k, v, nil
}

// Check decides whether next may be added after the existing versions (oldest first) under
// strategy s (Undefined is taken as Full). It returns nil or an error wrapping
// ErrIncompatible (or ErrInvalid for a definition that cannot be parsed).
func Check(existing []Definition, next Definition, s Strategy) error {
	if s == Undefined {
		s = Full
	}
	if s == AlwaysCompatible || len(existing) == 0 {
		return nil
	}
	if s == AlwaysIncompatible {
		return fmt.Errorf("%w: Schema compatibility strategy is ALWAYS_INCOMPATIBLE", ErrIncompatible)
	}
	against := existing
	if !s.Transitive() {
		against = existing[len(existing)-1:]
	}
	for _, e := range against {
		if e.Type != next.Type {
			return fmt.Errorf("%w: Incompatible schema: exists schema type %s, new schema type %s",
				ErrIncompatible, TypeName(e.Type), TypeName(next.Type))
		}
	}
	return checkSameType(against, next, s, 0)
}

// CheckConsumer decides whether a consumer with schema next may read a topic whose
// versions are existing (oldest first), as Pulsar's checkConsumerCompatibility.
func CheckConsumer(existing []Definition, next Definition, s Strategy) error {
	if s == Undefined {
		s = Full
	}
	switch s {
	case AlwaysCompatible:
		return nil
	case Backward, Forward, ForwardTransitive, Full:
		return Check(existing, next, Backward)
	}
	return Check(existing, next, s)
}

// checkSameType checks next against the definitions of against (all of next's type).
func checkSameType(against []Definition, next Definition, s Strategy, depth int) error {
	switch {
	case usesAvro(next.Type):
		return checkAvro(against, next, s)
	case next.Type == pb.Schema_KeyValue:
		if depth >= maxDepth {
			return fmt.Errorf("%w: KEY_VALUE definitions nested too deep", ErrInvalid)
		}
		nk, nv, err := splitKeyValue(next)
		if err != nil {
			return err
		}
		var ks, vs []Definition
		for _, e := range against {
			ek, ev, err := splitKeyValue(e)
			if err != nil {
				return err
			}
			if ek.Type != nk.Type || ev.Type != nv.Type {
				return fmt.Errorf("%w: KEY_VALUE schema types %s/%s, new %s/%s", ErrIncompatible,
					TypeName(ek.Type), TypeName(ev.Type), TypeName(nk.Type), TypeName(nv.Type))
			}
			ks, vs = append(ks, ek), append(vs, ev)
		}
		if err := checkSameType(ks, nk, s, depth+1); err != nil {
			return fmt.Errorf("key schema: %w", err)
		}
		if err := checkSameType(vs, nv, s, depth+1); err != nil {
			return fmt.Errorf("value schema: %w", err)
		}
	}
	return nil
}

// checkAvro applies Avro schema resolution: under Backward next must read what every
// definition of against wrote, under Forward each of them must read what next writes.
func checkAvro(against []Definition, next Definition, s Strategy) error {
	ns, err := parseAvro(next.Data)
	if err != nil {
		if next.Type == pb.Schema_Json && isJSONSchema(next.Data) {
			return checkJSONSchema(against, next)
		}
		return fmt.Errorf("%w: new schema: %v", ErrInvalid, err)
	}
	canRead := s == Backward || s == BackwardTransitive || s == Full || s == FullTransitive
	canBeRead := s == Forward || s == ForwardTransitive || s == Full || s == FullTransitive
	compat := avro.NewSchemaCompatibility()
	for _, e := range against {
		es, err := parseAvro(e.Data)
		if err != nil {
			if e.Type == pb.Schema_Json && isJSONSchema(e.Data) {
				continue // an old JSON-Schema definition: the Avro form that replaces it is accepted
			}
			return fmt.Errorf("%w: existing schema: %v", ErrInvalid, err)
		}
		if canRead {
			if err := compat.Compatible(ns, es); err != nil {
				return fmt.Errorf("%w: new schema cannot read data written with an existing schema (%s): %v",
					ErrIncompatible, s, err)
			}
		}
		if canBeRead {
			if err := compat.Compatible(es, ns); err != nil {
				return fmt.Errorf("%w: an existing schema cannot read data written with the new schema (%s): %v",
					ErrIncompatible, s, err)
			}
		}
	}
	return nil
}

// checkJSONSchema compares JSON-Schema definitions as Pulsar did before JSON schemas were
// Avro schemas: compatible only with identical documents (or no JSON-Schema ones).
func checkJSONSchema(against []Definition, next Definition) error {
	for _, e := range against {
		if string(e.Data) != string(next.Data) {
			return fmt.Errorf("%w: JSON-Schema definitions differ", ErrIncompatible)
		}
	}
	return nil
}

// Same reports whether a and b are the same schema for registration: the same type and
// definition, Avro definitions compared as parsed schemas (so that a client's rewriting of
// names, spacing or member order does not make a new version), properties ignored, as
// Pulsar's getSchemaVersionBySchemaData.
func Same(a, b Definition) bool {
	if a.Type != b.Type {
		return false
	}
	if string(a.Data) == string(b.Data) {
		return true
	}
	if !usesAvro(a.Type) {
		return false
	}
	na, ea := normalAvro(a.Data)
	nb, eb := normalAvro(b.Data)
	return ea == nil && eb == nil && na == nb
}

// normalAvro is the JSON form of a parsed Avro schema (full names, defaults kept).
func normalAvro(b []byte) (string, error) {
	s, err := parseAvro(b)
	if err != nil {
		return "", err
	}
	j, err := json.Marshal(s)
	return string(j), err
}
