package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAdminPolicyCommands: the set-/get-/remove- policy commands send Pulsar's REST
// requests (paths, query parameters and bodies, sizes and ages converted).
func TestAdminPolicyCommands(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = r.Method + " " + r.URL.RequestURI() + " " + strings.TrimSpace(string(b))
		if r.Method == "GET" {
			io.WriteString(w, `{"retentionTimeInMinutes":60}`)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"namespaces", "set-retention", "public/default", "--time", "2h", "--size", "10M"},
			`POST /admin/v2/namespaces/public/default/retention {"retentionSizeInMB":10,"retentionTimeInMinutes":120}`},
		{[]string{"topics", "get-retention", "public/default/t", "--applied"},
			`GET /admin/v2/persistent/public/default/t/retention?applied=true `},
		{[]string{"namespaces", "set-backlog-quota", "public/default", "-l", "1G", "-p", "producer_exception"},
			`POST /admin/v2/namespaces/public/default/backlogQuota?backlogQuotaType=destination_storage {"limitSize":1073741824,"limitTime":-1,"policy":"producer_exception"}`},
		{[]string{"topics", "remove-backlog-quota", "t", "-t", "message_age"},
			`DELETE /admin/v2/persistent/public/default/t/backlogQuota?backlogQuotaType=message_age `},
		{[]string{"topics", "get-backlog-quotas", "t"}, `GET /admin/v2/persistent/public/default/t/backlogQuotaMap `},
		{[]string{"topics", "set-message-ttl", "t", "-t", "1h"}, `POST /admin/v2/persistent/public/default/t/messageTTL 3600`},
		{[]string{"namespaces", "set-max-producers-per-topic", "a/b", "-p", "3"}, `POST /admin/v2/namespaces/a/b/maxProducersPerTopic 3`},
		{[]string{"topics", "set-max-unacked-messages-per-consumer", "t", "-m", "5"},
			`POST /admin/v2/persistent/public/default/t/maxUnackedMessagesOnConsumer 5`},
		{[]string{"topics", "set-publish-rate", "t", "-m", "100"},
			`POST /admin/v2/persistent/public/default/t/publishRate {"publishThrottlingRateInByte":-1,"publishThrottlingRateInMsg":100}`},
		{[]string{"topics", "expire-messages", "t", "-s", "sub", "-t", "10m"},
			`POST /admin/v2/persistent/public/default/t/subscription/sub/expireMessages/600 `},
		{[]string{"topics", "expire-messages-all-subscriptions", "t", "-t", "5"},
			`POST /admin/v2/persistent/public/default/t/all_subscription/expireMessages/5 `},
	} {
		got = ""
		var code int
		captureStdout(t, func() { code = run(append([]string{"admin", "--url", srv.URL}, tc.args...)) })
		if code != 0 || got != tc.want {
			t.Errorf("%v: exit %d, sent %q; want %q", tc.args, code, got, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"namespaces", "set-retention", "a/b", "--time", "soon"}, "--time: invalid value"},
		{[]string{"topics", "expire-messages", "t"}, "--subscription is required"},
		{[]string{"topics", "set-properties", "t", "-p", "novalue"}, "--properties: invalid value"},
	} {
		var code int
		stderr := captureStderr(t, func() { code = run(append([]string{"admin", "--url", srv.URL}, tc.args...)) })
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with %q", tc.args, code, firstLine(stderr), tc.want)
		}
	}
}
