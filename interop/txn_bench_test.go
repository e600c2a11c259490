package interop

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/itest"
	"github.com/magnetar-io/magnetar/metadata"
)

// TestTxnBenchmark measures #15's ratios on one `magnetar standalone` (transactions on), in
// one run, with pulsar-client-go: transactional produce (100 messages per transaction) vs
// plain produce; committed transactions per second with 10 concurrent clients of 1 message
// each; p99 commit latency at half that rate; and, as the reference, the rate of metadata
// writes (etcd puts, 10 concurrent writers) on the same etcd and disk. It runs only with
// MAGNETAR_BENCH_TXN=1 (MAGNETAR_BENCH_DIR: the data directory's parent; the message size,
// clients and messages per phase: MAGNETAR_BENCH_TXN_SIZE, _CLIENTS, _TOTAL).
func TestTxnBenchmark(t *testing.T) {
	if os.Getenv("MAGNETAR_BENCH_TXN") == "" {
		t.Skip("set MAGNETAR_BENCH_TXN=1 to run")
	}
	dir := os.Getenv("MAGNETAR_BENCH_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else {
		var err error
		if dir, err = os.MkdirTemp(dir, "txnbench-"); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}
	etcd, bk, brk, web := itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t)
	proc := itest.Start(t, "standalone", "standalone", "--data-dir", filepath.Join(dir, "data"),
		"--etcd-listen", etcd, "--bookie-listen", bk, "--broker-listen", brk, "--http", web,
		"--transaction-coordinator-enabled", "--log-level", "warn")
	itest.WaitTCP(t, brk, 60*time.Second)
	url := "pulsar://" + brk
	newClient := func() pulsar.Client {
		cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 60 * time.Second,
			EnableTransaction: true, Logger: clientLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	// Bytes per message (MAGNETAR_BENCH_TXN_SIZE): 1024, the default of pulsar-perf and of
	// pulsar-client-go's perf. At 100 bytes the plain phase's batches hold ~600 messages
	// against the transactions' 100, and the ratio measures the per-entry costs as much as
	// the transactions' (docs/BENCHMARKS-RESULTS.md, transactions).
	size := 1024
	if n, err := strconv.Atoi(os.Getenv("MAGNETAR_BENCH_TXN_SIZE")); err == nil && n > 0 {
		size = n
	}
	payload := make([]byte, size)
	total := 600_000 // messages per produce phase (MAGNETAR_BENCH_TXN_TOTAL)
	if n, err := strconv.Atoi(os.Getenv("MAGNETAR_BENCH_TXN_TOTAL")); err == nil && n > 0 {
		total = n
	}

	// 1. Plain and transactional async produce: 64 clients (MAGNETAR_BENCH_TXN_CLIENTS) with a producer each on one topic,
	// each sending its share; in transactions of 100 (a batch each, flushed after its last
	// message as an application does before it commits), each committed before its next one
	// starts. (pulsar-client-go serializes a client's requests to one
	// transaction coordinator, so one client alone is bound by their round trips.)
	producers := 64
	if n, err := strconv.Atoi(os.Getenv("MAGNETAR_BENCH_TXN_CLIENTS")); err == nil && n > 0 {
		producers = n
	}
	// Where a transaction's time goes, summed over all of them: NEW_TXN, the sends (with
	// ADD_PARTITION_TO_TXN) until their receipts, END_TXN.
	var phaseNew, phaseAdd, phaseSend, phaseCommit, txns atomic.Int64
	// CPU per message of each phase, the standalone's and the clients' (this process): less
	// changed by a busy machine than the throughput.
	type cpuUse struct{ server, client time.Duration }
	var cpu = map[int]cpuUse{}
	produce := func(topic string, perTxn int) float64 {
		ctx := ctxT(t, 10*time.Minute)
		s0, c0 := proc.CPUTime(), itest.SelfCPUTime()
		defer func() { cpu[perTxn] = cpuUse{proc.CPUTime() - s0, itest.SelfCPUTime() - c0} }()
		var failed atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for w := 0; w < producers; w++ {
			cl := newClient()
			opts := pulsar.ProducerOptions{Topic: topic, SendTimeout: time.Minute, MaxPendingMessages: 2000}
			if perTxn > 0 {
				opts.BatchingMaxMessages = uint(perTxn) // the batch goes out when the transaction's last message is in
			}
			p, err := cl.CreateProducer(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			wg.Add(1)
			go func() {
				defer wg.Done()
				var sends sync.WaitGroup
				for sent := 0; sent < total/producers; {
					var tx pulsar.Transaction
					n := total/producers - sent
					t0 := time.Now()
					if perTxn > 0 {
						if tx, err = cl.NewTransaction(time.Minute); err != nil {
							t.Error(err)
							return
						}
						n = min(n, perTxn)
						phaseNew.Add(int64(time.Since(t0)))
					}
					t1 := time.Now()
					for i := 0; i < n; i++ {
						sends.Add(1)
						p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload, Transaction: tx},
							func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
								if err != nil {
									failed.Add(1)
								}
								sends.Done()
							})
						if i == 0 && tx != nil { // the first send waits for ADD_PARTITION_TO_TXN
							phaseAdd.Add(int64(time.Since(t1)))
						}
					}
					sent += n
					if tx != nil {
						// The batch of the transaction's last message goes now, not at the
						// client's next batching tick (BatchingMaxPublishDelay, 10 ms).
						if err := p.FlushWithCtx(ctx); err != nil {
							t.Error(err)
							return
						}
						sends.Wait()
						t2 := time.Now()
						phaseSend.Add(int64(t2.Sub(t1)))
						if err := tx.Commit(ctx); err != nil {
							t.Error(err)
							return
						}
						phaseCommit.Add(int64(time.Since(t2)))
						txns.Add(1)
					}
				}
				sends.Wait()
			}()
		}
		wg.Wait()
		if failed.Load() > 0 {
			t.Fatalf("%d sends failed", failed.Load())
		}
		return float64(total) / time.Since(start).Seconds()
	}
	// MAGNETAR_BENCH_PROFILE=dir: a CPU profile (5 s, MAGNETAR_BENCH_PROFILE_SECONDS) of the standalone in each phase, and its
	// etcd's metrics after it (one profile at a time: a phase shorter than its profile
	// delays the next phase's).
	var profiling sync.Mutex
	profile := func(name string) {
		dir := os.Getenv("MAGNETAR_BENCH_PROFILE")
		if dir == "" {
			return
		}
		secs := "5" // MAGNETAR_BENCH_PROFILE_SECONDS
		if v := os.Getenv("MAGNETAR_BENCH_PROFILE_SECONDS"); v != "" {
			secs = v
		}
		go func() {
			time.Sleep(2 * time.Second) // into the phase: pacing, not synchronisation
			profiling.Lock()
			defer profiling.Unlock()
			if f, err := os.Create(filepath.Join(dir, name+".client.cpu")); err == nil { // the clients' (this process)
				if pprof.StartCPUProfile(f) == nil {
					defer func() { pprof.StopCPUProfile(); f.Close() }()
				}
			}
			for _, f := range []struct{ url, file string }{
				{"http://" + web + "/debug/pprof/profile?seconds=" + secs, name + ".cpu"},
				{"http://" + web + "/metrics", name + ".metrics"},
				{"http://" + etcd + "/metrics", name + ".etcd"}} { // the embedded etcd's own
				resp, err := http.Get(f.url)
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
		}()
	}
	profile("plain")
	plain := produce("persistent://public/default/bench-plain", 0)
	profile("txn100")
	txn100 := produce("persistent://public/default/bench-txn", 100)
	perMsg := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(total) }
	t.Logf("plain produce:                 %9.0f msg/s", plain)
	t.Logf("transactional (100 per txn):   %9.0f msg/s   ratio %.2f (target >= 0.5)", txn100, txn100/plain)
	t.Logf("  CPU per message: plain %.1f µs server + %.1f µs clients; transactional %.1f + %.1f µs",
		perMsg(cpu[0].server), perMsg(cpu[0].client), perMsg(cpu[100].server), perMsg(cpu[100].client))
	if n := txns.Load(); n > 0 {
		avg := func(v *atomic.Int64) time.Duration { return time.Duration(v.Load() / n) }
		t.Logf("  per transaction: new %v, sends until receipts %v (of which the first send, with the add, %v), commit %v",
			avg(&phaseNew), avg(&phaseSend), avg(&phaseAdd), avg(&phaseCommit))
	}
	if os.Getenv("MAGNETAR_BENCH_TXN_PRODUCE_ONLY") != "" {
		return
	}

	// 2. Committed transactions per second: 10 clients, 1 message each.
	commitLoop := func(clients int, d time.Duration, rate float64) (int, []time.Duration) {
		var mu sync.Mutex
		var lat []time.Duration
		var done atomic.Int64
		var wg sync.WaitGroup
		deadline := time.Now().Add(d)
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				cl := newClient()
				p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: fmt.Sprintf("persistent://public/default/bench-commit-%d", c),
					DisableBatching: true})
				if err != nil {
					t.Error(err)
					return
				}
				defer p.Close()
				ctx := context.Background()
				next := time.Now()
				for time.Now().Before(deadline) {
					if rate > 0 {
						next = next.Add(time.Duration(float64(time.Second) * float64(clients) / rate))
						if w := time.Until(next); w > 0 {
							time.Sleep(w) // pacing of the load, not synchronisation
						}
					}
					tx, err := cl.NewTransaction(time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: payload, Transaction: tx}); err != nil {
						t.Error(err)
						return
					}
					s := time.Now()
					if err := tx.Commit(ctx); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					lat = append(lat, time.Since(s))
					mu.Unlock()
					done.Add(1)
				}
			}(c)
		}
		wg.Wait()
		return int(done.Load()), lat
	}
	const window = 20 * time.Second
	profile("commits")
	n, _ := commitLoop(10, window, 0)
	commits := float64(n) / window.Seconds()
	_, lat := commitLoop(10, window, commits/2)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(q float64) time.Duration { return lat[min(int(q*float64(len(lat))), len(lat)-1)] }

	// 3. The reference: metadata writes per second on the same etcd (10 writers, and
	// MAGNETAR_BENCH_ETCD_WRITERS more to see the store's ceiling).
	eps, err := metadata.ParseURL("etcd://" + etcd)
	if err != nil {
		t.Fatal(err)
	}
	st, err := metadata.Open(ctxT(t, 10*time.Second), metadata.Config{Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var puts atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(10 * time.Second)
	for w := 0; w < 10; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for time.Now().Before(end) {
				if _, err := st.Put(context.Background(), fmt.Sprintf("/bench/put-%d", w), payload, metadata.AnyVersion); err != nil {
					t.Error(err)
					return
				}
				puts.Add(1)
			}
		}(w)
	}
	wg.Wait()
	etcdRate := float64(puts.Load()) / 10
	if n, err := strconv.Atoi(os.Getenv("MAGNETAR_BENCH_ETCD_WRITERS")); err == nil && n > 0 {
		puts.Store(0)
		end := time.Now().Add(10 * time.Second)
		for w := 0; w < n; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for time.Now().Before(end) {
					if _, err := st.Put(context.Background(), fmt.Sprintf("/bench/many-%d", w), payload, metadata.AnyVersion); err != nil {
						t.Error(err)
						return
					}
					puts.Add(1)
				}
			}(w)
		}
		wg.Wait()
		t.Logf("etcd puts, %d writers:        %9.0f put/s", n, float64(puts.Load())/10)
	}

	t.Logf("commits, 10 clients x 1 msg:   %9.0f txn/s   (%.3f txn per etcd put/s)", commits, commits/etcdRate)
	t.Logf("commit latency at %4.0f txn/s:  p50 %v  p99 %v  max %v", commits/2, pct(0.5), pct(0.99), lat[len(lat)-1])
	t.Logf("etcd puts, 10 writers:         %9.0f put/s", etcdRate)
}
