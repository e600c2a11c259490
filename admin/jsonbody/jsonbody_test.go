package jsonbody

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

type quota struct {
	LimitSize int64  `json:"limitSize" alias:"limit"`
	Policy    string `json:"policy"`
}

type body struct {
	N     int32            `json:"n"`
	U     *uint8           `json:"u,omitempty"`
	F     float64          `json:"f"`
	B     bool             `json:"b"`
	PB    *bool            `json:"pb"`
	S     string           `json:"s"`
	L     []int            `json:"l"`
	M     map[string]quota `json:"m"`
	Q     *quota           `json:"q"`
	Other any              `json:"other"`
}

func TestDecodeAccepts(t *testing.T) {
	var got body
	err := Decode([]byte(`{"n":" 42 ","u":"7","f":"1.5","b":"TRUE","pb":0,"s":12,"l":["1",2.9],
		"m":{"x":{"limit":"10","policy":"p","extra":true}},"q":{"limit":5,"limitSize":6},"other":{"k":"v"},"unknown":[1,{}]}`), &got)
	if err != nil {
		t.Fatal(err)
	}
	u, f := uint8(7), false
	want := body{N: 42, U: &u, F: 1.5, B: true, PB: &f, S: "12", L: []int{1, 2}, M: map[string]quota{"x": {10, "p"}},
		Q: &quota{LimitSize: 6}, Other: map[string]any{"k": "v"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	var n *int64
	if err := Decode([]byte(`""`), &n); err != nil || n != nil {
		t.Fatalf(`"" for a number: %v, %v; want null`, n, err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for in, reason := range map[string]string{
		`{"n":"x"}`:                "n: want an integer",
		`{"n":true}`:               "n: want an integer",
		`{"n":3000000000}`:         "n: 3000000000 is out of range",
		`{"u":-1}`:                 "u: -1 is out of range",
		`{"b":"yes"}`:              "b: want a boolean",
		`{"b":2}`:                  "b: want a boolean",
		`{"s":{}}`:                 "s: want a string",
		`{"l":1}`:                  "l: want an array",
		`{"l":[1,"a"]}`:            "l[1]: want an integer",
		`{"q":"x"}`:                "q: want an object",
		`{"m":{"x":{"limit":[]}}}`: "m.x.limitSize: want an integer",
		`{"n":1`:                   "malformed JSON",
		`{"n":1} {}`:               "malformed JSON",
		`[]`:                       "want an object",
	} {
		var b body
		err := Decode([]byte(in), &b)
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: %v, want an *Error naming %q", in, err, reason)
		}
	}
}

func TestNormalizeKeepsUnknown(t *testing.T) {
	got, err := Normalize([]byte(`{"n":"3","q":{"limit":"9","x":1},"kept":{"a":"1"},"nil":null}`), body{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kept":{"a":"1"},"n":3,"nil":null,"q":{"limitSize":9}}`
	if string(got) != want {
		t.Fatalf("Normalize: %s, want %s", got, want)
	}
	if _, err := Normalize([]byte(`{"n":"three"}`), body{}); err == nil || !strings.Contains(err.Error(), "n: want an integer") {
		t.Fatalf("Normalize of a bad member: %v", err)
	}
}
