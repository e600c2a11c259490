package config

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestParse(t *testing.T) {
	in := "# comment\n" +
		"  ! another\n" +
		"\n" +
		"a=1\n" +
		"b : two words  \n" +
		"c three\n" +
		"d=\n" +
		"long=first \\\n" +
		"     second\\\n" +
		"third\n" +
		"esc=x\\=y\\tz\\u00e9\\\\\n" +
		"key\\ with\\:sep=v\r\n" +
		"cr=1\r" +
		"dup=1\n" +
		"dup=2\n" +
		"   indented=yes\n" +
		"# not a \\\n" +
		"after=comment\n" +
		"tail=x\\"
	got, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{"a", "1", 4}, {"b", "two words", 5}, {"c", "three", 6}, {"d", "", 7},
		{"long", "first secondthird", 8}, {"esc", "x=y\tzé\\", 11}, {"key with:sep", "v", 12},
		{"cr", "1", 13}, {"dup", "1", 14}, {"dup", "2", 15}, {"indented", "yes", 16},
		{"after", "comment", 18}, {"tail", "x", 19},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{"a=\\u12\n", "a=\\uzzzz\n", "=v\n", ":v\n"} {
		_, err := Parse(strings.NewReader(in))
		var se *SyntaxError
		if !errors.As(err, &se) || se.Line != 1 {
			t.Errorf("%q: got %v, want a line-1 SyntaxError", in, err)
		}
	}
	if _, err := Parse(strings.NewReader(strings.Repeat("x", MaxFileSize+1))); !errors.Is(err, ErrTooLarge) {
		t.Errorf("large file: got %v", err)
	}
}

type testFlags struct {
	fs       *pflag.FlagSet
	listen   string
	ensemble int
	dedupOff bool
	ttl      time.Duration
	secret   string
	roles    []string
}

func newTestFlags() *testFlags {
	tf := &testFlags{fs: pflag.NewFlagSet("t", pflag.ContinueOnError)}
	tf.fs.StringVar(&tf.listen, "listen", "127.0.0.1:6650", "")
	tf.fs.IntVar(&tf.ensemble, "ensemble", 2, "")
	tf.fs.BoolVar(&tf.dedupOff, "disable-deduplication", false, "")
	tf.fs.DurationVar(&tf.ttl, "session-ttl", 10*time.Second, "")
	tf.fs.StringVar(&tf.secret, "token-secret-key", "", "")
	tf.fs.StringSliceVar(&tf.roles, "super-user-roles", nil, "")
	tf.fs.String("config", "", "")
	return tf
}

var testKeys = []Key{
	{Name: "bindAddress"},
	{Name: "brokerServicePort", Flag: "listen", Map: func(v string, get func(string) (string, bool)) (string, error) {
		h, _ := get("bindAddress")
		if h == "" {
			h = "0.0.0.0"
		}
		return h + ":" + v, nil
	}},
	{Name: "managedLedgerDefaultEnsembleSize", Flag: "ensemble"},
	{Name: "brokerDeduplicationEnabled", Flag: "disable-deduplication", Map: Not},
	{Name: "zooKeeperSessionTimeoutMillis", Flag: "session-ttl", Map: Millis},
	{Name: "tokenSecretKey", Flag: "token-secret-key", Secret: true},
	{Name: "superUserRoles", Flag: "super-user-roles"},
}

