package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// captureStderr runs f with os.Stderr redirected and returns what was written.
func captureStderr(t *testing.T, f func()) string { return capture(t, &os.Stderr, f) }

// captureStdout runs f with os.Stdout redirected and returns what was written.
func captureStdout(t *testing.T, f func()) string { return capture(t, &os.Stdout, f) }

// capture runs f with *file redirected to a pipe and returns what was written. It swaps a
// process-wide variable: not for tests that run etcd or a broker in process (runChild).
func capture(t *testing.T, file **os.File, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := *file
	*file = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	f()
	*file = old
	w.Close()
	return <-done
}

// TestToolsBadInput: bad flags and arguments of the admin and client tools exit 2 with a
// message, before any network I/O (the URLs point nowhere).
func TestToolsBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "--url", "ftp://x", "tenants", "list"}, "--url must be http"},
		{[]string{"admin", "-o", "yaml", "tenants", "list"}, "--output must be text or json"},
		{[]string{"admin", "topics", "list", "no-slash"}, "want tenant/namespace"},
		{[]string{"admin", "topics", "stats"}, "accepts 1 arg(s)"},
		{[]string{"admin", "topics", "stats", "a/b/c/d"}, "v1 names"},
		{[]string{"admin", "topics", "stats", "nope://a/b/c"}, "unknown domain"},
		{[]string{"admin", "topics", "create-partitioned-topic", "t", "-p", "0"}, "at least 1"},
		{[]string{"admin", "topics", "create-partitioned-topic", "t"}, `required flag(s) "partitions"`},
		{[]string{"admin", "topics", "create-partitioned-topic", "t-partition-1", "-p", "2"}, "partition name"},
		{[]string{"admin", "topics", "bogus"}, "unknown command"},
		{[]string{"admin", "tenants", "create", "bad name"}, "invalid name"},
		{[]string{"admin", "subscriptions", "create", "t"}, "--subscription is required"},
		{[]string{"admin", "subscriptions", "create", "t", "-s", "s", "-m", "1:x"}, "not a non-negative number"},
		{[]string{"admin", "subscriptions", "reset-cursor", "t", "-s", "s"}, "exactly one of"},
		{[]string{"admin", "subscriptions", "reset-cursor", "t", "-s", "s", "-t", "yesterday"}, "RFC 3339"},
		{[]string{"admin", "subscriptions", "skip", "t", "-s", "s", "-n", "-1"}, "must not be negative"},
		{[]string{"admin", "scalable-topics", "seek", "topic://a/b/c", "s", "x"}, "want a number"},
		{[]string{"admin", "scalable-topics", "reset-cursor", "topic://a/b/c", "s", "0", "-m", "latest"}, "earliest or LEDGER:ENTRY"},
		{[]string{"admin", "scalable-topics", "seek", "topic://a/b/c", "s", "0", "-m", "1:x"}, "not a non-negative number"},
		{[]string{"admin", "subscriptions", "skip", "t", "-s", "s", "-n", "x"}, "invalid argument"},
		{[]string{"standalone", "--journal-prepare-rate", "-1"}, "--journal-prepare-rate must not be negative"},
		{[]string{"bookie", "--data-dir", "d", "--journal-prepare-rate", "-1"}, "--journal-prepare-rate must not be negative"},
		{[]string{"autorecovery", "--audit-interval", "0"}, "--audit-interval must be positive"},
		{[]string{"bookie", "--data-dir", "d", "--autorecovery-audit-interval", "-1s"}, "--autorecovery-audit-interval must be positive"},
		{[]string{"produce", "t"}, "at least one message"},
		{[]string{"produce", "t", "-m", "x", "-n", "0"}, "-n must be at least 1"},
		{[]string{"produce", "t", "-m", "x", "-p", "novalue"}, "want key=value"},
		{[]string{"produce", "--url", "http://x:1", "t", "-m", "x"}, "want pulsar://host:port"},
		{[]string{"consume", "t"}, "--subscription is required"},
		{[]string{"consume", "t", "-s", "s", "-t", "Bogus"}, "unknown subscription type"},
		{[]string{"consume", "t", "-s", "s", "-p", "middle"}, "Earliest or Latest"},
		{[]string{"perf", "produce", "t", "--size", "0"}, "--size must be between"},
		{[]string{"perf", "produce", "t", "--rate", "-1"}, "--rate must not be negative"},
		{[]string{"perf", "produce", "t", "--duration", "0"}, "--duration must be positive"},
		{[]string{"perf", "produce", "t", "--max-pending", "0"}, "--max-pending must be at least 1"},
		{[]string{"perf", "consume", "t", "--consumers", "2"}, "need a Shared or Key_Shared"},
		{[]string{"perf", "consume", "t", "-t", "Nope"}, "unknown subscription type"},
		{[]string{"perf", "e2e", "t", "--size", "4"}, "--size must be between 8"},
		{[]string{"perf", "produce"}, "accepts 1 arg(s)"},
		{[]string{"perf", "disk", "--dir", ".", "--journals", "3"}, "--journals and --copies need --rate"},
		{[]string{"perf", "disk", "--dir", ".", "--rate", "10", "--journals", "2", "--copies", "3"}, "1 <= --copies <= --journals"},
		{[]string{"perf", "disk", "--dir", ".", "--rate", "10", "--group", "4"}, "--group is for the throughput mode"},
		{[]string{"perf", "disk", "--dir", ".", "--rate", "-1"}, "--rate must not be negative"},
	} {
		var code int
		stderr := captureStderr(t, func() { code = run(tc.args) })
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with %q", tc.args, code, firstLine(stderr), tc.want)
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// TestAdminServerErrors: an error answer of the server is shown with its reason and exits 1.
func TestAdminServerErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/admin/v2/persistent/public/default/nope/stats" {
			t.Errorf("path %s", r.URL.Path)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"reason":"Topic persistent://public/default/nope not found"}`)
	}))
	defer srv.Close()
	var code int
	stderr := captureStderr(t, func() { code = run([]string{"admin", "--url", srv.URL, "topics", "stats", "nope"}) })
	if code != 1 || !strings.Contains(stderr, "404 Not Found: Topic persistent://public/default/nope not found") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}
