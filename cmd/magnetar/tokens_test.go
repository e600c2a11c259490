package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runOut(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	stderr = captureStderr(t, func() { stdout = captureStdout(t, func() { code = run(args) }) })
	return code, stdout, stderr
}

// TestTokens: keys and tokens made by `magnetar tokens` verify, in each key form; a token
// made the way pulsar tokens (jjwt) makes it — header {"alg":"HS256"} only, key = the
// secret file's raw bytes — validates too.
func TestTokens(t *testing.T) {
	dir := t.TempDir()
	sk := filepath.Join(dir, "secret.key")
	if code, _, errs := runOut(t, "tokens", "create-secret-key", "--output", sk); code != 0 {
		t.Fatal(errs)
	}
	if b, _ := os.ReadFile(sk); len(b) != 32 {
		t.Fatalf("secret key of %d bytes", len(b))
	}
	code, tok, errs := runOut(t, "tokens", "create", "--secret-key", "file://"+sk, "-s", "alice", "-e", "1h")
	if code != 0 {
		t.Fatal(errs)
	}
	tokFile := filepath.Join(dir, "tok")
	os.WriteFile(tokFile, []byte(tok), 0o600) // with its trailing newline
	if code, out, errs := runOut(t, "tokens", "validate", "--secret-key", "file://"+sk, "-f", tokFile); code != 0 || !strings.Contains(out, `"sub":"alice"`) {
		t.Fatalf("validate: %d %q %q", code, out, errs)
	}
	if code, out, _ := runOut(t, "tokens", "show", strings.TrimSpace(tok)); code != 0 || !strings.HasPrefix(out, `{"alg":"HS256","typ":"JWT"}`+"\n---\n") {
		t.Fatalf("show: %d %q", code, out)
	}

	// A pulsar-tokens-style token, built by hand.
	key, _ := os.ReadFile(sk)
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(`{"alg":"HS256"}`)) + "." + enc.EncodeToString([]byte(`{"sub":"test-user"}`))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(signing))
	jj := signing + "." + enc.EncodeToString(mac.Sum(nil))
	if code, out, errs := runOut(t, "tokens", "validate", "--secret-key", "data:;base64,"+base64.StdEncoding.EncodeToString(key), jj); code != 0 || !strings.Contains(out, "test-user") {
		t.Fatalf("pulsar-style token: %d %q %q", code, out, errs)
	}

	for _, alg := range []string{"RS256", "ES256"} {
		priv, pub := filepath.Join(dir, alg+".key"), filepath.Join(dir, alg+".pub")
		if code, _, errs := runOut(t, "tokens", "create-key-pair", "-a", alg, "--output-private-key", priv, "--output-public-key", pub); code != 0 {
			t.Fatal(errs)
		}
		code, tok, errs := runOut(t, "tokens", "create", "--private-key", "file://"+priv, "-s", "svc")
		if code != 0 {
			t.Fatal(errs)
		}
		if code, out, _ := runOut(t, "tokens", "show", strings.TrimSpace(tok)); !strings.Contains(out, `"alg":"`+alg+`"`) {
			t.Errorf("%s: show %d %q", alg, code, out)
		}
		if code, _, errs := runOut(t, "tokens", "validate", "--public-key", "file://"+pub, strings.TrimSpace(tok)); code != 0 {
			t.Errorf("%s: validate: %s", alg, errs)
		}
		// The wrong kind of key: refused, exit 1.
		if code, _, errs := runOut(t, "tokens", "validate", "--secret-key", "file://"+sk, strings.TrimSpace(tok)); code != 1 || !strings.Contains(errs, "authentication failed") {
			t.Errorf("%s with the secret key: %d %q", alg, code, errs)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tokens", "create", "-s", "x"}, "exactly one of --secret-key and --private-key"},
		{[]string{"tokens", "create", "--secret-key", "file://" + sk}, "--subject is required"},
		{[]string{"tokens", "create", "--secret-key", "file://" + sk, "-s", "x", "-e", "soon"}, "--expiry-time"},
		{[]string{"tokens", "create-secret-key", "-a", "RS256"}, "want HS256"},
		{[]string{"tokens", "show"}, "give the token"},
	} {
		if code, _, errs := runOut(t, tc.args...); code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: %d %q", tc.args, code, firstLine(errs))
		}
	}
}

func TestParseRelativeTime(t *testing.T) {
	for in, want := range map[string]string{"30s": "30s", "10m": "10m0s", "2h": "2h0m0s", "1d": "24h0m0s", "1w": "168h0m0s", "1y": "8760h0m0s", "45": "45s"} {
		d, err := parseRelativeTime(in)
		if err != nil || d.String() != want {
			t.Errorf("%s: %v %v", in, d, err)
		}
	}
	for _, bad := range []string{"", "x", "0s", "-1h", "1q"} {
		if _, err := parseRelativeTime(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
