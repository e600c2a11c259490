package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestConsumeScalableSendsCredentials: `consume topic://...` with --auth-plugin token sends
// its subscription PUT to --admin-url with the token (it used to go without credentials and
// get 401).
func TestConsumeScalableSendsCredentials(t *testing.T) {
	var mu sync.Mutex
	var got []string // "METHOD URI Authorization"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer abc" {
			http.Error(w, `{"reason":"no credentials"}`, http.StatusUnauthorized)
			return
		}
		// Stop the command here: the test is about the request, not a whole consumer.
		http.Error(w, `{"reason":"stop here"}`, http.StatusForbidden)
	}))
	defer srv.Close()
	var code int
	stderr := captureStderr(t, func() {
		code = run([]string{"consume", "topic://t/ns/x", "-s", "sub", "--admin-url", srv.URL,
			"--auth-plugin", "token", "--auth-params", "token:abc", "--url", "pulsar://127.0.0.1:1"})
	})
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || got[0] != "PUT /admin/v2/scalable/t/ns/x/subscription/sub Bearer abc" {
		t.Fatalf("admin requests %q", got)
	}
	if code != 1 || !strings.Contains(stderr, "stop here") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}
