package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServiceURLFlags: every client tool takes the service URL as Pulsar's tools do
// (--service-url, -u) beside --url, and a value given under any name overrides the config
// file's brokerServiceUrl.
func TestServiceURLFlags(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "client.conf")
	os.WriteFile(conf, []byte("brokerServiceUrl=pulsar://from-file:6650\n"), 0o644)
	for _, tool := range [][]string{{"produce"}, {"consume", "-s", "sub"}, {"perf", "produce"}, {"perf", "consume"}, {"perf", "e2e"}} {
		for _, flag := range []string{"--service-url", "-u", "--url"} {
			args := append(append([]string{}, tool...), "--config", conf, flag, "pulsar://from-flag:1", "--print-config", "t")
			code, out, errOut := runChild(t, args...)
			if code != 0 || !strings.Contains(out, "brokerServiceUrl=pulsar://from-flag:1\n") {
				t.Errorf("%v: exit %d, want brokerServiceUrl=pulsar://from-flag:1 in\n%s%s", args, code, out, errOut)
			}
		}
	}
}

// TestAdminURLFlag: magnetar admin takes pulsar-admin's --admin-url beside --url.
func TestAdminURLFlag(t *testing.T) {
	for _, flag := range []string{"--admin-url", "--url"} {
		code, _, errOut := runChild(t, "admin", flag, "http://127.0.0.1:1", "tenants", "list")
		if code == 0 || !strings.Contains(errOut, "127.0.0.1:1/admin/v2/tenants") {
			t.Errorf("admin %s: exit %d, want a failed request to 127.0.0.1:1, got %s", flag, code, errOut)
		}
	}
}
