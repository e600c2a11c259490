package itest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// standalone is a running `magnetar standalone` and the URLs of its broker and admin API.
type standalone struct {
	proc      *Proc
	pulsarURL string
	httpURL   string
}

func startStandalone(t *testing.T) *standalone {
	t.Helper()
	etcd, bk, broker, web := FreeAddr(t), FreeAddr(t), FreeAddr(t), FreeAddr(t)
	p := Start(t, "standalone", "standalone", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--etcd-listen", etcd, "--bookie-listen", bk, "--broker-listen", broker, "--http", web)
	WaitTCP(t, broker, 60*time.Second)
	WaitTCP(t, web, 60*time.Second)
	return &standalone{proc: p, pulsarURL: "pulsar://" + broker, httpURL: "http://" + web}
}

// runTool runs the magnetar binary to completion and returns stdout, stderr and the exit code.
func runTool(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// mustTool runs the binary and fails the test unless it exits 0.
func mustTool(t *testing.T, args ...string) string {
	t.Helper()
	out, errs, code := runTool(t, args...)
	if code != 0 {
		t.Fatalf("magnetar %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// TestClientToolsOnStandalone: magnetar admin, produce, consume and perf against a real
// standalone process.
func TestClientToolsOnStandalone(t *testing.T) {
	s := startStandalone(t)
	adm := func(args ...string) string {
		return mustTool(t, append([]string{"admin", "--url", s.httpURL}, args...)...)
	}
	const topic = "persistent://public/default/itest-tools"

	adm("topics", "create", topic)
	if out := adm("topics", "list", "public/default"); !strings.Contains(out, topic) {
		t.Fatalf("topics list: %q", out)
	}
	adm("subscriptions", "create", topic, "-s", "audit", "-m", "earliest")

	// produce: 3 texts twice each; consume them in order from the REST-made subscription.
	out := mustTool(t, "produce", "--url", s.pulsarURL, topic, "-m", "a", "-m", "b", "-m", "c", "-n", "2", "-o", "json")
	var produced struct {
		Produced   int               `json:"produced"`
		MessageIDs []json.RawMessage `json:"messageIds"`
	}
	if err := json.Unmarshal([]byte(out), &produced); err != nil || produced.Produced != 6 || len(produced.MessageIDs) != 6 {
		t.Fatalf("produce output %q: %v", out, err)
	}
	out = mustTool(t, "consume", "--url", s.pulsarURL, topic, "-s", "audit", "-n", "6", "--timeout", "30s", "-o", "json")
	var got []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m struct {
			Payload string `json:"payload"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("consume line %q: %v", sc.Text(), err)
		}
		got = append(got, m.Payload)
	}
	if want := "a b c a b c"; strings.Join(got, " ") != want {
		t.Fatalf("consumed %q, want %q", got, want)
	}

	var stats struct {
		MsgInCounter  int64 `json:"msgInCounter"`
		Subscriptions map[string]struct {
			MsgBacklog int64 `json:"msgBacklog"`
		} `json:"subscriptions"`
	}
	if err := json.Unmarshal([]byte(adm("topics", "stats", topic)), &stats); err != nil {
		t.Fatal(err)
	}
	if stats.MsgInCounter != 6 || stats.Subscriptions["audit"].MsgBacklog != 0 {
		t.Fatalf("stats: %+v", stats)
	}
	adm("topics", "terminate", topic)
	if _, errs, code := runTool(t, "produce", "--url", s.pulsarURL, topic, "-m", "late"); code != 1 ||
		!strings.Contains(errs, "TopicTerminatedError") {
		t.Fatalf("produce to a terminated topic: exit %d, %q", code, errs)
	}
	if _, errs, code := runTool(t, "admin", "--url", s.httpURL, "topics", "stats", "public/default/nope"); code != 1 ||
		!strings.Contains(errs, "404") {
		t.Fatalf("stats of a missing topic: exit %d, %q", code, errs)
	}

	// perf produce, then perf consume of exactly what was acknowledged, then perf e2e.
	var res struct {
		Messages  int64              `json:"messages"`
		MsgPerSec float64            `json:"msgPerSec"`
		Failed    int64              `json:"failed"`
		Publish   map[string]float64 `json:"publishLatencyMs"`
		EndToEnd  map[string]float64 `json:"endToEndLatencyMs"`
	}
	decode := func(out string) {
		t.Helper()
		res.Messages, res.MsgPerSec, res.Failed, res.Publish, res.EndToEnd = 0, 0, 0, nil, nil
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("perf output %q: %v", out, err)
		}
	}
	decode(mustTool(t, "perf", "produce", "--url", s.pulsarURL, "itest-perf", "--messages", "2000", "--duration", "0",
		"--warmup", "0", "--size", "100", "-o", "json"))
	if res.Messages != 2000 || res.Failed != 0 || res.Publish["samples"] != 2000 {
		t.Fatalf("perf produce: %+v", res)
	}
	decode(mustTool(t, "perf", "consume", "--url", s.pulsarURL, "itest-perf", "--messages", "2000", "--duration", "60s",
		"-o", "json"))
	if res.Messages != 2000 || res.Failed != 0 {
		t.Fatalf("perf consume: %+v", res)
	}
	decode(mustTool(t, "perf", "e2e", "--url", s.pulsarURL, "itest-e2e", "--rate", "500", "--duration", "2s",
		"--warmup", "500ms", "-o", "json"))
	if res.Failed != 0 || res.EndToEnd["samples"] < 500 || res.Publish["samples"] < 500 {
		t.Fatalf("perf e2e: %+v", res)
	}
	t.Logf("e2e p99 %.2f ms", res.EndToEnd["p99"])
}
