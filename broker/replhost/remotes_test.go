package replhost

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
)

// TestClusterAuth: a cluster record's authentication plugin and parameters in each of the
// forms Pulsar accepts; an unknown plugin is refused.
func TestClusterAuth(t *testing.T) {
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte("file-jwt\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		plugin, params string
		method         string
		data           string
	}{
		{"org.apache.pulsar.client.impl.auth.AuthenticationToken", "token:abc", auth.MethodToken, "abc"},
		{"token", "abc", auth.MethodToken, "abc"},
		{"token", "file://" + tokFile, auth.MethodToken, "file-jwt"},
		{"org.apache.pulsar.client.impl.auth.AuthenticationBasic", `{"userId":"u","password":"p"}`, auth.MethodBasic, "u:p"},
		{"basic", "u:p", auth.MethodBasic, "u:p"},
	} {
		a, err := clusterAuth(tc.plugin, tc.params)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.plugin, tc.params, err)
		}
		d, err := a.Data()
		if err != nil || a.Method != tc.method || string(d) != tc.data {
			t.Errorf("%s %s: %s %q %v, want %s %q", tc.plugin, tc.params, a.Method, d, err, tc.method, tc.data)
		}
	}
	if a, err := clusterAuth("", ""); a != nil || err != nil {
		t.Errorf("no plugin: %v %v, want no credentials", a, err)
	}
	if _, err := clusterAuth("org.apache.pulsar.client.impl.auth.AuthenticationKerberos", "x"); err == nil {
		t.Error("an unsupported plugin was accepted")
	}
}

type clusters map[string]api.ClusterData

func (c clusters) Cluster(_ context.Context, name string) (api.ClusterData, error) {
	cd, ok := c[name]
	if !ok {
		return api.ClusterData{}, api.ErrClusterNotFound
	}
	return cd, nil
}

// TestRemotesRebuildOnRecordChange: one client per cluster record version; a record
// without a broker URL or of an unknown cluster is an error.
func TestRemotesRebuildOnRecordChange(t *testing.T) {
	cs := clusters{"west": {BrokerServiceURL: "pulsar://127.0.0.1:1"}, "bad": {}}
	r := NewRemotes(cs, nil)
	defer r.Close()
	ctx := context.Background()
	a, err := r.Remote(ctx, "west")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := r.Remote(ctx, "west"); b != a {
		t.Error("the same record built a second client")
	}
	cs["west"] = api.ClusterData{BrokerServiceURL: "pulsar://127.0.0.1:2"}
	if b, _ := r.Remote(ctx, "west"); b == a {
		t.Error("a changed record kept the old client")
	}
	if _, err := r.Remote(ctx, "bad"); err == nil {
		t.Error("a record without a broker URL gave a client")
	}
	if _, err := r.Remote(ctx, "nowhere"); !errors.Is(err, api.ErrClusterNotFound) {
		t.Errorf("unknown cluster: %v", err)
	}
}
