package bookie_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/magnetar-io/magnetar/proto/bk"
)

// TestBookKeeperMetricNames: the bookie exports BookKeeper's metric names (the ones the
// BookKeeper and Pulsar dashboards query) with values that follow its own metrics.
func TestBookKeeperMetricNames(t *testing.T) {
	e := newEnv(t)
	b := e.start(t.TempDir(), nil)
	c := dial(t, b.Addr())
	wantStatus(t, do(t, c, addReq(1, 0, -1, "a")), bk.StatusOK)
	wantStatus(t, do(t, c, addReq(1, 1, 0, "b")), bk.StatusOK)
	wantStatus(t, do(t, c, readReq(1, 0)), bk.StatusOK)
	srv := httptest.NewServer(b.MetricsHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, m := range []string{
		"bookie_SERVER_STATUS 1", "bookie_ledger_writable_dirs 1", "bookie_read_cache_size 0",
		`bookkeeper_server_ADD_ENTRY_count{success="true"} 2`, `bookkeeper_server_ADD_ENTRY_REQUEST_count{success="true"} 2`,
		`bookkeeper_server_ADD_ENTRY_count{success="false"} 0`, `bookkeeper_server_READ_ENTRY_count{success="true"} 1`,
		`bookkeeper_server_READ_ENTRY_REQUEST{success="true",quantile="0.99"}`, `bookie_journal_JOURNAL_ADD_ENTRY_count{success="true"} 2`,
		`bookie_journal_JOURNAL_SYNC_count{success="true"}`, "bookie_WRITE_BYTES ", "bookie_write_cache_size ",
		"bookie_entries_count ", "bookie_ledgers_count ", "bookie_DELETED_LEDGER_COUNT 0", "bookie_READ_BYTES ",
	} {
		if !strings.Contains(string(body), m) {
			t.Errorf("metrics lack %q", m)
		}
	}
	if strings.Contains(string(body), "bookie_WRITE_BYTES 0") || strings.Contains(string(body), "bookie_READ_BYTES 0") {
		t.Error("the bytes added or read are not counted")
	}
}
