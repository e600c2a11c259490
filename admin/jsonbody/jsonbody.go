// Package jsonbody decodes admin request bodies as Pulsar's admin API reads them: Jackson
// with Pulsar's ObjectMapperFactory settings (FAIL_ON_UNKNOWN_PROPERTIES off) and Jackson's
// default scalar coercions. Every admin body goes through Decode (package admin's handlers
// and broker/policy's policy bodies), so one set of rules holds everywhere:
//
//  1. Unknown fields are ignored (at every depth).
//  2. Numbers written as strings are numbers ("10240" → 10240, surrounding spaces
//     trimmed); a floating-point number for an integer is truncated (Jackson's
//     ACCEPT_FLOAT_AS_INT); "" for a number or boolean is null.
//  3. Booleans may be written "true"/"false" (any of Jackson's three casings) or as the
//     integers 0 and 1; strings take numbers and booleans as their text.
//  4. A field's older names (the `alias:"a,b"` struct tag, as Jackson's @JsonAlias) are
//     read when the field's own name is absent.
//  5. What Jackson refuses is refused (an *Error): malformed JSON, text that is not a number
//     for a number, an object or array for a scalar, a scalar for an object or array (Pulsar
//     does not turn on ACCEPT_SINGLE_VALUE_AS_ARRAY), a number out of the field's range.
//
// Values of types with their own UnmarshalJSON (and json.RawMessage, interface fields) are
// passed as they are: the type reads them.
package jsonbody

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// Error is a body Decode refuses: Path is where ("" for the body itself), Reason why.
type Error struct {
	Path, Reason string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Reason
	}
	return e.Path + ": " + e.Reason
}

// Decode decodes the JSON body b into v (a non-nil pointer) by the rules of the package
// comment. It is safe for concurrent use.
func Decode(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var raw any
	if err := d.Decode(&raw); err != nil {
		return &Error{Reason: "malformed JSON: " + err.Error()}
	}
	if d.More() {
		return &Error{Reason: "malformed JSON: data after the value"}
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("jsonbody: Decode needs a non-nil pointer, got %T", v)
	}
	c, err := coerce(raw, rv.Type().Elem(), "")
	if err != nil {
		return err
	}
	nb, err := json.Marshal(c)
	if err != nil {
		return &Error{Reason: err.Error()}
	}
	if err := json.Unmarshal(nb, v); err != nil {
		var te *json.UnmarshalTypeError
		if ok := asTypeError(err, &te); ok {
			return &Error{Path: te.Field, Reason: fmt.Sprintf("cannot read %s as %s", te.Value, te.Type)}
		}
		return &Error{Reason: err.Error()}
	}
	return nil
}

