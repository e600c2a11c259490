package interop

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/itest"
)

// TestBenchManyTopics measures what a loaded, idle topic costs a standalone and how fast
// topics open (issue: "100,000 topics loaded in one standalone"). It starts `magnetar
// standalone` (the built binary) and opens topics as a user with many topics does: for each
// topic a pulsar-client-go producer that sends one message and closes, 32 topics in
// parallel over one client. At each checkpoint of MAGNETAR_BENCH_TOPICS (a comma-separated
// list of cumulative topic counts, e.g. 1000,10000,100000) it reports the open rate of the
// topics opened since the previous checkpoint and, once the producers are closed, the
// standalone's RSS growth per loaded topic over its RSS before the first topic, its
// goroutines, live heap (heap in use after a collection) and stacks (from /debug/pprof), and
// the top entries of its heap profile (GODEBUG=memprofilerate=4096 in the environment, which
// the standalone inherits, makes the profile fine-grained enough to see a topic's share). It
// is skipped without MAGNETAR_BENCH_TOPICS. Run it without the race detector:
//
//	cd interop && MAGNETAR_BENCH_TOPICS=1000,10000 go test -count=1 -run TestBenchManyTopics -v -timeout 0 .
//
// MAGNETAR_BENCH_TOPICS_PARALLEL sets the topics opened in parallel (default 32);
// MAGNETAR_BENCH_TOPICS_PROFILE=<dir> keeps the heap profile and the goroutines of each
// checkpoint there and a CPU profile of the first 10 s of opening (cpu.pprof).
func TestBenchManyTopics(t *testing.T) {
	var checkpoints []int
	for _, f := range strings.Split(os.Getenv("MAGNETAR_BENCH_TOPICS"), ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			checkpoints = append(checkpoints, n)
		}
	}
	if len(checkpoints) == 0 {
		t.Skip("set MAGNETAR_BENCH_TOPICS=<topics>[,<topics>…] to run")
	}
	slices.Sort(checkpoints)
	parallel := 32
	if p, err := strconv.Atoi(os.Getenv("MAGNETAR_BENCH_TOPICS_PARALLEL")); err == nil && p > 0 {
		parallel = p
	}
	profDir := os.Getenv("MAGNETAR_BENCH_TOPICS_PROFILE")

	st := startPlainStandalone(t)
	cl := st.client(t)
	pid := st.pid(t)
	ctx := ctxT(t, 24*time.Hour)

	// The baseline: the standalone serving, with one topic loaded and closed, so that what
	// every loaded topic shares (connections, pools, caches) is counted before the first.
	openOne(t, ctx, cl, "persistent://public/default/many-warmup")
	base := st.sample(t, pid, 0)
	t.Logf("baseline: RSS %s, goroutines %d, live heap %s, stacks %s", mib(base.rss), base.goroutines,
		mib(base.heapInuse), mib(base.stacks))

	if profDir != "" {
		go func() { // the first seconds of opening
			if err := st.fetch(ctx, "/debug/pprof/profile?seconds=10", filepath.Join(profDir, "cpu.pprof")); err != nil {
				t.Logf("CPU profile: %v", err)
			}
		}()
	}
	opened := 0
	for _, n := range checkpoints {
		start := time.Now()
		openTopics(t, ctx, cl, opened, n, parallel)
		took := time.Since(start)
		seg := n - opened
		rate := float64(seg) / took.Seconds()
		opened = n
		s := st.sample(t, pid, n)
		per := func(v, b int64) float64 { return float64(v-b) / float64(n) / 1024 }
		t.Logf("RESULT many topics: %d loaded: opened %d at %.0f topics/s (%v); per idle topic: RSS %.1f KB, live heap %.1f KB, stacks %.1f KB, goroutines %.2f (RSS %s, %d goroutines)",
			n, seg, rate, took.Round(time.Millisecond), per(s.rss, base.rss), per(s.heapInuse, base.heapInuse),
			per(s.stacks, base.stacks), float64(s.goroutines-base.goroutines)/float64(n), mib(s.rss), s.goroutines)
		if profDir != "" {
			if err := st.fetch(ctx, "/debug/pprof/goroutine?debug=1", filepath.Join(profDir, fmt.Sprintf("goroutines-%d.txt", n))); err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(profDir, fmt.Sprintf("heap-%d.pprof", n))
			if err := st.fetch(ctx, "/debug/pprof/heap", f); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", "-sample_index=inuse_space", f).CombinedOutput(); err == nil {
				t.Logf("heap profile at %d topics (%s):\n%s", n, f, out)
			}
		}
	}
}

// plainStandalone is a standalone process with the default configuration.
type plainStandalone struct {
	proc            *itest.Proc
	data, url, http string
}

