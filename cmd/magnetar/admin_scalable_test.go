package main

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/admin"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// TestScalableTopicTools: `magnetar admin scalable-topics` creates, shows (tree and JSON),
// splits and reports a scalable topic, and `magnetar produce|consume` take its topic://
// name.
func TestScalableTopicTools(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	mem := topictest.NewStore()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	web := httptest.NewUnstartedServer(nil)
	svc, err := broker.Start(ctx, broker.Config{Store: store, Listen: "127.0.0.1:0", HTTPURL: "http://" + web.Listener.Addr().String(),
		Logger: quiet, Scalable: broker.ScalableConfig{TickInterval: 50 * time.Millisecond},
		OpenLog: func(_ context.Context, name string) (topic.Log, error) { return mem.Open(name), nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	web.Config.Handler = admin.Handler(svc, admin.Options{Logger: quiet})
	web.Start()
	t.Cleanup(web.Close)
	const tp = "topic://public/default/tools"
	cli := func(args ...string) string {
		t.Helper()
		var code int
		out := captureStdout(t, func() { code = run(args) })
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, out)
		}
		return out
	}
	adm := func(args ...string) string {
		return cli(append([]string{"admin", "--url", web.URL, "scalable-topics"}, args...)...)
	}
	adm("create", tp, "--segments", "2")
	if out := adm("list", "public/default"); strings.TrimSpace(out) != tp {
		t.Fatalf("list: %q", out)
	}
	// The controller leads asynchronously: the first leader-only call may find none yet.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var code int
		captureStderr(t, func() {
			captureStdout(t, func() {
				code = run([]string{"admin", "--url", web.URL, "scalable-topics", "create-subscription", tp, "s"})
			})
		})
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("create-subscription kept failing")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
	}
	if out := adm("subscriptions", tp); strings.TrimSpace(out) != "s" {
		t.Fatalf("subscriptions: %q", out)
	}
	srv := []string{"--url", "pulsar://" + svc.Addr().String(), "--admin-url", web.URL}
	cli(append([]string{"produce", tp, "-m", "a", "-m", "b", "-k", "a"}, srv...)...) // key a hashes to 3c25: segment 0
	adm("split", tp, "0", "--at", "4000")
	if out := adm("layout", tp); !strings.Contains(out, "0000-3fff") || !strings.Contains(out, "4000-7fff") || !strings.Contains(out, "sealed") {
		t.Fatalf("layout tree: %s", out)
	}
	if out := cli("admin", "--url", web.URL, "-o", "json", "scalable-topics", "layout", tp); !strings.Contains(out, `"epoch"`) {
		t.Fatalf("layout JSON: %s", out)
	}
	cli(append([]string{"produce", tp, "-m", "c", "-k", "a"}, srv...)...)
	out := cli(append([]string{"consume", tp, "-s", "s", "-n", "3", "--timeout", "20s"}, srv...)...)
	if ia, ib, ic := strings.Index(out, "content:a"), strings.Index(out, "content:b"), strings.Index(out, "content:c"); ia < 0 || ib < ia || ic < ib {
		t.Fatalf("consumed out of order: %s", out)
	}
	if out := adm("stats", tp); !strings.Contains(out, "subscription s: backlog") {
		t.Fatalf("stats: %s", out)
	}
	adm("delete", tp)
}
