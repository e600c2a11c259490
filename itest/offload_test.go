package itest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/pulsarclient"
)

// TestOffloadFilesystemOnStandalone: a real standalone process with the filesystem offload
// driver (objects under its data directory), ledgers of 10 entries, infinite retention and a
// deletion lag of 0. `magnetar admin topics offload -s 0` offloads every ledger but the
// newest; `offload-status -w` reports success; internal stats show the ledgers offloaded;
// their bookie ledgers are deleted; the broker's /metrics shows the offloader's work; after a
// restart (which empties the broker's entry cache) a new subscription from earliest reads
// every message byte-identical and in order, the offloaded ones from the object store, and
// /metrics shows those reads.
func TestOffloadFilesystemOnStandalone(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	etcd, bk, broker, web := FreeAddr(t), FreeAddr(t), FreeAddr(t), FreeAddr(t)
	proc := Start(t, "standalone", "standalone", "--data-dir", data,
		"--etcd-listen", etcd, "--bookie-listen", bk, "--broker-listen", broker, "--http", web,
		"--managed-ledger-offload-driver", "filesystem", "--managed-ledger-offload-deletion-lag-ms", "0",
		"--managed-ledger-max-entries-per-ledger", "10", "--default-retention-time", "-1ns", "--default-retention-size-mb", "-1")
	WaitTCP(t, broker, 60*time.Second)
	WaitTCP(t, web, 60*time.Second)
	httpURL := "http://" + web
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const topic = "persistent://public/default/tiered"
	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + broker})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	prod, err := cl.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2)) // payloads of random bytes and sizes, the same every run
	payloads := make([][]byte, 57)
	for i := range payloads {
		p := make([]byte, 1+rng.IntN(4096))
		for j := range p {
			p[j] = byte(rng.UintN(256))
		}
		payloads[i] = p
		if _, err := prod.Send(ctx, &pulsarclient.ProducerMessage{Payload: p}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}

	out := mustTool(t, "admin", "--url", httpURL, "topics", "offload", topic, "-s", "0")
	if !strings.Contains(out, "Offload triggered") {
		t.Fatalf("offload: %s", out)
	}
	out = mustTool(t, "admin", "--url", httpURL, "topics", "offload-status", topic, "-w")
	if !strings.Contains(out, "Offload was a success") {
		t.Fatalf("offload-status: %s", out)
	}

	var is struct {
		Ledgers []struct {
			LedgerID  int64 `json:"ledgerId"`
			Entries   int64 `json:"entries"`
			Offloaded bool  `json:"offloaded"`
		} `json:"ledgers"`
	}
	getJSON(t, httpURL+"/admin/v2/persistent/public/default/tiered/internalStats", &is)
	offloaded := map[int64]bool{}
	for _, l := range is.Ledgers {
		if l.Offloaded {
			offloaded[l.LedgerID] = true
		}
	}
	if len(offloaded) < 5 || len(offloaded) != len(is.Ledgers)-1 || is.Ledgers[len(is.Ledgers)-1].Offloaded {
		t.Fatalf("offloaded %v of ledgers %+v: want all but the newest", offloaded, is.Ledgers)
	}
	var objects int
	filepath.WalkDir(filepath.Join(data, "offload"), func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(d.Name(), "-ledger-") {
			objects++
		}
		return nil
	})
	if objects < 2*len(offloaded) {
		t.Fatalf("%d objects under %s for %d offloaded ledgers (want a data and an index object each)", objects, data, len(offloaded))
	}

	// The bookie copies go with a deletion lag of 0 (at the managed ledger's next offload
	// step: at once, or at its trim check).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var list []struct {
			LedgerID int64 `json:"ledgerId"`
		}
		runJSON(t, &list, "ledger", "list", "--metadata-url", "etcd://"+etcd, "-o", "json")
		left := 0
		for _, l := range list {
			if offloaded[l.LedgerID] {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d offloaded ledgers still on the bookies: %+v", left, list)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(time.Second): // the ledger list is read from another process
		}
	}

	// The offloader's metrics are on the broker's /metrics: offloaded ledgers and bytes, the
	// offload latency; no errors.
	checkMetrics(t, ctx, httpURL+"/metrics", []minMetric{
		{"magnetar_offload_ledgers_total", float64(len(offloaded))},
		{"pulsar_ledgeroffloader_offload_rate", 1},
		{"pulsar_ledgeroffloader_writeRate", 1},
		{"magnetar_offload_latency_seconds_count", float64(len(offloaded))},
		{"magnetar_ledgeroffloader_offloaded_bytes_total", 1}, // the topic's own, by namespace and topic
	}, "magnetar_offload_errors_total")

	// A restart empties the broker's entry cache: the reads below go to the object store.
	if err := proc.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	proc.Restart()
	WaitTCP(t, broker, 60*time.Second)
	WaitTCP(t, web, 60*time.Second)
	cl2, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + broker})
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	cons, err := cl2.Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: topic, Subscription: "from-earliest", InitialPosition: pulsarclient.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range payloads {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if !bytes.Equal(m.Payload, want) {
			t.Fatalf("message %d: %d bytes differ from the %d sent", i, len(m.Payload), len(want))
		}
	}

	// The reads from the object store are on /metrics too.
	checkMetrics(t, ctx, httpURL+"/metrics", []minMetric{
		{"magnetar_offload_read_entries_total", 1},
		{"magnetar_offload_read_bytes_total", 1},
		{"magnetar_offload_read_latency_seconds_count", 1},
		{"magnetar_offload_block_gets_total", 1},
		{"magnetar_ledgeroffloader_reads_total", 1},
	}, "magnetar_offload_read_errors_total")
}

