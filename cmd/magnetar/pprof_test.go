package main

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/magnetar-io/magnetar/auth"
)

// TestPprofBehindAuth: with authentication on, /debug/pprof answers 401 without
// credentials or with a bad token, 403 to a role that is not a superuser, and serves the
// superusers; with authentication off it is open, as before.
func TestPprofBehindAuth(t *testing.T) {
	secret := []byte("pprof test secret key of 32 byte")
	a, err := auth.New(auth.Config{Enabled: true, Providers: []string{"token"},
		Token: auth.TokenConfig{SecretKey: base64.StdEncoding.EncodeToString(secret)}})
	if err != nil {
		t.Fatal(err)
	}
	token := func(role string) string {
		s, err := auth.CreateToken(jwt.SigningMethodHS256, secret, role, time.Now().Add(time.Hour), nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	get := func(base, path, tok string) (int, string) {
		req, _ := http.NewRequest("GET", base+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	on := http.NewServeMux()
	mountPprof(on, a, []string{"admin"})
	srv := httptest.NewServer(on)
	defer srv.Close()
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1",
		"/debug/pprof/trace?seconds=1"} {
		for _, tc := range []struct {
			tok    string
			status int
		}{{"", 401}, {token("admin") + "x", 401}, {token("alice"), 403}} {
			if code, body := get(srv.URL, path, tc.tok); code != tc.status || !strings.Contains(body, `"reason"`) {
				t.Errorf("GET %s with %.10q: %d %.100s, want %d with a reason", path, tc.tok, code, body, tc.status)
			}
		}
	}
	if code, body := get(srv.URL, "/debug/pprof/", token("admin")); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("superuser: %d %.100s", code, body)
	}
	if code, body := get(srv.URL, "/debug/pprof/goroutine?debug=1", token("admin")); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("superuser, a profile: %d %.100s", code, body)
	}
	if code, _ := get(srv.URL, "/debug/pprof/cmdline", token("admin")); code == 200 {
		t.Error("the command line (which can hold a key) is served")
	}

	off := http.NewServeMux()
	mountPprof(off, nil, nil)
	open := httptest.NewServer(off)
	defer open.Close()
	if code, body := get(open.URL, "/debug/pprof/", ""); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("authentication off: %d %.100s", code, body)
	}
}