func startPlainStandalone(t *testing.T) *plainStandalone {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data")
	etcd, bk, brk, web := itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t)
	// Bundle splits (a bundle over 1,000 topics) unload the topics of the bundle: they would
	// be reloaded by their next client, not counted here as loaded.
	proc := itest.Start(t, "standalone", "standalone", "--data-dir", data, "--etcd-listen", etcd,
		"--bookie-listen", bk, "--broker-listen", brk, "--http", web, "--log-level", "warn",
		"--load-balancer-auto-bundle-split-enabled=false")
	itest.WaitTCP(t, brk, 60*time.Second)
	itest.WaitTCP(t, web, 60*time.Second)
	st := &plainStandalone{proc: proc, data: data, url: "pulsar://" + brk, http: "http://" + web}
	// public/default is created once the broker is up: wait for it through a producer.
	for deadline := time.Now().Add(time.Minute); ; {
		cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: st.url, OperationTimeout: 5 * time.Second, Logger: clientLogger()})
		if err == nil {
			var p pulsar.Producer
			if p, err = cl.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/many-ready"}); err == nil {
				p.Close()
				cl.Close()
				return st
			}
			cl.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("standalone not serving public/default after a minute: %v", err)
		}
	}
}

func (s *plainStandalone) client(t *testing.T) pulsar.Client {
	t.Helper()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: s.url, OperationTimeout: 2 * time.Minute, Logger: clientLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// pid finds the standalone's process id: the process whose command line names its data
// directory (unique to this test).
func (s *plainStandalone) pid(t *testing.T) int {
	t.Helper()
	ds, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmd, []byte("\x00"+s.data+"\x00")) && bytes.Contains(cmd, []byte("standalone")) {
			return pid
		}
	}
	t.Fatal("standalone process not found in /proc")
	return 0
}

// fetch saves the standalone's HTTP path to file.
func (s *plainStandalone) fetch(ctx context.Context, path, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.http+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// memSample is the standalone's memory at one moment.
type memSample struct {
	rss, heapInuse, stacks int64
	goroutines             int
}

// sample measures the standalone once the topics' goroutines have settled: after the
// producers closed, their topics' goroutines end (or park) within moments; the goroutine
// count is read until two reads a second apart agree (at most a minute). want is the number
// of topics the test opened: the broker's loaded-topic gauge must count at least them.
func (s *plainStandalone) sample(t *testing.T, pid, want int) memSample {
	t.Helper()
	ctx := ctxT(t, 5*time.Minute)
	prev := -1
	var m memSample
	for deadline := time.Now().Add(time.Minute); ; {
		m = memSample{}
		m.goroutines = s.goroutines(t, ctx)
		if m.goroutines == prev || time.Now().After(deadline) {
			break
		}
		prev = m.goroutines
		select {
		case <-time.After(time.Second): // the interval between two reads of a settling count
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			m.rss = kb << 10
		}
	}
	m.heapInuse, m.stacks = s.memStats(t, ctx)
	if m.rss == 0 || m.heapInuse == 0 {
		t.Fatalf("no RSS or heap figure: %+v", m)
	}
	if want > 0 {
		v, _, err := itest.Metric(ctx, s.http+"/metrics", "magnetar_broker_topics")
		if err != nil {
			t.Fatal(err)
		}
		if int(v) < want {
			t.Fatalf("%v topics loaded, want at least %d", v, want)
		}
	}
	return m
}

// goroutines reads the standalone's goroutine count from its goroutine profile's header.
func (s *plainStandalone) goroutines(t *testing.T, ctx context.Context) int {
	t.Helper()
	body := s.get(t, ctx, "/debug/pprof/goroutine?debug=1")
	line, _, _ := strings.Cut(body, "\n")
	v, ok := strings.CutPrefix(line, "goroutine profile: total ")
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if !ok || err != nil {
		t.Fatalf("goroutine profile header %q", line)
	}
	return n
}

// memStats reads HeapInuse and StackInuse from the runtime.MemStats the heap profile's text
// form ends with, after a garbage collection (gc=1): the heap in use is then what is live
// (and its fragmentation), not garbage waiting for the next cycle.
func (s *plainStandalone) memStats(t *testing.T, ctx context.Context) (heapInuse, stacks int64) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(s.get(t, ctx, "/debug/pprof/heap?debug=1&gc=1")))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapInuse = "); ok {
			heapInuse, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(sc.Text(), "# Stack = "); ok {
			stacks, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return heapInuse, stacks
}

func (s *plainStandalone) get(t *testing.T, ctx context.Context, path string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.http+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %s", path, err, resp.Status)
	}
	return string(b)
}

// openTopics opens topics many-from … many-(to-1): for each a producer that sends one
// message and closes, parallel at a time.
func openTopics(t *testing.T, ctx context.Context, cl pulsar.Client, from, to, parallel int) {
	t.Helper()
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	errs := make(chan error, parallel)
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < to; i = int(next.Add(1) - 1) {
				if err := openOneErr(ctx, cl, fmt.Sprintf("persistent://public/default/many-%d", i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

func openOne(t *testing.T, ctx context.Context, cl pulsar.Client, topic string) {
	t.Helper()
	if err := openOneErr(ctx, cl, topic); err != nil {
		t.Fatal(err)
	}
}

func openOneErr(ctx context.Context, cl pulsar.Client, topic string) error {
	var p pulsar.Producer
	var err error
	for attempt := 0; attempt < 3; attempt++ { // ServiceNotReady (a bundle moving) is retried, as clients do
		if p, err = cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true}); err == nil ||
			!strings.Contains(err.Error(), "ServiceNotReady") {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("producer of %s: %w", topic, err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(topic)}); err != nil {
		return fmt.Errorf("send to %s: %w", topic, err)
	}
	return nil
}

// mib formats a byte count in MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
