package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/magnetar-io/magnetar/broker/api"
)

// TestAdminOffloadCommands: the tiered-storage verbs send Pulsar's REST requests; topics
// offload -s picks pulsar-admin's message id from the internal stats; offload-status -w
// waits out RUNNING.
func TestAdminOffloadCommands(t *testing.T) {
	var sent []string
	statuses := []string{"RUNNING", "RUNNING", "SUCCESS"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		sent = append(sent, r.Method+" "+r.URL.RequestURI()+" "+strings.TrimSpace(string(b)))
		switch {
		case r.Method == "GET" && strings.HasSuffix(r.URL.Path, "/internalStats"):
			io.WriteString(w, `{"ledgers":[{"ledgerId":3,"size":100},{"ledgerId":4,"size":100},{"ledgerId":7,"size":100},{"ledgerId":9,"size":10}]}`)
		case r.Method == "GET" && strings.HasSuffix(r.URL.Path, "/offload"):
			st := statuses[0]
			if len(statuses) > 1 {
				statuses = statuses[1:]
			}
			io.WriteString(w, `{"status":"`+st+`","lastError":""}`)
		case r.Method == "GET":
			io.WriteString(w, `-1`)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"namespaces", "set-offload-threshold", "public/default", "-s", "10M"},
			[]string{`POST /admin/v2/namespaces/public/default/offloadThreshold 10485760`}},
		{[]string{"namespaces", "set-offload-threshold", "public/default", "-s", "-1", "--time", "1h"},
			[]string{`POST /admin/v2/namespaces/public/default/offloadThreshold -1`, `POST /admin/v2/namespaces/public/default/offloadThresholdInSeconds 3600`}},
		{[]string{"namespaces", "get-offload-threshold", "public/default"},
			[]string{`GET /admin/v2/namespaces/public/default/offloadThreshold `, `GET /admin/v2/namespaces/public/default/offloadThresholdInSeconds `}},
		{[]string{"namespaces", "set-offload-deletion-lag", "a/b", "-l", "10m"}, []string{`POST /admin/v2/namespaces/a/b/offloadDeletionLagMs 600000`}},
		{[]string{"namespaces", "get-offload-deletion-lag", "a/b"}, []string{`GET /admin/v2/namespaces/a/b/offloadDeletionLagMs `}},
		{[]string{"namespaces", "clear-offload-deletion-lag", "a/b"}, []string{`DELETE /admin/v2/namespaces/a/b/offloadDeletionLagMs `}},
		{[]string{"namespaces", "set-offload-policies", "a/b", "-d", "aws-s3", "-b", "bk", "-t", "1G", "--offloadAfterElapsed", "0", "--offloadedReadPriority", "bookkeeper-first"},
			[]string{`POST /admin/v2/namespaces/a/b/offloadPolicies {"managedLedgerOffloadBucket":"bk","managedLedgerOffloadDeletionLagInMillis":0,"managedLedgerOffloadDriver":"aws-s3","managedLedgerOffloadThresholdInBytes":1073741824,"managedLedgerOffloadedReadPriority":"bookkeeper-first"}`}},
		{[]string{"namespaces", "remove-offload-policies", "a/b"}, []string{`DELETE /admin/v2/namespaces/a/b/removeOffloadPolicies `}},
		{[]string{"topics", "get-offload-policies", "t", "--applied"}, []string{`GET /admin/v2/persistent/public/default/t/offloadPolicies?applied=true `}},
		{[]string{"topics", "remove-offload-policies", "t"}, []string{`DELETE /admin/v2/persistent/public/default/t/offloadPolicies `}},
		// Newest first, ledgers 9, 7 hold 110 bytes <= 150; with 4 they exceed it: ledgers
		// before 7 are offloaded (pulsar-admin's findFirstLedgerWithinThreshold).
		{[]string{"topics", "offload", "t", "-s", "150"}, []string{`GET /admin/v2/persistent/public/default/t/internalStats `,
			`PUT /admin/v2/persistent/public/default/t/offload {"entryId":0,"ledgerId":7,"partitionIndex":-1}`}},
		{[]string{"topics", "offload", "t", "-s", "1G"}, []string{`GET /admin/v2/persistent/public/default/t/internalStats `}},
		{[]string{"topics", "offload-status", "t", "-w"}, []string{`GET /admin/v2/persistent/public/default/t/offload `,
			`GET /admin/v2/persistent/public/default/t/offload `, `GET /admin/v2/persistent/public/default/t/offload `}},
	} {
		sent = nil
		var code int
		captureStdout(t, func() { code = run(append([]string{"admin", "--url", srv.URL}, tc.args...)) })
		if code != 0 || strings.Join(sent, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%v: exit %d, sent\n%s\nwant\n%s", tc.args, code, strings.Join(sent, "\n"), strings.Join(tc.want, "\n"))
		}
	}
	if id := firstLedgerWithinThreshold([]api.LedgerStats{{LedgerID: 1, Size: 5}}, 10); id != nil {
		t.Fatalf("nothing to offload: %+v", id)
	}
	var code int
	stderr := captureStderr(t, func() { code = run([]string{"admin", "--url", srv.URL, "topics", "offload", "t"}) })
	if code != 2 || !strings.Contains(stderr, "--size-threshold is required") {
		t.Fatalf("exit %d, %s", code, stderr)
	}
}