// minMetric is a metric and the least value a check wants of it.
type minMetric struct {
	name string
	min  float64
}

// checkMetrics scrapes url and checks every metric of want against its minimum, and that
// the metrics named zero are 0.
func checkMetrics(t *testing.T, ctx context.Context, url string, want []minMetric, zero ...string) {
	t.Helper()
	for _, c := range want {
		v, found, err := Metric(ctx, url, c.name)
		if err != nil {
			t.Fatal(err)
		}
		if !found || v < c.min {
			t.Errorf("%s = %v (found %v), want at least %v", c.name, v, found, c.min)
		}
	}
	for _, name := range zero {
		if v, found, err := Metric(ctx, url, name); err != nil || !found || v != 0 {
			t.Errorf("%s = %v (found %v, %v), want 0", name, v, found, err)
		}
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(fmt.Errorf("GET %s: %w", url, err))
	}
}

// TestOffloadBadConfigExits2: a broker.conf with an unknown offload driver, or the aws-s3
// driver without a bucket, stops standalone with exit status 2 and the key named.
func TestOffloadBadConfigExits2(t *testing.T) {
	for _, c := range []struct{ conf, key string }{
		{"managedLedgerOffloadDriver=tape\n", "managedLedgerOffloadDriver"},
		{"managedLedgerOffloadDriver=aws-s3\ns3ManagedLedgerOffloadRegion=eu-west-1\n", "s3ManagedLedgerOffloadBucket"},
	} {
		dir := t.TempDir()
		conf := filepath.Join(dir, "standalone.conf")
		if err := os.WriteFile(conf, []byte(c.conf), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errs, code := runTool(t, "standalone", "--config", conf, "--data-dir", filepath.Join(dir, "data"),
			"--etcd-listen", FreeAddr(t), "--bookie-listen", FreeAddr(t), "--broker-listen", FreeAddr(t), "--http", FreeAddr(t))
		if code != 2 || !strings.Contains(errs, c.key) {
			t.Fatalf("%q: exit %d, want 2 naming %s\n%s%s", c.conf, code, c.key, out, errs)
		}
	}
}
