package interop

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
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
	"github.com/magnetar-io/magnetar/perf"
)

// TestBenchIoT runs the "IoT telemetry" shape of Pulsar 5.0's release benchmark against one
// `magnetar standalone` with pulsar-client-go: many producers sending unbatched, keyed, small
// messages to one topic, and Key_Shared consumers, with the producers and the consumers in one
// pulsar.Client (one connection, as an IoT gateway has) or in separate clients (separate
// connections, as separate processes have). Every 10 s it logs the rate acknowledged to the
// producers (in), the rate received (out), the end-to-end latency from the publish timestamp
// in each payload (percentiles of the messages received in that window) and the standalone's
// CPU per message (in + out).
//
// It runs only with MAGNETAR_BENCH_IOT=1. Parameters (environment):
//
//	MAGNETAR_BENCH_IOT_CLIENTS    one | separate (default one)
//	MAGNETAR_BENCH_IOT_PRODUCERS  producers (500)
//	MAGNETAR_BENCH_IOT_CONSUMERS  consumers (20)
//	MAGNETAR_BENCH_IOT_KEYS       distinct keys (default: one per producer)
//	MAGNETAR_BENCH_IOT_SIZE       bytes per message (128)
//	MAGNETAR_BENCH_IOT_RATE       total msg/s (0: every producer as fast as it can)
//	MAGNETAR_BENCH_IOT_SECONDS    measured seconds (60), after a 5 s warm-up
//	MAGNETAR_BENCH_IOT_WINDOW     seconds per report (10)
//	MAGNETAR_BENCH_IOT_TYPE       Key_Shared | Shared (Key_Shared)
//	MAGNETAR_BENCH_IOT_URL        a broker to use instead of starting a standalone
//	MAGNETAR_BENCH_IOT_PID        that broker's process id (for its CPU time)
//	MAGNETAR_BENCH_IOT_PROFILE    a directory: CPU, block, mutex and goroutine profiles of
//	                              the standalone in the middle of the run
func TestBenchIoT(t *testing.T) {
	if os.Getenv("MAGNETAR_BENCH_IOT") == "" {
		t.Skip("set MAGNETAR_BENCH_IOT=1 to run")
	}
	env := func(name string, def int) int {
		if n, err := strconv.Atoi(os.Getenv("MAGNETAR_BENCH_IOT_" + name)); err == nil && n >= 0 {
			return n
		}
		return def
	}
	producers, consumers := env("PRODUCERS", 500), env("CONSUMERS", 20)
	keys, size, rate := env("KEYS", producers), max(env("SIZE", 128), 8), float64(env("RATE", 0))
	measured, window := time.Duration(env("SECONDS", 60))*time.Second, time.Duration(env("WINDOW", 10))*time.Second
	separate := os.Getenv("MAGNETAR_BENCH_IOT_CLIENTS") == "separate"
	subType, typeName := pulsar.KeyShared, "Key_Shared"
	if os.Getenv("MAGNETAR_BENCH_IOT_TYPE") == "Shared" {
		subType, typeName = pulsar.Shared, "Shared"
	}

	url, web := os.Getenv("MAGNETAR_BENCH_IOT_URL"), ""
	var proc *itest.Proc
	if url == "" {
		dir := t.TempDir()
		etcd, bk, brk := itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t)
		web = itest.FreeAddr(t)
		proc = itest.Start(t, "standalone", "standalone", "--data-dir", filepath.Join(dir, "data"),
			"--etcd-listen", etcd, "--bookie-listen", bk, "--broker-listen", brk, "--http", web, "--log-level", "warn")
		itest.WaitTCP(t, brk, 60*time.Second)
		url = "pulsar://" + brk
	}
	serverCPU := func() time.Duration {
		if proc == nil {
			// MAGNETAR_BENCH_IOT_PID: the process behind MAGNETAR_BENCH_IOT_URL.
			return procCPU(os.Getenv("MAGNETAR_BENCH_IOT_PID"))
		}
		return proc.CPUTime()
	}
	newClient := func() pulsar.Client {
		cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 60 * time.Second, Logger: clientLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	pcl := newClient()
	ccl := pcl
	if separate {
		ccl = newClient()
	}
	topic := fmt.Sprintf("persistent://public/default/iot-%d", time.Now().UnixNano())
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	var out atomic.Int64
	var latMu sync.Mutex
	var lat []time.Duration // end-to-end latencies of the current window
	var cwg sync.WaitGroup
	for i := range consumers {
		c, err := ccl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "iot", Type: subType,
			Name: fmt.Sprintf("iot-consumer-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			defer c.Close()
			for {
				m, err := c.Receive(ctx)
				if err != nil {
					return
				}
				now := time.Now()
				if p := m.Payload(); len(p) >= 8 {
					d := now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(p))))
					latMu.Lock()
					lat = append(lat, d)
					latMu.Unlock()
				}
				out.Add(1)
				c.Ack(m) //nolint:errcheck // a failed ack is redelivered; the rates show it
			}
		}()
	}

	// Every producer is created before any sends, so that their creation does not wait
	// behind the first ones' SENDs.
	var in, failed atomic.Int64
	var pwg sync.WaitGroup
	prods := make([]pulsar.Producer, producers)
	for i := range producers {
		p, err := pcl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true,
			Name: fmt.Sprintf("iot-device-%d", i), SendTimeout: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		prods[i] = p
	}
	for i, p := range prods {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			defer p.Close()
			key := "device-" + strconv.Itoa(i%keys)
			pacer := perf.NewPacer(perf.RealClock, rate/float64(producers), 0)
			for n := int64(0); ; n++ {
				sched, err := pacer.Wait(ctx, n)
				if err != nil {
					return
				}
				payload := make([]byte, size)
				binary.BigEndian.PutUint64(payload, uint64(sched.UnixNano()))
				p.SendAsync(ctx, &pulsar.ProducerMessage{Key: key, Payload: payload},
					func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
						if err != nil {
							if ctx.Err() == nil {
								failed.Add(1)
							}
							return
						}
						in.Add(1)
					})
			}
		}()
	}

	mode := "one client"
	if separate {
		mode = "separate clients"
	}
	t.Logf("IoT shape: %d producers, %d %s consumers, %d keys, %d B unbatched, %s, rate %v (0: max)",
		producers, consumers, typeName, keys, size, mode, rate)
	if dir := os.Getenv("MAGNETAR_BENCH_IOT_PROFILE"); dir != "" && web != "" {
		go profileStandalone(t, web, dir, 5*time.Second+measured/2)
	}
	warm := time.NewTimer(5 * time.Second)
	<-warm.C
	tick := time.NewTicker(window)
	defer tick.Stop()
	i0, o0, c0, t0 := in.Load(), out.Load(), serverCPU(), time.Now()
	latMu.Lock()
	lat = lat[:0]
	latMu.Unlock()
	var totIn, totOut int64
	var totCPU time.Duration
	var worst99 time.Duration
	for end := t0.Add(measured); time.Now().Before(end); {
		<-tick.C
		i1, o1, c1, t1 := in.Load(), out.Load(), serverCPU(), time.Now()
		latMu.Lock()
		w := lat
		lat = nil
		latMu.Unlock()
		slices.Sort(w)
		pct := func(q float64) time.Duration {
			if len(w) == 0 {
				return 0
			}
			return w[min(int(q*float64(len(w))), len(w)-1)]
		}
		secs := t1.Sub(t0).Seconds()
		dIn, dOut := i1-i0, o1-o0
		cpuPerMsg := 0.0
		if dIn+dOut > 0 {
			cpuPerMsg = float64((c1 - c0).Microseconds()) / float64(dIn+dOut)
		}
		t.Logf("in %7.0f/s  out %7.0f/s  out/in %.2f  e2e p50 %v p99 %v max %v  server CPU %.1f µs/msg (in+out), %.2f cores  backlog %d",
			float64(dIn)/secs, float64(dOut)/secs, float64(dOut)/max(float64(dIn), 1),
			pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), pct(1).Round(time.Millisecond),
			cpuPerMsg, (c1-c0).Seconds()/secs, i1-o1)
		worst99 = max(worst99, pct(0.99))
		totIn, totOut, totCPU = totIn+dIn, totOut+dOut, totCPU+(c1-c0)
		i0, o0, c0, t0 = i1, o1, c1, t1
	}
	secs := measured.Seconds()
	t.Logf("total: in %.0f/s, out %.0f/s, out/in %.2f, in+out %.0f/s, worst window e2e p99 %v, server CPU %.1f µs/msg, failed sends %d",
		float64(totIn)/secs, float64(totOut)/secs, float64(totOut)/max(float64(totIn), 1), float64(totIn+totOut)/secs,
		worst99.Round(time.Millisecond), float64(totCPU.Microseconds())/max(float64(totIn+totOut), 1), failed.Load())
	stop()
	// Producers close after their pending sends; with a backlog that can take minutes, and the
	// figures are in: wait a little, then leave them to the process's end.
	closed := make(chan struct{})
	go func() { pwg.Wait(); cwg.Wait(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Log("producers and consumers still closing after 30 s; not waiting")
	}
}

// procCPU returns the CPU time (user and system) process pid has used so far (0 if it cannot
// be read): fields 14 and 15 of /proc/<pid>/stat, in clock ticks of 10 ms, counted after the
// command name's closing parenthesis.
func procCPU(pid string) time.Duration {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// profileStandalone writes CPU (10 s), block, mutex and goroutine profiles of the standalone
// serving web after the delay given (pacing into the run, not synchronisation).
func profileStandalone(t *testing.T, web, dir string, after time.Duration) {
	time.Sleep(after)
	for _, f := range []struct{ path, file string }{
		{"/debug/pprof/goroutine?debug=2", "goroutines.txt"},
		{"/debug/pprof/profile?seconds=10", "cpu.pprof"},
		{"/debug/pprof/block", "block.pprof"},
		{"/debug/pprof/mutex", "mutex.pprof"},
		{"/debug/pprof/goroutine?debug=2", "goroutines2.txt"},
	} {
		resp, err := http.Get("http://" + web + f.path)
		if err != nil {
			t.Log(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := os.WriteFile(filepath.Join(dir, f.file), body, 0o644); err != nil {
			t.Log(err)
		}
	}
}