func TestApply(t *testing.T) {
	tf := newTestFlags()
	if err := tf.fs.Parse([]string{"--ensemble", "5"}); err != nil {
		t.Fatal(err)
	}
	es, err := Parse(strings.NewReader("bindAddress=10.0.0.1\nbrokerServicePort=7000\n" +
		"managedLedgerDefaultEnsembleSize=3\nbrokerDeduplicationEnabled=false\nzooKeeperSessionTimeoutMillis=2500\n" +
		"tokenSecretKey=data:;base64,c2VjcmV0\nsuperUserRoles=admin,ops\nfoo=1\nbar=\nfoo=2\nconfig=x\n" +
		"session-ttl=1h\n"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Apply(tf.fs, "f.conf", es, testKeys)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"bar", "config", "foo"}; !reflect.DeepEqual(res.Ignored, want) {
		t.Errorf("ignored %v, want %v", res.Ignored, want)
	}
	if e := res.From["listen"]; e.Key != "brokerServicePort" || e.Line != 2 {
		t.Errorf("listen set by %+v", e)
	}
	if _, ok := res.From["ensemble"]; ok {
		t.Error("ensemble came from the command line, not the file")
	}
	if tf.listen != "10.0.0.1:7000" || tf.ensemble != 5 || !tf.dedupOff || tf.ttl != time.Hour ||
		tf.secret != "data:;base64,c2VjcmV0" || !reflect.DeepEqual(tf.roles, []string{"admin", "ops"}) {
		t.Errorf("got %+v", *tf)
	}
	// session-ttl (a flag name) came after zooKeeperSessionTimeoutMillis: file order, each
	// key once, so the later line wins only because it is visited later.

	var buf bytes.Buffer
	if err := Print(&buf, tf.fs, testKeys); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	want := "listen=10.0.0.1:7000\nmanagedLedgerDefaultEnsembleSize=5\nsession-ttl=1h0m0s\nsuperUserRoles=admin,ops\ntokenSecretKey=******\n"
	if !strings.Contains(out, want) || strings.Contains(out, "c2VjcmV0") {
		t.Errorf("print:\n%s", out)
	}
	// What Print writes, Apply reads back (secrets aside).
	tf2 := newTestFlags()
	es2, err := Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(tf2.fs, "", es2, testKeys); err != nil {
		t.Fatal(err)
	}
	if tf2.listen != tf.listen || tf2.ensemble != 5 || tf2.ttl != time.Hour || !tf2.dedupOff {
		t.Errorf("round trip: %+v", *tf2)
	}
}

func TestApplyErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"x=1\nmanagedLedgerDefaultEnsembleSize=three\n", `f.conf:2: key managedLedgerDefaultEnsembleSize: strconv.ParseInt: parsing "three"`},
		{"brokerDeduplicationEnabled=maybe\n", "f.conf:1: key brokerDeduplicationEnabled: want true or false"},
		{"zooKeeperSessionTimeoutMillis=-5\n", "f.conf:1: key zooKeeperSessionTimeoutMillis: want a non-negative number of milliseconds"},
		{"ensemble=x\n", "f.conf:1: key ensemble:"},
	} {
		es, err := Parse(strings.NewReader(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Apply(newTestFlags().fs, "f.conf", es, testKeys)
		var ke *KeyError
		if !errors.As(err, &ke) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.in, err, tc.want)
		}
	}
	// A secret's bad value is not echoed.
	tf := newTestFlags()
	tf.fs.Int("secret-int", 0, "")
	es, _ := Parse(strings.NewReader("s=hunter2\n"))
	_, err := Apply(tf.fs, "", es, []Key{{Name: "s", Flag: "secret-int", Secret: true}})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("secret error: %v", err)
	}
}

// FuzzParse: Parse never panics, and what it returns survives a Print-style round trip.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"a=1\n", "# c\nb : x \\\n  y\n", "k\\ey=\\u00e9\\t\r\nz", "=\n", "a=\\u12"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		es, err := Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		var b strings.Builder
		for _, e := range es {
			if e.Key == "" {
				t.Fatalf("empty key from %q", in)
			}
			b.WriteString(escapeKey(e.Key) + "=" + escapeValue(e.Value) + "\n")
		}
		es2, err := Parse(strings.NewReader(b.String()))
		if err != nil {
			t.Fatalf("re-parse of %q: %v", b.String(), err)
		}
		if len(es2) != len(es) {
			t.Fatalf("round trip of %q: %d entries, want %d", in, len(es2), len(es))
		}
		for i := range es {
			if es[i].Key != es2[i].Key || es[i].Value != strings.TrimSpace(es2[i].Value) {
				t.Fatalf("round trip of %q: %+v, want %+v", in, es2[i], es[i])
			}
		}
	})
}

func escapeKey(k string) string {
	r := strings.NewReplacer(`\`, `\\`, "=", `\=`, ":", `\:`, " ", `\ `, "\t", `\t`, "\f", `\f`, "\n", `\n`, "\r", `\r`, "#", `\#`, "!", `\!`)
	return r.Replace(k)
}
