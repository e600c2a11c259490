package chaos

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDumpStats: the stats client writes each partition's stats and internal stats as the
// first admin URL that answers gives them, following the redirect to the owner; an admin
// URL that fails is noted and the next one tried.
func TestDumpStats(t *testing.T) {
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"from":"owner","path":"` + r.URL.Path + `"}`)) //nolint:errcheck // test server
	}))
	defer owner.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, owner.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer other.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // refuses connections
	out := filepath.Join(t.TempDir(), "stats.txt")
	s := ClientSpec{Role: roleStats, AdminURLs: []string{down.URL, other.URL}, Topic: "persistent://public/default/chaos",
		Partitions: 2, Out: out}
	if err := runClient(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		"== /admin/v2/persistent/public/default/chaos-partition-0/stats\n",
		`{"from":"owner","path":"/admin/v2/persistent/public/default/chaos-partition-1/internalStats"}`,
		down.URL + ": ", // noted, then the next URL
		other.URL + ": 200 OK\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stats.txt lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "== "); n != 4 {
		t.Errorf("%d sections, want 4 (2 partitions × stats, internalStats):\n%s", n, got)
	}
}