func asTypeError(err error, te **json.UnmarshalTypeError) bool {
	t, ok := err.(*json.UnmarshalTypeError)
	if ok {
		*te = t
	}
	return ok
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// coerce rewrites the decoded value x (UseNumber form) so that encoding/json reads it into
// a t as Jackson would read the original.
func coerce(x any, t reflect.Type, path string) (any, error) {
	if x == nil {
		return nil, nil
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || t.Implements(unmarshalerType) {
		return x, nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return coerce(x, t.Elem(), path)
	case reflect.Interface:
		return x, nil
	case reflect.Struct:
		m, ok := x.(map[string]any)
		if !ok {
			return nil, refuse(path, x, "an object")
		}
		return coerceStruct(m, t, path)
	case reflect.Map:
		m, ok := x.(map[string]any)
		if !ok {
			return nil, refuse(path, x, "an object")
		}
		out := make(map[string]any, len(m))
		for k, v := range m {
			c, err := coerce(v, t.Elem(), join(path, k))
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return x, nil // []byte: base64 text, as encoding/json reads it
		}
		l, ok := x.([]any)
		if !ok {
			return nil, refuse(path, x, "an array")
		}
		out := make([]any, len(l))
		for i, v := range l {
			c, err := coerce(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case reflect.Bool:
		return coerceBool(x, path)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return coerceInt(x, t, path)
	case reflect.Float32, reflect.Float64:
		return coerceFloat(x, path)
	case reflect.String:
		if reflect.PointerTo(t).Implements(textUnmarshalerType) {
			return x, nil
		}
		switch v := x.(type) {
		case string:
			return v, nil
		case json.Number:
			return v.String(), nil
		case bool:
			return strconv.FormatBool(v), nil
		}
		return nil, refuse(path, x, "a string")
	}
	return x, nil
}

// coerceStruct keeps the object's members that name a field of t (its json name, or an
// alias when the name is absent), each coerced to the field's type; the others are dropped.
func coerceStruct(m map[string]any, t reflect.Type, path string) (map[string]any, error) {
	out := map[string]any{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous && f.Tag.Get("json") == "" {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		v, ok := m[name]
		if !ok {
			for _, a := range strings.Split(f.Tag.Get("alias"), ",") {
				if v, ok = m[a]; ok && a != "" {
					break
				}
			}
		}
		if !ok {
			continue
		}
		c, err := coerce(v, f.Type, join(path, name))
		if err != nil {
			return nil, err
		}
		out[name] = c
	}
	return out, nil
}

func coerceBool(x any, path string) (any, error) {
	switch v := x.(type) {
	case bool:
		return v, nil
	case string:
		switch strings.TrimSpace(v) {
		case "true", "True", "TRUE":
			return true, nil
		case "false", "False", "FALSE":
			return false, nil
		case "":
			return nil, nil
		}
	case json.Number:
		switch v.String() {
		case "0":
			return false, nil
		case "1":
			return true, nil
		}
	}
	return nil, refuse(path, x, "a boolean")
}

func coerceInt(x any, t reflect.Type, path string) (any, error) {
	var s string
	switch v := x.(type) {
	case json.Number:
		s = v.String()
	case string:
		s = strings.TrimSpace(v)
		if s == "" {
			return nil, nil
		}
		if _, err := strconv.ParseInt(s, 10, 64); err != nil {
			if _, err := strconv.ParseUint(s, 10, 64); err != nil {
				return nil, refuse(path, x, "an integer")
			}
		}
	default:
		return nil, refuse(path, x, "an integer")
	}
	if strings.ContainsAny(s, ".eE") { // a floating-point number: truncated, as Jackson does
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, refuse(path, x, "an integer")
		}
		s = strconv.FormatFloat(math.Trunc(f), 'f', -1, 64)
	}
	n := reflect.New(t).Elem()
	var err error
	if n.CanInt() {
		var i int64
		if i, err = strconv.ParseInt(s, 10, t.Bits()); err == nil {
			n.SetInt(i)
		}
	} else {
		var u uint64
		if u, err = strconv.ParseUint(s, 10, t.Bits()); err == nil {
			n.SetUint(u)
		}
	}
	if err != nil {
		return nil, &Error{Path: path, Reason: fmt.Sprintf("%s is out of range of %s", s, t.Kind())}
	}
	return json.Number(s), nil
}

func coerceFloat(x any, path string) (any, error) {
	switch v := x.(type) {
	case json.Number:
		return v, nil
	case string:
		s := strings.TrimSpace(v)
		if s == "" {
			return nil, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return json.Number(s), nil
		}
	}
	return nil, refuse(path, x, "a number")
}

func refuse(path string, x any, want string) error {
	var got string
	switch v := x.(type) {
	case map[string]any:
		got = "an object"
	case []any:
		got = "an array"
	case string:
		got = strconv.Quote(v)
	default:
		b, _ := json.Marshal(v)
		got = string(b)
	}
	return &Error{Path: path, Reason: fmt.Sprintf("want %s, got %s", want, got)}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// Normalize rewrites the JSON body b as Decode reads it into a value of schema's type (a
// struct, or a pointer to one) and returns it, except that the members of b's top-level
// object the struct does not know are kept as they are: for records that keep what they do
// not interpret (namespace policies). A refused body is an *Error, as Decode's.
func Normalize(b []byte, schema any) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var raw any
	if err := d.Decode(&raw); err != nil {
		return nil, &Error{Reason: "malformed JSON: " + err.Error()}
	}
	if d.More() {
		return nil, &Error{Reason: "malformed JSON: data after the value"}
	}
	t := reflect.TypeOf(schema)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	m, ok := raw.(map[string]any)
	if !ok || t.Kind() != reflect.Struct {
		return nil, refuse("", raw, "an object")
	}
	known, err := coerceStruct(m, t, "")
	if err != nil {
		return nil, err
	}
	for k, v := range m {
		if _, has := known[k]; !has && !knows(t, k) {
			known[k] = v
		}
	}
	return json.Marshal(known)
}

// knows reports whether the struct t has a field named name (by its json name or an
// alias): a member coerceStruct dropped because it was null or aliased is not kept.
func knows(t reflect.Type, name string) bool {
	for _, f := range reflect.VisibleFields(t) {
		n, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if n == name {
			return true
		}
		for _, a := range strings.Split(f.Tag.Get("alias"), ",") {
			if a != "" && a == name {
				return true
			}
		}
	}
	return false
}
