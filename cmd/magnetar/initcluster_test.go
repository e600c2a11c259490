package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/config"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// TestInitializeClusterMetadataConfigStore: with a configuration store
// (--configuration-metadata-store, or Pulsar's older --configuration-store), two clusters
// initialized on one shared store each get their record there, the default tenants allow
// both, and neither local store gets any of it.
func TestInitializeClusterMetadataConfigStore(t *testing.T) {
	url := func(eps []string) string { return "etcd://" + strings.TrimPrefix(eps[0], "http://") }
	local1, local2, shared := metadatatest.Embedded(t), metadatatest.Embedded(t), metadatatest.Embedded(t)
	for _, args := range [][]string{
		{"--metadata-url", url(local1), "--configuration-metadata-store", url(shared), "--cluster", "c1", "--broker-service-url", "pulsar://c1:6650"},
		{"--metadata-store", url(local2), "--configuration-store", url(shared), "--cluster", "c2", "--broker-service-url", "pulsar://c2:6650"},
	} {
		if code, out, errs := runChild(t, append([]string{"initialize-cluster-metadata"}, args...)...); code != 0 || !strings.Contains(out, "initialized") {
			t.Fatalf("%v: %d %q %q", args, code, out, errs)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := metadatatest.OpenStore(t, shared, "")
	for _, c := range []string{"c1", "c2"} {
		kv, err := st.Get(ctx, metadata.ClusterKey(c))
		if err != nil || !strings.Contains(string(kv.Value), "pulsar://"+c+":6650") {
			t.Errorf("cluster %s in the configuration store: %q %v", c, kv.Value, err)
		}
	}
	for _, tenant := range []string{"public", "pulsar"} {
		kv, err := st.Get(ctx, metadata.TenantKey(tenant))
		var ti broker.TenantInfo
		if err == nil {
			err = json.Unmarshal(kv.Value, &ti)
		}
		if err != nil || !slices.Equal(ti.AllowedClusters, []string{"c1", "c2"}) {
			t.Errorf("tenant %s allows %v (%v), want both clusters", tenant, ti.AllowedClusters, err)
		}
	}
	for _, ns := range [][2]string{{"public", "default"}, {"pulsar", "system"}} {
		if _, err := st.Get(ctx, metadata.NamespaceKey(ns[0], ns[1])); err != nil {
			t.Errorf("namespace %s/%s: %v", ns[0], ns[1], err)
		}
	}
	for _, eps := range [][]string{local1, local2} {
		ls := metadatatest.OpenStore(t, eps, "")
		if kvs, _, err := ls.List(ctx, "/"); err != nil || len(kvs) != 0 {
			t.Errorf("a local store holds %d keys (%v), want none", len(kvs), err)
		}
	}
	if code, _, errs := runChild(t, "initialize-cluster-metadata", "--cluster", "c3", "--broker-service-url", "pulsar://c3:6650",
		"--configuration-metadata-store", "zk:h:2181"); code != 2 || !strings.Contains(errs, "--configuration-metadata-store") {
		t.Errorf("a bad configuration store URL: %d %q", code, errs)
	}
}

// TestConfigStoreKeys: broker.conf's configurationMetadataStoreUrl (and the deprecated
// configurationStoreServers) sets --configuration-metadata-store-url, in Pulsar's etcd form.
func TestConfigStoreKeys(t *testing.T) {
	for conf, want := range map[string]string{
		"": "",
		"configurationMetadataStoreUrl=etcd:http://h1:2379,http://h2:2379\n": "etcd://h1:2379,h2:2379",
		"configurationStoreServers=etcd:http://h3:2379\n":                    "etcd://h3:2379",
	} {
		fs := newBrokerCmd().Flags()
		es, err := config.Parse(strings.NewReader(conf))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := config.Apply(fs, "broker.conf", es, brokerKeys); err != nil {
			t.Fatalf("%q: %v", conf, err)
		}
		if got := flagValue(fs, "configuration-metadata-store-url"); got != want {
			t.Errorf("%q: --configuration-metadata-store-url %q, want %q", conf, got, want)
		}
	}
}

func flagValue(fs *pflag.FlagSet, name string) string {
	if f := fs.Lookup(name); f != nil {
		return f.Value.String()
	}
	return "<no flag>"
}
