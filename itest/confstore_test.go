package itest

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStandalonesShareConfigStore: two standalone processes, east and west, west given
// east's embedded etcd as its configuration store (--configuration-metadata-store-url):
// both cluster records are there (each standalone initializes its cluster at start), a
// tenant and a namespace replicated between the two, created through east's admin API
// only, are west's too, and a message produced in east is consumed in west.
func TestStandalonesShareConfigStore(t *testing.T) {
	start := func(cluster string, extra ...string) (etcd, pulsarURL, httpURL string) {
		etcd, bk, broker, web := FreeAddr(t), FreeAddr(t), FreeAddr(t), FreeAddr(t)
		args := append([]string{"standalone", "--cluster", cluster, "--data-dir", filepath.Join(t.TempDir(), "data"),
			"--etcd-listen", etcd, "--bookie-listen", bk, "--broker-listen", broker, "--http", web}, extra...)
		Start(t, cluster, args...)
		WaitTCP(t, broker, 60*time.Second)
		WaitTCP(t, web, 60*time.Second)
		return etcd, "pulsar://" + broker, "http://" + web
	}
	eastEtcd, eastPulsar, eastHTTP := start("east")
	_, westPulsar, westHTTP := start("west", "--configuration-metadata-store-url", "etcd://"+eastEtcd)
	adm := func(url string, args ...string) string {
		return mustTool(t, append([]string{"admin", "--url", url}, args...)...)
	}

	for _, url := range []string{eastHTTP, westHTTP} {
		if out := adm(url, "clusters", "list"); !strings.Contains(out, "east") || !strings.Contains(out, "west") {
			t.Fatalf("clusters seen through %s: %q, want both", url, out)
		}
	}
	adm(eastHTTP, "tenants", "create", "geo", "--allowed-clusters", "east,west")
	adm(eastHTTP, "namespaces", "create", "geo/ns")
	adm(eastHTTP, "namespaces", "set-clusters", "geo/ns", "--clusters", "east,west")
	if out := adm(westHTTP, "namespaces", "list", "geo"); !strings.Contains(out, "geo/ns") {
		t.Fatalf("west's namespaces of geo: %q", out)
	}
	if out := adm(westHTTP, "namespaces", "get-clusters", "geo/ns"); !strings.Contains(out, "east") || !strings.Contains(out, "west") {
		t.Fatalf("west's replication clusters of geo/ns: %q", out)
	}

	const topic = "persistent://geo/ns/shared"
	// The subscription first, in west, so the replicated message has a backlog to join.
	mustTool(t, "admin", "--url", westHTTP, "topics", "create", topic)
	mustTool(t, "admin", "--url", westHTTP, "subscriptions", "create", topic, "-s", "s", "-m", "earliest")
	mustTool(t, "produce", "--url", eastPulsar, topic, "-m", "from east")
	out := mustTool(t, "consume", "--url", westPulsar, topic, "-s", "s", "-n", "1", "--timeout", "60s")
	if !strings.Contains(out, "from east") {
		t.Fatalf("consumed in west: %q, want east's message", out)
	}
}
